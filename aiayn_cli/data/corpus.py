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

import codecs
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from ..errors import AiaynError

# Names a split is also found under, first the canonical one.
SPLIT_ALIASES: dict[str, tuple[str, ...]] = {
    "train": ("train",),
    "validation": ("validation", "val", "valid", "dev"),
    "test": ("test", "test2016"),
}

# Bump when cleaning changes, so that caches keyed on a dataset's fingerprint are not reused.
_CLEANING_VERSION = "1"


PAIR = ("source_file", "target_file")


@dataclass
class DataSpec:
    """Where parallel data comes from and how it is cleaned.

    Give exactly one source: `dataset`, `data_dir`, `prefix`, `source_file` + `target_file`, or
    `data_file`. Paths may contain `{split}`.

    Args:
        dataset: a Hub dataset name (`wmt14`), or a folder written by `save_to_disk`, or a local
            folder that `datasets.load_dataset` reads.
        dataset_config: the Hub configuration (`de-en` for `wmt14`).
        data_dir: a folder of `{split}.{lang}` plain-text files (or `{split}.jsonl`, `{split}.tsv`).
        prefix: a path prefix: the files are `{prefix}.{source_lang}` and `{prefix}.{target_lang}`.
        source_file, target_file: two plain-text files, one sentence per line, aligned by line.
        data_file: one TSV (`source<TAB>target` per line, no header) or JSONL file (one object per
            line, in the translation format or with one key per language); the format comes from
            the extension (`.tsv`, `.jsonl`, `.json`) or `data_format`.
        data_format: `tsv` or `jsonl`, to override the extension of `data_file`.
        source_lang, target_lang: language codes (`en`, `de`): file suffixes and translation keys.
        source_column, target_column: the columns to read instead of the translation keys: names for
            Hub datasets and JSONL (nested keys flattened with dots, `translation.en`), 0-based
            indices for TSV (default 0 and 1).
        max_length: drop pairs with a side of more than this many whitespace-separated tokens.
        max_ratio: drop pairs whose longer side has more than this many times the tokens of the other.
        dedup: drop every repeat of an identical (source, target) pair, keeping the first.
        cache_dir: the `datasets` cache for Hub datasets (default: the `datasets` default).
    """

    dataset: str | None = None
    dataset_config: str | None = None
    data_dir: str | Path | None = None
    prefix: str | None = None
    source_file: str | Path | None = None
    target_file: str | Path | None = None
    data_file: str | Path | None = None
    data_format: str | None = None
    source_lang: str | None = None
    target_lang: str | None = None
    source_column: str | None = None
    target_column: str | None = None
    max_length: int | None = None
    max_ratio: float | None = None
    dedup: bool = False
    cache_dir: str | Path | None = None

    def validate(self) -> None:
        """Raise `AiaynError` for a spec that names no source, or more than one, or bad limits."""
        sources = ("dataset", "data_dir", "prefix", "source_file", "data_file")
        given = [name for name in sources if getattr(self, name) or (name == "source_file" and self.target_file)]
        if not given:
            raise AiaynError(
                "no data given: use {dataset}, {data_dir}, {prefix}, {source_file} with {target_file}, or {data_file}",
                mentions=(*sources, "target_file"),
            )
        if len(given) > 1:
            raise AiaynError(
                "give one data source, not " + " and ".join(f"{{{name}}}" for name in given), mentions=tuple(given)
            )
        if bool(self.source_file) != bool(self.target_file):
            raise AiaynError("{source_file} and {target_file} go together: give both", mentions=PAIR)
        needs_langs = (
            self.dataset
            or self.data_dir
            or self.prefix
            or (self.data_file and _file_format(self) == "jsonl" and not (self.source_column and self.target_column))
        )
        if needs_langs and not (self.source_lang and self.target_lang):
            raise AiaynError(
                "{source_lang} and {target_lang} are required for this data source",
                mentions=("source_lang", "target_lang"),
            )
        if self.max_length is not None and self.max_length < 1:
            raise AiaynError(f"must be at least 1, got {self.max_length}", key="max_length")
        if self.max_ratio is not None and self.max_ratio < 1:
            raise AiaynError(f"must be at least 1, got {self.max_ratio}", key="max_ratio")


