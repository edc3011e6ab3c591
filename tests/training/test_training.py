"""`aiayn train` end to end on generated data: it learns; a kill -9 and a resume give the same weights
as an uninterrupted run; a kill during a checkpoint write leaves the previous one loadable."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, cli_env, run_cli
from training_task import (
    RESUME_FLAGS,
    TINY,
    max_difference,
    signal_when,
    start_training,
    train_args,
    weights,
    write_dictionary_task,
)

import aiayn_cli.model  # noqa: F401  (registers the model with AutoModelForSeq2SeqLM, for from_pretrained below)


@pytest.mark.slow  # learns to a BLEU target: the slow tier
def test_tiny_recipe_learns_and_writes_a_run_folder(task, tmp_path):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

    out = tmp_path / "run"
    result = run_cli(*train_args(task, out, "--set", "length_penalty_grid=[0.0, 1.0]"), env=task["env"])
    assert result.returncode == 0, result.stderr
    assert "stopped by max_steps" in result.stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "train/loss" in r]
    valid = [r for r in records if "valid/bleu" in r]
    assert [r["step"] for r in train] == list(range(20, 201, 20))
    assert train[-1]["train/loss"] < train[0]["train/loss"] - 2.0  # it learns
    # 200 steps of the tiny recipe reach 20-72 validation BLEU depending on the dropout masks (seeds 1-3,
    # two dropout implementations); at step 100, before it has learned the task, the same run scores 2.1
    assert valid[-1]["valid/bleu"] > 15 and valid[-1]["step"] == 200
    assert all(r["tokens_per_s"] > 0 and r["lr"] > 0 for r in train)
    # checkpoints: Hub-format folders with the training state; keep_last 3, averaged last 2
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-100", "checkpoint-200"]
    last = out / "checkpoint-200"
    names = {p.name for p in last.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "trainer_state.json",
        "training_state",
    } <= names
    state = json.loads((last / "trainer_state.json").read_text())
    assert state["step"] == 200 and state["best_step"] == 200
    model = AutoModelForSeq2SeqLM.from_pretrained(last)
    assert GenerationConfig.from_pretrained(last).num_beams == 4  # the paper's decoding defaults
    tokenizer = AutoTokenizer.from_pretrained(last)
    ids = model.generate(**tokenizer(["w1 w2 w3"], return_tensors="pt"), num_beams=1, max_length=20)
    assert tokenizer.batch_decode(ids, skip_special_tokens=True)[0].strip() == "v1x v2x v3x"
    # the final model: checkpoint 100 is still in the warmup (the peak learning rate is at step 100), so
    # no average is a candidate and the last checkpoint, also the best, is the final model
    averaged = json.loads((out / "averaged" / "averaged_from.json").read_text())
    assert averaged["checkpoints"] == ["checkpoint-200"] and averaged["selection"]["chosen"] == "last"
    assert list(averaged["selection"]["scores"]) == ["last"]
    assert "averaged/valid/bleu" in records[-2]
    # the length penalty chosen on the validation split, saved with the averaged model (§6.1)
    chosen = records[-1]
    tried = {float(alpha): bleu for alpha, bleu in chosen["length_penalty_bleu"].items()}  # in the order tried
    assert chosen["length_penalty_model"] == "averaged" and {0.0, 1.0} <= set(tried)
    assert chosen["length_penalty"] == max(tried, key=tried.get)
    assert sorted(chosen["length_penalty_extended"]) == sorted(set(tried) - {0.0, 1.0})
    assert chosen["length_penalty"] == 0.0 or chosen["length_penalty"] < max(tried)  # inside, or at alpha 0
    assert GenerationConfig.from_pretrained(out / "averaged").length_penalty == chosen["length_penalty"]
    assert f"{out / 'averaged'}: length penalty alpha" in result.stdout
    # the resolved recipe, the learning curve, TensorBoard
    assert "data_dir: " + str(task["data"]) in (out / "recipe.yaml").read_text()
    assert (out / "learning_curve.png").stat().st_size > 10_000
    assert list((out / "logs").rglob("events.out.tfevents.*"))


def _train_lrs(records: list[dict]) -> list[tuple[int, float]]:
    return [(r["step"], r["lr"]) for r in records if "train/loss" in r]


@pytest.mark.slow  # a training run in a subprocess
def test_lr_cooldown_by_steps_and_by_time(task, tmp_path):
    """The logged learning rate is equation (3) times the cooldown factor, whether the budget is
    max_steps or max_time."""
    from aiayn_cli.training.schedule import cooldown_factor, noam_lrate

    quiet = ("--set", "valid_every_steps=null", "--set", "average_last=null", "--set", "trackers=[]")
    out = tmp_path / "steps"
    cooldown = ("--set", "lr_cooldown=0.5", "--set", "log_every_steps=1", *quiet)
    result = run_cli(*train_args(task, out, "--max-steps", "40", *cooldown), env=task["env"])
    assert result.returncode == 0, result.stderr
    lrs = _train_lrs([json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()])
    assert [step for step, _ in lrs] == list(range(1, 41))
    for step, lr in lrs:  # tiny.yaml: d_model 64, warmup 100, lr_scale 0.5
        expected = noam_lrate(step, 64, 100, 0.5) * cooldown_factor((step - 1) / 40, 0.5)
        assert lr == pytest.approx(expected, rel=1e-9)
    assert lrs[19][1] == pytest.approx(noam_lrate(20, 64, 100, 0.5))  # untouched before the last half
    # by time: 6 s of training; the last update ran within a few steps' time of the end, at a small lr
    out = tmp_path / "time"
    args = train_args(task, out, *cooldown, "--set", "max_steps=null", "--max-time", "6s")
    result = run_cli(*args, env=task["env"])
    assert result.returncode == 0, result.stderr
    assert "stopped by max_time" in result.stdout
    lrs = _train_lrs([json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()])
    factors = [lr / noam_lrate(step, 64, 100, 0.5) for step, lr in lrs]
    assert factors[0] == pytest.approx(1.0) and factors[-1] < 0.5
    assert all(b <= a + 1e-12 for a, b in zip(factors, factors[1:]))  # it only falls


# A run whose early checkpoints (steps 6 and 12, in the warmup) are poor, validated at every checkpoint
POOR_EARLY_CHECKPOINTS = [
    "max_steps=36",
    "warmup_steps=12",
    "checkpoint_every_steps=6",
    "valid_every_steps=6",
    "log_every_steps=2",
    "keep_last=6",
    "average_last=6",
    "valid_bleu_samples=32",
    "trackers=[]",
]


@pytest.mark.slow  # a training run in a subprocess
def test_the_final_model_is_never_worse_on_validation_than_the_best_checkpoint(task, tmp_path):
    """The end of a run whose early checkpoints are poor (steps 6 and 12, in the warmup): the final model,
    chosen among the last checkpoint, the best one and the averages of the last k of the decayed tail,
    is at least as good on validation as every checkpoint the run validated; no average holds a
    checkpoint of the warmup; `averaged/` holds the chosen checkpoints' mean, with the choice."""
    out = tmp_path / "run"
    result = run_cli(
        *train_args(task, out, *[a for f in POOR_EARLY_CHECKPOINTS for a in ("--set", f)]), env=task["env"]
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    validated = {r["step"]: r for r in records if "valid/bleu" in r}
    assert sorted(validated) == [6, 12, 18, 24, 30, 36]
    assert validated[6]["valid/loss"] > min(r["valid/loss"] for r in validated.values()) + 0.1  # early: poor
    (selection,) = [r["selection"] for r in records if "selection" in r]
    scores = selection["scores"]
    # the candidates: the last, the best (where it is another), the averages of the tail 18-36 only
    averages = [name for name in scores if name.startswith("average")]
    assert averages == [f"average of the last {k}" for k in (2, 3, 4)]
    assert scores["average of the last 4"]["checkpoints"] == [f"checkpoint-{s}" for s in (18, 24, 30, 36)]
    assert selection["tail_rule"] == "checkpoints after step 12, the last at the peak learning rate"
    # the measure that chose the best checkpoint (validation BLEU, then loss) chose the final model
    chosen = scores[selection["chosen"]]
    best_single = max(validated.values(), key=lambda r: (r["valid/bleu"], -r["valid/loss"]))
    assert chosen["valid/bleu"] > best_single["valid/bleu"] or (
        chosen["valid/bleu"] == best_single["valid/bleu"] and chosen["valid/loss"] <= best_single["valid/loss"] + 1e-6
    )
    assert scores["last"]["valid/bleu"] == pytest.approx(validated[36]["valid/bleu"], abs=1e-9)
    assert scores["last"]["valid/loss"] == pytest.approx(validated[36]["valid/loss"], abs=1e-5)
    assert chosen["valid/bleu"] == max(s["valid/bleu"] for s in scores.values())
    averaged = json.loads((out / "averaged" / "averaged_from.json").read_text())
    assert averaged["checkpoints"] == chosen["checkpoints"] == selection["checkpoints"]
    assert averaged["selection"] == selection
    (final,) = [r for r in records if "averaged/valid/loss" in r]
    assert final["averaged/valid/bleu"] == chosen["valid/bleu"]
    assert f"final model: {selection['chosen']} (checkpoint steps" in result.stderr
    # `aiayn average --choose` makes the same choice from the run folder alone, into the same weights
    again = run_cli("average", str(out), "--last", "6", "--choose", "-o", str(tmp_path / "chosen"), env=task["env"])
    assert again.returncode == 0, again.stderr
    chosen_again = json.loads((tmp_path / "chosen" / "averaged_from.json").read_text())["selection"]
    assert chosen_again["chosen"] == selection["chosen"] and chosen_again["checkpoints"] == selection["checkpoints"]
    for name, scores in selection["scores"].items():
        assert chosen_again["scores"][name]["valid/bleu"] == pytest.approx(scores["valid/bleu"], abs=1e-9)
    assert max_difference(weights(tmp_path / "chosen"), weights(out / "averaged")) == 0.0
    assert "final model:" in again.stderr and f"wrote {selection['chosen']}" in again.stdout


@pytest.mark.slow  # a training run in a subprocess
def test_chosen_by_the_beam_the_final_model_and_its_alpha_are_the_best_pair_on_the_whole_split(task, tmp_path):
    """average_choose_by: beam: every candidate translates the whole validation split with the model's beam,
    re-ranked by each alpha of the grid; the final model is the candidate whose best alpha scores highest,
    with that alpha in averaged/generation_config.json (no second search for it), and `aiayn evaluate` of
    averaged/ on the split scores what the choice recorded. `aiayn average --choose` makes the same pair."""
    from transformers import GenerationConfig

    out = tmp_path / "run"
    flags = ["max_steps=160", "warmup_steps=40", "checkpoint_every_steps=20", "valid_every_steps=20"]
    flags += ["keep_last=6", "average_last=6", "valid_bleu_samples=32", "trackers=[]"]
    flags += ["average_choose_by=beam", "length_penalty_grid=[0.0, 1.0]"]
    result = run_cli(*train_args(task, out, *[a for f in flags for a in ("--set", f)]), env=task["env"])
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    (selection,) = [r["selection"] for r in records if "selection" in r]
    scores = selection["scores"]
    assert selection["metric"] == "valid/beam_bleu" and len(scores) >= 3  # last, averages of the tail
    # 160 steps have learned something (beam BLEU ~18 for the last checkpoint), and the candidates differ
    assert len({round(s["valid/beam_bleu"], 2) for s in scores.values()}) > 1 and scores["last"]["valid/beam_bleu"] > 5
    for name, candidate in scores.items():  # the grid's alphas at least, each candidate its best
        assert {"0", "1"} <= set(candidate["length_penalty_bleu"]), name
        assert candidate["valid/beam_bleu"] == max(candidate["length_penalty_bleu"].values())
        assert candidate["length_penalty_bleu"][f"{candidate['length_penalty']:g}"] == candidate["valid/beam_bleu"]
    chosen = scores[selection["chosen"]]
    assert chosen["valid/beam_bleu"] == max(s["valid/beam_bleu"] for s in scores.values())
    assert GenerationConfig.from_pretrained(out / "averaged").length_penalty == chosen["length_penalty"]
    (alpha_record,) = [r for r in records if "length_penalty" in r and "selection" not in r]
    assert (
        alpha_record["length_penalty"] == chosen["length_penalty"]
        and alpha_record["length_penalty_model"] == "averaged"
    )
    assert alpha_record["length_penalty_bleu"] == chosen["length_penalty_bleu"]
    assert f"length penalty alpha {chosen['length_penalty']:g}, chosen with the model" in result.stdout + result.stderr
    # what a user measures on the same split with the saved model and its generation config
    scored = run_cli(
        "evaluate", "-m", str(out / "averaged"), "--data-dir", str(task["data"]), "-s", "en", "-t", "de",
        "--split", "val", "--metrics", "sacrebleu", "--precision", "fp32", "--no-progress", env=task["env"],
    )  # fmt: skip
    assert scored.returncode == 0, scored.stderr
    bleu = float(next(line.split()[1] for line in scored.stdout.splitlines() if line.startswith("BLEU ")))
    assert bleu == pytest.approx(chosen["valid/beam_bleu"], abs=0.01)
    # `aiayn average --choose` reads average_choose_by from the run's recipe.yaml: the same pair
    again = run_cli("average", str(out), "--last", "6", "--choose", "-o", str(tmp_path / "chosen"), env=task["env"])
    assert again.returncode == 0, again.stderr
    chosen_again = json.loads((tmp_path / "chosen" / "averaged_from.json").read_text())["selection"]
    assert chosen_again["chosen"] == selection["chosen"] and chosen_again["metric"] == "valid/beam_bleu"
    assert GenerationConfig.from_pretrained(tmp_path / "chosen").length_penalty == chosen["length_penalty"]
    assert f"wrote length_penalty {chosen['length_penalty']:g}" in again.stdout
    # --choose-by sample: the run's validation sample decides, and the alpha is not touched
    sample = tmp_path / "by-sample"
    again = run_cli(
        "average", str(out), "--last", "6", "--choose", "--choose-by", "sample", "-o", str(sample), env=task["env"]
    )
    assert again.returncode == 0, again.stderr
    by_sample = json.loads((sample / "averaged_from.json").read_text())["selection"]
    assert by_sample["metric"] == "valid/bleu" and "valid/beam_bleu" not in by_sample["scores"]["last"]
    assert "wrote length_penalty" not in again.stdout
    assert by_sample["scores"][by_sample["chosen"]]["valid/bleu"] == max(s["valid/bleu"] for s in scores.values())
    # benchmarks/ablate_end_choice.py records both choices of the folder, as the run and `average` made them
    bench = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "ablate_end_choice.py"), f"tiny={out}", "--last", "6",
         "--results", str(tmp_path / "end.json")],
        capture_output=True, text=True, env=task["env"], timeout=300,
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    figures = json.loads((tmp_path / "end.json").read_text())["figures"]["runs"]["tiny"]
    assert figures["chosen_by_beam"] == selection["chosen"] and figures["chosen_by_sample"] == by_sample["chosen"]
    for name, candidate in figures["candidates"].items():
        assert candidate["beam_bleu"] == round(scores[name]["valid/beam_bleu"], 2)
        assert candidate["alpha"] == scores[name]["length_penalty"]
    assert figures["sample_alpha"] == figures["candidates"][by_sample["chosen"]]["alpha"]  # the same search
    assert figures["seconds_beam"] > 0 and figures["seconds_sample_alpha"] > 0 and figures["steps"] == 160


