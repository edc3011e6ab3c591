"""`aiayn export --to ctranslate2`: CTranslate2 computes the model's own probabilities and, with the
|Y|^alpha length penalty, finds the translations of `aiayn translate --length-penalty-style hf`."""

from __future__ import annotations

import math

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

from helpers import run_cli, sentences  # noqa: E402
from helpers import save_varied_model as saved_model  # noqa: E402

from aiayn_cli.decoding.ctranslate2_convert import export_ctranslate2  # noqa: E402
from aiayn_cli.decoding.translator import Translator  # noqa: E402

MAX_LEN = 30  # tokens before </s>: aiayn's max_len_b with max_len_a 0, CTranslate2's max_decoding_length


def ct2_best(folder, translator: Translator, inputs: list[str], beam: int) -> list[tuple[str, float, int]]:
    """CTranslate2's best hypothesis of each input: text, score and number of tokens (without </s>)."""
    model = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
    tokenizer = translator.tokenizer
    source = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(inputs)["input_ids"]]
    results = model.translate_batch(
        source,
        beam_size=beam,
        length_penalty=0.6,
        min_decoding_length=0,
        max_decoding_length=MAX_LEN,
        return_scores=True,
    )
    return [
        (translator.detokenize(tokenizer.convert_tokens_to_ids(r.hypotheses[0])), r.scores[0], len(r.hypotheses[0]))
        for r in results
    ]


@pytest.mark.parametrize(
    "overrides",
    [{}, {"tie_word_embeddings": True}, {"pre_norm": True}, {"positional_encoding": "learned"}],
    ids=["paper", "tied", "pre_norm", "learned_positions"],
)
def test_ctranslate2_gives_aiayn_translate_hf(tmp_path, overrides):
    model_dir = saved_model(tmp_path / "model", **overrides)
    export_ctranslate2(model_dir, tmp_path / "ct2")
    translator = Translator.from_pretrained(str(model_dir), device="cpu", dtype="fp32")
    inputs = sentences(60)
    hf = dict(length_penalty_style="hf", max_len_a=0.0, max_len_b=MAX_LEN)
    # Greedy search: every token is the argmax of the same probabilities; the scores agree too where
    # the translation ends before the maximum length (there aiayn adds a forced </s>, CTranslate2 not).
    ours = [hyps[0] for hyps in translator.translate_nbest(inputs, num_beams=1, **hf)]
    theirs = ct2_best(tmp_path / "ct2", translator, inputs, beam=1)
    assert [text for text, _, _ in theirs] == [text for text, _ in ours]
    ended = [i for i, (_, _, length) in enumerate(theirs) if length < MAX_LEN]
    assert len(ended) >= 10
    assert [theirs[i][1] for i in ended] == pytest.approx([ours[i][1] for i in ended], abs=1e-4)
    # Beam 4: the same translation wherever aiayn's ends before the maximum length (there aiayn forces
    # </s> and CTranslate2 returns an unfinished hypothesis, scored differently).
    ours = [hyps[0] for hyps in translator.translate_nbest(inputs, num_beams=4, **hf)]
    theirs = ct2_best(tmp_path / "ct2", translator, inputs, beam=4)
    ended = [i for i, (_, _, length) in enumerate(theirs) if length < MAX_LEN]
    assert len(ended) >= 10
    agree = sum(ours[i][0] == theirs[i][0] for i in ended)
    assert agree >= 0.95 * len(ended), [(ours[i], theirs[i]) for i in ended if ours[i][0] != theirs[i][0]]


def test_the_position_table_is_the_models_own(tmp_path):
    """CTranslate2's built-in sinusoids (sines first, then cosines) are not §3.5's interleaved ones:
    without the explicit table the exported model would compute other probabilities."""
    from ctranslate2.specs import transformer_spec  # noqa: F401

    from aiayn_cli.decoding.ctranslate2_convert import transformer_spec_of
    from aiayn_cli.model.modeling_aiayn import sinusoidal_positional_encoding

    model_dir = saved_model(tmp_path / "model")
    translator = Translator.from_pretrained(str(model_dir), device="cpu", dtype="fp32")
    spec = transformer_spec_of(translator.model, translator.tokenizer)
    table = spec.encoder.position_encodings.encodings
    d_model = translator.model.config.d_model
    assert table.shape == (translator.model.config.max_position_embeddings, d_model)
    expected = sinusoidal_positional_encoding(torch.arange(table.shape[0]), d_model)
    assert (table == expected).all()
    assert table[1, 1] == pytest.approx(math.cos(1.0))  # PE(1, 1) = cos(1): interleaved


def test_int8_export_translates_and_the_folder_is_complete(tmp_path, capsys):
    model_dir = saved_model(tmp_path / "model")
    args = ("export", "-m", model_dir, "--to", "ctranslate2", "-o", tmp_path / "int8", "--quantization", "int8")
    code, _, err = run_cli(*args, capsys=capsys)
    assert code == 0, err
    names = {p.name for p in (tmp_path / "int8").iterdir()}
    assert {"model.bin", "config.json", "shared_vocabulary.json", "tokenizer.json", "README.md"} <= names
    readme = (tmp_path / "int8" / "README.md").read_text()
    assert "ctranslate2.Translator" in readme and "length-penalty-style hf" in readme
    translator = Translator.from_pretrained(str(model_dir), device="cpu", dtype="fp32")
    ours = [text for text, _, _ in ct2_best(tmp_path / "int8", translator, sentences(20), beam=4)]
    assert len(ours) == 20 and any(ours)


def test_export_mistakes_are_one_line(tmp_path, capsys):
    from aiayn_cli.errors import AiaynError

    model_dir = saved_model(tmp_path / "model")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    with pytest.raises(AiaynError, match="holds files that are not part of a CTranslate2 export"):
        export_ctranslate2(model_dir, tmp_path / "busy")
    with pytest.raises(AiaynError, match="quantization int4: choose one of float32, int8"):
        export_ctranslate2(model_dir, tmp_path / "out", quantization="int4")
    code, _, err = run_cli("export", "-m", model_dir, "--to", "onnx", "-o", tmp_path / "out", capsys=capsys)
    assert code == 2 and err.strip() == "error: --to onnx: choose one of ctranslate2"
    assert not (tmp_path / "out").exists()
