"""Shared test fixtures: tiny models, the Multi30k folder (skipped where absent), CLI runners."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
MULTI30K = Path(os.environ.get("AIAYN_MULTI30K", REPO_ROOT.parent / "shared" / "data" / "multi30k"))

# Never touch the network in tests.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture
def multi30k_dir() -> Path:
    """The real Multi30k corpus; tests that need it skip with a reason where it is absent."""
    if not (MULTI30K / "train.en").is_file():
        pytest.skip(f"Multi30k not found at {MULTI30K} (set AIAYN_MULTI30K to its folder)")
    return MULTI30K


def cli_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess that runs this checkout's `aiayn_cli`, offline."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def run_cli(*args: str, input: str | bytes | None = None, cwd: Path | None = None, timeout: float = 600,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `python -m aiayn_cli ARGS...` in a subprocess; returns the completed process (text mode
    unless `input` is bytes)."""
    text = not isinstance(input, bytes)
    return subprocess.run(
        [sys.executable, "-m", "aiayn_cli", *map(str, args)],
        input=input, capture_output=True, text=text, cwd=cwd, timeout=timeout, env=env or cli_env(),
    )


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield
