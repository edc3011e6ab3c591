"""Parallel data from wherever a user keeps it: one loader for every command.

The paper trains on sentence pairs (§5.1: WMT 2014 English-German, about 4.5 million pairs).
`load_split(spec, split)` turns any of these into a `datasets.Dataset` with exactly two string
columns, `source` and `target`:

- a Hub dataset in the translation format (`wmt14`, config `de-en`, rows
  `{"translation": {"de": ..., "en": ...}}`) or with one column per language, or a folder written
  by `Dataset.save_to_disk` / `DatasetDict.save_to_disk` (`DataSpec.dataset`);
- local files: a folder of `{split}.{lang}` plain-text pairs (`DataSpec.data_dir`, which also finds
  `{split}.jsonl` and `{split}.tsv`), a path prefix (`{prefix}.{lang}`), two explicit files, or one
  TSV / JSONL file (`DataSpec.data_file`). A path may hold `{split}`, replaced by the split's name;
  a path without it serves whichever split is asked for.

Split names have aliases (`SPLIT_ALIASES`): Multi30k names its files train / val / test2016, so
`validation` also finds `val`, `valid` and `dev`, and `test` also finds `test2016`.

Cleaning is counted and reported, never silent (`CleaningReport`, attached to the returned dataset
as `dataset.cleaning_report`): whitespace is stripped at both ends; pairs with an empty side are
dropped; with `max_length`, pairs with a side longer than that many whitespace-separated tokens;
with `max_ratio`, pairs whose longer side has more than `max_ratio` times the tokens of the shorter
one (both as Moses' clean-corpus-n counts them; subword limits belong to `tokenize_split`); with
`dedup`, every repeat of an identical pair. Each dropped pair is counted under its first reason.

Every bad input raises `AiaynError` with one line naming the file, line, column or option.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from ..errors import AiaynError, first_line
from .cleaning import CleaningReport, clean_chunks, concat_chunks, finish_cleaning, limits, new_report
from .spec import DataSpec, PairStream, file_format
from .text_files import file_digest, jsonl_chunks, refuse_streams, text_pair_chunks, tsv_chunks

# Names a split is also found under, first the canonical one.
SPLIT_ALIASES: dict[str, tuple[str, ...]] = {
    "train": ("train",),
    "validation": ("validation", "val", "valid", "dev"),
    "test": ("test", "test2016"),
}

CHUNK_ROWS = 1 << 20  # rows of a Hub dataset cleaned at a time

# Bump when cleaning changes, so that caches keyed on a dataset's fingerprint are not reused.
_CLEANING_VERSION = "1"


def split_candidates(split: str) -> tuple[str, ...]:
    """The names under which `split` may be stored, the given name first."""
    for aliases in SPLIT_ALIASES.values():
        if split in aliases:
            return (split,) + tuple(a for a in aliases if a != split)
    return (split,)


def load_split(spec: DataSpec, split: str = "train", show_progress: bool = False) -> datasets.Dataset:
    """Load one split as a cleaned `Dataset` with string columns `source` and `target`.

    The `CleaningReport` is attached as `dataset.cleaning_report` (a plain attribute: it does not
    survive `map`/`filter`, so read it right away). The dataset's fingerprint is derived from the
    files' contents (or the Hub dataset's fingerprint) and the cleaning options, so that
    `tokenize_split` can cache on it. Files are read and cleaned in chunks: the text is held once,
    as Arrow strings, never as a Python list. `prepare.prepare_split` writes the chunks to disk instead.
    """
    stream = open_pairs(spec, split)
    report = new_report(spec, stream.origin, split)
    chunks = list(clean_chunks(stream, spec, report, show_progress))
    table = finish_cleaning(concat_chunks(chunks), spec, report)
    dataset = datasets.Dataset(
        table, split=datasets.NamedSplit(split), fingerprint=cleaned_fingerprint(stream.fingerprint(), spec)
    )
    dataset.cleaning_report = report
    return dataset


def open_pairs(spec: DataSpec, split: str) -> PairStream:
    """The raw (uncleaned) pairs of a split, read lazily, chunk by chunk."""
    spec.validate()
    if spec.dataset:
        return _hub_stream(spec, split)
    fmt, paths = _local_files(spec, split)
    hashers = [xxhash.xxh3_128() for _ in paths]
    if fmt == "text":
        chunks = text_pair_chunks(paths[0], paths[1], hashers)
    elif fmt == "tsv":
        chunks = tsv_chunks(paths[0], *_tsv_columns(paths[0], spec), hasher=hashers[0])
    else:
        chunks = _jsonl_pairs(paths[0], spec, hashers[0])
    return PairStream(_origin(paths), chunks, lambda: _local_fingerprint(fmt, [h.digest() for h in hashers], spec))


def split_origin(spec: DataSpec, split: str) -> str:
    """What `open_pairs(spec, split).origin` names (the files, or the dataset), without opening anything."""
    spec.validate()
    return _hub_origin(spec) if spec.dataset else _origin(_local_files(spec, split)[1])


def _origin(paths: list[Path]) -> str:
    return ", ".join(str(path) for path in paths)


def _hub_origin(spec: DataSpec) -> str:
    return str(spec.dataset) + (f" ({spec.dataset_config})" if spec.dataset_config else "")


def split_files(spec: DataSpec, split: str) -> list[Path]:
    """The local files a split is read from (none for a Hub dataset): what no output may replace."""
    spec.validate()
    return [] if spec.dataset else _local_files(spec, split)[1]


def data_fingerprint(spec: DataSpec, split: str, identity_file: Path | None = None) -> str:
    """The fingerprint `load_split` gives the split (content and cleaning), without reading local
    files whose size, modification time and inode match `identity_file`'s record of them."""
    spec.validate()
    if spec.dataset:
        return cleaned_fingerprint(_hub_stream(spec, split).fingerprint(), spec)
    fmt, paths = _local_files(spec, split)
    if fmt == "tsv":
        _tsv_columns(paths[0], spec)
    refuse_streams(paths)  # all of them before any is hashed (and its identity written)
    digests = [file_digest(path, identity_file) for path in paths]
    return cleaned_fingerprint(_local_fingerprint(fmt, digests, spec), spec)


