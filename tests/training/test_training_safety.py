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
from helpers import one_error_line, run_cli
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
def test_a_checkpoint_holding_a_pickle_is_refused_and_never_loaded(capsys, tmp_path, name):
    marker = tmp_path / "written-by-the-pickle"
    checkpoint = _fake_checkpoint(tmp_path / "elsewhere" / "checkpoint-10")
    (checkpoint / name).write_bytes(pickle.dumps(_WritesAFile(marker)))
    args = ["train", TINY, "--output-dir", tmp_path / "run", "--resume", checkpoint]
    line = one_error_line(*run_cli(*args, capsys=capsys)[::2])
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


def test_resuming_over_other_training_data_is_refused(capsys, task, tmp_path):
    data = shutil.copytree(task["data"], tmp_path / "data")
    out = tmp_path / "run"
    code, _, err = run_cli(*_quick_args(data, task["tokenizer"], out, 4), capsys=capsys)
    assert code == 0, err
    umask = os.umask(0)
    os.umask(umask)
    for path in (out / "checkpoint-4" / "trainer_state.json", out / "checkpoint-4" / "model.safetensors"):
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # the umask's mode, not mkstemp's 0600
    write_dictionary_task(data, n_train=300, seed=7)  # the same paths, other sentences
    before = sorted(p.name for p in out.iterdir())
    line = _last_error_line(*run_cli(*_quick_args(data, task["tokenizer"], out, 6), capsys=capsys)[::2])
    assert f"{out / 'checkpoint-4'} was trained on other data" in line and "--accept-new-data" in line
    assert sorted(p.name for p in out.iterdir()) == before
    args = _quick_args(data, task["tokenizer"], out, 6, "--accept-new-data")
    code, stdout, err = run_cli(*args, capsys=capsys)
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
    line = _last_error_line(*run_cli(*_quick_args(task["data"], task["tokenizer"], out, 6), capsys=capsys)[::2])
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
    code, _, err = run_cli(
        *_quick_args(task["data"], task["tokenizer"], out, 2, "--set", "mixed_precision=bf16"), capsys=capsys
    )
    assert code == 0, err
    assert len(calls) > 2 and set(calls) == {(torch.bfloat16, True)}, calls  # training steps and validation
    assert all(torch.isfinite(t).all() for t in weights(out / "checkpoint-2").values())


@pytest.mark.parametrize("after", [2, 3])
def test_the_step_a_signal_names_is_the_step_it_saves(monkeypatch, capfd, task, tmp_path, after):
    # SIGTERM lands where the loop's bookkeeping runs after step `after` (its count already moved on,
    # its stop check not yet made): that step is the one finished and saved, and the message says so
    import aiayn_cli.training.loop as loop

    calls, real_check = [], loop.KeptMemory.check

    def check(self):
        calls.append(1)
        if len(calls) == after:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_check(self)

    monkeypatch.setattr(loop.KeptMemory, "check", check)
    out = tmp_path / "run"
    # capfd: the handler writes its line to fd 2 itself
    code, _, err = run_cli(*_quick_args(task["data"], task["tokenizer"], out, 6), capsys=capfd)
    assert code == 128 + signal.SIGTERM, err
    assert f"SIGTERM: finishing step {after}, then saving a checkpoint" in err, err
    assert f"interrupted: SIGTERM at step {after}: saved {out / f'checkpoint-{after}'};" in err, err
    assert max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")) == after


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
    assert re.search(r"SIGTERM again: stopping now; the last complete checkpoint is \S+/checkpoint-\d+: the same "
                     r"command resumes from it$", stderr.rstrip()), stderr  # fmt: skip
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


class _HostReads:
    """Every read of a tensor's value by the host (`item`, `int`, `float`, `bool`: aten's
    `_local_scalar_dense`; `tolist`) while active, with the loop's function it happened in and the
    innermost function of the package. On a CPU every tensor is the host's: a read is counted
    wherever it is, as a GPU would make the host wait there."""

    # where the host may read: the log lines, validation, checkpoints; and the data loader's own batches
    # (host tensors before they go to the device)
    EVENTS = ("log_train", "validate", "checkpoint", "save_checkpoint", "global_batches")

    def __init__(self, monkeypatch):
        from torch.utils._python_dispatch import TorchDispatchMode

        self.reads: list[tuple[str, str]] = []
        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func is torch.ops.aten._local_scalar_dense.default:
                    outer.note()
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        real_tolist = torch.Tensor.tolist

        def tolist(tensor):
            outer.note()
            return real_tolist(tensor)

        monkeypatch.setattr(torch.Tensor, "tolist", tolist)

    def note(self) -> None:
        import traceback

        frames = [frame for frame in traceback.extract_stack() if "aiayn_cli" in frame.filename]
        names = [(Path(frame.filename).name, frame.name) for frame in frames]
        event = next((name for _, name in names if name in self.EVENTS), "in a step")
        where = f"{names[-1][0]}:{names[-1][1]}" if names else "?"
        self.reads.append((event, where))


