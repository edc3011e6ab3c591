"""A run that cannot be lost or hijacked: no pickle is ever loaded from a checkpoint, one run per
output folder, a signal saves a checkpoint that resumes exactly, other data or a non-finite loss
stop the run in one line."""

from __future__ import annotations

import ctypes.util
import json
import os
import pickle
import random
import re
import shutil
import signal
import threading
from pathlib import Path

import pytest
import torch
from helpers import cli_here as aiayn
from helpers import one_error_line, run_cli
from training_task import (  # noqa: F401  (task, uninterrupted: fixtures)
    RESUME_FLAGS,
    TINY,
    max_difference,
    signal_when,
    start_training,
    task,
    train_args,
    uninterrupted,
    weights,
    write_dictionary_task,
)


class _WritesAFile:
    """Unpickling this object opens (creates) `path`: what a crafted checkpoint would do, harmlessly."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def _fake_checkpoint(folder: Path) -> Path:
    (folder / "training_state").mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"step": 10}))
    return folder


@pytest.mark.parametrize("name", ["training_state/custom_checkpoint_0.pkl", "training_state/rng-0.json"])
def test_a_checkpoint_holding_a_pickle_is_refused_and_never_loaded(monkeypatch, capsys, tmp_path, name):
    marker = tmp_path / "written-by-the-pickle"
    checkpoint = _fake_checkpoint(tmp_path / "elsewhere" / "checkpoint-10")
    (checkpoint / name).write_bytes(pickle.dumps(_WritesAFile(marker)))
    args = ["train", TINY, "--output-dir", tmp_path / "run", "--resume", checkpoint]
    line = one_error_line(*aiayn(monkeypatch, capsys, *args)[::2])
    assert line.startswith(f"error: {checkpoint / name}: a pickle in a checkpoint") and "refused" in line
    assert not marker.exists()
    pickle.loads((checkpoint / name).read_bytes())  # the payload does write the file when unpickled
    assert marker.exists()


def _quick_args(data: Path, tokenizer: Path, output: Path, steps: int, *extra: str) -> list:
    # fp32 on every CPU (a later `--set mixed_precision=...` in `extra` overrides it)
    flags = ["mixed_precision=no", "checkpoint_every_steps=2", "valid_bleu_samples=0", "best_metric=loss"]
    flags += ["average_last=null", "trackers=[]"]
    return [
        *("train", TINY, "--data-dir", data, "--tokenizer", tokenizer, "--output-dir", output),
        *("--max-steps", str(steps), "--no-progress", *[x for flag in flags for x in ("--set", flag)], *extra),
    ]


def _last_error_line(code: int, err: str) -> str:
    """The run's own lines (the data report) may come first; one error line, last, no traceback."""
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err and [x for x in lines if x.startswith("error")] == lines[-1:], err
    return lines[-1]


def test_resuming_over_other_training_data_is_refused(monkeypatch, capsys, task, tmp_path):
    data = shutil.copytree(task["data"], tmp_path / "data")
    out = tmp_path / "run"
    code, _, err = aiayn(monkeypatch, capsys, *_quick_args(data, task["tokenizer"], out, 4))
    assert code == 0, err
    umask = os.umask(0)
    os.umask(umask)
    for path in (out / "checkpoint-4" / "trainer_state.json", out / "checkpoint-4" / "model.safetensors"):
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # the umask's mode, not mkstemp's 0600
    write_dictionary_task(data, n_train=300, seed=7)  # the same paths, other sentences
    before = sorted(p.name for p in out.iterdir())
    line = _last_error_line(*aiayn(monkeypatch, capsys, *_quick_args(data, task["tokenizer"], out, 6))[::2])
    assert f"{out / 'checkpoint-4'} was trained on other data" in line and "--accept-new-data" in line
    assert sorted(p.name for p in out.iterdir()) == before
    args = _quick_args(data, task["tokenizer"], out, 6, "--accept-new-data")
    code, stdout, err = aiayn(monkeypatch, capsys, *args)
    assert code == 0 and f"resuming from {out / 'checkpoint-4'}" in err and "trained 6 steps" in stdout, err
    assert json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["scheduler_steps"] == 6


def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(monkeypatch, capsys, task, tmp_path):
    import aiayn_cli.training.loss as loss

    real, calls = loss.label_smoothed_cross_entropy, []

    def poisoned(logits, *args, **kwargs):
        calls.append(1)
        return real(logits * float("nan") if len(calls) == 3 else logits, *args, **kwargs)

    monkeypatch.setattr(loss, "label_smoothed_cross_entropy", poisoned)
    out = tmp_path / "run"
    line = _last_error_line(*aiayn(monkeypatch, capsys, *_quick_args(task["data"], task["tokenizer"], out, 6))[::2])
    assert line.startswith("error: step 3: the loss is not finite (nan); stopped before applying this update")
    assert f"the last good checkpoint is {out / 'checkpoint-2'}" in line
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    assert all(torch.isfinite(t).all() for t in weights(out / "checkpoint-2").values())


def test_under_bf16_the_loss_reads_the_bf16_scores_compiled(monkeypatch, capsys, task, tmp_path):
    # accelerate's float32 cast of the model's outputs is taken off: the scores reach the loss in bf16
    import aiayn_cli.training.loss as loss

    calls = []

    def spy(real):
        def loss(logits, *args, **kwargs):
            calls.append((logits.dtype, args[-1]))  # the last argument: compiled
            return real(logits, *args, **kwargs)

        return loss

    monkeypatch.setattr(loss, "label_smoothed_cross_entropy", spy(loss.label_smoothed_cross_entropy))
    out = tmp_path / "run"
    code, _, err = aiayn(
        monkeypatch, capsys, *_quick_args(task["data"], task["tokenizer"], out, 2, "--set", "mixed_precision=bf16")
    )
    assert code == 0, err
    assert len(calls) > 2 and set(calls) == {(torch.bfloat16, True)}, calls  # training steps and validation
    assert all(torch.isfinite(t).all() for t in weights(out / "checkpoint-2").values())


