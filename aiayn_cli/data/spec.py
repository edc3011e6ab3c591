"""What a data source is (`DataSpec`) and how its pairs arrive (`PairStream`): the types that reading
(`corpus`, `text_files`), cleaning (`cleaning`) and tokenizing share. Light to import: no `datasets`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import AiaynError

if TYPE_CHECKING:
    import pyarrow as pa

PAIR = ("source_file", "target_file")
# The fields that name where the data is: a spec gives one of them (the pair of files counts as one).
DATA_SOURCES = ("dataset", "data_dir", "prefix", "source_file", "target_file", "data_file")


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
        sources = tuple(name for name in DATA_SOURCES if name != "target_file")
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
            or (self.data_file and file_format(self) == "jsonl" and not (self.source_column and self.target_column))
        )
        if needs_langs and not (self.source_lang and self.target_lang):
            raise AiaynError(
                "{source_lang} and {target_lang} are required for this data source",
                mentions=("source_lang", "target_lang"),
            )
        if self.source_lang and self.source_lang == self.target_lang:
            raise AiaynError(
                f"{{source_lang}} and {{target_lang}} are both {self.source_lang}: a translation has two languages",
                mentions=("source_lang", "target_lang"),
            )
        if self.max_length is not None and self.max_length < 1:
            raise AiaynError(f"must be at least 1, got {self.max_length}", key="max_length")
        if self.max_ratio is not None and self.max_ratio < 1:
            raise AiaynError(f"must be at least 1, got {self.max_ratio}", key="max_ratio")


def file_format(spec: DataSpec) -> str:
    """The format of `spec.data_file`: `tsv` or `jsonl`, from `data_format` or the file's extension."""
    if spec.data_format:
        if spec.data_format not in ("tsv", "jsonl"):
            raise AiaynError(f"must be tsv or jsonl, got {spec.data_format!r}", key="data_format")
        return spec.data_format
    suffix = Path(str(spec.data_file)).suffix.lower()
    formats = {".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}
    if suffix not in formats:
        raise AiaynError(
            f"{spec.data_file}: cannot tell the format from {suffix or 'no extension'!r}; use a .tsv or .jsonl name, or {{data_format}}",
            key="data_file",
            mentions=("data_format",),
        )
    return formats[suffix]


@dataclass
class PairStream:
    """A split's sentence pairs as they are read: `chunks` yields (source, target) Arrow arrays;
    `fingerprint()` identifies the content, once every chunk has been read."""

    origin: str
    chunks: Iterator[tuple[pa.Array, pa.Array]]
    fingerprint: Callable[[], str]


__all__ = ["DATA_SOURCES", "PAIR", "DataSpec", "PairStream", "file_format"]
