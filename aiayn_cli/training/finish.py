"""The end of a run (phase 6 of `training.py`, §6.1): the final model (the last checkpoint, the best one
or an average of the last ones, chosen on the validation split: `selection.py`), and the length penalty
chosen on the validation split."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ..evaluation import length_penalty
from ..model.modeling_aiayn import AiaynForConditionalGeneration
from .checkpoint import list_checkpoints, write_averaged_checkpoint
from .heartbeat import whole_write
from .loop import RunContext
from .selection import select_final_model, with_beam_bleu


@dataclass
class FinalModel:
    """The model a run ends with (`averaged/`), its validation scores, and whether its length penalty
    was chosen with it (then `length_penalty` describes the choice on the main process)."""

    folder: Path
    valid: dict[str, float]
    alpha_chosen: bool = False
    length_penalty: str | None = None


def average_last_checkpoints(run: RunContext, last: int, choose: bool = True, by: str = "sample") -> FinalModel:
    """The run's final model into `averaged/` (§6.1): with `choose` and a validation split, the best on
    validation of the last checkpoint, the best one and the averages of the last k <= `last` of the
    decayed tail (`selection.py`, compared `by` the run's validation sample or by the beam on the whole
    split); else the plain average of the last `last` checkpoints. Also, where the choice was made by
    the beam with the recipe's length-penalty grid, the alpha chosen with the model, described (it is in
    `averaged/generation_config.json`)."""
    accelerator, recipe = run.accelerator, run.recipe
    checkpoints = list_checkpoints(run.output)
    paths, details, metrics, chosen = checkpoints[-last:], {}, {}, {}
    if choose and run.data.valid_loader is not None:
        best = run.output / f"checkpoint-{run.state.best_step}" if run.state.best_step else None
        evaluate = run.evaluate
        if by == "beam" and accelerator.num_processes > 1:  # a two-process run once hung at its exit this way
            _say(accelerator, "average_choose_by: beam runs in one process: this run of several chooses by the "
                 "sample; `aiayn average --choose --choose-by beam` makes the beam's choice after it")  # fmt: skip
            by = "sample"
        if by == "beam" and run.data.valid_sources:
            max_tokens = recipe.valid_max_tokens or recipe.max_tokens
            sources, references = run.data.valid_sources, run.data.valid_references
            grid = recipe.length_penalty_grid
            evaluate = with_beam_bleu(evaluate, run.tokenizer, sources, references, grid, accelerator, max_tokens)
        selection = select_final_model(
            checkpoints,
            last,
            best if best is not None and best.is_dir() else None,
            run.metrics.path,
            evaluate,
            accelerator,
        )
        paths, details = list(selection.chosen.checkpoints), {"selection": selection.record()}
        chosen = selection.scores[selection.chosen.name]
        metrics = {f"averaged/{k}": v for k, v in chosen.items() if isinstance(v, float) and k.startswith("valid/")}
        run.metrics.write({"step": run.state.step, **details})
        _say(accelerator, selection.describe())
    averaged = run.output / "averaged"
    if accelerator.is_main_process:
        with whole_write():
            write_averaged_checkpoint(paths, averaged, overwrite=True, details=details)  # the run's own average
    alpha_chosen = "length_penalty" in chosen and bool(recipe.length_penalty_grid)  # the same on every process
    alpha_line = _save_length_penalty(run, averaged, chosen) if alpha_chosen else None
    accelerator.wait_for_everyone()
    if run.data.valid_loader is not None:
        if not metrics:
            model = AiaynForConditionalGeneration.from_pretrained(averaged).to(accelerator.device)
            metrics = {f"averaged/{k}": v for k, v in run.evaluate(model).items()}
            shown = ", ".join(f"{k.split('/')[-1]} {v:.3f}" for k, v in metrics.items())
            _say(accelerator, f"average of the last {len(paths)} checkpoints (not chosen): validation {shown}")
        run.metrics.write({"step": run.state.step, **metrics, "averaged_from": [p.name for p in paths]})
        accelerator.log(metrics, step=run.state.step)
    elif choose:
        _say(accelerator, f"average of the last {len(paths)} checkpoints, not chosen: the run has no validation split")
    return FinalModel(averaged, metrics, alpha_chosen, alpha_line)


def _say(accelerator, line: str) -> None:
    if accelerator.is_main_process:
        print(line, file=sys.stderr, flush=True)


def choose_length_penalty(run: RunContext, model_dir: Path) -> str | None:
    """§6.1: the length penalty of the recipe's grid with the best BLEU on the whole validation split,
    written into `model_dir`'s generation_config.json (the main process decodes); the choice,
    described (None on the other processes)."""
    from ..decoding.translator import Translator

    accelerator, described = run.accelerator, None
    if accelerator.is_main_process:
        model = AiaynForConditionalGeneration.from_pretrained(model_dir).to(accelerator.device)
        translator = Translator(model, run.tokenizer, device=accelerator.device)  # as `translate` by default
        choice = length_penalty.choose_length_penalty(
            translator,
            run.data.valid_sources,
            run.data.valid_references,
            list(run.recipe.length_penalty_grid),
            max_tokens=run.recipe.valid_max_tokens or run.recipe.max_tokens,
        )
        scores = {
            "length_penalty": choice.alpha,
            "length_penalty_bleu": {f"{a:g}": b for a, b in choice.bleu.items()},
            "length_penalty_extended": choice.extended,
        }
        described = _save_length_penalty(run, model_dir, scores, choice.describe())
    accelerator.wait_for_everyone()
    return described


def _save_length_penalty(run: RunContext, model_dir: Path, scores: dict, described: str | None = None) -> str | None:
    """The main process writes the alpha of `scores` (a length-penalty choice: "length_penalty",
    "length_penalty_bleu", "length_penalty_extended") into `model_dir`'s generation_config.json and
    records it in metrics.jsonl; the choice, `described` (by default: chosen with the model), or None
    on the other processes."""
    if not run.accelerator.is_main_process:
        return None
    alpha, extended = scores["length_penalty"], scores["length_penalty_extended"]
    length_penalty.save_length_penalty(model_dir, alpha)
    record = {key: scores[key] for key in ("length_penalty", "length_penalty_bleu", "length_penalty_extended")}
    run.metrics.write({"step": run.state.step, **record, "length_penalty_model": model_dir.name})
    if described is None:
        tried = ", ".join(f"{a}: {b:.2f}" for a, b in scores["length_penalty_bleu"].items())
        past = f"; the grid extended past its edge to {', '.join(f'{a:g}' for a in extended)}" if extended else ""
        described = f"length penalty alpha {alpha:g}, chosen with the model (sacreBLEU by alpha: {tried}{past})"
    return f"{model_dir}: {described}"


__all__ = ["FinalModel", "average_last_checkpoints", "choose_length_penalty"]
