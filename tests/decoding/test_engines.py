"""`--engine ctranslate2`: the model converted once (cached by its weights' hash) and decoded by
CTranslate2 gives aiayn's translations, with the default options (the paper's GNMT penalty) too, and
refuses in one line what it cannot do. Precision: fp32 (CTranslate2's float32) unless a test says int8."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

pytest.importorskip("ctranslate2")

from helpers import (  # noqa: E402
    cli_env,
    run_cli,  # noqa: E402
    sentences,
    split_corpus,
)
from helpers import save_varied_model as saved_model  # noqa: E402

from aiayn_cli.decoding.ctranslate2_cache import model_key  # noqa: E402
from aiayn_cli.decoding.translator import Translator  # noqa: E402

HF = {"length_penalty_style": "hf"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("engines") / "model")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def engines(model_dir, cache):
    torch_engine = Translator.from_pretrained(str(model_dir), device="cpu", dtype="fp32")
    from aiayn_cli.model.loading import load_pretrained

    model, tokenizer = load_pretrained(str(model_dir))
    ct2 = Translator(model, tokenizer, device="cpu", dtype="fp32", engine="ctranslate2", cache=cache)
    return torch_engine, ct2


def texts(results):
    return [[text for text, _ in hyps] for hyps in results]


def test_greedy_gives_the_same_translations_and_scores_under_either_penalty(engines):
    ours, theirs = engines
    inputs = sentences(40)
    for style in ("hf", "gnmt"):  # greedy search does not depend on the penalty: the score is computed
        want = ours.hypotheses(inputs, num_beams=1, length_penalty_style=style)
        got = theirs.hypotheses(inputs, num_beams=1, length_penalty_style=style)
        assert [h[0].tokens for h in got] == [h[0].tokens for h in want]
        # The scores too, where the translation ends before its length limit (there aiayn forces </s>).
        ended = [i for i, hyps in enumerate(want) if len(hyps[0].tokens) < len(inputs[i].split()) + 1 + 50]
        assert len(ended) >= 20
        assert [got[i][0].score for i in ended] == pytest.approx([want[i][0].score for i in ended], abs=1e-4)


def test_beam_search_with_hf_penalty_gives_the_torch_engines_translations(engines):
    ours, theirs = engines
    inputs = sentences(60, seed=3)
    want = ours.hypotheses(inputs, nbest=4, **HF)
    got = theirs.hypotheses(inputs, nbest=4, **HF)
    # Where aiayn's best translation ends before its length limit (there CTranslate2 returns an
    # unfinished hypothesis instead of forcing </s>), the same best translation and score.
    limit = [len(s.split()) + 1 + 50 for s in inputs]
    ended = [i for i, hyps in enumerate(want) if len(hyps[0].tokens) < limit[i]]
    assert len(ended) >= 40
    same = [i for i in ended if got[i][0].tokens == want[i][0].tokens]
    assert len(same) >= 0.9 * len(ended)
    assert [got[i][0].score for i in same] == pytest.approx([want[i][0].score for i in same], abs=1e-4)
    # The lower ranks differ more (CTranslate2 does not keep an empty hypothesis finished at the first
    # step, nor force </s> at the limit); where the 4 are the same, so are their scores and log p.
    lists = [i for i in ended if [h.tokens for h in got[i]] == [h.tokens for h in want[i]]]
    assert len(lists) >= 0.5 * len(ended)
    lists = [i for i in lists if all(len(h.tokens) < limit[i] for h in want[i])]
    for i in lists:
        assert [h.score for h in got[i]] == pytest.approx([h.score for h in want[i]], abs=1e-4)
        assert [h.log_prob for h in got[i]] == pytest.approx([h.log_prob for h in want[i]], abs=1e-3)


def test_the_default_options_give_the_torch_engines_translations(engines):
    """The model's generation_config (beam 4, the paper's GNMT penalty 0.6): CTranslate2's finished
    hypotheses ranked by GNMT's penalty give aiayn's best translation for at least 99% of 300 sentences,
    those that reach their length limit included, with the same scores."""
    ours, theirs = engines
    inputs = sentences(300, seed=11)
    want, got = ours.hypotheses(inputs), theirs.hypotheses(inputs)
    same = [i for i in range(len(inputs)) if got[i][0].tokens == want[i][0].tokens]
    assert len(same) >= 0.99 * len(inputs)
    assert [got[i][0].score for i in same] == pytest.approx([want[i][0].score for i in same], abs=1e-4)
    assert any(len(want[i][0].tokens) == len(inputs[i].split()) + 1 + 50 for i in same)  # at the limit
    # GNMT's penalty, not |Y|^alpha: somewhere the two styles rank differently, and both engines agree
    hf = ours.hypotheses(inputs, **HF)
    assert any(h[0].tokens != w[0].tokens for h, w in zip(hf, want))
    assert theirs.translate(["w1 w2"], length_penalty=0.0) == theirs.translate(["w1 w2"], length_penalty=0.0, **HF)


def test_a_second_load_does_not_convert_and_other_weights_do(model_dir, cache, engines, tmp_path):
    from aiayn_cli.model.loading import load_pretrained

    _, first = engines
    model, tokenizer = load_pretrained(str(model_dir))
    again = Translator(model, tokenizer, device="cpu", dtype="int8", engine="ctranslate2", cache=cache)
    assert first.engine.converted and not again.engine.converted and again.engine.folder == first.engine.folder
    assert again.precision == "int8" and again.translate(["w3 w4"], **HF)[0] is not None
    assert [p.device.type for p in again.model.parameters()] == ["meta"] * len(list(again.model.parameters()))
    model, tokenizer = load_pretrained(str(model_dir))
    key = model_key(model, tokenizer)
    with torch.no_grad():
        model.lm_head.weight[0, 0] += 1.0
    assert model_key(model, tokenizer) != key


def test_sampling_with_a_seed_repeats(engines):
    _, theirs = engines
    options = dict(do_sample=True, num_beams=1, nbest=3, top_k=5, seed=7)
    first = theirs.translate_nbest(sentences(3), **options)
    assert first == theirs.translate_nbest(sentences(3), **options)
    assert all(len(hyps) == 3 for hyps in first)


@pytest.mark.parametrize("search", [("--beam", "1"), ()], ids=["greedy", "defaults"])
def test_translate_engine_ctranslate2_prints_the_torch_engines_translations(
    model_dir, tmp_path, monkeypatch, capsys, search
):
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
    inputs = sentences(20, seed=5)
    common = ("translate", "-m", model_dir, "--precision", "fp32", *search, "--nbest", "1", *inputs)
    code, torch_out, err = run_cli(*common, capsys=capsys)
    assert code == 0, err
    for _ in range(2):  # converted once, then read from the cache
        code, ct2_out, err = run_cli(*common, "--engine", "ctranslate2", capsys=capsys)
        assert code == 0, err
        assert ct2_out == torch_out and len(ct2_out.splitlines()) == 20
    assert len(list((tmp_path / "cache" / "ctranslate2").iterdir())) == 1


# Runs `aiayn translate ARGS...` and prints, last, which of torch and transformers were imported.
IMPORTED = """
import sys
from aiayn_cli.cli.app import main
sys.argv = ["aiayn", *sys.argv[1:]]
try:
    main()
