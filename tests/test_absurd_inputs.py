"""Absurd sizes, wrong types and hostile strings (issue rows 6 to 9): each is one `error:` line naming the
option or file, a non-zero exit, no traceback, and nothing written. In process (`cli_here`), a tiny model."""

from __future__ import annotations

import os

import pytest
from helpers import cli_here, save_tiny_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("absurd") / "model")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("absurd-data")
    for split in ("train", "validation", "test"):
        for lang in ("en", "de"):
            (folder / f"{split}.{lang}").write_text("w5 w6\nw7 w8\n")
    return folder


def one_error_line(code: int, err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if not line.startswith("warning:")]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    return lines[0]


@pytest.mark.parametrize(
    "args, said",
    [
        (["--threads", "1000000"], f"--threads: at most {4 * (os.cpu_count() or 1)} (4 per core"),
        (["--beam", "1000000"], "--beam must be <= 1024, got 1000000"),
        (["--beam", str(10**20)], f"--beam must be <= 1024, got {10**20}"),
        (["--nbest", "5000"], "--nbest must be <= 1024"),
    ],
)
def test_absurd_decoding_sizes_are_refused_with_the_limit(monkeypatch, capsys, model, args, said):
    """The issue's row 6: --threads 1000000 crashed the process (and starved the machine of threads),
    --beam 1000000 asked for 29 GB, --beam 10^20 overflowed."""
    code, out, err = cli_here(monkeypatch, capsys, "translate", "-m", model, *args, "w5 w6")
    assert said in one_error_line(code, err) and out == ""


def test_a_model_too_large_for_memory_is_refused_before_anything_is_built(monkeypatch, capsys, tmp_path, data):
    """The issue's row 6: --set model.d_ff=1000000000 asked for 256 GB; the estimate names the numbers."""
    out = tmp_path / "run"
    args = ["train", "tiny", "--data-dir", data, "-s", "en", "-t", "de", "--output-dir", out]
    code, _, err = cli_here(monkeypatch, capsys, *args, "--set", "model.d_ff=1000000000")
    line = one_error_line(code, err)
    assert line.startswith("error: --set model.d_ff: a model of ") and "GiB to train" in line, line
    assert not out.exists()
