"""`aiayn attention --checkpoints RUN` (`aiayn_cli.inspection.history`): every checkpoint of a run folder
(history/ included) in step order, its AER per layer equal to `alignment.measure` on it, its pattern
equal to `aiayn attention`'s view of it; files, standard output and bad input. A run folder of random
`tiny` models (fp32) with the quickstart's generated data, so that it takes seconds."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from attention_models import subword_model_dir
from helpers import run_cli

from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration
from aiayn_cli.decoding.translator import Translator
from aiayn_cli.inspection import explain
from aiayn_cli.inspection.alignment import measure
from aiayn_cli.inspection.history import over_training, run_checkpoints
from aiayn_cli.inspection.views import view
from aiayn_cli.quickstart.synthetic import write_corpus

STEPS = {"history/checkpoint-10": 0, "history/checkpoint-40": 1, "checkpoint-25": 2, "checkpoint-40": 3}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run folder: recipe.yaml naming a data folder with true alignments, checkpoints at steps 10
    (history only), 25 (the run's only) and 40 (both: the run's own is used)."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("history")
    data = root / "data"
    write_corpus(data, train=0, validation=4, test=5, seed=7)
    tokenizer = AutoTokenizer.from_pretrained(subword_model_dir())
    folder = root / "run"
    for name, seed in STEPS.items():
        torch.manual_seed(seed)
        config = AiaynConfig.from_preset("tiny", vocab_size=len(tokenizer), max_position_embeddings=64)
        AiaynForConditionalGeneration(config).save_pretrained(folder / name)
        tokenizer.save_pretrained(folder / name)
        step = int(name.rsplit("-", 1)[1])
        (folder / name / "trainer_state.json").write_text(json.dumps({"step": step}))
    recipe = {"data": {"data_dir": str(data), "source_lang": "en", "target_lang": "de"}, "max_steps": 40}
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 25, "valid/bleu": 1.5}) + "\n")
    return folder


def test_checkpoints_in_step_order_the_runs_own_first(run):
    assert [(step, path.relative_to(run).as_posix()) for step, path in run_checkpoints(run)] == [
        (10, "history/checkpoint-10"),
        (25, "checkpoint-25"),
        (40, "checkpoint-40"),
    ]


def test_aer_and_pattern_at_each_step_are_those_of_that_checkpoint(run):
    data = run.parent / "data"
    report = over_training(run, kind="encoder", layer=1, head=3, align_path=data / "test.align", langs=("en", "de"))
    sources = (data / "test.en").read_text().splitlines()
    references = (data / "test.de").read_text().splitlines()
    gold = (data / "test.align").read_text().splitlines()
    assert report.steps == [10, 25, 40] and report.pairs == 5
    assert report.source == sources[0] and report.reference == references[0]
    assert report.validation == {"steps": [25], "bleu": [1.5]}
    for index, folder in enumerate([run / "history/checkpoint-10", run / "checkpoint-25", run / "checkpoint-40"]):
        translator = Translator.from_pretrained(str(folder), device="cpu", dtype="fp32")
        expected = measure(translator.model, translator.tokenizer, sources, references, gold)
        for name in ("layer 1 predict", "layer 2 predict", "diagonal"):
            assert report.aer[name][index] == pytest.approx(expected[name])
        (ex,) = explain(translator, None, sources[:1], references[:1], with_scores=False)
        assert report.patterns[index] == pytest.approx(view(ex, "encoder", layer=1, head=3).weights[0, 0], abs=1e-6)
    assert not any(name.endswith(" input") for name in report.aer)


def test_the_command_writes_the_figure_and_prints_the_table(run, tmp_path, capsys):
    out = tmp_path / "over"
    code, stdout, err = run_cli("attention", "--checkpoints", run, "--sample-size", "3", "-o", out, capsys=capsys)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == [
        ".aiayn-written.json",
        "over_training.json",
        "over_training.md",
        "over_training.png",
    ]
    data = json.loads((out / "over_training.json").read_text())
    assert data["steps"] == [10, 25, 40] and data["aer_pairs"] == 3
    assert data["pattern"]["title"] == "encoder-decoder attention, layer 2, mean of heads"
    assert stdout.startswith("| step | AER layer 1 | AER layer 2 | AER diagonal |")
    code, stdout, _ = run_cli("attention", "--checkpoints", run, "--sample-size", "2", capsys=capsys)
    assert code == 0 and stdout.count("\n| ") == 3  # no -o: the table alone, nothing written


@pytest.mark.parametrize(
    "args, message",
    [
        (["--checkpoints", "nowhere"], "--checkpoints nowhere: no such run folder"),
        (["--kind", "sideways"], "--kind sideways: choose among encoder, decoder, cross"),
        (["A dog runs.", "A cat sleeps.", "--reference", "x", "--reference", "y"], "one sentence pair"),
        (["A dog runs."], "give --reference"),
        (["--layer", "9"], "--layer 9: the model's decoder has layers 1 to 2"),
        (["--data-dir", "."], "no test.align"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(run, tmp_path, capsys, args, message):
    out = tmp_path / "over"
    if "--checkpoints" not in args:
        args = ["--checkpoints", str(run), *args]
    code, _, err = run_cli("attention", *args, "--sample-size", "2", "-o", out, capsys=capsys)
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
