"""Which model a run ends with (§6.1): the last checkpoint, the best one, or an average of the last k,
whichever is best on the validation split.

"[...] for the base models, we used a single model obtained by averaging the last 5 checkpoints" (§6.1):
after 100,000 steps the last checkpoints lie close together on a decayed learning rate, and their mean
is a better model than any of them. In a run of minutes they may not: a quickstart stopped early by a
busy machine averaged checkpoints 111, 205 and 222, all still in the warmup, and scored 24 validation
BLEU where its last checkpoint scored 53. So the end of a run compares, on validation only:

- the last checkpoint;
- the best single checkpoint (`best_metric`, as the run recorded it), where it is not the last;
- the average of the last k checkpoints, k = 2..N, taking only checkpoints of the decayed tail: those
  saved after the last step at which the recorded learning rate was at its peak (the end of the
  warmup for `noam` and `inverse_sqrt`, the start of the cooldown for `lr_cooldown`). Where the rate
  never fell (a constant rate without cooldown) or none was recorded, every checkpoint is of the tail.

Each candidate is scored as validation scores a checkpoint during the run (`evaluate`, the caller's):
BLEU on the run's fixed validation sample with its validation decoding (`valid_beam_size`), and the
loss on the whole split. With `average_choose_by: sample` the run's `best_metric` decides (BLEU, or the
loss where the run has no BLEU sample), the loss breaks ties: the measure that chose the best
checkpoint chooses among the candidates, so the chosen model is never worse on it than the best
single checkpoint. But a user runs the model with its beam and its alpha, and a greedy sample of 200
sentences can rank close candidates otherwise: on four CPU hours of the Multi30k recipe, the sample's
choice was the beam's best in one (docs/train.md, the end-choice table). With `average_choose_by: beam`
(`with_beam_bleu`) each candidate also translates the whole split with the model's beam, once, and
every alpha of the length-penalty grid re-ranks its hypotheses (`evaluation/length_penalty.py`): the
candidate and alpha with the best BLEU win, the loss breaking ties. It costs one beam search per
candidate: about a minute in all for the CPU hour's end on 2 cores, about twice the sample's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AiaynError
from .checkpoint import average_checkpoints, checkpoint_step


@dataclass(frozen=True)
class Candidate:
    """A model the run may end with: the mean of `checkpoints` (one checkpoint: that checkpoint)."""

    name: str  # "last", "best", "average of the last 3"
    checkpoints: tuple[Path, ...]

    @property
    def steps(self) -> str:
        return ", ".join(str(checkpoint_step(p)) for p in self.checkpoints)


@dataclass
class Selection:
    """The candidate chosen, the scores of all of them, and the rules that made the list."""

    chosen: Candidate
    candidates: list[Candidate]
    scores: dict[str, dict[str, Any]]  # candidate name -> its validation metrics (and, by beam, its alphas)
    metric: str  # "valid/beam_bleu" or "valid/bleu" (higher is better), or "valid/loss" (lower)
    tail_rule: str

    def describe(self) -> str:
        """One line: what was chosen, on what, against what."""

        def shown(name: str) -> str:
            scores = self.scores[name]
            main = {
                "valid/beam_bleu": f"BLEU {scores.get('valid/beam_bleu', 0.0):.2f} at alpha {scores.get('length_penalty', 0.0):g}",
                "valid/bleu": f"BLEU {scores.get('valid/bleu', 0.0):.2f}",
            }.get(self.metric, "")
            loss = f"loss {scores['valid/loss']:.4f}"
            return f"{main}, {loss}" if main else loss

        chosen = self.chosen
        others = "; ".join(f"{c.name} ({c.steps}): {shown(c.name)}" for c in self.candidates if c != chosen)
        what = {
            "valid/beam_bleu": "BLEU of the model's beam on the whole validation split at its best alpha, then loss",
            "valid/bleu": "BLEU on the validation sample, then loss",
        }.get(self.metric, "validation loss")
        return (
            f"final model: {chosen.name} (checkpoint steps {chosen.steps}), validation {shown(chosen.name)}; "
            f"chosen by {what} among {len(self.candidates)} candidates"
            + (f" (others: {others})" if others else "")
            + f"; averaged only: {self.tail_rule}"
        )

    def record(self) -> dict[str, Any]:
        """The choice as JSON: for metrics.jsonl and the model's averaged_from.json."""
        return {
            "chosen": self.chosen.name,
            "checkpoints": [p.name for p in self.chosen.checkpoints],
            "metric": self.metric,
            "scores": {
                c.name: {"checkpoints": [p.name for p in c.checkpoints], **self.scores[c.name]} for c in self.candidates
            },
            "tail_rule": self.tail_rule,
        }