@pytest.mark.slow
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_saves_the_step_and_resuming_is_exact(task, tmp_path, uninterrupted, number):
    name, out = signal.Signals(number).name, tmp_path / "run"
    for _attempt in range(5):  # the signal must land after the first checkpoint and before the end
        process = start_training(task, out, *RESUME_FLAGS)
        sent = signal_when(process, lambda: (out / "checkpoint-3").is_dir(), number, random.uniform(0.0, 1.0))
        stderr = process.communicate()[1]
        if sent and process.returncode == 128 + number:
            break
        shutil.rmtree(out, ignore_errors=True)
    else:
        pytest.fail(f"could not send {name} in the middle of the run")
    assert "Traceback" not in stderr
    finishing = int(re.search(rf"{name}: finishing step (\d+), then saving a checkpoint", stderr)[1])
    last = stderr.strip().splitlines()[-1]
    saved = out / f"checkpoint-{finishing}"
    assert last == f"interrupted: {name} at step {finishing}: saved {saved}; the same command resumes the run"
    assert max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if p.suffix == "") == finishing
    result = run_cli(*train_args(task, out, *RESUME_FLAGS), env=task["env"])
    assert result.returncode == 0, result.stderr
    assert f"resuming from {saved} (step {finishing}," in result.stderr
    assert max_difference(weights(out / "checkpoint-60"), uninterrupted) <= 1e-6
    # `python -m aiayn_cli train` started again, in the same process, with jemalloc where it is installed
    jemalloc = ctypes.util.find_library("jemalloc")
    expected = f"allocator: {jemalloc} (preloaded;" if jemalloc else "allocator: glibc malloc"
    assert expected in result.stderr, result.stderr


def _second_signal_after_the_first_is_taken(process, number: int) -> str:
    """Send `number` again as soon as the run has said it is finishing its step for the first one;
    the run's whole stderr once it has ended."""
    lines, taken = [], threading.Event()

    def read():
        for line in process.stderr:
            lines.append(line)
            if "finishing step" in line:
                taken.set()
        taken.set()  # ended: nothing to wait for

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if taken.wait(timeout=300) and process.poll() is None:
        process.send_signal(number)
    process.wait(timeout=300)
    reader.join(timeout=60)
    return "".join(lines)


@pytest.mark.slow
def test_a_second_signal_stops_at_once(task, tmp_path):
    out = tmp_path / "run"
    for _attempt in range(10):  # the second signal must come before the first one's checkpoint is written
        process = start_training(task, out, *RESUME_FLAGS)
        assert signal_when(process, lambda: (out / "checkpoint-3").is_dir(), signal.SIGTERM, 0.2)
        stderr = _second_signal_after_the_first_is_taken(process, signal.SIGTERM)
        finishing = int(re.search(r"SIGTERM: finishing step (\d+), then saving a checkpoint", stderr)[1])
        if "SIGTERM again" not in stderr:  # too late: the step and its checkpoint were done first
            assert process.returncode in (128 + signal.SIGTERM, -signal.SIGTERM), stderr
            assert (out / f"checkpoint-{finishing}").is_dir(), stderr
            shutil.rmtree(out, ignore_errors=True)
            continue
        break
    else:
        pytest.fail("the second SIGTERM never came before the first one's checkpoint was written")
    assert process.returncode == -signal.SIGTERM, stderr  # the signal's default action: no exit code of ours
    assert stderr.rstrip().endswith("SIGTERM again: stopping now, without a checkpoint"), stderr
    assert "interrupted:" not in stderr and "Traceback" not in stderr
    checkpoints = [p for p in out.glob("checkpoint-*") if p.suffix == ""]
    assert checkpoints, "the checkpoints written before the signals are kept"
    assert all((p / "trainer_state.json").is_file() for p in checkpoints)  # none half-written under its name


@pytest.mark.slow
def test_two_runs_started_together_one_trains_the_other_refuses(task, tmp_path, uninterrupted):
    out = tmp_path / "run"
    processes = [start_training(task, out, *RESUME_FLAGS), start_training(task, out, *RESUME_FLAGS)]
    errors = [p.communicate()[1] for p in processes]
    codes = [p.returncode for p in processes]
    assert sorted(codes) == [0, 2], errors
    winner, loser = processes[codes.index(0)], errors[codes.index(2)]
    lines = loser.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: --output-dir {out}: in use by another run (aiayn train, process {winner.pid} on "
    )
    assert lines[0].endswith("wait for it to end or choose another --output-dir")
    assert max_difference(weights(out / "checkpoint-60"), uninterrupted) <= 1e-6
    # a pickle planted in that finished run's newest checkpoint is refused on the next run
    marker = tmp_path / "written-by-the-pickle"
    (out / "checkpoint-60" / "training_state" / "custom_checkpoint_0.pkl").write_bytes(
        pickle.dumps(_WritesAFile(marker))
    )
    result = run_cli(*train_args(task, out, *RESUME_FLAGS), env=task["env"])
    line = one_error_line(result.returncode, result.stderr)
    assert line.startswith(f"error: {out / 'checkpoint-60'}/training_state/custom_checkpoint_0.pkl: a pickle")
    assert not marker.exists()
