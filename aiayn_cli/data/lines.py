"""The one line reader: UTF-8 text files of any size, one sentence per line, read in chunks.

Every command that reads sentences from a file reads them here, with the same rules:

- a line ends at `\\n` (as `wc -l` counts); a `\\r` right before it belongs to the ending (CRLF files
  read as LF files); other separators (`\\u2028`, `\\x85`, form feeds) are ordinary characters;
- the newline after the last line is optional; an empty file has no lines; a UTF-8 byte-order mark at
  the start of the file is skipped;
- invalid UTF-8 raises `AiaynError` naming the file, the line and the byte (`errors="strict"`), or is
  replaced by U+FFFD, with the line numbers passed to `on_invalid` (`errors="replace"`);
- a UTF-16 or UTF-32 text (a byte-order mark of theirs at the start, or without one, NUL bytes between
  its characters) raises `AiaynError` either way, and so does any NUL byte (naming the file and line):
  text holds none, and a NUL would become a token of the vocabulary;
- a line longer than `MAX_LINE_BYTES` raises `AiaynError` too: no sentence is that long, and a file
  that never ends a line (a device such as `/dev/zero`, a binary file) is refused within a bounded read
  instead of being read forever. A NUL byte is found as soon as its block is read, newline or not.

`iter_line_chunks` yields the lines as Arrow string arrays of a few million lines at most, built
straight from the file's bytes (numpy finds the newlines; no Python string per line), so that a
corpus of any size is read in bounded memory. `read_lines` gives a small file's lines as a list.
"""

from __future__ import annotations

import codecs
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from ..errors import AiaynError

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 26  # 64 MiB of text per chunk
SNIFF_BYTES = 8192  # what a stream's first look for a binary file reads (as `grep` and `git` look)
MAX_LINE_BYTES = 1 << 24  # 16 MiB: a longer line is no sentence (the cleaning steps drop far shorter ones)


def open_text(path: str | Path):
    """`open(path, "rb")`, with `AiaynError` for a missing file, a folder or no permission."""
    path = Path(path)
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise AiaynError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise AiaynError(f"{path}: is a folder, not a file") from None
    except PermissionError:
        raise AiaynError(f"{path}: permission denied") from None


def iter_line_chunks(
    path: str | Path,
    *,
    errors: str = "strict",
    on_invalid: Callable[[int], None] | None = None,
    hasher=None,
    chunk_bytes: int | None = None,
) -> Iterator[pa.Array]:
    """The lines of a UTF-8 text file, as consecutive Arrow string arrays.

    Args:
        errors: "strict" (invalid UTF-8 raises `AiaynError` naming the file and line) or "replace".
        on_invalid: with "replace", called with the (1-based) number of each line that held invalid UTF-8.
        hasher: an object with `update(bytes)` (an `xxhash` hasher) fed every byte of the file, as read.
        chunk_bytes: bytes read at a time (default `CHUNK_BYTES`); a chunk holds the whole lines among them.
    """
    if errors not in ("strict", "replace"):
        raise ValueError(f"errors must be 'strict' or 'replace', got {errors!r}")
    path, chunk_bytes = Path(path), chunk_bytes or CHUNK_BYTES
    first_line, carry, start = 1, b"", True
    with open_text(path) as file:
        while True:
            block = file.read(max(chunk_bytes, len(codecs.BOM_UTF8)) if start else chunk_bytes)
            if hasher is not None:
                hasher.update(block)
            at_end = not block
            if start:
                start = False
                _refuse_utf16(block, path)
                _refuse_bomless_utf16(block, path)
                if block.startswith(codecs.BOM_UTF8):
                    block = block[len(codecs.BOM_UTF8) :]
            data = carry + block if carry else block
            if at_end:  # what is left is the last line, without its newline
                if data:
                    yield _lines(data, path, first_line, errors, on_invalid, final=True)
                return
            cut = data.rfind(b"\n") + 1
            lines = _lines(data[:cut], path, first_line, errors, on_invalid, final=False) if cut else None
            first_line += len(lines) if lines is not None else 0
            carry = data[cut:]  # the next line, without its end yet: refused now if it never could be text
            _refuse_nul_in(carry, path, first_line)
            _refuse_long(len(carry), path, first_line)
            if lines is not None:
                yield lines


