"""What `aiayn attention` writes: a text table, JSON, heatmap grids (PNG), alignments.

* text: OpenNMT's `-attn_debug` table, one per kind, layer and head asked for: a row per query
  token (with, for the decoder's rows, the log-probability of the token it predicts), a column
  per key token, the row's largest weight marked `*`;
* json: every token, score and attention tensor (Hugging Face's shapes), for a notebook or
  bertviz (README, "See inside the model");
* bertviz: `bertviz_inputs(explanation)`, the keyword arguments of bertviz's `head_view` and
  `model_view` for one sentence (in a notebook: `model_view(**bertviz_inputs(ex))`);
* png: per sentence and kind, a grid of heatmaps, layers down and heads across, tokens as tick
  labels (one heatmap when narrowed to a layer and a head, or to the mean of the heads);
* align: "i-j" word alignments, one line per sentence.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import AiaynError
from .extract import Explanation
from .views import View

# ---------------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------------


def sentence_header(number: int, ex: Explanation) -> list[str]:
    what = "reference (teacher forcing)" if ex.is_reference else "translation (the model's beam search)"
    return [
        f"sentence {number}: {ex.source}",
        f"{what}: {ex.target}",
        f"log p(target | source) = {ex.log_prob:.4f} over {len(ex.target_ids)} tokens (</s> included); "
        f"score = log p / lp = {ex.score:.4f} ({ex.length_penalty})",
    ]


def text_table(v: View, layer_index: int, head_index: int, log_probs: list[float] | None = None) -> list[str]:
    """One attention matrix as OpenNMT's `-attn_debug` prints it; the row maximum is marked `*`."""
    weights = v.weights[layer_index, head_index]
    width = max([len(c) for c in v.columns] + [6]) + 1
    label = max([len(r) for r in v.rows] + [4])
    lp_column = log_probs is not None
    head = v.heads[head_index] if v.heads[head_index].startswith("mean") else f"head {v.heads[head_index]}"
    lines = [f"{v.title}, layer {v.layers[layer_index]}, {head}" + (f"  [{'; '.join(v.notes)}]" if v.notes else "")]
    lines.append(" " * label + ("   log p" if lp_column else "") + "".join(c.rjust(width) for c in v.columns))
    for r, row in enumerate(weights):
        best = int(np.argmax(row)) if row.size else -1
        cells = "".join((("*" if c == best else "") + f"{w:.3f}").rjust(width) for c, w in enumerate(row))
        lp = f"{log_probs[r]:8.3f}" if lp_column and r < len(log_probs) else ""
        lines.append(v.rows[r].ljust(label) + lp + cells)
    return lines


# ---------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------


def to_json(explanations: list[Explanation], options: dict) -> str:
    """Tokens, scores and every attention tensor: `cross_attentions[layer][0][head][t][s]`, as HF returns them."""

    def tensors(attentions) -> list:
        return [np.round(a.numpy().astype(np.float64), 6).tolist() for a in attentions]

    sentences = []
    for ex in explanations:
        sentences.append(
            {
                "source": ex.source,
                "target": ex.target,
                "is_reference": ex.is_reference,
                "source_tokens": ex.source_tokens,
                "target_tokens": ex.target_tokens,
                "decoder_input_tokens": ex.decoder_input_tokens,
                "source_words": ex.source_words,
                "target_words": ex.target_words,
                "decoder_input_words": ex.decoder_input_words,
                "token_log_probs": ex.token_log_probs,
                "log_prob": ex.log_prob,
                "score": ex.score,
                "length_penalty": ex.length_penalty,
                "encoder_attentions": tensors(ex.encoder_attentions),
                "decoder_attentions": tensors(ex.decoder_attentions),
                "cross_attentions": tensors(ex.cross_attentions),
            }
        )
    layout = (
        "attentions: one list per layer of shape (1, heads, queries, keys); decoder rows: position t reads "
        "decoder_input_tokens[t] and predicts target_tokens[t]"
    )
    return json.dumps({"options": options, "layout": layout, "sentences": sentences}, ensure_ascii=False)