@dataclass
class CleaningReport:
    """Counts of what cleaning did to one split; `str()` gives the line commands print on stderr."""

    origin: str
    split: str
    read: int = 0
    stripped: int = 0  # pairs kept after removing whitespace at an end of a side
    empty: int = 0
    too_long: int = 0
    bad_ratio: int = 0
    duplicates: int = 0
    limits: dict[str, Any] = field(default_factory=dict)

    @property
    def dropped(self) -> int:
        return self.empty + self.too_long + self.bad_ratio + self.duplicates

    @property
    def kept(self) -> int:
        return self.read - self.dropped

    def __str__(self) -> str:
        parts = [f"{self.empty} empty"]
        if self.limits.get("max_length") is not None:
            parts.append(f"{self.too_long} longer than {self.limits['max_length']} tokens")
        if self.limits.get("max_ratio") is not None:
            parts.append(f"{self.bad_ratio} past length ratio {self.limits['max_ratio']:g}")
        if self.limits.get("dedup"):
            parts.append(f"{self.duplicates} duplicates")
        return (
            f"{self.split} ({self.origin}): {self.read} pairs read, {self.kept} kept; dropped "
            f"{', '.join(parts)}; stripped whitespace in {self.stripped}"
        )


def split_candidates(split: str) -> tuple[str, ...]:
    """The names under which `split` may be stored, the given name first."""
    for aliases in SPLIT_ALIASES.values():
        if split in aliases:
            return (split,) + tuple(a for a in aliases if a != split)
    return (split,)


def load_split(spec: DataSpec, split: str = "train") -> datasets.Dataset:
    """Load one split as a cleaned `Dataset` with string columns `source` and `target`.

    The `CleaningReport` is attached as `dataset.cleaning_report` (a plain attribute: it does not
    survive `map`/`filter`, so read it right away). The dataset's fingerprint is derived from the
    files' contents (or the Hub dataset's fingerprint) and the cleaning options, so that
    `tokenize_split` can cache on it.
    """
    spec.validate()
    if spec.dataset:
        source, target, origin, fingerprint = _load_hub(spec, split)
    else:
        source, target, origin, fingerprint = _load_local(spec, split)
    return _clean(source, target, spec, split, origin, fingerprint)


# ---------------------------------------------------------------------------------------------
# Hub datasets and save_to_disk folders
# ---------------------------------------------------------------------------------------------


def _load_hub(spec: DataSpec, split: str) -> tuple[pa.Array, pa.Array, str, str]:
    name = str(spec.dataset)
    origin = name + (f" ({spec.dataset_config})" if spec.dataset_config else "")
    path = Path(name)
    if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
        try:
            saved = datasets.load_from_disk(str(path))
        except Exception as err:  # a damaged folder: corrupt JSON or Arrow files
            raise _user_error(err, origin) from err
        dataset = _select_saved_split(saved, split, origin)
    else:
        dataset = _load_hub_split(spec, split, origin)
    return _translation_pair(dataset, spec, origin, f"{origin} [{split}]")


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
            return datasets.load_dataset(str(spec.dataset), spec.dataset_config, split=name, cache_dir=cache_dir)
        except ValueError as err:
            if not str(err).startswith(("Unknown split", "Bad split")):
                raise _user_error(err, origin) from err
            unknown = err
        except Exception as err:  # not found, offline, a missing config: the datasets library's types vary
            raise _user_error(err, origin) from err
    available = re.search(r"\[(.*)\]", str(unknown))
    detail = f" (splits: {available.group(1)})" if available else ""
    raise AiaynError(f"dataset {origin} has no split {split!r}{detail}")


def _translation_pair(
    dataset: datasets.Dataset, spec: DataSpec, origin: str, where: str
) -> tuple[pa.Array, pa.Array, str, str]:
    """Source and target sentences of a Hub-style dataset, with a fingerprint of where they came from."""
    flat = _flatten(dataset)
    source, target = _pair_columns(flat, spec, where)
    fingerprint = xxhash.xxh3_128_hexdigest(f"dataset|{dataset._fingerprint}|{source}|{target}".encode())
    return _column(flat, source), _column(flat, target), origin, fingerprint


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
        f"{where}: no 'translation' column and no columns {langs[0]!r} and {langs[1]!r} "
        f"(columns: {', '.join(columns)}); name them with --source-column/--target-column"
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
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        raise AiaynError(f"column {name!r} holds {values.type}, not text")
    return values


# ---------------------------------------------------------------------------------------------
# Local files: plain-text pairs, TSV, JSONL
# ---------------------------------------------------------------------------------------------