def decayed_tail(checkpoints: list[Path], records: list[dict[str, Any]]) -> tuple[list[Path], str]:
    """The checkpoints saved after the last step at which the learning rate in `records` (metrics.jsonl's,
    with "step" and "lr") was at its peak; all of them where the rate never fell or none was recorded.
    Also the rule, in words."""
    rates = [(int(r["step"]), float(r["lr"])) for r in records if "lr" in r and "step" in r]
    if not rates:
        return list(checkpoints), "checkpoints of any step (no learning rate recorded)"
    peak = max(lr for _, lr in rates)
    peak_step = max(step for step, lr in rates if lr >= peak * (1 - 1e-6))
    if peak_step >= max(step for step, _ in rates):
        return list(checkpoints), "checkpoints of any step (the learning rate never fell)"
    tail = [p for p in checkpoints if (checkpoint_step(p) or 0) > peak_step]
    return tail, f"checkpoints after step {peak_step}, the last at the peak learning rate"


def candidates(checkpoints: list[Path], best: Path | None, tail: list[Path], last: int) -> list[Candidate]:
    """The last checkpoint, the best one (unless it is the last), and the averages of the last k of
    `checkpoints` for k = 2..`last` while all k are in `tail`. `checkpoints` oldest first."""
    if not checkpoints:
        raise AiaynError("average: no checkpoints to choose from")
    newest = checkpoints[-1]
    found = [Candidate("last", (newest,))]
    if best is not None and best.resolve() != newest.resolve():
        found.append(Candidate("best", (best,)))
    in_tail = {p.resolve() for p in tail}
    for k in range(2, min(last, len(checkpoints)) + 1):
        chosen = tuple(checkpoints[-k:])
        if not all(p.resolve() in in_tail for p in chosen):
            break
        found.append(Candidate(f"average of the last {k}", chosen))
    return found


def choose(found: list[Candidate], model, evaluate: Callable[[Any], dict[str, Any]], tail_rule: str) -> Selection:
    """Score every candidate with `evaluate(model)` after loading its weights into `model` (a model of the
    checkpoints' shape, on its device); the best by the beam's BLEU on the whole split where every score
    has one (`with_beam_bleu`), else by validation BLEU where every score has one, else by loss; the loss
    breaks ties, then the order of `found`."""
    scores: dict[str, dict[str, Any]] = {}
    for candidate in found:
        weights = average_checkpoints(list(candidate.checkpoints))
        _, unexpected = model.load_state_dict(weights, strict=False)  # tied copies are not saved
        if unexpected:
            raise AiaynError(
                f"average: {candidate.checkpoints[-1]} holds tensors the model does not have (e.g. '{unexpected[0]}')"
            )
        model.tie_weights()
        scores[candidate.name] = dict(evaluate(model))
    metric = next((m for m in ("valid/beam_bleu", "valid/bleu") if all(m in s for s in scores.values())), "valid/loss")

    def rank(candidate: Candidate) -> tuple[float, float]:
        s = scores[candidate.name]
        loss = round(s["valid/loss"], 6)
        return (round(s[metric], 6), -loss) if metric != "valid/loss" else (-loss, -loss)

    best = max(found, key=rank)  # the first of equals
    return Selection(best, found, scores, metric, tail_rule)


def with_beam_bleu(
    evaluate: Callable[[Any], dict[str, float]],
    tokenizer,
    sources: list[str],
    references: list[str],
    alphas: list[float] | None,
    accelerator,
    max_tokens: int = 4096,
) -> Callable[[Any], dict[str, Any]]:
    """`evaluate`, and sacreBLEU on the whole validation split (`sources`, `references`) translated as
    `aiayn translate` translates by default (the model's beam, fp32), under the best of
    `alphas` (the model's own alpha where None): one beam search re-ranked per alpha, the grid extended
    past its edge while the best is there (`evaluation/length_penalty.py`). Adds "valid/beam_bleu",
    "length_penalty", "length_penalty_bleu" (alpha -> BLEU) and "length_penalty_extended". One process
    only: a two-process run that decoded on its main process while the other waited once hung at its
    exit (in the gloo group's teardown), so a run of several chooses by the sample (`finish.py`)."""
    from ..decoding.translator import Translator
    from ..evaluation.length_penalty import choose_length_penalty

    if accelerator.num_processes > 1:
        raise AiaynError("average_choose_by: beam runs in one process; choose by the sample under accelerate launch")

    def evaluate_with_beam(model) -> dict[str, Any]:
        # a copy: the translator makes its model its own (eval mode, projections prepared from its weights)
        translator = Translator(copy.deepcopy(model), tokenizer, device=accelerator.device)
        grid = list(alphas) if alphas else [translator.decoding_options().length_penalty]
        choice = choose_length_penalty(
            translator, sources, references, grid, max_tokens=max_tokens, source="the validation split"
        )
        return {
            **evaluate(model),
            "valid/beam_bleu": choice.bleu[choice.alpha],
            "length_penalty": choice.alpha,
            "length_penalty_bleu": {f"{a:g}": b for a, b in choice.bleu.items()},
            "length_penalty_extended": choice.extended,
        }

    return evaluate_with_beam