def read_lines(
    path: str | Path, *, errors: str = "strict", on_invalid: Callable[[int], None] | None = None
) -> list[str]:
    """All lines of a (small) text file as a list of strings, by the rules of `iter_line_chunks`."""
    lines: list[str] = []
    for chunk in iter_line_chunks(path, errors=errors, on_invalid=on_invalid):
        lines.extend(chunk.to_pylist())
    return lines


def decode_lines(raw_lines: BinaryIO | Iterable[bytes], source: str = "input") -> Iterator[str]:
    """Text lines from a binary stream (a file, standard input, read as it arrives) or an iterable of
    binary lines, by the rules of this module with `errors="replace"`: a trailing "\\r" and a first-line
    byte-order mark are dropped; invalid UTF-8 is replaced by U+FFFD, with a warning that names the line.
    A stream is read `MAX_LINE_BYTES` at most at a time, so that one without newlines is refused, and
    its first bytes are looked at before any line is decoded: a binary file is refused in one line,
    before a warning for each of its lines."""
    if hasattr(raw_lines, "readline"):
        stream = raw_lines
        if hasattr(stream, "peek"):  # a buffered stream: its first block, without consuming it
            _refuse_binary(stream.peek(SNIFF_BYTES)[:SNIFF_BYTES], source)
        raw_lines = iter(lambda: stream.readline(MAX_LINE_BYTES + 1), b"")
    for number, raw in enumerate(raw_lines, 1):
        if number == 1:
            _refuse_utf16(raw, source)
            _refuse_bomless_utf16(raw, source)
        _refuse_nul_in(raw, source, number)
        _refuse_long(len(raw) - raw.endswith(b"\n"), source, number)
        raw = raw[:-1] if raw.endswith(b"\n") else raw
        raw = raw[:-1] if raw.endswith(b"\r") else raw
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", errors="replace")
            logger.warning("%s line %d: invalid UTF-8, the bad bytes were replaced by U+FFFD", source, number)
        yield text[1:] if number == 1 and text.startswith("\ufeff") else text


_WIDE_BOMS = (  # UTF-32 first: its little-endian mark begins with UTF-16's
    ("UTF-32", codecs.BOM_UTF32_LE),
    ("UTF-32", codecs.BOM_UTF32_BE),
    ("UTF-16", codecs.BOM_UTF16_LE),
    ("UTF-16", codecs.BOM_UTF16_BE),
)


def _refuse_utf16(start: bytes, source) -> None:
    """A UTF-16 or UTF-32 text (by its byte-order mark) is refused, even where invalid UTF-8 would only
    be replaced: its newlines are not `\\n` bytes, so its lines would not be the file's lines."""
    for name, bom in _WIDE_BOMS:
        if start.startswith(bom):
            raise AiaynError(f"{source}: is {name} text (byte-order mark {bom.hex(' ').upper()}); convert it to UTF-8")


def _refuse_bomless_utf16(start: bytes, source) -> None:
    """UTF-16 text without a byte-order mark: mostly ASCII, so NUL at every other byte (odd places: little-endian)."""
    sample = start[:4096]
    if len(sample) < 4 or b"\0" not in sample:
        return
    for parity, name in ((1, "UTF-16LE"), (0, "UTF-16BE")):
        half = sample[parity::2]
        if half.count(0) >= 0.6 * len(half) and sample[1 - parity :: 2].count(0) <= 0.1 * len(half):
            raise AiaynError(
                f"{source}: is {name} text without a byte-order mark (NUL between its characters); convert it to UTF-8"
            )


def _refuse_nul(source, line: int, byte: int) -> None:
    raise AiaynError(f"{source}:{line}: a NUL byte (byte {byte} of the line): text holds none; is it a binary file?")


def _refuse_binary(start: bytes, source) -> None:
    """The first bytes of a text: UTF-16 or UTF-32 (said as such), else any NUL byte, by its line."""
    _refuse_utf16(start, source)
    _refuse_bomless_utf16(start, source)
    at = start.find(b"\0")
    if at >= 0:
        _refuse_nul(source, start.count(b"\n", 0, at) + 1, at - start.rfind(b"\n", 0, at))


