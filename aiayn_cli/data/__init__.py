"""Parallel data: the one line reader (`lines`), corpora from files or the Hub read in chunks
(`corpus`, `text_files`, `cleaning`), the shared BPE vocabulary of §5.1 (`tokenization`), the
token-count batches of §5.1 (`batching`), and data prepared once for every run (`prepare`)."""

from .corpus import CleaningReport, DataSpec, load_split

__all__ = ["CleaningReport", "DataSpec", "load_split"]
