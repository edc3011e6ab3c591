"""Past one machine, on the CPU: two `accelerate launch --num_machines 2` commands (one process each, the
rendezvous on 127.0.0.1, as two machines would run them) train the same weights as one process with
`--update-freq 2`; when one of the two processes is killed (kill -9) or hangs (SIGSTOP: its connections stay
open, as a lost GPU process's NCCL peers see it), the other stops within a minute with one line that says how
to resume, leaving only whole checkpoints, and the same two commands again give the uninterrupted run's weights.

All runs are fp32 on every CPU (`--precision fp32`), with dropout on: every batch's dropout masks
are seeded from (seed, step, its index in the global batch), so the runs agree to float rounding.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO_ROOT, cli_env, run_cli
from test_training import max_difference, weights, write_dictionary_task

from aiayn_cli.training.checkpoint import list_checkpoints

TINY = REPO_ROOT / "recipes" / "tiny.yaml"
STEPS = 40
LAUNCHER = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(LAUNCHER is None, reason="the accelerate launcher is not installed"),
]


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    from aiayn_cli.data.corpus import DataSpec
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


def train_args(task, output: Path, *extra: str) -> list[str]:
    return [
        "train",
        str(TINY),
        "--data-dir",
        str(task["data"]),
        "--tokenizer",
        str(task["tokenizer"]),
        "-o",
        str(output),
        "--no-progress",
        "--precision",
        "fp32",
        "--max-steps",
        str(STEPS),
        "--set",
        "checkpoint_every_steps=4",
        "--set",
        f"valid_every_steps={STEPS}",
        "--set",
        "valid_bleu_samples=4",
        "--set",
        "keep_last=20",
        "--set",
        "average_last=null",
        "--set",
        "trackers=[]",
        *extra,
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_two_machines(task, output: Path, *extra: str) -> list[subprocess.Popen]:
    """The two commands two machines would run (`--machine_rank 0` and `1`), here on one."""
    port = str(_free_port())
    launchers = []
    for rank in (0, 1):
        command = [
            LAUNCHER,
            "launch",
            "--multi_gpu",
            "--num_machines",
            "2",
            "--num_processes",
            "2",
            "--machine_rank",
            str(rank),
            "--main_process_ip",
            "127.0.0.1",
            "--main_process_port",
            port,
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "-m",
            "aiayn_cli",
            *train_args(task, output, *extra),
        ]
        env = {**task["env"], "ACCELERATE_USE_CPU": "1"}
        launchers.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return launchers


def finish(launchers: list[subprocess.Popen], timeout: float = 300) -> list[tuple[int, str, str]]:
    """Each launcher's (exit code, stdout, stderr)."""
    outputs = [p.communicate(timeout=timeout) for p in launchers]
    return [(p.returncode, *output) for p, output in zip(launchers, outputs)]


def worker(launcher: subprocess.Popen) -> psutil.Process:
    """The training process that a launcher started (`python -m aiayn_cli train ...`)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for child in psutil.Process(launcher.pid).children():  # not its forks (tokenization, compilation)
            try:
                if "aiayn_cli" in child.cmdline():
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)
    raise AssertionError("the launcher started no training process")


@pytest.fixture(scope="module")
def two_machines(task):
    """The uninterrupted run on two machines: its final weights."""
    out = task["root"] / "two-machines"
    results = finish(launch_two_machines(task, out))
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


def _stop_one_in_the_middle(task, out: Path, how: signal.Signals, *extra: str):
    """Launch two machines, send `how` to machine 1's process once checkpoint-8 is written; the survivor's
    (exit code, stderr, seconds from the signal to its launcher's end)."""
    for _attempt in range(3):  # the signal must land before the run ends
        launchers = launch_two_machines(task, out, *extra)
        victim = worker(launchers[1])
        while not (out / "checkpoint-8").is_dir() and launchers[0].poll() is None:
            time.sleep(0.005)
        if launchers[0].poll() is None and not (out / f"checkpoint-{STEPS}").exists():
            break
        finish(launchers)
        shutil.rmtree(out, ignore_errors=True)
    else:
        pytest.fail("could not stop a process in the middle of the run")
    os.kill(victim.pid, how)
    sent = time.monotonic()
    try:
        launchers[0].wait(timeout=120)
    finally:
        seconds = time.monotonic() - sent
        if victim.is_running():
            victim.kill()
        results = finish(launchers)
    return results[0][0], results[0][2], seconds


def _only_whole_checkpoints(out: Path) -> None:
    folders = sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint-"))
    assert folders == [p.name for p in list_checkpoints(out)], folders  # no .tmp, no .old, each complete
    for line in (out / "metrics.jsonl").read_text().splitlines():
        json.loads(line)  # no torn line


def test_a_killed_process_stops_the_other_and_the_same_commands_resume(task, two_machines, tmp_path):
    out = tmp_path / "run"
    code, stderr, seconds = _stop_one_in_the_middle(task, out, signal.SIGKILL)
    assert code != 0 and seconds < 60, (seconds, stderr)
    lines = [line for line in stderr.splitlines() if line.startswith("error: another process of the run was lost")]
    assert len(lines) == 1 and f"the same command on every machine resumes from {out}" in lines[0], stderr
    _only_whole_checkpoints(out)
    stopped_at = list_checkpoints(out)[-1].name
    results = finish(launch_two_machines(task, out))
    for code, _, stderr in results:
        assert code == 0, stderr
    assert f"resuming from {out / stopped_at}" in results[0][2]
    final = f"checkpoint-{STEPS}"
    assert max_difference(weights(out / final), weights(two_machines / final)) <= 1e-6


def test_a_hung_process_stops_the_other_within_lost_process_after(task, tmp_path):
    out = tmp_path / "run"
    code, stderr, seconds = _stop_one_in_the_middle(task, out, signal.SIGSTOP, "--set", "lost_process_after=5s")
    assert code == 1 and 5 <= seconds < 60, (seconds, stderr)
    assert (
        "error: process 1 of 2 gave no sign of life for 5 s (killed, hung, or its machine is gone): this process stops; the same command on every machine resumes from"
        in stderr
    )
    _only_whole_checkpoints(out)
