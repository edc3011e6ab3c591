"""Prepared data: a split read, cleaned and tokenized once, then opened by every later run.

At the paper's sizes (WMT 2014: 4.5 million pairs for English-German, 36 million for
English-French) reading and tokenizing take minutes; they are done once, like fairseq's
`preprocess` and OpenNMT's `build_vocab`, by `aiayn prepare RECIPE` ahead of a job or by the
first `aiayn train`. `prepare_split`:

1. fingerprints the data without reading it when it can: a local file's content hash is recorded
   with its size, modification time and inode (`identities.json`), and trusted while they match;
2. looks for `{cache_dir}/{split}-{key}/`, the key hashing that fingerprint, the cleaning options,
   the tokenizer and `max_length`; if it is there (its `prepared.json` is written last), the
   tokenized Arrow files are memory-mapped and nothing else happens;
3. otherwise streams the corpus through cleaning into an Arrow file (bounded memory), tokenizes it
   with `num_proc` processes (by default this machine's cores) into Arrow files, writes
   `prepared.json`, and renames the folder into place. Until that rename the work lives in a
   hidden `.{split}-{key}.*.tmp` folder that no run trusts, and that is removed on any failure
   (a full disk included): a half-written cache is never opened.

Every process of a multi-process run, every resume and every second run take step 2 only.
"""

from __future__ import annotations

import errno
import json
import os
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import datasets
import pyarrow as pa
import xxhash

from ..errors import AiaynError
from ..files import atomic_open, node_kind, staging_dir
from .corpus import (
    CleaningReport,
    DataSpec,
    clean_chunks,
    cleaned_fingerprint,
    data_fingerprint,
    finish_cleaning,
    new_report,
    open_pairs,
    split_origin,
)
from .tokenization import tokenize_split

_PREPARED_VERSION = "1"
MANIFEST = "prepared.json"
IDENTITIES = "identities.json"
SMALL_CORPUS = 100_000  # pairs; fewer are tokenized in one process (starting others costs more)


@dataclass
class PreparedSplit:
    """A prepared split: the tokenized dataset (memory-mapped) and what preparing it found."""

    dataset: datasets.Dataset  # input_ids, labels, src_len, tgt_len
    report: CleaningReport
    num_too_long: int  # pairs dropped for a side longer than max_length tokens
    path: Path  # the folder that holds it
    from_cache: bool  # opened as an earlier run left it


def default_prepared_dir(spec: DataSpec) -> Path:
    """Where prepared splits go: `{data.cache_dir or the datasets cache}/aiayn/prepared`."""
    return Path(spec.cache_dir or datasets.config.HF_DATASETS_CACHE) / "aiayn" / "prepared"


def prepare_split(
    spec: DataSpec,
    split: str,
    tokenizer,
    *,
    max_length: int | None = None,
    num_proc: int | None = None,
    cache_dir: str | Path | None = None,
    show_progress: bool = False,
) -> PreparedSplit:
    """The split cleaned and tokenized, from the cache if it was prepared before, else prepared now.

    Args:
        tokenizer: the tokenizer of `train_tokenizer` (or a `tokenizers.Tokenizer`).
        max_length: drop pairs with a side longer than this many tokens, `</s>` included.
        num_proc: tokenizing processes; None: this machine's cores (one for fewer than 100,000 pairs).
        cache_dir: default `default_prepared_dir(spec)`.
    """
    if spec.cache_dir is not None and node_kind(Path(spec.cache_dir)) not in ("missing", "folder"):
        raise AiaynError(f"{spec.cache_dir}: is a {node_kind(Path(spec.cache_dir))}, not a folder", key="cache_dir")
    cache_dir = Path(os.path.realpath(cache_dir if cache_dir is not None else default_prepared_dir(spec)))
    fingerprint = data_fingerprint(spec, split, cache_dir / IDENTITIES)
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    key = xxhash.xxh3_128_hexdigest(
        "|".join([_PREPARED_VERSION, fingerprint, backend.to_str(), str(max_length)]).encode()
    )
    folder = cache_dir / f"{split}-{key}"
    if (folder / MANIFEST).is_file():
        return _open(folder, from_cache=True, origin=split_origin(spec, split))
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AiaynError(f"cannot create the data cache {cache_dir}: {err.strerror}") from None
    try:
        # Another process that finishes the same work first keeps its folder (`keep_existing`).
        with staging_dir(folder, f".{folder.name}.{uuid.uuid4().hex[:12]}.tmp", keep_existing=True) as staging:
            _build(spec, split, fingerprint, tokenizer, max_length, num_proc, staging, show_progress)
    except OSError as err:
        if (folder / MANIFEST).is_file():  # the same race, lost at the rename
            return _open(folder, from_cache=True, origin=split_origin(spec, split))
        if err.errno == errno.ENOSPC:
            raise AiaynError(
                f"{cache_dir}: no space left on the disk while preparing {split}; nothing was kept "
                "(free some space, or set data.cache_dir to another disk)"
            ) from None
        raise
    return _open(folder, from_cache=False)


