"""Local corpora read in chunks: two line-aligned text files, a TSV file, a JSONL file.

Each reader yields a few million pairs at a time (Arrow arrays, through `lines.iter_line_chunks`), so
a corpus of any size is read in bounded memory; `corpus.load_split` cleans the chunks as they come.
A hasher given to a reader sees every byte of its file, so the content's fingerprint costs no second
pass. `file_digest` gives that fingerprint without reading the file when its size, modification time
and inode are those recorded at its last hashing (an identity file, as `make` and `rsync` trust them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from ..errors import AiaynError
from ..files import atomic_open, node_kind
from .lines import CHUNK_BYTES, iter_line_chunks


def text_pair_chunks(source_path: Path, target_path: Path, hashers=(None, None)) -> Iterator[tuple[pa.Array, pa.Array]]:
    """Aligned chunks of the lines of two files; `AiaynError` with both line counts if they differ."""
    paths = (source_path, target_path)
    readers = [iter_line_chunks(path, hasher=hasher) for path, hasher in zip(paths, hashers)]
    pending: list[pa.Array | None] = [pa.array([], pa.string())] * 2
    counts = [0, 0]
    while True:
        for side in (0, 1):
            if pending[side] is not None and len(pending[side]) == 0:
                pending[side] = next(readers[side], None)
                counts[side] += len(pending[side]) if pending[side] is not None else 0
        if pending[0] is None and pending[1] is None:
            return
        if pending[0] is None or pending[1] is None:
            longer = 0 if pending[0] is not None else 1
            counts[longer] += sum(len(chunk) for chunk in readers[longer])  # read on, to count
            raise AiaynError(f"line counts differ: {source_path} has {counts[0]} lines, {target_path} has {counts[1]}")
        rows = min(len(pending[0]), len(pending[1]))
        yield pending[0][:rows], pending[1][:rows]
        pending = [side[rows:] for side in pending]


def tsv_chunks(path: Path, source_index: int, target_index: int, hasher=None) -> Iterator[tuple[pa.Array, pa.Array]]:
    """The `source_index`-th and `target_index`-th tab-separated fields of each line (a blank line: two empty ones)."""
    needed = max(source_index, target_index) + 1
    first_line = 1
    for lines in iter_line_chunks(path, hasher=hasher):
        blank = pc.equal(pc.utf8_trim_whitespace(lines), "")
        fields = pc.split_pattern(pc.if_else(blank, "\t" * (needed - 1), lines), "\t")
        counts = pc.list_value_length(fields)
        short = np.flatnonzero(pc.less(counts, needed).to_numpy(zero_copy_only=False))
        if len(short):
            raise AiaynError(
                f"{path}:{first_line + int(short[0])}: expected at least {needed} tab-separated columns, "
                f"found {counts[int(short[0])].as_py()}"
            )
        first_line += len(lines)
        yield pc.list_element(fields, source_index), pc.list_element(fields, target_index)


def jsonl_chunks(path: Path, hasher=None) -> Iterator[pa.Table]:
    """The objects of a JSONL file (blank lines skipped), as one Arrow table per chunk of lines."""
    first_line, numbers = 1, []
    for lines in iter_line_chunks(path, hasher=hasher):
        rows = []
        for number, line in enumerate(lines.to_pylist(), first_line):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise AiaynError(f"{path}:{number}: invalid JSON ({err.msg} at column {err.colno})") from None
            if not isinstance(row, dict):
                raise AiaynError(f"{path}:{number}: expected a JSON object, found {type(row).__name__}")
            rows.append(row)
            numbers.append(number)
        first_line += len(lines)
        if not rows:
            continue
        keys = list(dict.fromkeys(key for row in rows for key in row))
        try:
            yield pa.table({key: pa.array([row.get(key) for row in rows]) for key in keys})
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            where = _first_disagreement(rows, numbers)
            if where:
                raise AiaynError(f"{path}:{where}") from None
            raise AiaynError(f"{path}: the lines disagree on the type of a key ({err})") from None
        numbers.clear()


def _first_disagreement(rows: list[dict], numbers: list[int]) -> str:
    """'13: "translation.en" is a number here but a string on line 1', for the first line whose value of a
    key (nested keys joined by dots) has another JSON type than on an earlier line; '' if none has."""
    first: dict[str, tuple[str, int]] = {}
    for number, row in zip(numbers, rows):
        for key, kind in _kinds(row):
            if key not in first:
                first[key] = (kind, number)
            elif kind != first[key][0]:
                return f'{number}: "{key}" is a {kind} here but a {first[key][0]} on line {first[key][1]}'
    return ""


def _kinds(row: dict, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted key, JSON type) of every non-null value of `row`, nested objects walked into."""
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield name, "object"
            yield from _kinds(value, name + ".")
        elif value is not None:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            yield name, "number" if number else {str: "string", list: "list", bool: "boolean"}[type(value)]


# ---------------------------------------------------------------------------------------------
# Content fingerprints, trusted while a file's size, modification time and inode stay the same
# ---------------------------------------------------------------------------------------------


def file_digest(path: Path, identity_file: Path | None = None) -> bytes:
    """xxh3-128 of the file's bytes; read from `identity_file` when the file has not changed since."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise AiaynError(f"{path}: no such file") from None
    refuse_streams([path])
    identity = [stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_dev]
    key = str(path.resolve())
    known = _read_identities(identity_file)
    if key in known and known[key][0] == identity:
        return bytes.fromhex(known[key][1])
    hasher = xxhash.xxh3_128()
    try:
        with open(path, "rb") as file:
            while block := file.read(CHUNK_BYTES):
                hasher.update(block)
    except IsADirectoryError:
        raise AiaynError(f"{path}: is a folder, not a file") from None
    digest = hasher.digest()
    if identity_file is not None and path.stat().st_mtime_ns == stat.st_mtime_ns:
        known = _read_identities(identity_file)  # another process may have added files meanwhile
        known[key] = [identity, digest.hex()]
        identity_file.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(identity_file) as out:
            json.dump(known, out)
    return digest


def refuse_streams(paths: list[Path]) -> None:
    """`AiaynError` for the first of `paths` that is a device or a pipe (not a file or folder): data that is
    fingerprinted before it is read must be read twice, and a device may never end (`/dev/zero`)."""
    for path in paths:
        kind = node_kind(path)
        if kind not in ("file", "folder", "missing"):
            raise AiaynError(f"{path}: is a {kind}, not a text file (data is read twice: fingerprinted, then prepared)")


def _read_identities(identity_file: Path | None) -> dict:
    if identity_file is None:
        return {}
    try:
        return json.loads(identity_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # absent or damaged: every file is hashed again


__all__ = ["file_digest", "jsonl_chunks", "refuse_streams", "text_pair_chunks", "tsv_chunks"]
