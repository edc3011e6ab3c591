"""`aiayn layers` and `aiayn_cli.inspection.layers`: the last layer's prediction is the model's (post-LN
and pre-norm), the per-layer accuracy and loss are the model's own where they must be, the files, AER
per layer where true alignments exist, bad input. Random `tiny` models in fp32."""

from __future__ import annotations

import json

import pytest
import torch
from attention_models import subword_model_dir
from helpers import run_cli

from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration
from aiayn_cli.decoding.translator import Translator
from aiayn_cli.inspection.heads import batches, sample_of
from aiayn_cli.inspection.layers import layer_logits, layer_predictions, measure_layers
from aiayn_cli.quickstart.synthetic import write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("layers") / "data"
    write_corpus(folder, train=0, validation=10, test=4, seed=5)
    return folder


@pytest.fixture(scope="module")
def translator():
    return Translator.from_pretrained(str(subword_model_dir()), device="cpu", dtype="fp32")


def _sample(translator, data_dir, n=6):
    sources = (data_dir / "validation.en").read_text().splitlines()[:n]
    references = (data_dir / "validation.de").read_text().splitlines()[:n]
    return sample_of(translator, sources, references)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_the_last_layers_prediction_is_the_models(pre_norm):
    """fp32, to 1e-5: layer N through the output projection (after the final LayerNorm where pre-norm)
    gives the model's logits; the lower layers give others."""
    torch.manual_seed(0)
    model = AiaynForConditionalGeneration(AiaynConfig.from_preset("tiny", vocab_size=50, pre_norm=pre_norm)).eval()
    ids = torch.randint(4, 50, (2, 6))
    decoder_ids = torch.randint(4, 50, (2, 5))
    with torch.no_grad():
        out = model(input_ids=ids, decoder_input_ids=decoder_ids, output_hidden_states=True, use_cache=False)
        logits = layer_logits(model, out.decoder_hidden_states)
    assert len(logits) == 2
    assert torch.allclose(logits[-1], out.logits, atol=1e-5, rtol=0)
    assert (logits[0] - out.logits).abs().max() > 1e-2


def test_per_layer_accuracy_and_loss(translator, data_dir):
    """The last layer's accuracy and loss are the model's own (its argmax, its cross-entropy)."""
    model, sample = translator.model, _sample(translator, data_dir)
    report = measure_layers(model, sample, batch_size=4)
    assert len(report.accuracy) == len(report.loss) == model.config.num_decoder_layers
    correct = echo = tokens = 0
    nll = 0.0
    with torch.no_grad():
        for batch in batches(model, sample, 4):
            labels = batch["labels"]
            real = labels != model.config.pad_token_id
            out = model(**batch, use_cache=False)
            correct += int(((out.logits.argmax(-1) == labels) & real).sum())
            echo += int(((out.logits.argmax(-1) == batch["decoder_input_ids"]) & real).sum())
            nll += float(out.loss) * int(real.sum())
            tokens += int(real.sum())
    assert report.tokens == tokens
    assert report.accuracy[-1] == pytest.approx(correct / tokens)
    assert report.echo[-1] == pytest.approx(echo / tokens)  # its top choice is the token it reads
    assert report.loss[-1] == pytest.approx(nll / tokens, abs=1e-5)


def test_one_sentence_layer_by_layer(translator):
    grid = layer_predictions(translator.model, translator.tokenizer, "The small dog sees a red ball.",
                             "Der kleine Hund sieht einen roten Ball.")  # fmt: skip
    t = len(grid.targets)
    assert len(grid.choices) == 2 and all(len(row) == t for row in grid.choices)
    assert grid.inputs[0] == "<s>" and grid.targets[-1] == "</s>" and grid.inputs[1:] == grid.targets[:-1]
    assert all(0 < p <= 1 for row in grid.probabilities for p in row)
    assert all(q <= p + 1e-6 for rp, rq in zip(grid.probabilities, grid.target_probabilities) for p, q in zip(rp, rq))


def test_the_command_writes_the_table_figures_and_aer_per_layer(data_dir, tmp_path, capsys):
    out = tmp_path / "layers"
    code, stdout, err = run_cli(
        "layers", "-m", subword_model_dir(), "--data-dir", data_dir, "-s", "en", "-t", "de",
        "--sample-size", "6", "-o", out,
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == [
        ".aiayn-written.json",  # what the command wrote there (the output rule: files.staging_files)
        "layers.json",
        "layers.md",
        "layers_accuracy.png",
        "layers_sentence.png",
    ]
    data = json.loads((out / "layers.json").read_text())
    assert [row["layer"] for row in data["layers"]] == [1, 2]
    assert data["aer"]["pairs"] == 6 and 0 <= data["aer"]["layer 2 predict"] <= 1 and "diagonal" in data["aer"]
    assert "AER, encoder-decoder attention (6 pairs)" in stdout and "What to notice:" in stdout
    assert data["sentence"]["source"] == (data_dir / "validation.en").read_text().splitlines()[0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sentence", "A dog."], "--sentence and --reference go together"),
        (["--split", "nosuch"], "no nosuch data"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(data_dir, tmp_path, capsys, args, message):
    out = tmp_path / "layers"
    code, _, err = run_cli(
        "layers", "-m", subword_model_dir(), "--data-dir", data_dir, "-s", "en", "-t", "de",
        "-o", out, *args,
        capsys=capsys,
    )  # fmt: skip
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_sentence_as_translate_and_attention_take_it(translator, tmp_path, capsys):
    """`aiayn layers -m M "a sentence"`: no data split needed; the sentence is teacher-forced on the
    model's own translation (fp32), and the table is of that sentence alone."""
    sentence = "The small dog sees a red ball."
    out = tmp_path / "layers"
    code, stdout, err = run_cli("layers", "-m", subword_model_dir(), sentence, "-o", out, capsys=capsys)
    assert code == 0, err
    data = json.loads((out / "layers.json").read_text())
    assert data["sentence"]["source"] == sentence
    assert data["sentence"]["reference"] == translator.translate([sentence])[0]
    assert data["settings"]["sentence"] == sentence and data["settings"]["pairs"] == 1
    assert data["tokens"] == len(data["sentence"]["targets"]) and "What to notice:" in stdout


def test_a_sentence_with_a_data_split_is_the_one_shown(data_dir, tmp_path, capsys):
    out = tmp_path / "layers"
    code, _, err = run_cli(
        "layers", "-m", subword_model_dir(), "A red ball.", "--reference", "Ein roter Ball.",
        "--data-dir", data_dir, "-s", "en", "-t", "de", "--sample-size", "3", "-o", out,
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    data = json.loads((out / "layers.json").read_text())
    assert data["sentence"]["source"] == "A red ball." and data["sentence"]["reference"] == "Ein roter Ball."
    assert data["settings"]["split"] == "validation" and data["settings"]["pairs"] == 3


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give a SENTENCE"),
        (["A dog.", "--sentence", "A cat.", "--reference", "Eine Katze."], "give the sentence once"),
    ],
)
def test_no_sentence_or_two_is_one_line(tmp_path, capsys, args, message):
    out = tmp_path / "layers"
    code, _, err = run_cli("layers", "-m", subword_model_dir(), "-o", out, *args, capsys=capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
