"""The attention of one sentence as a picture or table shows it: narrowed, and merged into words.

Rows are queries, columns keys. Encoder self-attention: source tokens x source tokens. Masked
decoder self-attention: the decoder's inputs (`<s>` y_1 .. y_{n-1}) x the same. Encoder-decoder
attention: target tokens y_1 .. y_n (row t is the decoder predicting y_t) x source tokens.

`words=True` merges subword tokens into words: attention *to* a word is the sum over its pieces
(so a row still sums to 1), attention *from* a word the mean over its pieces. `hide_eos=True`
drops `</s>` rows and columns (it soaks up attention, fairseq #4446): the rows then sum to less
than 1, by the weight `</s>` had. Both are stated in `View.notes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import AiaynError
from .extract import KIND_NAMES, Explanation

EOS = "</s>"


@dataclass
class View:
    """Weights `(layers, heads, rows, columns)` with their labels (layers and heads count from 1)."""

    kind: str
    rows: list[str]
    columns: list[str]
    weights: np.ndarray
    layers: list[int]
    heads: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return KIND_NAMES[self.kind]


def check_layer_head(ex: Explanation, kind: str, layer: int | None, head: int | None) -> None:
    """Raise `AiaynError` naming `--layer` / `--head` where they are out of range for this model."""
    layers, heads = len(ex.attentions(kind)), ex.attentions(kind)[0].shape[1]
    if layer is not None and not 1 <= layer <= layers:
        side = "encoder" if kind == "encoder" else "decoder"
        raise AiaynError(f"{layer}: the model's {side} has layers 1 to {layers}", key="layer")
    if head is not None and not 1 <= head <= heads:
        raise AiaynError(f"{head}: the model has heads 1 to {heads}", key="head")


def view(
    ex: Explanation,
    kind: str,
    *,
    layer: int | None = None,
    head: int | None = None,
    mean_heads: bool = False,
    words: bool = False,
    hide_eos: bool = False,
) -> View:
    """One kind of attention of `ex`, narrowed to `layer` and `head` (from 1; None: all), heads
    averaged with `mean_heads`, merged into words and without `</s>` as asked."""
    check_layer_head(ex, kind, layer, head)
    stacked = torch_stack(ex.attentions(kind))  # (L, h, R, C)
    layers = list(range(1, stacked.shape[0] + 1))
    if layer is not None:
        stacked, layers = stacked[layer - 1 : layer], [layer]
    heads = [str(h) for h in range(1, stacked.shape[1] + 1)]
    if head is not None:
        stacked, heads = stacked[:, head - 1 : head], [str(head)]
    if mean_heads:
        stacked, heads = stacked.mean(axis=1, keepdims=True), ["mean of " + ("heads" if head is None else heads[0])]
    row_tokens, row_words, col_tokens, col_words = _labels(ex, kind)
    notes = []
    if words:
        stacked, row_tokens = merge(stacked, row_tokens, row_words, axis=-2, how="mean")
        stacked, col_tokens = merge(stacked, col_tokens, col_words, axis=-1, how="sum")
        notes.append(
            "--words: subwords merged into words (attention to a word: the sum over its pieces; from a word: the mean)"
        )
    if hide_eos:
        keep_rows = [i for i, t in enumerate(row_tokens) if t != EOS]
        keep_cols = [j for j, t in enumerate(col_tokens) if t != EOS]
        stacked = stacked[..., keep_rows, :][..., keep_cols]
        row_tokens, col_tokens = [row_tokens[i] for i in keep_rows], [col_tokens[j] for j in keep_cols]
        notes.append("--hide-eos: </s> left out; rows sum to less than 1 by the weight it had")
    return View(kind, row_tokens, col_tokens, stacked, layers, heads, notes)


def torch_stack(attentions) -> np.ndarray:
    """HF's tuple of `(1, h, R, C)` tensors -> one array `(L, h, R, C)`."""
    return np.stack([a[0].float().numpy() for a in attentions])


def _labels(ex: Explanation, kind: str) -> tuple[list[str], list[int], list[str], list[int]]:
    if kind == "encoder":
        return ex.source_tokens, ex.source_words, ex.source_tokens, ex.source_words
    if kind == "decoder":
        return ex.decoder_input_tokens, ex.decoder_input_words, ex.decoder_input_tokens, ex.decoder_input_words
    return ex.target_tokens, ex.target_words, ex.source_tokens, ex.source_words


def merge(
    weights: np.ndarray, tokens: list[str], words: list[int], axis: int, how: str
) -> tuple[np.ndarray, list[str]]:
    """Merge the tokens along `axis` into their words (`words[i]`: token i's word): sum or mean."""
    count = max(words) + 1
    group = np.zeros((count, len(tokens)), dtype=weights.dtype)  # (words, tokens)
    group[words, np.arange(len(tokens))] = 1.0
    if how == "mean":
        group /= group.sum(axis=1, keepdims=True)
    merged = np.moveaxis(np.moveaxis(weights, axis, -1) @ group.T, -1, axis)
    labels = ["".join(t for t, w in zip(tokens, words) if w == k) for k in range(count)]
    return merged, [word_label(label) for label in labels]


def word_label(pieces: str) -> str:
    """A word's pieces joined, without the Metaspace / byte-level word marks."""
    return pieces.replace("▁", "").replace("Ġ", "") or pieces


__all__ = ["View", "check_layer_head", "merge", "view", "word_label"]
