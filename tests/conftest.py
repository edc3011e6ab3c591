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


def cli_here(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """Run the `aiayn` entry point in this process (no seconds of imports per call, as `run_cli` has):
    (exit code, stdout, stderr)."""
    from aiayn_cli.cli.app import main

    monkeypatch.setattr(sys, "argv", ["aiayn", *map(str, args)])
    try:
        main()
        code = 0
    except SystemExit as exit:
        code = exit.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def run_cli(
    *args: str,
    input: str | bytes | None = None,
    cwd: Path | None = None,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run `python -m aiayn_cli ARGS...` in a subprocess; returns the completed process (text mode
    unless `input` is bytes)."""
    text = not isinstance(input, bytes)
    return subprocess.run(
        [sys.executable, "-m", "aiayn_cli", *map(str, args)],
        input=input,
        capture_output=True,
        text=text,
        cwd=cwd,
        timeout=timeout,
        env=env or cli_env(),
    )


def pytest_runtest_setup(item):
    """`@pytest.mark.gpu` tests (`python -m pytest -m gpu`) skip where there is no CUDA device, all
    with the one reason line below."""
    if item.get_closest_marker("gpu") is not None and not torch.cuda.is_available():
        pytest.skip("no CUDA device: the GPU tests run on a machine with one (benchmarks/gpu_check.py runs them)")


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield


def word_level_tokenizer(vocab_size: int = 72):
    """A tokenizer with aiayn's special ids (<pad>=0, <s>=1, </s>=2, <unk>=3), words w0 w1 ..., `</s>` appended."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{f"w{i}": i + 4 for i in range(vocab_size - 4)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=1024,
    )


def save_tiny_model(folder: Path, vocab_size: int = 72, seed: int = 0) -> Path:
    """A random `tiny` aiayn model and its word-level tokenizer, saved together in `folder`."""
    from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration

    torch.manual_seed(seed)
    model = AiaynForConditionalGeneration(AiaynConfig.from_preset("tiny", vocab_size=vocab_size))
    model.save_pretrained(folder)
    word_level_tokenizer(vocab_size).save_pretrained(folder)
    return folder