def cleaned_fingerprint(content: str, spec: DataSpec) -> str:
    options = json.dumps([_CLEANING_VERSION, limits(spec)], sort_keys=True)
    return xxhash.xxh3_128_hexdigest(f"{content}|{options}".encode())


def _local_fingerprint(fmt: str, digests: list[bytes], spec: DataSpec) -> str:
    columns = (spec.source_column, spec.target_column)
    if fmt == "jsonl":
        columns += (spec.source_lang, spec.target_lang)
    extra = repr(columns).encode() if fmt != "text" else b""
    return xxhash.xxh3_128_hexdigest(fmt.encode() + b"|" + b"".join(digests) + extra)


# ---------------------------------------------------------------------------------------------
# Hub datasets and save_to_disk folders
# ---------------------------------------------------------------------------------------------


def _hub_stream(spec: DataSpec, split: str) -> PairStream:
    name, origin = str(spec.dataset), _hub_origin(spec)
    path = Path(name)
    if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
        try:
            saved = datasets.load_from_disk(str(path))
        except Exception as err:  # a damaged folder: corrupt JSON or Arrow files
            raise _user_error(err, origin) from err
        dataset = _select_saved_split(saved, split, origin)
    else:
        dataset = _load_hub_split(spec, split, origin)
    flat = _flatten(dataset)  # memory-mapped: sliced below, never copied whole
    source, target = _pair_columns(flat, spec, f"{origin} [{split}]")
    fingerprint = xxhash.xxh3_128_hexdigest(f"dataset|{dataset._fingerprint}|{source}|{target}".encode())
    columns = _column(flat, source), _column(flat, target)
    chunks = (
        (columns[0].slice(start, CHUNK_ROWS), columns[1].slice(start, CHUNK_ROWS))
        for start in range(0, len(columns[0]), CHUNK_ROWS)
    )
    return PairStream(origin, chunks, lambda: fingerprint)


def _user_error(err: Exception, origin: str) -> AiaynError:
    """A one-line `AiaynError` for an exception the `datasets` library raised on a bad input."""
    causes = [err] + ([err.__cause__] if err.__cause__ is not None else [])
    lines = [str(cause).strip().splitlines()[0] for cause in causes if str(cause).strip()]
    return AiaynError(f"could not load dataset {origin}: {': '.join(lines) or type(err).__name__}")


def _select_saved_split(saved, split: str, origin: str) -> datasets.Dataset:
    if isinstance(saved, datasets.Dataset):
        return saved  # one saved split serves every split asked for
    for name in split_candidates(split):
        if name in saved:
            return saved[name]
    raise AiaynError(f"dataset {origin} has no split {split!r} (splits: {', '.join(saved)})")


