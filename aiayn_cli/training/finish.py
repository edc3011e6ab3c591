"""The end of a run (phase 6 of `training.py`, §6.1): the final model (the last checkpoint, the best one
or an average of the last ones, chosen on the validation split: `selection.py`), and the length penalty
chosen on the validation split."""

from __future__ import annotations

import sys
from pathlib import Path

from ..model.modeling_aiayn import AiaynForConditionalGeneration
from .checkpoint import list_checkpoints, write_averaged_checkpoint
from .heartbeat import whole_write
from .loop import Run
from .selection import select_final_model


def average_last_checkpoints(run: Run, last: int, choose: bool = True) -> tuple[Path, dict[str, float]]:
    """The run's final model into `averaged/` (§6.1): with `choose` and a validation split, the best on
    validation of the last checkpoint, the best one and the averages of the last k <= `last` of the
    decayed tail (`selection.py`); else the plain average of the last `last` checkpoints."""
    accelerator = run.accelerator
    checkpoints = list_checkpoints(run.output)
    paths, details, metrics = checkpoints[-last:], {}, {}
    if choose and run.data.valid_loader is not None:
        best = run.output / f"checkpoint-{run.state.best_step}" if run.state.best_step else None
        selection = select_final_model(
            checkpoints,
            last,
            best if best is not None and best.is_dir() else None,
            run.metrics.path,
            run.evaluate,
            accelerator,
        )
        paths, details = list(selection.chosen.checkpoints), {"selection": selection.record()}
        metrics = {f"averaged/{k}": v for k, v in selection.scores[selection.chosen.name].items()}
        run.metrics.write({"step": run.state.step, **details})
        _say(accelerator, selection.describe())
    averaged = run.output / "averaged"
    if accelerator.is_main_process:
        with whole_write():
            write_averaged_checkpoint(paths, averaged, overwrite=True, details=details)  # the run's own average
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
    return averaged, metrics


def _say(accelerator, line: str) -> None:
    if accelerator.is_main_process:
        print(line, file=sys.stderr, flush=True)


def choose_length_penalty(run: Run, model_dir: Path) -> str | None:
    """§6.1: the length penalty of the recipe's grid with the best BLEU on the whole validation split,
    written into `model_dir`'s generation_config.json (the main process decodes); the choice,
    described (None on the other processes)."""
    from ..decoding.translator import Translator
    from ..evaluation import length_penalty

    accelerator, described = run.accelerator, None
    if accelerator.is_main_process:
        model = AiaynForConditionalGeneration.from_pretrained(model_dir).to(accelerator.device)
        translator = Translator(model, run.tokenizer, device=accelerator.device, dtype="auto")  # as translate
        choice = length_penalty.choose_length_penalty(
            translator,
            run.data.valid_sources,
            run.data.valid_references,
            list(run.recipe.length_penalty_grid),
            max_tokens=run.recipe.valid_max_tokens or run.recipe.max_tokens,
        )
        length_penalty.save_length_penalty(model_dir, choice.alpha)
        run.metrics.write(
            {
                "step": run.state.step,
                "length_penalty": choice.alpha,
                "length_penalty_bleu": {f"{a:g}": b for a, b in choice.bleu.items()},
                "length_penalty_extended": choice.extended,
                "length_penalty_model": model_dir.name,
            }
        )
        described = f"{model_dir}: {choice.describe()}"
    accelerator.wait_for_everyone()
    return described


__all__ = ["average_last_checkpoints", "choose_length_penalty"]
