"""Cleaning parallel data: counted, reported, never silent (see `corpus` for the rules).

`clean_chunks` cleans a `PairStream` chunk by chunk (whitespace, empty sides, `max_length`,
`max_ratio`); `finish_cleaning` does what needs the whole split (`dedup`) and the last counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm

from ..errors import AiaynError

if TYPE_CHECKING:
    from .spec import DataSpec, PairStream


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


# ---------------------------------------------------------------------------------------------
# Cleaning: counted, reported, never silent
# ---------------------------------------------------------------------------------------------


def new_report(spec: DataSpec, origin: str, split: str) -> CleaningReport:
    return CleaningReport(origin=origin, split=split, limits=limits(spec))


def limits(spec: DataSpec) -> dict[str, Any]:
    return {"max_length": spec.max_length, "max_ratio": spec.max_ratio, "dedup": spec.dedup}


def clean_chunks(
    stream: PairStream, spec: DataSpec, report: CleaningReport, show_progress: bool = False
) -> Iterator[pa.Table]:
    """Each chunk of `stream`, cleaned (all but `dedup`): tables of `source`, `target` and `changed`
    (whitespace was stripped), counted in `report`. `finish_cleaning` does the rest."""
    with tqdm(
        desc=f"Reading {report.split}", unit=" pairs", unit_scale=True, disable=None if show_progress else True
    ) as bar:
        for source, target in stream.chunks:
            yield _clean_chunk(source, target, spec, report)
            bar.update(len(source))


def _clean_chunk(source: pa.Array, target: pa.Array, spec: DataSpec, report: CleaningReport) -> pa.Table:
    report.read += len(source)
    source, target = (pc.fill_null(_combine(side), "") for side in (source, target))
    stripped_source, stripped_target = pc.utf8_trim_whitespace(source), pc.utf8_trim_whitespace(target)
    changed = pc.or_(pc.not_equal(source, stripped_source), pc.not_equal(target, stripped_target))
    source, target = stripped_source, stripped_target

    keep = pc.and_(pc.greater(pc.utf8_length(source), 0), pc.greater(pc.utf8_length(target), 0))
    report.empty += _count_false(keep)
    if spec.max_length is not None or spec.max_ratio is not None:
        source_words = pc.list_value_length(pc.utf8_split_whitespace(source))
        target_words = pc.list_value_length(pc.utf8_split_whitespace(target))
    if spec.max_length is not None:
        fits = pc.and_(pc.less_equal(source_words, spec.max_length), pc.less_equal(target_words, spec.max_length))
        dropped, keep = _drop(keep, fits)
        report.too_long += dropped
    if spec.max_ratio is not None:
        longer = pc.max_element_wise(source_words, target_words)
        shorter = pc.min_element_wise(source_words, target_words)
        ratio_ok = pc.less_equal(longer, pc.multiply(pc.cast(shorter, pa.float64()), spec.max_ratio))
        dropped, keep = _drop(keep, ratio_ok)
        report.bad_ratio += dropped
    return pa.table({"source": source, "target": target, "changed": changed}).filter(keep)


def finish_cleaning(table: pa.Table, spec: DataSpec, report: CleaningReport) -> pa.Table:
    """The cleaned chunks, joined: repeats dropped (`dedup`), `stripped` counted, `changed` removed."""
    if spec.dedup:
        index = pa.array(np.arange(table.num_rows, dtype=np.int64))
        keyed = table.select(["source", "target"]).append_column("i", index)
        first = keyed.group_by(["source", "target"], use_threads=False).aggregate([("i", "min")]).column("i_min")
        keep = pc.is_in(index, value_set=first.combine_chunks())
        report.duplicates = _count_false(keep)
        table = table.filter(keep)
    report.stripped = pc.sum(pc.cast(table.column("changed"), pa.int64())).as_py() or 0
    table = table.drop_columns(["changed"])
    if table.num_rows == 0:
        raise AiaynError(f"{report.origin}: no sentence pairs left in {report.split} after cleaning ({report})")
    return table


def concat_chunks(chunks: list[pa.Table]) -> pa.Table:
    if not chunks:
        return pa.table(
            {
                "source": pa.array([], pa.string()),
                "target": pa.array([], pa.string()),
                "changed": pa.array([], pa.bool_()),
            }
        )
    return pa.concat_tables(chunks, promote_options="permissive")


def _combine(values) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _count_false(mask: pa.Array) -> int:
    return len(mask) - (pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)


def _drop(keep: pa.Array, condition: pa.Array) -> tuple[int, pa.Array]:
    """Pairs still kept that fail `condition`, and the mask without them."""
    new_keep = pc.and_(keep, pc.fill_null(condition, False))
    return _count_false(new_keep) - _count_false(keep), new_keep


__all__ = ["CleaningReport", "clean_chunks", "concat_chunks", "finish_cleaning", "limits", "new_report"]
