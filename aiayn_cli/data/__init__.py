"""Parallel data: the one line reader (`lines`), what a data source is (`spec`), corpora from files or
the Hub read in chunks (`corpus`, `text_files`, `cleaning`), the shared BPE vocabulary of §5.1 (`tokenization`), the
token-count batches of §5.1 (`batching`), and data prepared once for every run (`prepare`)."""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

_EXPORTS = {"CleaningReport": ".corpus", "DataSpec": ".spec", "load_split": ".corpus"}
__getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from .corpus import CleaningReport, load_split
    from .spec import DataSpec

__all__ = ["CleaningReport", "DataSpec", "load_split"]
