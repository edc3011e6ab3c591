"""No input reaches a traceback and no input is read forever: character devices that never end or hold
NUL bytes (`/dev/zero`, `/dev/full`, `/dev/urandom`) and lines without an end are refused in one line
after a bounded read, by every command that reads text; a second Ctrl-C during `aiayn train` ends the
run at once and keeps a checkpoint to resume from; a run that opens data another run prepared names
its own files."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from helpers import run_cli, save_tiny_model, word_level_tokenizer

from aiayn_cli.data import lines as lines_module
from aiayn_cli.errors import AiaynError

DEVICES = ("/dev/zero", "/dev/full", "/dev/urandom")
WHY = ("a NUL byte", "a line longer than", "not a text file", "UTF-16", "UTF-32")
pytestmark = pytest.mark.skipif(
    not all(Path(d).exists() for d in DEVICES), reason="no /dev/zero, /dev/full, /dev/urandom"
)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("endless") / "model")


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("endless-text") / "text.de"
    path.write_text("w5 w6\nw7 w8\n")
    return path


# ---------------------------------------------------------------------------------------------
# The line reader: a NUL byte as soon as its block is read, a line longer than the limit
# ---------------------------------------------------------------------------------------------


class _Counted(io.BufferedReader):
    """A file that fails the test once more than `limit` bytes were read from it."""

    limit = 1 << 16

    def read(self, size=-1):
        block = super().read(size)
        self.total = getattr(self, "total", 0) + len(block)
        assert self.total <= self.limit, f"read {self.total} bytes of an endless file"
        return block


def test_an_endless_file_without_newlines_is_refused_after_one_block(monkeypatch):
    monkeypatch.setattr(lines_module, "open_text", lambda path: _Counted(io.FileIO(path, "rb")))
    with pytest.raises(AiaynError, match=r"^/dev/zero:1: a NUL byte \(byte 1 of the line\)"):
        list(lines_module.iter_line_chunks("/dev/zero", chunk_bytes=4096))


def test_a_nul_in_an_unfinished_line_after_whole_ones_is_found_in_its_block(monkeypatch, tmp_path):
    path = tmp_path / "text.en"
    path.write_bytes(b"one\ntwo\nthree" + b"\0" * 10_000)
    with pytest.raises(AiaynError, match=r"text.en:3: a NUL byte \(byte 6 of the line\)"):
        next(iter(lines_module.iter_line_chunks(path, chunk_bytes=4096)))  # the first chunk: lines 1 and 2


def test_a_line_longer_than_the_limit_is_refused_by_both_readers(monkeypatch, tmp_path):
    monkeypatch.setattr(lines_module, "MAX_LINE_BYTES", 100)
    path = tmp_path / "text.en"
    path.write_bytes(b"short\n" + b"x" * 101 + b"\nshort\n")
    said = r"text.en:2: a line longer than 100 bytes; is it a text file \(one sentence per line\)\?"
    with pytest.raises(AiaynError, match=said):
        lines_module.read_lines(path)
    with pytest.raises(AiaynError, match=said):
        list(lines_module.iter_line_chunks(path, chunk_bytes=16))  # unfinished at every read
    with open(path, "rb") as stream, pytest.raises(AiaynError, match=said):
        list(lines_module.decode_lines(stream, source=str(path)))
    path.write_bytes(b"x" * 100 + b"\n" + b"y" * 100)  # at the limit: read
    assert lines_module.read_lines(path) == ["x" * 100, "y" * 100]
    with open(path, "rb") as stream:
        assert list(lines_module.decode_lines(stream, source=str(path))) == ["x" * 100, "y" * 100]


def test_a_binary_stream_is_refused_before_any_line_is_decoded(tmp_path):
    path = tmp_path / "binary"
    path.write_bytes(b"ab\xfd\ncd\xff\nef\0gh\n")
    decoded = []
    with open(path, "rb") as stream, pytest.raises(AiaynError, match=r"binary:3: a NUL byte \(byte 3 of the line\)"):
        for line in lines_module.decode_lines(stream, source=str(path)):
            decoded.append(line)
    assert decoded == []  # lines 1 and 2 were not decoded (each with a warning of invalid UTF-8) first


# ---------------------------------------------------------------------------------------------
# Every command that reads text, given a device: one line naming it, exit 2, nothing written
# ---------------------------------------------------------------------------------------------


def _refused(result, device: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {device}:") and any(why in lines[0] for why in WHY), lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "device", ["/dev/zero", *(pytest.param(d, marks=pytest.mark.slow) for d in DEVICES if d != "/dev/zero")]
)
def test_translate_refuses_a_device_as_its_input(tmp_path, model, device):
    out = tmp_path / "out.de"
    _refused(run_cli("translate", "-m", model, "--input", device, "-o", out, timeout=60), device)
    assert not out.exists()


def test_translate_looks_at_its_input_before_it_loads_the_model(tmp_path, model):
    """A device or a binary file given as --input is refused before the model loads: with weights that
    would not load, the error is still the input's."""
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(model, broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    binary = tmp_path / "binary.en"
    binary.write_bytes(b"w1 w2\nw3\0w4\n")
    for source in ("/dev/zero", str(binary)):
        line = _refused(
            run_cli("translate", "-m", broken, "--input", source, "-o", tmp_path / "out", timeout=60), source
        )
        assert "NUL byte" in line and not (tmp_path / "out").exists()


@pytest.mark.parametrize("side", ["--hypotheses", "--references"])
@pytest.mark.parametrize("device", DEVICES)
def test_evaluate_refuses_a_device_on_either_side(tmp_path, text, device, side):
    files = {"--hypotheses": text, "--references": text, side: device}
    result = run_cli("evaluate", *[str(x) for pair in files.items() for x in pair], timeout=60)
    _refused(result, device)
    assert result.stdout == ""


@pytest.mark.parametrize("option, device", [("--input", "/dev/zero"), ("--references", "/dev/urandom")])
def test_attention_refuses_a_device(tmp_path, model, text, option, device):
    out = tmp_path / "out"
    files = {"--input": text, "--references": text, option: device}
    args = [str(x) for pair in files.items() for x in pair]
    _refused(run_cli("attention", "-m", model, *args, "-o", out, timeout=60), device)
    assert not out.exists()


def test_layers_refuses_a_device_as_its_data(tmp_path, model, text):
    out = tmp_path / "out"
    args = ["--source-file", "/dev/full", "--target-file", text, "-s", "en", "-t", "de"]
    _refused(run_cli("layers", "-m", model, *args, "-o", out, timeout=60), "/dev/full")
    assert not out.exists()


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_train_tokenizer_refuses_a_device_as_its_data(tmp_path, text, device):
    out = tmp_path / "tok"
    args = ["--source-file", device, "--target-file", text, "-s", "en", "-t", "de", "-o", out]
    _refused(run_cli("train-tokenizer", *args, timeout=60), device)
    assert not out.exists()


@pytest.mark.parametrize("device", ["/dev/full", pytest.param("/dev/urandom", marks=pytest.mark.slow)])
def test_prepare_refuses_a_device_unread(tmp_path, model, text, device):
    cache = tmp_path / "cache"
    args = ["prepare", "tiny", "--source-file", text, "--target-file", device, "-s", "en", "-t", "de"]
    line = _refused(run_cli(*args, "--tokenizer", model, "--cache-dir", cache, timeout=60), device)
    assert line == (
        f"error: {device}: is a character device, not a text file (data is read twice: fingerprinted, then prepared)"
    )
    assert not cache.exists()


# ---------------------------------------------------------------------------------------------
# Prepared data opened by another run: the report names this run's files
# ---------------------------------------------------------------------------------------------


def test_data_prepared_by_another_run_is_reported_as_this_runs_files(capsys, tmp_path):
    word_level_tokenizer().save_pretrained(tmp_path / "tok")
    folders = [tmp_path / "first", tmp_path / "second"]
    for folder in folders:  # the same text in two places: one prepared folder
        folder.mkdir()
        for lang in ("en", "de"):
            for split in ("train", "validation"):
                (folder / f"{split}.{lang}").write_text("w5 w6\nw7 w8\nw9\n")
    reports = []
    for folder in folders:
        args = ["prepare", "tiny", "--data-dir", folder, "-s", "en", "-t", "de", "--tokenizer", tmp_path / "tok"]
        code, out, err = run_cli(*args, "--cache-dir", tmp_path / "cache", capsys=capsys)
        assert code == 0, err
        reports.append((out, err))
    (first_out, first_err), (second_out, second_err) = reports
    assert first_err.startswith(f"train ({folders[0] / 'train.en'}, {folders[0] / 'train.de'}): 3 pairs read")
    assert second_err.startswith(f"train ({folders[1] / 'train.en'}, {folders[1] / 'train.de'}): 3 pairs read")
    assert str(folders[0]) not in second_err
    assert " pairs prepared: " in first_out and " pairs opened from the cache: " in second_out
    assert first_out.split(": ")[-1] == second_out.split(": ")[-1]  # the same folder, named
