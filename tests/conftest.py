"""Test fixtures and hooks: the network off, the Multi30k folder (skipped where absent), a seed per test,
GPU tests skipped without a GPU. Helpers that tests import are in `helpers.py`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
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