def refuse_binary_file(path: Path, source: str) -> None:
    """Before any work is done (a model loaded): a file whose first bytes say it is no text (NUL bytes,
    UTF-16 or UTF-32) is refused in one line, as `decode_lines` would refuse it later. Also a character
    device that is not a terminal (/dev/zero); a terminal, a pipe or standard input are not read ahead."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # said by the caller's own checks
    if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
        return
    try:
        with open(path, "rb", buffering=0) as raw:
            if stat.S_ISCHR(mode) and os.isatty(raw.fileno()):
                return
            start = raw.read(SNIFF_BYTES)
    except OSError:
        return  # unreadable: said when it is read
    _refuse_binary(start, source)


def _refuse_nul_in(line: bytes, source, number: int) -> None:
    """`line` is (the start of) line `number`: refused if it holds a NUL byte."""
    at = line.find(b"\0")
    if at >= 0:
        _refuse_nul(source, number, at + 1)


def _refuse_long(length: int, source, number: int) -> None:
    if length > MAX_LINE_BYTES:
        limit = f"{MAX_LINE_BYTES >> 20} MiB" if MAX_LINE_BYTES % (1 << 20) == 0 else f"{MAX_LINE_BYTES:,} bytes"
        raise AiaynError(f"{source}:{number}: a line longer than {limit}; is it a text file (one sentence per line)?")


def _lines(data: bytes, path: Path, first_line: int, errors: str, on_invalid, final: bool) -> pa.Array:
    """The lines of `data` (whole lines, each ending in `\\n` unless `final`) as an Arrow string array."""
    raw = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(raw == 10)  # (lines,) the position of each `\n`
    if final:
        ends = np.append(ends, len(raw))
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    nul = np.flatnonzero(raw == 0)
    if len(nul):
        index = int(np.searchsorted(starts, nul[0], side="right")) - 1
        _refuse_nul(path, first_line + index, int(nul[0] - starts[index]) + 1)
    lengths = ends - starts  # (lines,) bytes before each `\n`
    if len(lengths) and int(lengths.max()) > MAX_LINE_BYTES:
        index = int(np.flatnonzero(lengths > MAX_LINE_BYTES)[0])
        _refuse_long(int(lengths[index]), path, first_line + index)
    # Drop each line's ending: its `\n` and a `\r` before it. (A final line has no `\n`.)
    has_newline = np.ones(len(ends), dtype=bool)
    if final:
        has_newline[-1] = False
    has_cr = (ends > starts) & (raw[np.maximum(ends - 1, 0)] == 13)
    keep = np.ones(len(raw), dtype=bool)
    keep[ends[has_newline]] = False
    keep[ends[has_cr] - 1] = False
    removed = np.cumsum(has_newline.astype(np.int64) + has_cr)
    offsets = np.empty(len(ends) + 1, dtype=np.int64)
    offsets[0], offsets[1:] = 0, ends + has_newline - removed
    text = raw[keep]
    if offsets[-1] < 2**31:
        lines = pa.StringArray.from_buffers(
            len(ends), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(text.tobytes())
        )
    else:
        lines = pa.LargeStringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(text.tobytes()))
    try:
        lines.validate(full=True)  # checks the UTF-8
        return lines
    except pa.ArrowInvalid:
        pass
    return _invalid_utf8(data, starts, path, first_line, errors, on_invalid)


def _invalid_utf8(data: bytes, starts: np.ndarray, path: Path, first_line: int, errors: str, on_invalid) -> pa.Array:
    """Raise for the first invalid byte (strict), or decode with U+FFFD and report each bad line (replace)."""
    position, bad_lines = 0, []
    while True:
        try:
            data[position:].decode("utf-8")
            break
        except UnicodeDecodeError as err:
            at = position + err.start
            index = int(np.searchsorted(starts, at, side="right")) - 1
            if errors == "strict":
                raise AiaynError(
                    f"{path}:{first_line + index}: invalid UTF-8 "
                    f"(byte 0x{data[at]:02x} at byte {at - int(starts[index]) + 1} of the line)"
                ) from None
            if not bad_lines or bad_lines[-1] != first_line + index:
                bad_lines.append(first_line + index)
            position += err.end
    for number in bad_lines:
        if on_invalid is not None:
            on_invalid(number)
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "" and text.endswith("\n"):
        lines.pop()
    return pa.array([line[:-1] if line.endswith("\r") else line for line in lines], pa.string())


__all__ = [
    "CHUNK_BYTES",
    "MAX_LINE_BYTES",
    "decode_lines",
    "iter_line_chunks",
    "open_text",
    "read_lines",
    "refuse_binary_file",
]