def _load_hub_split(spec: DataSpec, split: str, origin: str) -> datasets.Dataset:
    cache_dir = str(spec.cache_dir) if spec.cache_dir else None
    unknown = None
    for name in split_candidates(split):
        try:
            with _quiet_retries(), _offline_where_the_hub_cannot_be_found(str(spec.dataset)):
                return datasets.load_dataset(str(spec.dataset), spec.dataset_config, split=name, cache_dir=cache_dir)
        except ValueError as err:
            if not str(err).startswith(("Unknown split", "Bad split")):
                raise _user_error(err, origin) from err
            unknown = err
        except ConnectionError as err:  # offline, or the Hub unreachable (after its own retries)
            raise AiaynError(
                f"could not reach the Hub dataset {origin} ({first_line(err)}); to use a local copy, pass a "
                f"folder of train.{spec.source_lang}, train.{spec.target_lang}, val.{spec.source_lang}, ... "
                f"files with {{data_dir}}",
                mentions=("data_dir",),
            ) from None
        except Exception as err:  # not found, a missing config: the datasets library's types vary
            raise _user_error(err, origin) from err
    available = re.search(r"\[(.*)\]", str(unknown))
    detail = f" (splits: {available.group(1)})" if available else ""
    raise AiaynError(f"dataset {origin} has no split {split!r}{detail}")


@contextlib.contextmanager
def _quiet_retries():
    """Without the Hub's warning per retry of a failed request (the error that ends them says it)."""
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _offline_where_the_hub_cannot_be_found(name: str):
    """Offline mode (a cached copy or one error, at once) for a Hub dataset where the Hub's host name
    does not resolve, instead of the Hub client's retries of every request."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if datasets.config.HF_HUB_OFFLINE or Path(name).exists():
        yield
        return
    try:
        socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname, 443)
        yield
        return
    except OSError:
        pass
    saved = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved


def describe_source(spec: DataSpec) -> str:
    """Where `spec`'s data comes from, in a few words: `the Hub dataset wmt14 (de-en)`, `the folder data/`."""
    if spec.dataset:
        name = str(spec.dataset) + (f" ({spec.dataset_config})" if spec.dataset_config else "")
        return f"the dataset folder {name}" if Path(str(spec.dataset)).is_dir() else f"the Hub dataset {name}"
    if spec.data_dir:
        return f"the folder {spec.data_dir}"
    if spec.prefix:
        return f"the files {spec.prefix}.{spec.source_lang} and {spec.prefix}.{spec.target_lang}"
    if spec.source_file:
        return f"the files {spec.source_file} and {spec.target_file}"
    return f"the file {spec.data_file}"


def _pair_columns(flat: datasets.Dataset, spec: DataSpec, where: str) -> tuple[str, str]:
    """The flattened column names that hold the source and the target sentences.

    In order: `source_column`/`target_column` if given; the `translation` column's language keys;
    columns named after the languages.
    """
    columns = flat.column_names
    if spec.source_column or spec.target_column:
        chosen = (
            spec.source_column or f"translation.{spec.source_lang}",
            spec.target_column or f"translation.{spec.target_lang}",
        )
        for option, name in zip(("--source-column", "--target-column"), chosen):
            if name not in columns:
                raise AiaynError(f"{where}: no column {name!r} for {option} (columns: {', '.join(columns)})")
        return chosen
    langs = (spec.source_lang, spec.target_lang)
    keys = [c.split(".", 1)[1] for c in columns if c.startswith("translation.")]
    if keys:
        for option, lang in zip(("--source-lang", "--target-lang"), langs):
            if lang not in keys:
                raise AiaynError(
                    f"{where}: language {lang!r} ({option}) is not a key of the translation "
                    f"column (keys: {', '.join(keys)})"
                )
        return f"translation.{langs[0]}", f"translation.{langs[1]}"
    if all(lang in columns for lang in langs):
        return langs[0], langs[1]
    raise AiaynError(
        f"{where}: no 'translation' column and no columns {langs[0]!r} and {langs[1]!r} (columns: {', '.join(columns)}); name them with {{source_column}}/{{target_column}}",
        mentions=("source_column", "target_column"),
    )