def _build(spec, split, fingerprint, tokenizer, max_length, num_proc, staging: Path, show_progress) -> None:
    """Read, clean, tokenize into `staging`, and write its manifest last."""
    stream = open_pairs(spec, split)
    report = new_report(spec, stream.origin, split)
    raw, clean = staging / "cleaned-chunks.arrow", staging / "cleaned.arrow"
    _write(clean_chunks(stream, spec, report, show_progress), raw)
    if cleaned_fingerprint(stream.fingerprint(), spec) != fingerprint:
        raise AiaynError(f"{stream.origin}: the data changed while it was read; run again")
    with pa.memory_map(str(raw)) as source:
        table = finish_cleaning(pa.ipc.open_stream(source).read_all(), spec, report)
        _write((table.slice(start, 1 << 20) for start in range(0, table.num_rows, 1 << 20)), clean)
        del table
    raw.unlink()
    cleaned = datasets.Dataset.from_file(str(clean))
    processes = num_proc if num_proc is not None else (_cores() if len(cleaned) >= SMALL_CORPUS else 1)
    bars_were_off = datasets.utils.are_progress_bars_disabled()
    if not show_progress:
        datasets.utils.disable_progress_bars()
    try:
        tokenized = tokenize_split(
            cleaned, tokenizer, max_length=max_length, num_proc=processes if processes > 1 else None, cache_dir=staging
        )
    finally:
        if not bars_were_off:
            datasets.utils.enable_progress_bars()
    files = [Path(entry["filename"]).name for entry in tokenized.cache_files]
    manifest = {
        "version": _PREPARED_VERSION,
        "split": split,
        "origin": stream.origin,
        "fingerprint": fingerprint,
        "max_length": max_length,
        "pairs": len(tokenized),
        "num_too_long": tokenized.num_too_long,
        "num_proc": processes,
        "files": files,
        "report": asdict(report),
    }
    del tokenized, cleaned
    clean.unlink()
    for name in files:
        _fsync(staging / name)
    with atomic_open(staging / MANIFEST) as out:
        json.dump(manifest, out, indent=1)
        out.flush()
        os.fsync(out.fileno())


def _write(tables, path: Path) -> None:
    """Stream Arrow tables into an Arrow IPC stream file (the format `datasets` memory-maps)."""
    writer = None
    with pa.OSFile(str(path), "wb") as sink:
        for table in tables:
            if writer is None:
                schema = pa.schema(
                    [(name, pa.bool_() if name == "changed" else pa.string()) for name in table.schema.names]
                )
                writer = pa.ipc.new_stream(sink, schema)
            writer.write_table(table.cast(schema))
        if writer is None:  # no pairs at all: an empty table, for cleaning to report
            schema = pa.schema([("source", pa.string()), ("target", pa.string()), ("changed", pa.bool_())])
            writer = pa.ipc.new_stream(sink, schema)
        writer.close()


def _open(folder: Path, from_cache: bool, origin: str | None = None) -> PreparedSplit:
    """The prepared split in `folder`; `origin` names this run's files in its report (the same data may
    have been prepared from other files, by another run: their names are in the manifest)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        parts = [datasets.Dataset.from_file(str(folder / name)) for name in manifest["files"]]
        dataset = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
        report = CleaningReport(**manifest["report"])
        report = replace(report, origin=origin) if origin is not None else report
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowInvalid) as err:
        raise AiaynError(
            f"{folder}: the prepared data is damaged ({err}); delete the folder to prepare it again"
        ) from None
    if len(dataset) != manifest["pairs"]:
        raise AiaynError(
            f"{folder}: the prepared data is damaged (rows missing); delete the folder to prepare it again"
        )
    return PreparedSplit(dataset, report, manifest["num_too_long"], folder, from_cache)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _fsync(path: Path) -> None:
    with open(path, "rb") as file:
        os.fsync(file.fileno())


__all__ = ["IDENTITIES", "MANIFEST", "PreparedSplit", "default_prepared_dir", "prepare_split"]