@pytest.mark.slow  # a training run in a subprocess
def test_history_steps_keep_the_model_alone_at_those_steps(task, tmp_path):
    """history_steps: history/checkpoint-<step>/ at each listed step the run reaches, model and tokenizer
    without optimizer state, never rotated away; the weights are the run's at that step."""
    from transformers import AutoModelForSeq2SeqLM

    out = tmp_path / "run"
    flags = ["max_steps=12", "checkpoint_every_steps=4", "keep_last=1", "valid_every_steps=null"]
    flags += ["average_last=null", "trackers=[]", "history_steps=[1, 4, 7, 50]"]
    result = run_cli(*train_args(task, out, *[a for f in flags for a in ("--set", f)]), env=task["env"])
    assert result.returncode == 0, result.stderr
    history = sorted((out / "history").iterdir(), key=lambda p: int(p.name.split("-")[1]))
    assert [p.name for p in history] == ["checkpoint-1", "checkpoint-4", "checkpoint-7"]
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-12"]  # keep_last rotates, history stays
    assert not any((history[0] / "training_state").iterdir())  # no optimizer state
    assert max_difference(weights(history[1]), weights(out / "checkpoint-12")) > 0
    model = AutoModelForSeq2SeqLM.from_pretrained(history[2])
    assert json.loads((history[2] / "trainer_state.json").read_text())["step"] == 7
    assert model.config.d_model == 64


