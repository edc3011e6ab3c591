"""The generated training task the training tests share: a word-by-word dictionary a `tiny` model
learns in a few hundred steps, `aiayn train`'s arguments for it, and what the tests that kill and
resume runs need (the fixtures `task` and `uninterrupted` that build on it are in `training/conftest.py`)."""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

import torch
from helpers import REPO_ROOT, cli_command
from safetensors.torch import load_file

TINY = REPO_ROOT / "recipes" / "tiny.yaml"
EN = [f"w{i}" for i in range(40)]
DE = [f"v{i}x" for i in range(40)]


def write_dictionary_task(folder: Path, n_train: int = 2000, n_valid: int = 64, seed: int = 0) -> Path:
    """A word-by-word translation task a tiny model learns in a few hundred steps."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("val", n_valid)):
        pairs = []
        for _ in range(n):
            words = [rng.randrange(len(EN)) for _ in range(rng.randint(3, 9))]
            pairs.append((" ".join(EN[w] for w in words), " ".join(DE[w] for w in words)))
        (folder / f"{split}.en").write_text("".join(s + "\n" for s, _ in pairs))
        (folder / f"{split}.de").write_text("".join(t + "\n" for _, t in pairs))
    return folder


def train_args(task, output: Path, *extra: str) -> list[str]:
    return [
        "train",
        str(TINY),
        "--data-dir",
        str(task["data"]),
        "--tokenizer",
        str(task["tokenizer"]),
        "--output-dir",
        str(output),
        "--no-progress",
        "--precision",
        "fp32",  # fp32 on every CPU, so that what the tests check does not depend on the hardware
        *extra,
    ]


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(checkpoint / "model.safetensors")


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def start_training(task, output: Path, *extra: str) -> subprocess.Popen:
    """`aiayn train` on the task in a subprocess (stderr piped), for tests that kill it."""
    return subprocess.Popen(
        cli_command(*train_args(task, output, *extra)),
        env=task["env"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def signal_when(
    process: subprocess.Popen, condition, number: int, then_wait: float = 0.0, timeout: float = 300.0
) -> bool:
    """Send signal `number` to `process` `then_wait` seconds after `condition()` holds; False if the
    process ended first (or `condition` did not hold within `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    time.sleep(then_wait)
    if process.poll() is not None:
        return False
    process.send_signal(number)
    return True


RESUME_FLAGS = (
    "--max-steps",
    "60",
    "--set",
    "checkpoint_every_steps=3",
    "--set",
    "valid_every_steps=30",
    "--set",
    "average_last=null",
    "--set",
    "keep_last=3",
    "--set",
    "trackers=[]",
    "--set",
    "lr_cooldown=0.5",  # the resumed run's cooldown continues where it stopped
)
