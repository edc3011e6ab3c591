"""Test fixtures and hooks: the network off, the Multi30k folder (skipped where absent) and its tokenizer,
a 1 MiB tmpfs, one thread, a seed per test, GPU tests skipped without a GPU. Fixtures are requested by
name, never imported; helpers that tests import are in `helpers.py`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
from corpora import multi30k_bpe, multi30k_train_tokenized
from helpers import MULTI30K

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


@pytest.fixture
def bpe_multi30k(multi30k_dir):
    return multi30k_bpe(multi30k_dir)


@pytest.fixture
def tokenized_multi30k(multi30k_dir):
    return multi30k_train_tokenized(multi30k_dir)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs (skipped where it cannot be mounted: mounting needs root); `fill_disk` fills it."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()}); the full-disk tests need root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture
def one_thread():
    """One thread: on a machine shared by other processes, two threads wait for each other at every small
    operation of a tiny model. A test module uses it for all its tests with
    `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


DEFAULT_TIER = "not slow and not long and not gpu"  # addopts' -m


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: where it is not installed (the GPU bundle), unused
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (addopts): the default tier on one worker a core, at most 4 (each holds torch and a few
    models); the slow tier (`-m slow`) on two at most, as its training runs start processes and
    threads of their own; every other run in this one process: the long tier trains for an hour alone,
    the GPU tests share one device, a run that prints as it goes (`-s`) prints in order, and a marker
    chosen by hand runs as it always did."""
    workers = {DEFAULT_TIER: 4, "slow": 2}.get(config.getoption("markexpr"), 0)
    if workers == 0 or config.getoption("capture") == "no":
        config.option.dist = "no"  # addopts' --dist: no workers, nothing to distribute
        return 0
    return max(1, min(os.cpu_count() or 1, workers))


def pytest_runtest_setup(item):
    """`@pytest.mark.gpu` tests (`python -m pytest -m gpu`) skip where there is no CUDA device, all
    with the one reason line below."""
    if item.get_closest_marker("gpu") is not None and not torch.cuda.is_available():
        pytest.skip("no CUDA device: the GPU tests run on a machine with one (benchmarks/gpu_check.py runs them)")


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield


# transformers' common test files are mixins that tests/model/test_transformers_common.py runs, not tests of their own
collect_ignore = ["transformers_common"]


def pytest_configure(config):
    # In a worker of `-n`: PyTorch's threads split the cores among the workers, so that two workers'
    # thread pools do not wait for each other's cores.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    for marker in (
        "accelerate_tests",
        "flash_attn_test",
        "flash_attn_3_test",
        "flash_attn_4_test",
        "torch_compile_test",
    ):
        config.addinivalue_line(
            "markers", f"{marker}: a marker of transformers' common tests (tests/transformers_common)"
        )
