"""Parallel data: corpora from files or the Hub (`corpus`), the shared BPE vocabulary of §5.1
(`tokenization`), and the token-count batches of §5.1 (`batching`)."""

from .corpus import CleaningReport, DataSpec, load_split

__all__ = ["CleaningReport", "DataSpec", "load_split"]