except SystemExit as exit:
    assert not exit.code, exit.code
print([name for name in ("torch", "transformers") if name in sys.modules])
"""


def test_translate_with_a_converted_model_imports_neither_torch_nor_transformers(
    model_dir, tmp_path, monkeypatch, capsys
):
    """The converted folder is found from the model folder's files; the configuration, generation_config
    and tokenizer are read from theirs: the same translations, without torch or transformers."""
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
    args = ("translate", "-m", model_dir, "--engine", "ctranslate2", "--precision", "fp32", *sentences(8, seed=4))
    code, converted, err = run_cli(*args, capsys=capsys)  # loads the model, converts it
    assert code == 0, err
    for extra in ((), ("--threads", "1", "--nbest", "2")):
        done = subprocess.run(
            [sys.executable, "-c", IMPORTED, *map(str, args), *extra],
            env=cli_env(AIAYN_CACHE=str(tmp_path / "cache")),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        *out, imported = done.stdout.splitlines()
        assert imported == "[]"
        if not extra:
            assert out == converted.splitlines()
        else:
            code, want, err = run_cli(*args, *extra, capsys=capsys)
            assert out == want.splitlines()
    assert len(list((tmp_path / "cache" / "ctranslate2").iterdir())) == 1


def test_the_converted_path_decodes_with_the_generation_config_that_transformers_reads(model_dir, tmp_path):
    """A generation_config.json without num_beams, length_penalty and early_stopping (transformers
    leaves out values equal to its defaults, or a hand-written file): the converted path decodes with
    the values the loaded model's generation_config gives, kept at conversion."""
    folder = tmp_path / "model"
    shutil.copytree(model_dir, folder)
    saved = json.loads((folder / "generation_config.json").read_text())
    for name in ("num_beams", "length_penalty", "early_stopping"):
        del saved[name]
    (folder / "generation_config.json").write_text(json.dumps(saved))
    cache = tmp_path / "cache"
    assert Translator.from_converted(folder, device="cpu", dtype="fp32") is None  # not converted yet
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AIAYN_CACHE", str(cache))
        loaded = Translator.from_pretrained(str(folder), device="cpu", dtype="fp32", engine="ctranslate2")
        light = Translator.from_converted(folder, device="cpu", dtype="fp32")
    assert light is not None and light.engine.folder == loaded.engine.folder
    assert light.decoding_options() == loaded.decoding_options()
    assert light.decoding_options(do_sample=True) == loaded.decoding_options(do_sample=True)
    inputs = sentences(10, seed=8)
    # The same tokens; the scores to float rounding: `loaded` decodes on PyTorch's thread count (which an
    # earlier test of this process may have set), `light` on the cores' (it never imports torch).
    got, want = light.translate_nbest(inputs), loaded.translate_nbest(inputs)
    assert [[text for text, _ in row] for row in got] == [[text for text, _ in row] for row in want]
    assert [score for row in got for _, score in row] == pytest.approx(
        [score for row in want for _, score in row], rel=1e-5
    )