def bertviz_inputs(ex: Explanation) -> dict:
    """One sentence's attention as bertviz's `head_view` / `model_view` take it for an encoder-decoder:
    `encoder_attention`, `decoder_attention`, `cross_attention` (tuples of `(1, h, queries, keys)` tensors,
    one per layer) and `encoder_tokens`, `decoder_tokens`. The decoder's tokens are the ones it reads
    (`<s>` y_1 .. y_(n-1), as Hugging Face's `decoder_input_ids`): position t reads decoder_tokens[t] and
    predicts y_t. bertviz is an optional extra (`pip install aiayn-cli[bertviz]`); this needs none of it.

        from bertviz import model_view
        from aiayn_cli.inspection import bertviz_inputs, explain

        [ex] = explain(model, tokenizer, ["A dog runs."])
        model_view(**bertviz_inputs(ex))
    """
    return {
        "encoder_attention": tuple(ex.encoder_attentions),
        "decoder_attention": tuple(ex.decoder_attentions),
        "cross_attention": tuple(ex.cross_attentions),
        "encoder_tokens": list(ex.source_tokens),
        "decoder_tokens": list(ex.decoder_input_tokens),
    }


# ---------------------------------------------------------------------------------------------
# PNG
# ---------------------------------------------------------------------------------------------


# About 12,000 x 8,000 pixels at 100 dpi (6 layers x 8 heads of 100 tokens fit); matplotlib needs a few
# bytes a pixel for each array it makes while drawing.
MAX_PICTURE_PIXELS = 100_000_000


def _figure_inches(v: View) -> tuple[float, float]:
    """The heatmap grid's width and height in inches."""
    layers, heads, rows, cols = v.weights.shape
    cell = 0.22 if layers == heads == 1 else 0.13  # inches per token: 40 tokens stay legible at 6 x 8 heads
    panel_w, panel_h = max(2.0, cell * cols + 0.3), max(1.6, cell * rows + 0.3)
    label_w = 0.07 * max(len(t) for t in v.rows + [" "]) + 0.8  # the row labels, left of the first column
    label_h = 0.07 * max(len(t) for t in v.columns + [" "]) + 0.8  # the column labels, under the last row
    return label_w + heads * (panel_w + 0.1) + 1.2, label_h + layers * (panel_h + 0.3) + 0.8


def check_picture_size(v: View, path: Path) -> None:
    """Refuse, in one line naming `path`, a heatmap grid too large to draw (matplotlib would take
    gigabytes) or to look at; `heatmap_grid` checks it too, and a report checks every picture before it
    writes anything."""
    fig_w, fig_h = _figure_inches(v)
    if fig_w * fig_h * 100**2 > MAX_PICTURE_PIXELS:
        layers, heads, rows, cols = v.weights.shape
        raise AiaynError(
            f"{path.name}: {layers} x {heads} heatmaps of {rows} x {cols} tokens make a picture of "
            f"{fig_w * 100:,.0f} x {fig_h * 100:,.0f} pixels, too large to draw or look at: choose a {{layer}} "
            "and a {head}, a shorter sentence, or {formats} json or html",
            mentions=("layer", "head", "formats"),
        )


def heatmap_grid(v: View, title: str, path: Path) -> None:
    """A grid of heatmaps (layers down, heads across) with the tokens as tick labels, saved as PNG."""
    check_picture_size(v, path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, heads, rows, cols = v.weights.shape
    single = layers == 1 and heads == 1
    fig_w, fig_h = _figure_inches(v)
    fig, axes = plt.subplots(layers, heads, figsize=(fig_w, fig_h), squeeze=False, dpi=100, layout="constrained")
    font = 9 if single else 7
    for li in range(layers):
        for hi in range(heads):
            ax = axes[li][hi]
            image = ax.imshow(
                v.weights[li, hi], cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest"
            )
            head = v.heads[hi] if v.heads[hi].startswith("mean") else f"head {v.heads[hi]}"
            ax.set_title(f"layer {v.layers[li]}, {head}", fontsize=font + 1)
            ax.set_xticks(range(cols))
            ax.set_yticks(range(rows))
            ax.set_xticklabels(v.columns if li == layers - 1 else [], rotation=90, fontsize=font)
            ax.set_yticklabels(v.rows if hi == 0 else [], fontsize=font)
            ax.tick_params(length=0)
    query, key = AXES[v.kind]
    fig.supxlabel(f"key: {key} (attended to)", fontsize=font + 2)
    fig.supylabel(f"query: {query} (attending)", fontsize=font + 2)
    fig.suptitle(title, fontsize=font + 3)
    fig.colorbar(image, ax=axes, shrink=min(1.0, 4.0 / fig_h + 0.3), label="attention weight (0 to 1)")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


AXES = {
    "encoder": ("source token", "source token"),
    "decoder": ("decoder input token", "decoder input token"),
    "cross": ("target token being predicted", "source token"),
}

__all__ = ["bertviz_inputs", "check_picture_size", "heatmap_grid", "sentence_header", "text_table", "to_json"]
