"""Choosing the length penalty on the development set, as the paper did (§6.1).

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 [38]. These
hyperparameters were chosen after experimentation on the development set."

alpha changes nothing in the search itself (`aiayn_cli.decoding.search`): live hypotheses are
ranked by their summed log-probability and a sentence stops when `beam` hypotheses have finished,
whatever alpha is; alpha only decides which finished hypothesis is returned. So one beam search
with `nbest = beam` gives every candidate, and each alpha of a grid re-ranks them by
log p / lp(|Y|): exactly what a search with that alpha returns, for the cost of one search.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..decoding.search import length_penalty
from ..errors import AiaynError
from ..files import atomic_open
from .scoring import score


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

    def describe(self) -> str:
        tried = ", ".join(f"{alpha:g}: {bleu:.2f}" for alpha, bleu in self.bleu.items())
        return (
            f"length penalty alpha {self.alpha:g}, chosen on {self.sentences:,} validation sentences "
            f"(beam {self.num_beams}, {self.style}; sacreBLEU by alpha: {tried})"
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
    best hypothesis under each alpha against `references`; ties go to the alpha listed first.
    `source` names the sentences in warnings (a file or split)."""
    if not alphas:
        raise AiaynError("no alpha to try", key="length_penalty_grid")
    if len(sources) != len(references):
        raise AiaynError(f"{len(sources)} sources but {len(references)} references")
    options = translator.decoding_options()
    beam, style = options.num_beams, options.length_penalty_style
    candidates = translator.hypotheses(sources, max_tokens=max_tokens, nbest=beam, progress=progress, source=source)
    bleu: dict[float, float] = {}
    translations: dict[float, list[str]] = {}
    for alpha in alphas:
        best = [
            max(hyps, key=lambda h: h.log_prob / length_penalty(len(h.tokens) + 1, alpha, style)) if hyps else None
            for hyps in candidates
        ]
        translations[alpha] = [translator.detokenize(h.tokens) if h is not None else "" for h in best]
        sacrebleu = score(translations[alpha], references, metrics=("sacrebleu",))["scores"]["sacrebleu"]
        bleu[alpha] = float(sacrebleu["score"])
    chosen = max(bleu, key=lambda a: bleu[a])  # the first of equal scores
    return LengthPenaltyChoice(chosen, bleu, beam, style, len(sources), translations[chosen])


def save_length_penalty(model_dir: str | Path, alpha: float) -> None:
    """Write `alpha` into the model folder's generation_config.json (the other settings kept)."""
    from transformers import GenerationConfig

    model_dir = Path(model_dir)
    config = GenerationConfig.from_pretrained(model_dir)
    config.length_penalty = alpha
    with atomic_open(model_dir / "generation_config.json") as f:
        f.write(config.to_json_string(use_diff=True))


__all__ = ["LengthPenaltyChoice", "choose_length_penalty", "save_length_penalty"]