@pytest.mark.parametrize(
    "args, line",
    [
        (("--engine", "onnx"), "error: --engine onnx: choose one of torch, ctranslate2"),
        (
            ("--engine", "ctranslate2", "--precision", "bf16", "--length-penalty-style", "hf"),
            "error: --precision bf16: CTranslate2 has no bfloat16 on cpu here; choose one of auto, fp32; "
            "--quantization int8 for its int8",
        ),
        (
            ("--engine", "ctranslate2", "--alignment"),
            "error: --alignment reads aiayn's own attention: use it with --engine torch",
        ),
        (
            ("--engine", "ctranslate2", "--device", "mps"),
            "error: --device mps: CTranslate2 runs on cpu, cuda or cuda:N",
        ),
    ],
)
def test_what_the_engine_cannot_do_is_one_line(model_dir, tmp_path, monkeypatch, capsys, args, line):
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
    code, out, err = run_cli("translate", "-m", model_dir, *args, "w1 w2", capsys=capsys)
    assert (code, out, err.strip()) == (2, "", line)


def test_evaluate_engine_needs_a_model(capsys, tmp_path):
    (tmp_path / "h").write_text("a\n")
    (tmp_path / "r").write_text("a\n")
    code, _, err = run_cli(
        "evaluate", "-i", tmp_path / "h", "-r", tmp_path / "r", "--engine", "ctranslate2", capsys=capsys
    )
    assert code == 2 and err.strip() == "error: --engine decodes with --model; without it nothing is decoded"


def test_serve_with_the_ctranslate2_engine(engines):
    pytest.importorskip("fastapi")
    from live_server import get, post, serve_in_thread

    from aiayn_cli.serving.app import create_app

    ours, theirs = engines
    theirs.defaults = dict(HF)  # aiayn serve --length-penalty-style hf
    try:
        with serve_in_thread(create_app(theirs)) as url:
            inputs = sentences(4, seed=9)
            status, answer = post(f"{url}/v1/translate", {"text": inputs, "beam": 1})
            assert status == 200
            assert [t["text"] for t in answer["translations"]] == ours.translate(inputs, num_beams=1)
            status, answer = post(f"{url}/v1/translate", {"text": inputs, "length_penalty_style": "gnmt"})
            assert status == 200
            assert [t["text"] for t in answer["translations"]] == ours.translate(inputs)
            model = get(f"{url}/v1/model")[1]
            assert (model["engine"], model["dtype"], model["decoding"]["length_penalty_style"]) == (
                "ctranslate2",
                "float32",
                "hf",
            )
            status, answer = post(f"{url}/v1/attention", {"text": "w1 w2"})
            assert status == 422 and "this server decodes with ctranslate2" in answer["error"]
    finally:
        theirs.defaults = {}


def test_evaluate_model_with_the_ctranslate2_engine(model_dir, tmp_path, monkeypatch, capsys):
    import json

    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
    data, sources, _ = split_corpus(tmp_path)
    args = ("evaluate", "--model", model_dir, "--data-dir", data, "-s", "en", "-t", "de", "--split", "test")
    out = ("-o", tmp_path / "hyp.de", "--json", tmp_path / "out.json")
    code, _, err = run_cli(*args, *out, "--engine", "ctranslate2", capsys=capsys)
    assert code == 0, err
    translator = Translator.from_pretrained(str(model_dir), engine="ctranslate2")
    assert (tmp_path / "hyp.de").read_text().splitlines() == translator.translate(sources)
    assert json.loads((tmp_path / "out.json").read_text())["inputs"]["engine"] == "ctranslate2"


def test_a_batch_of_two_sentences_a_thread_is_decoded_in_parts_by_single_thread_replicas(model_dir, cache):
    from aiayn_cli.model.loading import load_pretrained

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model, tokenizer = load_pretrained(str(model_dir))
        ct2 = Translator(model, tokenizer, device="cpu", dtype="fp32", engine="ctranslate2", cache=cache)
    finally:
        torch.set_num_threads(threads)
    engine = ct2.engine
    assert engine.translator_for(3) == (engine.ctranslate2, 0) and engine.replicas is None  # loaded when needed
    replicas, part = engine.translator_for(9)
    assert replicas is engine.replicas and part == 5
    assert (replicas.num_translators, engine.ctranslate2.num_translators) == (2, 1)
    inputs = sentences(9, seed=5)
    in_parts = ct2.hypotheses(inputs, nbest=2, **HF)
    engine.translator_for = lambda sentences: (engine.ctranslate2, 0)  # the whole batch on one replica
    whole = ct2.hypotheses(inputs, nbest=2, **HF)
    # the same hypotheses; scores to float32's rounding (a part is padded to its own longest sentence)
    assert [[h.tokens for h in hyps] for hyps in whole] == [[h.tokens for h in hyps] for hyps in in_parts]
    flat = [x for hyps in whole for h in hyps for x in (h.score, h.log_prob)]
    assert flat == pytest.approx([x for hyps in in_parts for h in hyps for x in (h.score, h.log_prob)], abs=1e-4)
