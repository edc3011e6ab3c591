"""The attention explorer: one self-contained HTML file (script, style and data inline; no network).

For a batch of sentences the reader chooses the sentence, the kind of attention, the layer and
the head, sees every head of the layer as thumbnails, clicks a token to see where it attends
(lines and shading, as bertviz's head view), and follows equation (1) for that token and head with
the model's own numbers: q.k against every key (from the layer's own projections, captured
while the model ran), divided by sqrt(d_k), the softmax (equal to the drawn row), and the largest
contributions weight x |v| to the weighted sum of values. Masked positions are shown as masked.
The page itself is `explorer.html` beside this module: the explorer's parts (`explorer_view.html`,
its elements; `explorer.css`; `explorer.js`, which draws the data) and the data replace its
placeholders. `aiayn serve`'s page inlines the same three parts for its "look inside" view, which
draws what `/v1/attention` answers (`explorer_data`): the same code and look.
"""

from __future__ import annotations

import json
import math
from importlib import resources

from .extract import KINDS, Explanation

PLACEHOLDER = "/*AIAYN_DATA*/"
PARTS = {"css": "/*AIAYN_EXPLORER_CSS*/", "view": "<!--AIAYN_EXPLORER_VIEW-->", "js": "/*AIAYN_EXPLORER_JS*/"}


def explorer_parts() -> dict[str, str]:
    """The explorer's style, elements and script: {"css", "view", "js"}, for a page to inline."""
    files = {"css": "explorer.css", "view": "explorer_view.html", "js": "explorer.js"}
    return {
        part: resources.files(__package__).joinpath(name).read_text(encoding="utf-8") for part, name in files.items()
    }


def with_explorer(page: str) -> str:
    """`page` with the explorer's parts in place of its placeholders (`PARTS`)."""
    for part, text in explorer_parts().items():
        page = page.replace(PARTS[part], text)
    return page


def explorer_data(explanations: list[Explanation], notes: list[str] | None = None) -> dict:
    """What the explorer draws: {"about", "d_k", "sentences"} (the page's data, /v1/attention's answer)."""
    return {
        "about": "Vaswani et al. (2017), §3.2: the three kinds of attention of a trained model. "
        "Weights are eq. (1)'s softmax of the model's own q.k (captured while it ran), computed from the "
        "scores shown, so that the numbers printed are the ones drawn; rows are queries, columns keys. "
        "Decoder position t reads the token before y_t and predicts y_t." + "".join(" " + note for note in notes or []),
        "d_k": explanations[0].d_k if explanations else 0,
        "sentences": [_sentence(ex, explanations[0].d_k) for ex in explanations],
    }


def explorer_html(explanations: list[Explanation], notes: list[str] | None = None) -> str:
    """The explorer page for `explanations` (from `explain`, with their raw scores); `notes` are
    shown under the title."""
    page = resources.files(__package__).joinpath("explorer.html").read_text(encoding="utf-8")
    payload = json.dumps(explorer_data(explanations, notes), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    payload = payload.replace("</", "<\\/")  # nothing in the data can close the script element
    return with_explorer(page).replace(PLACEHOLDER, payload)


def _sentence(ex: Explanation, d_k: int) -> dict:
    scores = {kind: [_rounded(s, 6) for s in ex.raw_scores[kind]] for kind in KINDS}  # q.k, null where masked
    return {
        "source": ex.source,
        "target": ex.target,
        "is_reference": ex.is_reference,
        "source_tokens": ex.source_tokens,
        "target_tokens": ex.target_tokens,
        "decoder_input_tokens": ex.decoder_input_tokens,
        "token_log_probs": [round(x, 4) for x in ex.token_log_probs],
        "log_prob": ex.log_prob,
        "score": ex.score,
        "length_penalty": ex.length_penalty,
        "kinds": {
            kind: {
                # [layer][head][query][key]: the softmax of the scores below, as the page computes it (the
                # model's own weights to 1e-5 in fp32; in bf16 the model rounded its softmax, the page does not)
                "attention": _softmax(scores[kind], d_k),
                "scores": scores[kind],
                "value_norms": [_rounded(v, 3) for v in ex.value_norms[kind]],  # [layer][head][key]
            }
            for kind in KINDS
        },
    }


def _softmax(scores: list, d_k: int) -> list:
    """Eq. (1)'s softmax(q.k / sqrt(d_k)) over the last level of nested lists of scores (None: masked),
    in float64, in the order of operations of explorer.js's `softmax`; rounded to 5 decimals."""
    if scores and isinstance(scores[0], list):
        return [_softmax(row, d_k) for row in scores]
    root = math.sqrt(d_k)
    scaled = [None if x is None else x / root for x in scores]
    top = max((x for x in scaled if x is not None), default=0.0)
    exps = [0.0 if x is None else math.exp(x - top) for x in scaled]
    total = sum(exps)
    return [round(e / total, 5) if total > 0 else 0.0 for e in exps]


def _rounded(tensor, digits: int) -> list:
    """Nested lists of floats rounded to `digits` decimals; -inf (a masked score) becomes null."""

    def walk(x):
        if isinstance(x, list):
            return [walk(y) for y in x]
        return None if math.isinf(x) else round(x, digits)

    return walk(tensor.float().tolist())


__all__ = ["explorer_data", "explorer_html", "explorer_parts", "with_explorer"]