@pytest.mark.slow
def test_kill_and_resume_gives_the_same_weights(task, tmp_path, uninterrupted):
    out = tmp_path / "run"
    for _attempt in range(5):  # the kill must land after the first checkpoint and before the end
        process = start_training(task, out, *RESUME_FLAGS)
        killed = signal_when(process, lambda: (out / "checkpoint-3").is_dir(), signal.SIGKILL, random.uniform(0.0, 1.0))
        process.communicate()
        if killed and not (out / "checkpoint-60").exists():
            break
        import shutil

        shutil.rmtree(out, ignore_errors=True)
    else:
        pytest.fail("could not kill the run in the middle")
    assert process.returncode == -signal.SIGKILL
    stopped_at = max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if p.suffix == "")
    assert 3 <= stopped_at < 60
    # the same command again continues the run
    result = run_cli(*train_args(task, out, *RESUME_FLAGS), env=task["env"])
    assert result.returncode == 0, result.stderr
    assert f"resuming from {out / f'checkpoint-{stopped_at}'}" in result.stderr
    assert max_difference(weights(out / "checkpoint-60"), uninterrupted) <= 1e-6
    # the metrics file has each step once, across the kill
    steps = [
        json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines() if "train/loss" in line
    ]
    assert steps == list(range(20, 61, 20))


