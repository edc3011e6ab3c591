"""What tests import: the repository's root, CLI runners, a word-level tokenizer, one tiny-model
factory, and the one-thread fixture (fixtures and hooks that apply by themselves are in `conftest.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
MULTI30K = Path(os.environ.get("AIAYN_MULTI30K", REPO_ROOT.parent / "shared" / "data" / "multi30k"))


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


def tiny_model(vocab_size: int = 72, seed: int | None = 0, varied_lengths: bool = False, **overrides):
    """A random `AiaynForConditionalGeneration` of the `tiny` preset, in eval mode (`seed` None: from the
    random state as it is).

    `varied_lengths`: translations that end at varied lengths. Random weights alone give degenerate
    outputs (one token repeated up to the length limit): unless the embeddings are tied (an override),
    the pre-softmax projection is scaled up and the last LayerNorm's bias leans towards `</s>`, so that
    `</s>` wins at different steps for different sentences (64 positions).
    """
    from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration

    if seed is not None:
        torch.manual_seed(seed)
    settings = {"vocab_size": vocab_size, **overrides}
    if varied_lengths:
        settings = {"max_position_embeddings": 64, "tie_word_embeddings": False, **settings}
    model = AiaynForConditionalGeneration(AiaynConfig.from_preset("tiny", **settings)).eval()
    if varied_lengths and not model.config.tie_word_embeddings:
        decoder = model.model.decoder
        last_norm = decoder.final_norm or decoder.layers[-1].feed_forward_sublayer.norm
        with torch.no_grad():
            model.lm_head.weight.mul_(3.0)
            eos_row = model.lm_head.weight[2]  # </s>
            last_norm.bias.add_(eos_row / eos_row.norm())
    return model


def save_tiny_model(folder: Path, vocab_size: int = 72, seed: int = 0) -> Path:
    """A random `tiny` aiayn model and its word-level tokenizer, saved together in `folder`."""
    tiny_model(vocab_size, seed=seed).save_pretrained(folder)
    word_level_tokenizer(vocab_size).save_pretrained(folder)
    return folder


@pytest.fixture
def one_thread():
    """One thread: on a machine shared by other processes, two threads wait for each other at every small
    operation of a tiny model. A test module uses it for all its tests with
    `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
