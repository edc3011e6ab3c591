"""`aiayn heads` and `aiayn_cli.inspection.heads`: the statistics against a plain loop over the model's
attention, the losses against the model's own loss, the pruning curve's rule, the files, bad input.

A random `tiny` model (fp32) with a real BPE: its BLEU is about 0, so the pruning never falls by a
point and removes every head, which exercises the whole curve in a few seconds."""

from __future__ import annotations

import json

import pytest
import torch
from attention_models import subword_model_dir
from helpers import run_cli

from aiayn_cli.decoding.translator import Translator
from aiayn_cli.inspection import explain
from aiayn_cli.inspection.heads import (
    all_heads,
    attention_statistics,
    batches,
    head_masks,
    measure_heads,
    sample_of,
    validation_loss,
)
from aiayn_cli.quickstart.synthetic import write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("heads") / "data"
    write_corpus(folder, train=0, validation=12, test=6, seed=3)
    return folder


@pytest.fixture(scope="module")
def translator():
    return Translator.from_pretrained(str(subword_model_dir()), device="cpu", dtype="fp32")


@pytest.fixture(scope="module")
def six_heads_dir(tmp_path_factory):
    """A random model of 1 + 1 layers and 2 heads (6 heads in all) with the subword tokenizer: the
    command's whole run, every head and the whole pruning curve, in seconds."""
    from transformers import AutoTokenizer

    from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration

    folder = tmp_path_factory.mktemp("six") / "model"
    tokenizer = AutoTokenizer.from_pretrained(subword_model_dir())
    torch.manual_seed(0)
    config = AiaynConfig.from_preset(
        "tiny", vocab_size=len(tokenizer), num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_model=32
    )
    model = AiaynForConditionalGeneration(config)
    model.generation_config.max_len_b = 6
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def sample(translator, data_dir):
    sources = (data_dir / "validation.en").read_text().splitlines()[:8]
    references = (data_dir / "validation.de").read_text().splitlines()[:8]
    return sample_of(translator, sources, references, "validation split")


def test_statistics_equal_a_plain_loop_over_the_attention(translator, sample):
    """Confidence, distance and the previous / same / next shares, to 1e-5 (fp32), from `explain`'s
    per-sentence tensors (no padding) averaged over every query of every sentence."""
    stats = attention_statistics(translator.model, batches(translator.model, sample, batch_size=3))
    explanations = explain(translator, None, sample.sources, sample.references, with_scores=False)
    for kind, layer, head in [("encoder", 1, 2), ("decoder", 0, 1), ("cross", 1, 3)]:
        rows = [row for ex in explanations for row in ex.attentions(kind)[layer][0, head].tolist()]
        positions = [i for ex in explanations for i in range(ex.attentions(kind)[layer].shape[2])]
        got = stats[(kind, layer, head)]
        assert got["confidence"] == pytest.approx(sum(max(r) for r in rows) / len(rows), abs=1e-5)
        distance = sum(sum(w * abs(i - j) for j, w in enumerate(r)) for i, r in zip(positions, rows)) / len(rows)
        assert got["distance"] == pytest.approx(distance, abs=1e-5)
        if kind == "cross":
            assert got["previous"] is got["same"] is got["next"] is None
            continue
        same = sum(r[i] for i, r in zip(positions, rows)) / len(rows)
        previous = sum(r[i - 1] for i, r in zip(positions, rows) if i > 0) / len(rows)
        assert got["same"] == pytest.approx(same, abs=1e-5)
        assert got["previous"] == pytest.approx(previous, abs=1e-5)
        if kind == "decoder":
            assert got["next"] == 0.0  # the future is masked (§3.2.3)


def test_the_loss_is_the_models_own_and_masks_change_it(translator, sample):
    """The unmasked loss is the model's own cross-entropy (fp32, 1e-5); masking a head changes it."""
    model = translator.model
    parts = batches(model, sample, batch_size=64)
    (batch,) = parts
    with torch.no_grad():
        own = model(**{k: v for k, v in batch.items()}, use_cache=False).loss  # mean over target tokens
    assert validation_loss(model, parts) == pytest.approx(float(own), abs=1e-5)
    masked = validation_loss(model, parts, head_masks(model.config, [("cross", 0, 1)]))
    assert abs(masked - float(own)) > 1e-4


def test_measure_heads_rows_and_the_pruning_rule(six_heads_dir, sample):
    translator = Translator.from_pretrained(str(six_heads_dir), device="cpu", dtype="fp32")
    report = measure_heads(translator, sample, num_beams=1)
    heads = all_heads(translator.model.config)
    assert len(report.heads) == len(heads) == report.total == 6  # 3 kinds x 1 layer x 2 heads
    for row in report.heads:
        assert row["delta_loss"] == pytest.approx(row["loss"] - report.base_loss)
        assert row["delta_bleu"] == pytest.approx(row["bleu"] - report.base_bleu)
        assert row["gradient"] >= 0 and 0 < row["confidence"] <= 1
    # least important first, by the loss change; the curve stops once BLEU has fallen by more than 1
    points = report.pruning
    assert points[0] == {"removed": 0, "head": None, "bleu": report.base_bleu, "loss": report.base_loss}
    order = sorted(report.heads, key=lambda r: r["delta_loss"])
    assert [p["head"] for p in points[1:]] == [f"{r['kind']} {r['layer']}.{r['head']}" for r in order][
        : len(points) - 1
    ]
    fell = [p for p in points if p["bleu"] < report.base_bleu - 1]
    assert len(fell) <= 1 and (not fell or fell[0] is points[-1])
    assert report.removable == (len(points) - 2 if fell else len(points) - 1)
    assert points[-1]["removed"] == len(heads) or fell  # a random model's BLEU ~0 cannot fall by a point


def test_the_command_writes_the_table_and_figures(six_heads_dir, data_dir, tmp_path, capsys):
    out = tmp_path / "heads"
    code, stdout, err = run_cli(
        "heads", "-m", six_heads_dir, "--data-dir", data_dir, "-s", "en", "-t", "de",
        "--sample-size", "4", "--beam", "1", "--importance", "gradient", "-o", out,
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        ".aiayn-written.json",
        "heads.json",
        "heads.md",
        "heads_importance.png",
        "heads_pruning.png",
        "heads_roles.png",
    ]
    data = json.loads((out / "heads.json").read_text())
    assert data["settings"]["importance"] == "gradient" and data["settings"]["sample"] == 4
    assert len(data["heads"]) == 6 and data["total"] == 6
    assert "| kind | layer | head | confidence |" in stdout and "What to notice:" in stdout
    assert (out / "heads_pruning.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--importance", "size"], "--importance size: choose one of loss, gradient"),
        (["-s", "en"], "--source-lang and --target-lang are required"),
        (["--split", "nosuch"], "no nosuch data"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(data_dir, tmp_path, capsys, args, message):
    out = tmp_path / "heads"
    base = ["heads", "-m", subword_model_dir(), "--data-dir", data_dir, "-o", out, "--sample-size", "2"]
    if "-s" not in args:
        args = [*args, "-s", "en", "-t", "de"]
    else:
        args = [*args]
    code, _, err = run_cli(*base, *args, capsys=capsys)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_an_output_that_is_a_file_is_refused_before_the_work(data_dir, tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("keep me")
    code, _, err = run_cli(
        "heads", "-m", subword_model_dir(), "--data-dir", data_dir, "-s", "en", "-t", "de",
        "-o", target,
        capsys=capsys,
    )  # fmt: skip
    assert code == 2 and "is a file, not a folder" in err
    assert target.read_text() == "keep me"