@pytest.mark.slow
def test_kill_during_a_checkpoint_write(task, tmp_path, uninterrupted):
    from transformers import AutoModelForSeq2SeqLM

    from aiayn_cli.training.checkpoint import latest_checkpoint

    out = tmp_path / "run"
    for _attempt in range(10):  # kill -9 the moment a checkpoint's temporary folder appears
        process = start_training(task, out, *RESUME_FLAGS)
        killed = signal_when(
            process, lambda: (out / "checkpoint-6").is_dir() and any(out.glob("checkpoint-*.tmp")), signal.SIGKILL
        )
        process.communicate()
        if killed and any(out.glob("checkpoint-*.tmp")):
            break
        import shutil

        shutil.rmtree(out, ignore_errors=True)
    else:
        pytest.fail("could not kill the run during a checkpoint write")
    partial = next(out.glob("checkpoint-*.tmp"))
    previous = latest_checkpoint(out)
    assert previous is not None and int(previous.name.split("-")[1]) < int(partial.name.split("-")[1].split(".")[0])
    AutoModelForSeq2SeqLM.from_pretrained(previous)  # the previous checkpoint is whole
    result = run_cli(*train_args(task, out, *RESUME_FLAGS, "--resume", str(previous)), env=task["env"])
    assert result.returncode == 0, result.stderr
    assert f"resuming from {previous}" in result.stderr
    assert not list(out.glob("checkpoint-*.tmp"))
    assert max_difference(weights(out / "checkpoint-60"), uninterrupted) <= 1e-6