def _flatten(dataset: datasets.Dataset) -> datasets.Dataset:
    """The dataset with nested columns as `parent.child` columns and no indices mapping.

    A `Json` column (JSON files whose objects differ in their keys) is decoded in Python first.
    """
    json_columns = [name for name, feature in dataset.features.items() if isinstance(feature, datasets.Json)]
    if json_columns:
        table = dataset.flatten_indices().data.table.drop_columns(json_columns)
        for name in json_columns:
            values = [v if isinstance(v, dict) else None for v in dataset[name]]
            table = table.append_column(name, pa.array(values))
        dataset = datasets.Dataset(table, fingerprint=dataset._fingerprint)
    flat = dataset.flatten()
    return flat.flatten_indices() if flat._indices is not None else flat


def _column(flat: datasets.Dataset, name: str) -> pa.ChunkedArray:
    values = flat.data.column(name)
    if pa.types.is_null(values.type):  # no value in this chunk of a JSONL file
        return pc.cast(values, pa.string())
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        raise AiaynError(f"column {name!r} holds {values.type}, not text")
    return values


# ---------------------------------------------------------------------------------------------
# Local files: plain-text pairs, TSV, JSONL
# ---------------------------------------------------------------------------------------------


def _local_files(spec: DataSpec, split: str) -> tuple[str, list[Path]]:
    """The format (`text`, `tsv` or `jsonl`) and the files of a split of local data."""
    candidates = split_candidates(split)
    if spec.data_dir:
        directory = Path(spec.data_dir)
        if not directory.is_dir():
            raise AiaynError(f"{directory}: not a folder", key="data_dir")
        looked = []
        for name in candidates:
            pair = [directory / f"{name}.{spec.source_lang}", directory / f"{name}.{spec.target_lang}"]
            if pair[0].is_file() or pair[1].is_file():
                return "text", pair
            for fmt in ("jsonl", "tsv"):
                if (directory / f"{name}.{fmt}").is_file():
                    return fmt, [directory / f"{name}.{fmt}"]
            looked.append(f"{name}.{spec.source_lang}+{name}.{spec.target_lang}")
        raise AiaynError(
            f"{directory}: no {split} data for {spec.source_lang}-{spec.target_lang} (looked for {', '.join(looked)}, and .jsonl/.tsv)",
            key="data_dir",
        )
    if spec.prefix:
        prefix = _existing_split_path(spec.prefix, candidates, suffix=f".{spec.source_lang}")
        return "text", [Path(f"{prefix}.{spec.source_lang}"), Path(f"{prefix}.{spec.target_lang}")]
    if spec.source_file:
        return "text", [
            Path(_existing_split_path(str(spec.source_file), candidates)),
            Path(_existing_split_path(str(spec.target_file), candidates)),
        ]
    return file_format(spec), [Path(_existing_split_path(str(spec.data_file), candidates))]


def _existing_split_path(template: str, candidates: tuple[str, ...], suffix: str = "") -> str:
    """`template` with `{split}` filled by the first candidate whose file exists (or the first)."""
    if "{split}" not in template:
        return template
    for name in candidates:
        path = template.replace("{split}", name)
        if Path(path + suffix).is_file():
            return path
    return template.replace("{split}", candidates[0])


def _tsv_columns(path: Path, spec: DataSpec) -> tuple[int, int]:
    columns = []
    for option, value, default in (
        ("--source-column", spec.source_column, 0),
        ("--target-column", spec.target_column, 1),
    ):
        if value is None:
            columns.append(default)
        elif str(value).isdigit():
            columns.append(int(value))
        else:
            raise AiaynError(f"{path}: a TSV file has no column names; {option} must be a 0-based index, got {value!r}")
    return columns[0], columns[1]


def _jsonl_pairs(path: Path, spec: DataSpec, hasher) -> Iterator[tuple[pa.Array, pa.Array]]:
    for table in jsonl_chunks(path, hasher):
        flat = _flatten(datasets.Dataset(table))
        source, target = _pair_columns(flat, spec, str(path))  # from here on, the Hub code
        yield _column(flat, source), _column(flat, target)


__all__ = [
    "CleaningReport",
    "DataSpec",
    "PairStream",
    "SPLIT_ALIASES",
    "clean_chunks",
    "cleaned_fingerprint",
    "data_fingerprint",
    "describe_source",
    "finish_cleaning",
    "load_split",
    "new_report",
    "open_pairs",
    "split_candidates",
    "split_files",
    "split_origin",
]
