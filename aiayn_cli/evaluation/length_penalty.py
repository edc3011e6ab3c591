"""Choosing the length penalty on the development set, as the paper did (§6.1).

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 [38]. These
hyperparameters were chosen after experimentation on the development set."

alpha changes nothing in the search itself (`aiayn_cli.decoding.search`): live hypotheses are
ranked by their summed log-probability and a sentence stops when `beam` hypotheses have finished,
whatever alpha is; alpha only decides which finished hypothesis is returned. So one beam search
with `nbest = beam` gives every candidate, and each alpha of a grid re-ranks them by
log p / lp(|Y|): exactly what a search with that alpha returns, for the cost of one search.

A grid is only a guess at where the best alpha lies: where the best of a grid is its largest (or
smallest) alpha, the grid goes on past it with the spacing of its last (first) two alphas, and on
again, until the best alpha has a worse or equal neighbour on each side (`search_alphas`). It stops at
alpha 0 below (lp = 1: no penalty) and at `MAX_ALPHA` above: at alpha 10, GNMT's ((5 + |Y|) / 6)^alpha
divides the log-probability of a 20-token hypothesis by 1.6 million, so the hypotheses are ranked by
their length alone and a larger alpha changes nothing. Each extra alpha costs a re-ranking, not a search. A grid of one alpha is a fixed alpha: nothing is extended.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..decoding.search import length_penalty
from ..errors import AiaynError
from ..files import atomic_open
from .scoring import score

MAX_ALPHA = 10.0  # the grid is never extended past this alpha (see the module's docstring)


def search_alphas(
    alphas: list[float], bleu_of: Callable[[float], float], limit: float = MAX_ALPHA
) -> dict[float, float]:
    """The score `bleu_of(alpha)` of every alpha of the grid `alphas`, then of the alphas past its ends
    while the best (the first of equal scores, in the order tried) is the largest or the smallest tried:
    steps of the grid's outer spacing, never below 0 or above `limit`. alpha -> score, in the order tried."""
    bleu: dict[float, float] = {}
    for alpha in alphas:
        if alpha not in bleu:
            bleu[alpha] = bleu_of(alpha)
    ordered = sorted(bleu)
    if len(ordered) < 2:  # one alpha: a fixed alpha, no grid to extend
        return bleu
    up, down = ordered[-1] - ordered[-2], ordered[1] - ordered[0]
    while True:
        best, tried = max(bleu, key=lambda a: bleu[a]), sorted(bleu)
        if best == tried[-1] and best < limit:
            alpha = min(round(best + up, 6), limit)
        elif best == tried[0] and best > 0:
            alpha = max(round(best - down, 6), 0.0)
        else:
            return bleu
        bleu[alpha] = bleu_of(alpha)


@dataclass
class LengthPenaltyChoice:
    """The alpha with the highest sacreBLEU on the development set, the score of every alpha tried, and
    the translations under the chosen alpha."""

    alpha: float
    bleu: dict[float, float]  # alpha -> sacreBLEU, in the order tried
    num_beams: int
    style: str
    sentences: int
    translations: list[str]
    extended: list[float] = field(default_factory=list)  # the alphas tried past the grid's ends

    def describe(self) -> str:
        tried = ", ".join(f"{alpha:g}: {bleu:.2f}" for alpha, bleu in self.bleu.items())
        at_limit = self.alpha in (0.0, MAX_ALPHA) and self.alpha in self.extended
        extended = (
            f"; the grid extended past its edge to {', '.join(f'{a:g}' for a in self.extended)}"
            + (f", up to its limit {self.alpha:g}" if at_limit else "")
            if self.extended
            else ""
        )
        return (
            f"length penalty alpha {self.alpha:g}, chosen on {self.sentences:,} validation sentences "
            f"(beam {self.num_beams}, {self.style}; sacreBLEU by alpha: {tried}{extended})"
        )


def choose_length_penalty(
    translator,
    sources: list[str],
    references: list[str],
    alphas: list[float],
    max_tokens: int = 4096,
    progress: bool = False,
    source: str = "input",
) -> LengthPenaltyChoice:
    """Decode `sources` once with the model's beam size (`translator`: a `Translator`) and score the
    best hypothesis under each alpha against `references`, the grid extended past its edge while the
    best is there (`search_alphas`); ties go to the alpha tried first.
    `source` names the sentences in warnings (a file or split)."""
    if not alphas:
        raise AiaynError("no alpha to try", key="length_penalty_grid")
    if len(sources) != len(references):
        raise AiaynError(f"{len(sources)} sources but {len(references)} references")
    options = translator.decoding_options()
    beam, style = options.num_beams, options.length_penalty_style
    candidates = translator.hypotheses(sources, max_tokens=max_tokens, nbest=beam, progress=progress, source=source)
    bleu, translations = score_alphas(translator, candidates, references, alphas, style)
    chosen = max(bleu, key=lambda a: bleu[a])  # the first of equal scores
    extended = [a for a in bleu if a not in alphas]
    return LengthPenaltyChoice(chosen, bleu, beam, style, len(sources), translations[chosen], extended)


def score_alphas(
    translator, candidates: list[list], references: list[str], alphas: list[float], style: str = "gnmt"
) -> tuple[dict[float, float], dict[float, list[str]]]:
    """sacreBLEU against `references` of the best of each sentence's `candidates` (a beam search's finished
    hypotheses, `Translator.hypotheses` with `nbest` = beam) under each alpha of the grid `alphas`,
    extended past its edge while the best is there (`search_alphas`): alpha -> BLEU in the order tried,
    and alpha -> the translations."""
    translations: dict[float, list[str]] = {}

    def bleu_of(alpha: float) -> float:
        best = [
            max(hyps, key=lambda h: h.log_prob / length_penalty(len(h.tokens) + 1, alpha, style)) if hyps else None
            for hyps in candidates
        ]
        translations[alpha] = [translator.detokenize(h.tokens) if h is not None else "" for h in best]
        return float(score(translations[alpha], references, metrics=("sacrebleu",))["scores"]["sacrebleu"]["score"])

    return search_alphas(alphas, bleu_of), translations


def save_length_penalty(model_dir: str | Path, alpha: float) -> None:
    """Write `alpha` into the model folder's generation_config.json (the other settings kept)."""
    from transformers import GenerationConfig

    model_dir = Path(model_dir)
    config = GenerationConfig.from_pretrained(model_dir)
    config.length_penalty = alpha
    with atomic_open(model_dir / "generation_config.json") as f:
        f.write(config.to_json_string(use_diff=True))


__all__ = [
    "MAX_ALPHA",
    "LengthPenaltyChoice",
    "choose_length_penalty",
    "save_length_penalty",
    "score_alphas",
    "search_alphas",
]