@pytest.mark.slow
def test_resume_of_a_finished_run_and_with_another_tokenizer(task, tmp_path, uninterrupted):
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.data.tokenization import train_tokenizer

    out = task["root"] / "uninterrupted"
    before = sorted(p.name for p in out.iterdir())
    done = run_cli(*train_args(task, out, *RESUME_FLAGS), env=task["env"])
    assert done.returncode == 0, done.stderr
    assert "trained 60 steps" in done.stdout and sorted(p.name for p in out.iterdir()) == before
    assert max_difference(weights(out / "checkpoint-60"), uninterrupted) == 0.0
    other = write_dictionary_task(tmp_path / "other-data", n_train=500, seed=5)
    train_tokenizer(
        DataSpec(data_dir=str(other), source_lang="en", target_lang="de"),
        vocab_size=400,
        output_dir=tmp_path / "other-tok",
        show_progress=False,
    )
    args = train_args(task, out, *RESUME_FLAGS)
    args[args.index("--tokenizer") + 1] = str(tmp_path / "other-tok")
    result = run_cli(*args, env=task["env"])
    assert result.returncode == 2 and "trained with another tokenizer" in result.stderr, result.stderr


@pytest.mark.slow
def test_accelerate_decides_precision_unless_the_recipe_does(tmp_path):
    """`accelerate launch --mixed_precision X` sets ACCELERATE_MIXED_PRECISION; a recipe's null keeps it."""
    script = (
        "import sys\n"
        "from aiayn_cli.training.recipe import load_recipe\n"
        "from aiayn_cli.training.accelerator import make_accelerator\n"
        f"recipe = load_recipe({str(TINY)!r}, {{'output_dir': {str(tmp_path / 'out')!r}, 'trackers': [],\n"
        "                      'mixed_precision': None if sys.argv[1] == 'null' else sys.argv[1]})\n"
        "print(make_accelerator(recipe).mixed_precision)\n"
    )
    for recipe_value, expected in (("null", "bf16"), ("no", "no")):
        result = subprocess.run(
            [sys.executable, "-c", script, recipe_value],
            capture_output=True,
            text=True,
            env=cli_env(ACCELERATE_MIXED_PRECISION="bf16"),
            cwd=REPO_ROOT,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip().splitlines()[-1] == expected


@pytest.mark.parametrize("kernels", [None, ["flash", "efficient", "math"], ["math"]])
def test_the_recipes_attention_kernels_hold_while_the_run_trains_and_are_restored(tmp_path, monkeypatch, kernels):
    from torch.backends import cuda

    from aiayn_cli.training import trainer
    from aiayn_cli.training.recipe import load_recipe

    flags = {
        "flash": cuda.flash_sdp_enabled,
        "efficient": cuda.mem_efficient_sdp_enabled,
        "cudnn": cuda.cudnn_sdp_enabled,
        "math": cuda.math_sdp_enabled,
    }
    before = {name: flag() for name, flag in flags.items()}
    seen = {}
    monkeypatch.setattr(trainer, "_train", lambda *a: seen.update({n: f() for n, f in flags.items()}))
    recipe = load_recipe(TINY, {"output_dir": str(tmp_path / "run"), "attention_kernels": kernels})
    trainer.train(recipe, show_progress=False)
    assert seen == (before if kernels is None else {name: name in kernels for name in flags})
    assert {name: flag() for name, flag in flags.items()} == before


def test_gradient_checkpointing_trains_the_same_weights(task, tmp_path, monkeypatch):
    # the recipe key recomputes each layer in the backward pass: same dropout masks, same weights (fp32,
    # to float rounding: the recomputed forward sums in the same order); trained in this process, as the
    # command trains (the command's --set is every key's, tested with the recipes)
    from aiayn_cli.training import trainer
    from aiayn_cli.training.recipe import load_recipe

    monkeypatch.setenv("HF_DATASETS_CACHE", str(task["root"] / "cache"))
    runs = {}
    for flag in (False, True):
        out = tmp_path / str(flag)
        overrides = {
            **{"data.data_dir": str(task["data"]), "data.dataset": None, "tokenizer": str(task["tokenizer"])},
            **{"output_dir": str(out), "max_steps": 3, "valid_split": None, "best_metric": "loss"},
            **{"average_last": None, "mixed_precision": "no", "trackers": [], "gradient_checkpointing": flag},
        }
        trainer.train(load_recipe(TINY, overrides), show_progress=False)
        runs[flag] = weights(out / "checkpoint-3")
    assert max_difference(runs[False], runs[True]) < 1e-5


def test_the_resident_memory_is_checked_after_every_step(task, tmp_path, monkeypatch):
    # the pages the allocator keeps can pile up by gigabytes between two log lines: KeptMemory reads the
    # resident memory after every step, and the log line records its last reading
    from aiayn_cli.allocator import KeptMemory
    from aiayn_cli.training import loop, trainer
    from aiayn_cli.training.recipe import load_recipe

    readings, released = iter(range(1, 100)), []

    class Counted(KeptMemory):
        def __init__(self):
            super().__init__(resident=lambda: next(readings) * 2**20, release=lambda: released.append(True))

    monkeypatch.setattr(loop, "KeptMemory", Counted)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(task["root"] / "cache"))
    overrides = {
        **{"data.data_dir": str(task["data"]), "data.dataset": None, "tokenizer": str(task["tokenizer"])},
        **{"output_dir": str(tmp_path / "run"), "max_steps": 5, "log_every_steps": 2, "valid_split": None},
        **{"best_metric": "loss", "average_last": None, "mixed_precision": "no", "trackers": []},
    }
    trainer.train(load_recipe(TINY, overrides), show_progress=False)
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["rss_mb"]) for r in logged if "rss_mb" in r] == [(2, 2.0), (4, 4.0)]
    assert next(readings) == 6  # five steps, five readings
    assert released  # 2 MB > 1 MB * 1.5, and the checkpoint at the end


