"""What tests import: the repository's root, the one CLI runner (`run_cli`, and `cli_command` for a
process a test talks to) and the one-line error check, a word-level tokenizer, one tiny-model factory
(and saved forms of it), random sentences for it, file snapshots, a full disk (the fixtures are in
`conftest.py`; the generated training task is in `training_task.py`)."""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

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


def cli_command(*args) -> list[str]:
    """The command line of `aiayn ARGS...` in a fresh interpreter: `python -m aiayn_cli ARGS...` (for
    `subprocess.Popen`, where a test talks to the process while it runs; `run_cli` runs it to the end)."""
    return [sys.executable, "-m", "aiayn_cli", *map(str, args)]


class CliResult(NamedTuple):
    """What `run_cli` gives back: unpacks as `code, out, err`, reads as a completed process."""

    returncode: int
    stdout: str | bytes
    stderr: str | bytes  # text, but bytes from a subprocess given bytes as `input`


def run_cli(
    *args,
    capsys: pytest.CaptureFixture | None = None,
    input: str | bytes | None = None,
    cwd: Path | None = None,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> CliResult:
    """Run `aiayn ARGS...`: (exit code, stdout, stderr), also as `.returncode`, `.stdout`, `.stderr`.

    With `capsys` (pytest's `capsys`, or `capsysbinary` for stdout as bytes; stderr stays text), in this
    process, through the console entry point: no seconds of imports per call; for tests that check what a
    command prints and its exit code. `input` is then stdin. An exception other than `SystemExit` (`--debug`) propagates.

    Without, `python -m aiayn_cli ARGS...` in a fresh interpreter (`cli_env()` unless `env`): for tests
    that need a real process (signals, what a fresh interpreter imports, its own environment or folder).
    Text mode unless `input` is bytes."""
    if capsys is None:
        text = not isinstance(input, bytes)
        done = subprocess.run(
            cli_command(*args),
            input=input,
            capture_output=True,
            text=text,
            cwd=cwd,
            timeout=timeout,
            env=env or cli_env(),
        )
        return CliResult(done.returncode, done.stdout, done.stderr)
    assert cwd is None and env is None, "run_cli: cwd and env need a subprocess (no capsys)"
    from aiayn_cli.cli.app import main

    capsys.readouterr()  # drop what came before
    saved = sys.argv, sys.stdin
    sys.argv = ["aiayn", *map(str, args)]
    if input is not None:
        data = input.encode("utf-8") if isinstance(input, str) else input
        sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    try:
        main()
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    finally:
        sys.argv, sys.stdin = saved
    out, err = capsys.readouterr()
    return CliResult(code, out, err.decode("utf-8", errors="replace") if isinstance(err, bytes) else err)


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


def one_error_line(code: int, err: str) -> str:
    """The one `error: ...` line of a refusal (exit code 2), asserted to be all of stderr."""
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def save_varied_model(folder: Path, **overrides) -> Path:
    """A random tiny model whose translations end at varied lengths (`tiny_model(40, varied_lengths=True)`),
    with a 40-word tokenizer, saved in `folder`."""
    model = tiny_model(40, seed=overrides.pop("seed", 0), varied_lengths=True, **overrides)
    if overrides.get("tie_word_embeddings"):  # lean towards </s> through the tied embedding matrix
        eos = model.lm_head.weight[model.config.eos_token_id]
        with torch.no_grad():
            model.model.decoder.layers[-1].feed_forward_sublayer.norm.bias.add_(8.0 * eos / eos.norm())
    model.save_pretrained(folder)
    word_level_tokenizer(40).save_pretrained(folder)
    return folder


def sentences(n: int, seed: int = 0) -> list[str]:
    """`n` random sentences of 1-12 words of a 40-word tokenizer's vocabulary."""
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(36)}" for _ in range(rng.randint(1, 12))) for _ in range(n)]


def split_corpus(folder: Path) -> tuple[Path, list[str], list[str]]:
    """A `test` split of 20 sentence pairs (en: "w4 w5 w6" ..., de: the words reversed) in `folder / "data"`:
    the folder, the sources and the targets."""
    data = folder / "data"
    data.mkdir()
    sources = [f"w{i} w{i + 1} w{i + 2}" for i in range(4, 24)]
    targets = [f"w{i + 2} w{i + 1} w{i}" for i in range(4, 24)]
    (data / "test.en").write_text("\n".join(sources) + "\n")
    (data / "test.de").write_text("\n".join(targets) + "\n")
    return data, sources, targets


class StubTokenizer:
    """Stands in for a tokenizer where only `save_pretrained` is used (checkpoints)."""

    def save_pretrained(self, folder: Path) -> None:
        (Path(folder) / "tokenizer.json").write_text("{}")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` and its bytes: what a refusal must leave unchanged."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fill_disk(folder: Path) -> None:
    """Write to `folder / "filler"` until the disk under it has no byte left."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (65536, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * chunk)
                except OSError:
                    break
    finally:
        os.close(fd)


def save_tiny_model(folder: Path, vocab_size: int = 72, seed: int = 0) -> Path:
    """A random `tiny` aiayn model and its word-level tokenizer, saved together in `folder`."""
    tiny_model(vocab_size, seed=seed).save_pretrained(folder)
    word_level_tokenizer(vocab_size).save_pretrained(folder)
    return folder
