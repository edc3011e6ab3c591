"""Decoding (§6.1): the searches (`search`: beam search with GNMT's length penalty, sampling), the
incremental decoder they drive (`incremental`), and `Translator`, which turns text into text
(`translator`) with an engine (`engines`): aiayn's own decoder (`torch_engine`) or CTranslate2
(`ctranslate2_engine`, on the model converted by `ctranslate2_convert`, as `aiayn export` writes
it, and kept in `ctranslate2_cache`). `defaults` declares the decoding options and the limits,
without importing torch."""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

_EXPORTS = {
    "DecodingOptions": ".defaults",
    "Hypothesis": ".search",
    "decode": ".search",
    "Translator": ".translator",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from .defaults import DecodingOptions
    from .search import Hypothesis, decode
    from .translator import Translator

__all__ = ["DecodingOptions", "Hypothesis", "Translator", "decode"]