@pytest.mark.parametrize(
    ("elapsed", "last_checkpoint", "last_valid", "expected"),
    [
        (300.0, 0.0, 0.0, (1.0, 1.0)),  # both due
        (300.0, 0.0, 20.0, (1.0, 1.0)),  # the checkpoint is due, validation 20 s away: both now
        (300.0, 20.0, 0.0, (1.0, 1.0)),  # and the other way round
        (300.0, 0.0, 100.0, (1.0, 0.0)),  # validation 100 s away: the checkpoint alone
        (250.0, 0.0, 0.0, (0.0, 0.0)),
        (3590.0, 3200.0, 3200.0, (0.0, 0.0)),  # 10 s before the limit, whose step validates and saves
        (3600.0, 3200.0, 3200.0, (0.0, 0.0)),
    ],
)
def test_timed_checkpoints_and_validations_never_come_a_few_steps_apart(elapsed, last_checkpoint, last_valid, expected):
    # a timed checkpoint one step before a validation's new best (or before the end) would count twice
    # in an average of the last k (checkpoint-3273 and checkpoint-3274 in a Multi30k hour)
    from types import SimpleNamespace

    from aiayn_cli.training.loop import Clock

    clock = Clock(SimpleNamespace(train_seconds=0.0, cpu_seconds=0.0), "60m")
    clock.elapsed = lambda: elapsed
    clock.last_checkpoint, clock.last_valid = last_checkpoint, last_valid
    recipe = SimpleNamespace(checkpoint_every_minutes=5, valid_every_minutes=5)
    checkpoint, valid, time_up, _ = clock.events(recipe)
    assert (checkpoint, valid) == expected
    assert time_up == float(elapsed >= 3600)
