"""aiayn_cli.data.lines: the one line reader (chunks, line ends, BOM, invalid UTF-8 named by line)."""

from __future__ import annotations

import pytest

from aiayn_cli.data import lines as lines_module
from aiayn_cli.data.lines import iter_line_chunks, read_lines
from aiayn_cli.errors import AiaynError

TRICKY = b"\xef\xbb\xbfeins\r\nzwei\xe2\x80\xa8drei\n\n  vier\tf\xc3\xbcnf \x7f\nf\xc3\xbcnf\rsechs\nlast\r"


def test_line_ends_bom_and_ordinary_characters(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(TRICKY)
    # "\r\n" and a final "\r" end lines; a lone "\r", U+2028, tabs, spaces and DEL are kept.
    assert read_lines(path) == ["eins", "zwei\u2028drei", "", "  vier\tfünf \x7f", "fünf\rsechs", "last"]
    path.write_bytes(b"")
    assert read_lines(path) == []
    path.write_bytes(b"\n")
    assert read_lines(path) == [""]
    path.write_bytes(b"no newline")
    assert read_lines(path) == ["no newline"]


@pytest.mark.parametrize("chunk_bytes", [1, 2, 3, 4, 7, 16])
def test_any_chunk_size_gives_the_same_lines(tmp_path, chunk_bytes):
    path = tmp_path / "a.txt"
    path.write_bytes(TRICKY * 3)
    whole = read_lines(path)
    chunks = list(iter_line_chunks(path, chunk_bytes=chunk_bytes))
    assert [line for chunk in chunks for line in chunk.to_pylist()] == whole
    assert all(len(chunk) > 0 for chunk in chunks)


def test_invalid_utf8_in_the_middle_of_a_large_file_names_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr(lines_module, "CHUNK_BYTES", 1 << 16)  # many chunks: the line count must carry over
    path = tmp_path / "big.txt"
    lines = [f"line {i}".encode() for i in range(1_500_000)]
    lines[750_000] = b"caf\xc3 au lait"  # a truncated two-byte sequence
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(AiaynError, match=r"big\.txt:750001: invalid UTF-8 \(byte 0xc3 at byte 4 of the line\)"):
        for _ in iter_line_chunks(path):
            pass


def test_replace_mode_reports_each_bad_line(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"ok\nbad \xff here\nok\n\xfe\xfe\n")
    bad = []
    assert read_lines(path, errors="replace", on_invalid=bad.append) == ["ok", "bad \ufffd here", "ok", "\ufffd\ufffd"]
    assert bad == [2, 4]


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(AiaynError, match="absent.txt: no such file"):
        read_lines(tmp_path / "absent.txt")
    with pytest.raises(AiaynError, match="is a folder"):
        read_lines(tmp_path)


def test_hasher_sees_every_byte(tmp_path):
    import xxhash

    path = tmp_path / "a.txt"
    path.write_bytes(TRICKY * 5)
    hasher = xxhash.xxh3_128()
    for _ in iter_line_chunks(path, hasher=hasher, chunk_bytes=5):
        pass
    assert hasher.digest() == xxhash.xxh3_128_digest(TRICKY * 5)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
@pytest.mark.parametrize("errors", ["strict", "replace"])
def test_utf16_and_utf32_files_and_streams_are_refused(tmp_path, encoding, errors):
    text = "ein Hund\nzwei Katzen\n"
    data = text.encode(encoding) if encoding != "utf-16-be" else b"\xfe\xff" + text.encode(encoding)
    path = tmp_path / "wide.txt"
    path.write_bytes(data)
    name = "UTF-32" if "32" in encoding else "UTF-16"
    with pytest.raises(AiaynError, match=f"wide.txt: is {name} text"):
        read_lines(path, errors=errors)
    with pytest.raises(AiaynError, match=f"stdin: is {name} text"):
        list(lines_module.decode_lines(iter(data.splitlines(keepends=True)), source="stdin"))


def test_nul_bytes_and_utf16_without_a_byte_order_mark_are_refused_by_line(tmp_path):
    """The issue's row 14: a 3-line BOM-less UTF-16 file read as 4 lines; a NUL became vocabulary."""
    from aiayn_cli.data.lines import decode_lines

    path = tmp_path / "a.txt"
    for encoding, name in (("utf-16-le", "UTF-16LE"), ("utf-16-be", "UTF-16BE")):
        path.write_bytes("one dog\ntwo cats\nthree birds\n".encode(encoding))
        with pytest.raises(AiaynError, match=f"a.txt: is {name} text without a byte-order mark"):
            read_lines(path)
        with pytest.raises(AiaynError, match=f"stdin: is {name} text without a byte-order mark"):
            list(decode_lines(path.open("rb"), source="stdin"))
    path.write_bytes(b"fine\nalso fine\nbad \x00 here\n")
    with pytest.raises(AiaynError, match=r"a\.txt:3: a NUL byte \(byte 5 of the line\)"):
        read_lines(path)
    with pytest.raises(AiaynError, match=r"stdin:3: a NUL byte \(byte 5 of the line\)"):
        list(decode_lines(path.open("rb"), source="stdin"))
