"""What tests import: the repository's root, CLI runners and the one-line error check, a word-level
tokenizer, one tiny-model factory (and saved forms of it), random sentences for it, file snapshots, a
full disk, and the one-thread fixture (fixtures and hooks that apply by themselves are in `conftest.py`;
the generated training task is in `training_task.py`)."""

from __future__ import annotations

import os
import random
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


@pytest.fixture
def one_thread():
    """One thread: on a machine shared by other processes, two threads wait for each other at every small
    operation of a tiny model. A test module uses it for all its tests with
    `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