def test_the_host_never_waits_for_the_device_between_log_lines(monkeypatch, task, tmp_path):
    # 8 steps, a log line and a checkpoint every 4: the host reads the device's values only there (the
    # losses, the non-finite flag, the weights). The model's own `padding_mask` still reads one value per
    # forward pass (`bool(attention_mask.all())`): counted apart, a known branch of the model.
    import aiayn_cli.training.trainer as trainer
    from aiayn_cli.training.recipe import load_recipe

    reads = _HostReads(monkeypatch)
    real_loop = trainer.train_loop

    def counted(*args, **kwargs):
        with reads.mode:
            return real_loop(*args, **kwargs)

    monkeypatch.setattr(trainer, "train_loop", counted)
    overrides = {
        "output_dir": str(tmp_path / "run"),
        "tokenizer": str(task["tokenizer"]),
        "tokenizer_training": None,
        "data.data_dir": str(task["data"]),
        "max_steps": 8,
        "log_every_steps": 4,
        "checkpoint_every_steps": 4,
        "checkpoint_every_minutes": None,
        "valid_split": None,
        "best_metric": "loss",
        "average_last": None,
        "trackers": [],
        "mixed_precision": "no",
    }
    trainer.train(load_recipe(TINY, overrides), show_progress=False)
    in_steps = [where for event, where in reads.reads if event == "in a step"]
    model = [where for where in in_steps if where == "modeling_aiayn.py:padding_mask"]
    assert [where for where in in_steps if where not in model] == [], in_steps
    assert len(model) == 2 * 8  # encoder and decoder, one forward pass a step (update_freq 1)
    assert {event for event, _ in reads.reads} - {"in a step"} <= set(_HostReads.EVENTS)
    assert any(event == "log_train" for event, _ in reads.reads)  # the counter sees the reads that remain


