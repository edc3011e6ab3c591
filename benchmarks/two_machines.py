"""Two `accelerate launch --num_machines 2` commands on one host, as two machines would run them (one
process each, the rendezvous on 127.0.0.1): `tests/training/test_multi_machine.py` on CPUs, and the lost-process
part of `gpu_check.py` on two GPUs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

LAUNCHER = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_two_machines(
    arguments: list[str], env: dict[str, str], per_machine_env: tuple[dict, dict] = ({}, {})
) -> list[subprocess.Popen]:
    """`accelerate launch ... -m aiayn_cli ARGUMENTS` as machine 0 and machine 1 (mixed precision and
    dynamo left to the recipe); `per_machine_env`: what differs (CUDA_VISIBLE_DEVICES on one host)."""
    if LAUNCHER is None:
        raise RuntimeError("the accelerate launcher is not installed")
    port = str(free_port())
    launchers = []
    for rank in (0, 1):
        command = [LAUNCHER, "launch", "--multi_gpu", "--num_machines", "2", "--num_processes", "2"]
        command += ["--machine_rank", str(rank), "--main_process_ip", "127.0.0.1", "--main_process_port", port]
        command += ["--mixed_precision", "no", "--dynamo_backend", "no", "-m", "aiayn_cli", *arguments]
        launchers.append(
            subprocess.Popen(
                command,
                env={**env, **per_machine_env[rank]},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return launchers


def finish(launchers: list[subprocess.Popen], timeout: float = 300) -> list[tuple[int, str, str]]:
    """Each launcher's (exit code, stdout, stderr)."""
    outputs = [p.communicate(timeout=timeout) for p in launchers]
    return [(p.returncode, *output) for p, output in zip(launchers, outputs)]


def training_process(launcher: subprocess.Popen, timeout: float = 120):
    """The training process a launcher started (`python -m aiayn_cli train ...`), as a `psutil.Process`."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in psutil.Process(launcher.pid).children():  # not its forks (tokenization, compilation)
            try:
                if "aiayn_cli" in child.cmdline():
                    return child
            except psutil.NoSuchProcess:
                continue
        if launcher.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError("the launcher started no training process")


def stop_one_in_the_middle(
    arguments: list[str],
    env: dict,
    output: Path,
    when: str,
    how: int,
    steps: int,
    per_machine_env=({}, {}),
    delay: float = 0.0,
) -> dict:
    """Launch two machines; `delay` seconds after `output/when` exists, send signal `how` to machine 1's
    process. The survivor's exit code, stderr and the seconds from the signal to the end of its
    launcher; the signalled machine's exit code and stderr."""
    for _attempt in range(3):  # the signal must land before the run ends
        launchers = launch_two_machines(arguments, env, per_machine_env)
        victim = training_process(launchers[1])
        while not (output / when).is_dir() and launchers[0].poll() is None:
            time.sleep(0.005)
        if launchers[0].poll() is None and not (output / f"checkpoint-{steps}").exists():
            break
        finish(launchers)
        shutil.rmtree(output, ignore_errors=True)
    else:
        raise RuntimeError("could not stop a process in the middle of the run")
    time.sleep(delay)
    os.kill(victim.pid, how)
    sent = time.monotonic()
    try:
        launchers[0].wait(timeout=180)
    finally:
        seconds = time.monotonic() - sent
        if victim.is_running():
            victim.kill()
        results = finish(launchers)
    return {
        "code": results[0][0],
        "stderr": results[0][2],
        "seconds": seconds,
        "signalled_code": results[1][0],
        "signalled_stderr": results[1][2],
    }
