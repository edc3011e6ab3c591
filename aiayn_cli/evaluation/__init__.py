"""Evaluation: sacreBLEU, chrF, TER and the paper's tokenized BLEU, computed by `evaluate` modules
that ship in `metrics/` and load by path (no network); `scoring` reads files and formats results."""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

_EXPORTS = {"metric_path": ".metrics", "score": ".scoring"}
__getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from .metrics import metric_path
    from .scoring import score

__all__ = ["metric_path", "score"]