def _guarded_steps(losses_to_poison: set[int], steps: int = 3, guard: bool = True):
    """A tiny model's weights and Adam's state after `steps` steps (fused Adam, clip 1.0), the guard's
    (or, with `guard` False, the plain step: backward, clip, `optimizer.step()`)."""
    from types import SimpleNamespace

    from helpers import tiny_model

    from aiayn_cli.training.guard import NonFiniteGuard
    from aiayn_cli.training.loss import batch_loss

    model = tiny_model().train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    accelerator = SimpleNamespace(device=torch.device("cpu"), num_processes=1, scaler=None)
    checks = NonFiniteGuard(accelerator, optimizer, kept=lambda: "no checkpoint was written yet")
    generator = torch.Generator().manual_seed(5)
    for step in range(1, steps + 1):
        batch = {
            "input_ids": torch.randint(4, 72, (4, 7), generator=generator),
            "attention_mask": torch.ones(4, 7, dtype=torch.long),
            "labels": torch.randint(4, 72, (4, 6), generator=generator),
        }
        torch.manual_seed(step)  # the dropout masks
        out = batch_loss(model, batch, model.config, 0.1)
        loss = out.loss * float("nan") if step in losses_to_poison else out.loss
        (loss / out.ntokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if guard:
            checks.record(torch.stack([loss.detach(), out.nll.detach()]).double(), step)
            checks.update(optimizer.step)
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    state = [optimizer.state[p]["step"].item() for p in model.parameters()]
    return {k: v.clone() for k, v in model.state_dict().items()}, state, checks


def test_the_guarded_step_gives_the_plain_steps_weights_and_skips_a_non_finite_one_on_the_device():
    # fp32 on the CPU, fused Adam: with no bad loss the weights equal the plain step's bit for bit; a NaN
    # loss at step 2 leaves the weights and Adam's step count of step 1, and the host learns it when it reads
    plain, plain_state, _ = _guarded_steps(set(), guard=False)
    guarded, guarded_state, checks = _guarded_steps(set())
    assert guarded_state == plain_state == [3.0] * len(plain_state)
    assert all(torch.equal(plain[k], guarded[k]) for k in plain)
    checks.raise_if_found()  # nothing found: no error

    one, _, _ = _guarded_steps(set(), steps=1, guard=False)
    skipped, skipped_state, checks = _guarded_steps({2})
    assert skipped_state == [1.0] * len(skipped_state)  # steps 2 and 3 were not applied
    assert all(torch.equal(one[k], skipped[k]) for k in one)
    with pytest.raises(Exception, match=r"step 2: the loss is not finite \(nan\); stopped before applying"):
        checks.raise_if_found()


@pytest.mark.slow  # fp16 is emulated on a CPU: minutes
def test_fp16_trains_with_dynamic_loss_scaling_and_saves_the_scale(capsys, task, tmp_path):
    # fp16 forced on the CPU runs the path `mixed_precision: auto` takes on a GPU without bf16: autocast in
    # fp16, torch.amp.GradScaler's scaled loss, fused Adam given the scaler's flag; the scale is saved.
    # (test_gpu_check's fp16 entry runs it on a GPU.)
    out = tmp_path / "run"
    args = _quick_args(task["data"], task["tokenizer"], out, 4, "--set", "mixed_precision=fp16")
    code, _, err = run_cli(*args, capsys=capsys)
    assert code == 0, err
    assert "precision: fp16 (asked for)" in err
    scaler = json.loads((out / "checkpoint-4" / "training_state" / "grad_scaler.json").read_text())
    assert 0 < scaler["scale"] <= 65536.0 and scaler["_growth_tracker"] >= 0
    final = weights(out / "checkpoint-4")
    assert all(torch.isfinite(t).all() for t in final.values())
    assert max_difference(final, weights(out / "checkpoint-2")) > 0  # the updates were applied


def test_auto_takes_fp16_on_a_cuda_gpu_without_bf16(monkeypatch):
    from types import SimpleNamespace

    import aiayn_cli.training.accelerator as accelerator
    from aiayn_cli.precision import PrecisionChoice
    from aiayn_cli.training.recipe import load_recipe

    monkeypatch.setattr(accelerator, "process_state", lambda: SimpleNamespace(device=torch.device("cuda", 0)))
    without = PrecisionChoice("no", "auto: Tesla T4 has no native bf16")
    monkeypatch.setattr(accelerator, "choose_precision", lambda requested, device: without)
    choice = accelerator.run_precision(load_recipe(TINY, {"mixed_precision": "auto"}))
    assert (
        choice.precision == "fp16"
        and choice.reason == "auto: Tesla T4 has no native bf16: fp16 with dynamic loss scaling"
    )
    assert accelerator.run_precision(load_recipe(TINY, {"mixed_precision": "no"})).precision == "no"


def test_under_a_loss_scaler_a_non_finite_loss_makes_the_scaler_skip_the_update():
    # fp16's path, in fp32 on the CPU: the guard makes the loss that reaches backward NaN, the scaler
    # finds it in the gradients, fused Adam leaves everything as it was, and the scale backs off
    from types import SimpleNamespace

    from aiayn_cli.training.guard import NonFiniteGuard

    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.1, fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    accelerator = SimpleNamespace(device=torch.device("cpu"), num_processes=1, scaler=scaler)
    guard = NonFiniteGuard(accelerator, optimizer, kept=lambda: "no checkpoint was written yet")
    for poisoned in (True, False):
        loss = layer(torch.randn(2, 4)).square().sum() * (float("inf") if poisoned else 1.0)
        scaler.scale(guard.poison(loss.detach(), loss)).backward()
        guard.record(torch.stack([loss.detach(), loss.detach()]).double(), 1)
        guard.update(lambda: scaler.step(optimizer))
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    assert all(torch.equal(before[k], v) for k, v in layer.state_dict().items())  # the second one too: sticky
    assert scaler.get_scale() == 256.0  # backed off twice
    with pytest.raises(Exception, match=r"step 1: the loss is not finite \(inf\)"):
        guard.raise_if_found()


# ---------------------------------------------------------------------------------------------
# A second Ctrl-C during `aiayn train`
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_and_names_the_checkpoint_to_resume_from(task, tmp_path):
    from aiayn_cli.training.checkpoint import list_checkpoints, load_weights, read_trainer_state

    out = tmp_path / "run"
    for _attempt in range(10):  # the second SIGINT must come before the first one's checkpoint is written
        process = start_training(task, out, *RESUME_FLAGS)
        assert signal_when(process, lambda: (out / "checkpoint-3").is_dir(), signal.SIGINT, 0.2)
        stderr = _second_signal_after_the_first_is_taken(process, signal.SIGINT)
        if "SIGINT again" in stderr:
            break
        shutil.rmtree(out, ignore_errors=True)  # too late: the step and its checkpoint were done first
    else:
        pytest.fail("the second SIGINT never came before the first one's checkpoint was written")
    assert process.returncode == -signal.SIGINT, stderr  # the signal's default action, as the shell shows it
    assert "Traceback" not in stderr and "interrupted:" not in stderr
    last = stderr.rstrip().splitlines()[-1]
    named = re.fullmatch(
        r"SIGINT again: stopping now; the last complete checkpoint is (\S+): the same command resumes from it", last
    )
    assert named, stderr
    kept = Path(named[1])
    assert kept == list_checkpoints(out)[-1] and not list(out.glob("checkpoint-*.tmp"))
    step = read_trainer_state(kept)["step"]
    assert kept.name == f"checkpoint-{step}" and load_weights(kept)
    result = run_cli(*train_args(task, out, *RESUME_FLAGS), env=task["env"])
    assert result.returncode == 0, result.stderr
    assert f"resuming from {kept} (step {step}," in result.stderr
    assert read_trainer_state(list_checkpoints(out)[-1])["step"] == 60
