"""Decoding (§6.1): the searches (`search`: beam search with GNMT's length penalty, sampling), the
incremental decoder they drive (`incremental`), and `Translator`, which turns text into text
(`translator`)."""

from .search import DecodingOptions, Hypothesis, decode
from .translator import Translator

__all__ = ["DecodingOptions", "Hypothesis", "Translator", "decode"]