def select_final_model(
    checkpoints: list[Path],
    last: int,
    best: Path | None,
    metrics_path: Path,
    evaluate: Callable[[Any], dict[str, Any]],
    accelerator,
) -> Selection:
    """Choose among the last checkpoint, `best` and the averages of the last k <= `last` of `checkpoints`
    (oldest first) of the decayed tail, as the learning rates in `metrics_path` (metrics.jsonl) tell.
    Every process calls this (`evaluate` may be collective); the main process reads the learning rates.

    Args:
        evaluate: validation of a model (the run's: loss on the whole split, BLEU on its sample).
    """
    from accelerate.utils import broadcast_object_list

    from ..model.modeling_aiayn import AiaynForConditionalGeneration
    from .curves import read_metrics

    shared: list[Any] = [None]
    if accelerator.is_main_process:
        shared = [decayed_tail(checkpoints, read_metrics(metrics_path))]
    if accelerator.num_processes > 1:
        broadcast_object_list(shared)
    tail, rule = shared[0]
    found = candidates(checkpoints, best, tail, last)
    model = AiaynForConditionalGeneration.from_pretrained(checkpoints[-1]).to(accelerator.device)
    return choose(found, model, evaluate, rule)


def select_in_run_folder(run_dir: Path, last: int, data_dir: str | None = None, by: str | None = None) -> Selection:
    """`aiayn average --choose`: the choice a run's end makes (`select_final_model`), from its folder alone:
    its recipe.yaml (validation split, sample, decoding, precision, `average_choose_by`), the newest checkpoint's tokenizer,
    its metrics.jsonl (the learning rates) and its best checkpoint; `data_dir` replaces the recipe's data
    folder (a run trained elsewhere); `by` replaces its `average_choose_by`."""
    from ..data.tokenization import load_tokenizer
    from .accelerator import make_accelerator
    from .checkpoint import list_checkpoints
    from .recipe import load_recipe
    from .run_folder import METRICS_FILE, RECIPE_FILE, TrainState
    from .validation import evaluate_model, load_validation

    checkpoints = list_checkpoints(run_dir)
    if not checkpoints:
        raise AiaynError(f"{run_dir} holds no checkpoints (checkpoint-<step> folders)")
    if not (run_dir / RECIPE_FILE).is_file():
        raise AiaynError(f"--choose: {run_dir} holds no {RECIPE_FILE} (not a run folder of `aiayn train`)")
    overrides: dict[str, Any] = {"trackers": []}
    if data_dir is not None:
        overrides.update({"data.data_dir": data_dir, "data.dataset": None})
    if by is not None:
        overrides["average_choose_by"] = by
    recipe = load_recipe(run_dir / RECIPE_FILE, overrides, flags={"data.data_dir": "--data-dir"})
    if not recipe.valid_split:
        raise AiaynError(f"--choose: {run_dir / RECIPE_FILE} has no validation split (valid_split: null) to choose on")
    state = TrainState.from_checkpoint(checkpoints[-1])
    best = run_dir / f"checkpoint-{state.best_step}" if state.best_step else None
    tokenizer = load_tokenizer(str(checkpoints[-1]))
    accelerator = make_accelerator(recipe)
    valid = load_validation(recipe, tokenizer, accelerator)

    def evaluate(model) -> dict[str, Any]:
        return evaluate_model(
            model, recipe, tokenizer, valid.loader, valid.bleu_sources, valid.bleu_references, accelerator
        )

    if recipe.average_choose_by == "beam":
        evaluate = with_beam_bleu(
            evaluate,
            tokenizer,
            valid.sources,
            valid.references,
            recipe.length_penalty_grid,
            accelerator,
            recipe.valid_max_tokens or recipe.max_tokens,
        )
    best = best if best is not None and best.is_dir() else None
    return select_final_model(checkpoints, last, best, run_dir / METRICS_FILE, evaluate, accelerator)


__all__ = [
    "Candidate",
    "Selection",
    "candidates",
    "choose",
    "decayed_tail",
    "select_final_model",
    "select_in_run_folder",
    "with_beam_bleu",
]
