"""Past one machine, on the CPU: two `accelerate launch --num_machines 2` commands (one process each, the
rendezvous on 127.0.0.1, as two machines would run them) train the same weights as one process with
`--update-freq 2`; when one of the two processes is killed (kill -9), the other stops within a minute with one line that says how
to resume, leaving only whole checkpoints, and the same two commands again give the uninterrupted run's weights.
A process that hangs instead (SIGSTOP: its connections stay open, as a lost GPU process's NCCL peers see it) is
the heartbeat's case: `gpu_check.py --smoke` (tests/project/test_gpu_check.py) stops one that way.

All runs are fp32 on every CPU (`--precision fp32`), with dropout on: every batch's dropout masks
are seeded from (seed, step, its index in the global batch), so the runs agree to float rounding.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
from helpers import cli_env, run_cli
from training_task import max_difference, weights, write_dictionary_task
from training_task import train_args as task_train_args

from aiayn_cli.training.checkpoint import list_checkpoints
from benchmarks.two_machines import LAUNCHER, finish, launch_two_machines, stop_one_in_the_middle

STEPS = 40
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(LAUNCHER is None, reason="the accelerate launcher is not installed"),
]


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.data.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("machines")
    data = write_dictionary_task(root / "data", n_train=600, n_valid=16)
    train_tokenizer(
        DataSpec(data_dir=str(data), source_lang="en", target_lang="de"),
        vocab_size=320,
        output_dir=root / "tok",
        show_progress=False,
    )
    env = cli_env(HF_DATASETS_CACHE=str(root / "cache"), OMP_NUM_THREADS="1")
    return {"root": root, "data": data, "tokenizer": root / "tok", "env": env}


# The two-machine runs: `training_task.train_args` with a short budget, every checkpoint kept.
RUN_FLAGS = (
    *("--max-steps", str(STEPS), "--set", "checkpoint_every_steps=4", "--set", f"valid_every_steps={STEPS}"),
    *("--set", "valid_bleu_samples=4", "--set", "keep_last=20", "--set", "average_last=null"),
    *("--set", "trackers=[]"),
)


def train_args(task, output: Path, *extra: str) -> list[str]:
    return task_train_args(task, output, *RUN_FLAGS, *extra)


def launch(task, output: Path, *extra: str):
    return launch_two_machines(train_args(task, output, *extra), {**task["env"], "ACCELERATE_USE_CPU": "1"})


@pytest.fixture(scope="module")
def two_machines(task):
    """The uninterrupted run on two machines: its final weights."""
    out = task["root"] / "two-machines"
    results = finish(launch(task, out))
    for code, _, stderr in results:
        assert code == 0, stderr
    assert results[0][1].count(f"trained {STEPS} steps") == 1 and "trained" not in results[1][1]  # one report
    return out


def test_two_machines_train_as_one_process_with_update_freq_2(task, two_machines, tmp_path):
    single = run_cli(*train_args(task, tmp_path / "one", "--update-freq", "2"), env=task["env"])
    assert single.returncode == 0, single.stderr
    one, two = (
        json.loads((run / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
        for run in (tmp_path / "one", two_machines)
    )
    assert (one["num_processes"], two["num_processes"]) == (1, 2)
    assert one["target_tokens"] == two["target_tokens"] > 0 and one["source_tokens"] == two["source_tokens"]
    final = f"checkpoint-{STEPS}"
    assert max_difference(weights(tmp_path / "one" / final), weights(two_machines / final)) <= 1e-5


def _stop_one_in_the_middle(task, out: Path, how: signal.Signals, delay: float = 0.0) -> dict:
    """Machine 1's process gets `how` `delay` seconds after checkpoint-8 is written: `stop_one_in_the_middle`'s
    exit codes, stderrs and the seconds from the signal to the survivor's end."""
    env = {**task["env"], "ACCELERATE_USE_CPU": "1"}
    return stop_one_in_the_middle(train_args(task, out), env, out, "checkpoint-8", how, STEPS, delay=delay)


def _resuming_gives_the_uninterrupted_weights(task, out: Path, two_machines: Path, stopped_at: Path) -> None:
    """The same two commands again: they resume from `stopped_at` and end with the uninterrupted run's weights."""
    results = finish(launch(task, out))
    for code, _, stderr in results:
        assert code == 0, stderr
    assert f"resuming from {stopped_at}" in results[0][2]
    final = f"checkpoint-{STEPS}"
    assert max_difference(weights(out / final), weights(two_machines / final)) <= 1e-6


def _only_whole_checkpoints(out: Path) -> None:
    folders = sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint-"))
    assert folders == sorted(p.name for p in list_checkpoints(out)), folders  # no .tmp, no .old, each complete
    for line in (out / "metrics.jsonl").read_text().splitlines():
        json.loads(line)  # no torn line


def test_a_killed_process_stops_the_other_and_the_same_commands_resume(task, two_machines, tmp_path):
    out = tmp_path / "run"
    stopped = _stop_one_in_the_middle(task, out, signal.SIGKILL)
    code, stderr, seconds = stopped["code"], stopped["stderr"], stopped["seconds"]
    assert code != 0 and seconds < 60, (seconds, stderr)
    lines = [line for line in stderr.splitlines() if line.startswith("error: another process of the run was lost")]
    assert len(lines) == 1 and f"the same command on every machine resumes from {out}" in lines[0], stderr
    _only_whole_checkpoints(out)
    _resuming_gives_the_uninterrupted_weights(task, out, two_machines, list_checkpoints(out)[-1])


def test_a_signal_to_one_process_stops_both_at_the_step_it_names_and_resuming_is_exact(task, two_machines, tmp_path):
    # SIGTERM (a preemption notice) to machine 1's process only: the processes learn of it in the next
    # step's agreement and stop together after that step, which the signalled process's message names
    out = tmp_path / "run"
    # a few steps after checkpoint-8 (a step takes well under 0.3 s here): mostly inside a step, after its
    # agreement, where the message used to name that step while both processes stopped one step later
    stopped = _stop_one_in_the_middle(task, out, signal.SIGTERM, delay=0.3)
    signalled = stopped["signalled_stderr"]
    assert stopped["code"] != 0 and stopped["signalled_code"] != 0, (stopped["stderr"], signalled)
    for stderr in (stopped["stderr"], signalled):  # ours; the launcher's own traceback (ChildFailedError) follows
        assert "Traceback" not in stderr.split("interrupted:")[0], stderr
    finishing = int(re.search(r"SIGTERM: finishing step (\d+), then saving a checkpoint", signalled)[1])
    saved = out / f"checkpoint-{finishing}"
    for stderr in (stopped["stderr"], signalled):
        assert f"interrupted: SIGTERM at step {finishing}: saved {saved}; the same command resumes the run" in stderr
    _only_whole_checkpoints(out)
    assert list_checkpoints(out)[-1] == saved
    _resuming_gives_the_uninterrupted_weights(task, out, two_machines, saved)
