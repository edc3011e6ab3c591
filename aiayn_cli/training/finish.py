"""The end of a run (phase 6 of `training.py`, §6.1): the average of the last checkpoints, and the
length penalty chosen on the validation split."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import AiaynError
from ..model.modeling_aiayn import AiaynForConditionalGeneration
from .checkpoint import average_checkpoints, list_checkpoints, write_averaged_checkpoint
from .heartbeat import whole_write
from .loop import Run
from .validation import validation_loss


def average_last_checkpoints(run: Run, last: int, choose: bool = False) -> tuple[Path, dict[str, float]]:
    """Average the last checkpoints of `run` into `averaged/` (§6.1) and validate the result; with
    `choose`, only as many of them as give the lowest validation loss."""
    accelerator = run.accelerator
    paths = list_checkpoints(run.output)[-last:]
    if choose and len(paths) > 1 and run.data.valid_loader is not None:
        paths = _choose_average(run, paths)
    averaged = run.output / "averaged"
    if accelerator.is_main_process:
        with whole_write():
            write_averaged_checkpoint(paths, averaged, overwrite=True)  # the run's own average
    accelerator.wait_for_everyone()
    metrics: dict[str, float] = {}
    if run.data.valid_loader is not None:
        model = AiaynForConditionalGeneration.from_pretrained(averaged).to(accelerator.device)
        metrics = {f"averaged/{k}": v for k, v in run.evaluate(model).items()}
        run.metrics.write({"step": run.state.step, **metrics, "averaged_from": [p.name for p in paths]})
        accelerator.log(metrics, step=run.state.step)
        if accelerator.is_main_process:
            shown = ", ".join(f"{k.split('/')[-1]} {v:.3f}" for k, v in metrics.items())
            what = f"{len(paths)} checkpoints" if len(paths) > 1 else "1 checkpoint (the last)"
            print(f"average of {what}: validation {shown}", file=sys.stderr, flush=True)
    return averaged, metrics


def _choose_average(run: Run, paths: list[Path]) -> list[Path]:
    """The newest k of `paths` whose mean has the lowest loss on the whole validation split (ties: the
    larger k, the paper's side); each mean is built in memory, nothing is written."""
    recipe, accelerator = run.recipe, run.accelerator
    model = AiaynForConditionalGeneration.from_pretrained(paths[-1]).to(accelerator.device)
    losses: dict[int, float] = {}
    for k in range(1, len(paths) + 1):
        weights = average_checkpoints(paths[-k:])
        _, unexpected = model.load_state_dict(weights, strict=False)  # tied copies are not saved
        if unexpected:
            raise AiaynError(f"average: {paths[-1]} holds tensors the model does not have (e.g. '{unexpected[0]}')")
        metrics = validation_loss(
            model, run.data.valid_loader, accelerator, recipe.label_smoothing, recipe.compile_loss
        )
        losses[k] = metrics["valid/loss"]
    best = min(losses, key=lambda k: (round(losses[k], 6), -k))
    run.metrics.write({"step": run.state.step, "average_choice": best, "average_valid_loss": losses})
    if accelerator.is_main_process:
        shown = ", ".join(f"{k}: {loss:.3f}" for k, loss in losses.items())
        print(
            f"checkpoints averaged: the last {best} of {len(paths)}, chosen by validation loss ({shown})",
            file=sys.stderr,
            flush=True,
        )
    return paths[-best:]


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
                "length_penalty_model": model_dir.name,
            }
        )
        described = f"{model_dir}: {choice.describe()}"
    accelerator.wait_for_everyone()
    return described


__all__ = ["average_last_checkpoints", "choose_length_penalty"]