def _file_format(spec: DataSpec) -> str:
    if spec.data_format:
        if spec.data_format not in ("tsv", "jsonl"):
            raise AiaynError(f"--data-format must be tsv or jsonl, got {spec.data_format!r}")
        return spec.data_format
    suffix = Path(str(spec.data_file)).suffix.lower()
    formats = {".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}
    if suffix not in formats:
        raise AiaynError(
            f"--data-file {spec.data_file}: cannot tell the format from {suffix or 'no extension'!r}; "
            "use a .tsv or .jsonl name, or --data-format"
        )
    return formats[suffix]


def _load_local(spec: DataSpec, split: str) -> tuple[pa.Array, pa.Array, str, str]:
    candidates = split_candidates(split)
    if spec.data_dir:
        directory = Path(spec.data_dir)
        if not directory.is_dir():
            raise AiaynError(f"--data-dir {directory}: not a folder")
        looked = []
        for name in candidates:
            pair = (directory / f"{name}.{spec.source_lang}", directory / f"{name}.{spec.target_lang}")
            if pair[0].is_file() or pair[1].is_file():
                return _read_text_pair(*pair)
            for fmt in ("jsonl", "tsv"):
                if (directory / f"{name}.{fmt}").is_file():
                    return _read_one_file(directory / f"{name}.{fmt}", fmt, spec)
            looked.append(f"{name}.{spec.source_lang}+{name}.{spec.target_lang}")
        raise AiaynError(
            f"--data-dir {directory}: no {split} data for {spec.source_lang}-{spec.target_lang} "
            f"(looked for {', '.join(looked)}, and .jsonl/.tsv)"
        )
    if spec.prefix:
        prefix = _existing_split_path(spec.prefix, candidates, suffix=f".{spec.source_lang}")
        return _read_text_pair(Path(f"{prefix}.{spec.source_lang}"), Path(f"{prefix}.{spec.target_lang}"))
    if spec.source_file:
        return _read_text_pair(
            Path(_existing_split_path(str(spec.source_file), candidates)),
            Path(_existing_split_path(str(spec.target_file), candidates)),
        )
    path = Path(_existing_split_path(str(spec.data_file), candidates))
    return _read_one_file(path, _file_format(spec), spec)


def _existing_split_path(template: str, candidates: tuple[str, ...], suffix: str = "") -> str:
    """`template` with `{split}` filled by the first candidate whose file exists (or the first)."""
    if "{split}" not in template:
        return template
    for name in candidates:
        path = template.replace("{split}", name)
        if Path(path + suffix).is_file():
            return path
    return template.replace("{split}", candidates[0])


def read_lines(path: Path) -> tuple[list[str], bytes]:
    """The lines of a UTF-8 text file (split on `\\n` only, as `wc -l` counts; a byte-order mark
    is skipped) and its bytes.

    Raises `AiaynError` for a missing file or invalid UTF-8, naming the file and the line.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise AiaynError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise AiaynError(f"{path}: is a folder, not a file") from None
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[start:].decode("utf-8")
    except UnicodeDecodeError as err:
        at = start + err.start
        line = data.count(b"\n", 0, at) + 1
        column = at - (data.rfind(b"\n", 0, at) + 1) + 1
        raise AiaynError(f"{path}:{line}: invalid UTF-8 (byte 0x{data[at]:02x} at byte {column} of the line)") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return lines, data


def _read_text_pair(source_path: Path, target_path: Path) -> tuple[pa.Array, pa.Array, str, str]:
    source, source_bytes = read_lines(source_path)
    target, target_bytes = read_lines(target_path)
    if len(source) != len(target):
        raise AiaynError(f"line counts differ: {source_path} has {len(source)} lines, {target_path} has {len(target)}")
    fingerprint = xxhash.xxh3_128_hexdigest(
        b"text|" + xxhash.xxh3_128_digest(source_bytes) + xxhash.xxh3_128_digest(target_bytes)
    )
    return pa.array(source, pa.string()), pa.array(target, pa.string()), f"{source_path}, {target_path}", fingerprint


def _read_one_file(path: Path, fmt: str, spec: DataSpec) -> tuple[pa.Array, pa.Array, str, str]:
    lines, data = read_lines(path)
    digest = xxhash.xxh3_128_digest(data)
    if fmt == "tsv":
        source, target = _parse_tsv(lines, path, spec)
        fingerprint = xxhash.xxh3_128_hexdigest(
            b"tsv|" + digest + repr((spec.source_column, spec.target_column)).encode()
        )
        return pa.array(source, pa.string()), pa.array(target, pa.string()), str(path), fingerprint
    dataset = datasets.Dataset(_parse_jsonl(lines, path), fingerprint=xxhash.xxh3_128_hexdigest(b"jsonl|" + digest))
    return _translation_pair(dataset, spec, str(path), str(path))  # from here on, the Hub code


def _parse_tsv(lines: list[str], path: Path, spec: DataSpec) -> tuple[list[str], list[str]]:
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
    s, t = columns
    needed = max(s, t) + 1
    source, target = [], []
    for number, line in enumerate(lines, 1):
        fields = line.split("\t")
        if len(fields) < needed:
            if not line.strip():
                fields = [""] * needed  # a blank line is an empty pair: counted and dropped
            else:
                raise AiaynError(
                    f"{path}:{number}: expected at least {needed} tab-separated columns, found {len(fields)}"
                )
        source.append(fields[s])
        target.append(fields[t])
    return source, target


def _parse_jsonl(lines: list[str], path: Path) -> pa.Table:
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise AiaynError(f"{path}:{number}: invalid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(row, dict):
            raise AiaynError(f"{path}:{number}: expected a JSON object, found {type(row).__name__}")
        rows.append(row)
    keys = list(dict.fromkeys(key for row in rows for key in row))
    try:
        return pa.table({key: pa.array([row.get(key) for row in rows]) for key in keys})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise AiaynError(f"{path}: the lines disagree on the type of a key ({err})") from None


# ---------------------------------------------------------------------------------------------
# Cleaning: counted, reported, never silent
# ---------------------------------------------------------------------------------------------


def _clean(
    source: pa.Array, target: pa.Array, spec: DataSpec, split: str, origin: str, fingerprint: str
) -> datasets.Dataset:
    limits = {"max_length": spec.max_length, "max_ratio": spec.max_ratio, "dedup": spec.dedup}
    report = CleaningReport(origin=origin, split=split, read=len(source), limits=limits)
    source, target = (pc.fill_null(_combine(side), "") for side in (source, target))
    stripped_source, stripped_target = pc.utf8_trim_whitespace(source), pc.utf8_trim_whitespace(target)
    changed = pc.or_(pc.not_equal(source, stripped_source), pc.not_equal(target, stripped_target))
    source, target = stripped_source, stripped_target

    keep = pc.and_(pc.greater(pc.utf8_length(source), 0), pc.greater(pc.utf8_length(target), 0))
    report.empty = _count_false(keep)
    if spec.max_length is not None or spec.max_ratio is not None:
        source_words = pc.list_value_length(pc.utf8_split_whitespace(source))
        target_words = pc.list_value_length(pc.utf8_split_whitespace(target))
    if spec.max_length is not None:
        fits = pc.and_(pc.less_equal(source_words, spec.max_length), pc.less_equal(target_words, spec.max_length))
        report.too_long, keep = _drop(keep, fits)
    if spec.max_ratio is not None:
        longer = pc.max_element_wise(source_words, target_words)
        shorter = pc.min_element_wise(source_words, target_words)
        ratio_ok = pc.less_equal(longer, pc.multiply(pc.cast(shorter, pa.float64()), spec.max_ratio))
        report.bad_ratio, keep = _drop(keep, ratio_ok)
    if spec.dedup:
        index = pa.array(range(len(source)), pa.int64())
        kept = pa.table({"s": source, "t": target, "i": index}).filter(keep)
        first = kept.group_by(["s", "t"], use_threads=False).aggregate([("i", "min")]).column("i_min")
        report.duplicates, keep = _drop(keep, pc.is_in(index, value_set=first.combine_chunks()))

    report.stripped = pc.sum(pc.cast(pc.and_(changed, keep), pa.int64())).as_py() or 0
    table = pa.table({"source": source, "target": target}).filter(keep)
    if table.num_rows == 0:
        raise AiaynError(f"{origin}: no sentence pairs left in {split} after cleaning ({report})")
    options = json.dumps([_CLEANING_VERSION, limits], sort_keys=True)
    dataset = datasets.Dataset(
        table,
        split=datasets.NamedSplit(split),
        fingerprint=xxhash.xxh3_128_hexdigest(f"{fingerprint}|{options}".encode()),
    )
    dataset.cleaning_report = report
    return dataset


def _combine(values) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _count_false(mask: pa.Array) -> int:
    return len(mask) - (pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)


def _drop(keep: pa.Array, condition: pa.Array) -> tuple[int, pa.Array]:
    """Pairs still kept that fail `condition`, and the mask without them."""
    new_keep = pc.and_(keep, pc.fill_null(condition, False))
    return _count_false(new_keep) - _count_false(keep), new_keep


__all__ = ["CleaningReport", "DataSpec", "SPLIT_ALIASES", "load_split", "read_lines", "split_candidates"]
