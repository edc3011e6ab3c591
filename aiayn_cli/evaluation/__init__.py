"""Evaluation: sacreBLEU, chrF, TER and the paper's tokenized BLEU, computed by `evaluate` modules
that ship in `metrics/` and load by path (no network); `scoring` reads files and formats results."""

from .metrics import metric_path
from .scoring import score

__all__ = ["metric_path", "score"]
