"""The run's one `Accelerator` (phase 1 of `trainer.py`), in the precision the recipe asks for on this
process's device (`aiayn_cli.precision`), or in accelerate's where the recipe leaves it to
`accelerate launch` / `accelerate config`. The end of a run chosen again from its folder
(`selection.select_in_run_folder`) makes its accelerator here too.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import AiaynError, first_line
from ..precision import PrecisionChoice, choose_precision
from .recipe import TrainRecipe


def make_accelerator(recipe: TrainRecipe, choice: PrecisionChoice | None = None):
    """One `Accelerator` for the run, in the precision `choice` (default: the recipe's, on this device);
    `accelerate launch` / `accelerate config` decide the rest."""
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration, is_wandb_available

    if "wandb" in recipe.trackers and not is_wandb_available():
        raise AiaynError("trackers: wandb is not installed (pip install wandb), or leave it out of trackers")
    project = ProjectConfiguration(project_dir=recipe.output_dir, logging_dir=str(Path(recipe.output_dir) / "logs"))
    choice = choice or run_precision(recipe)
    precision = {"mixed_precision": choice.precision} if choice is not None else {}
    _forget_an_earlier_precision(choice)
    try:
        accelerator = Accelerator(
            log_with=list(recipe.trackers) or None,
            project_config=project,
            step_scheduler_with_optimizer=False,
            **precision,
        )
    except ValueError as err:  # e.g. fp16 where the device has none
        raise AiaynError(f"accelerate: {first_line(err)}") from None
    if accelerator.mixed_precision == "fp16" and accelerator.scaler is None and accelerator.device.type == "cpu":
        # accelerate scales an fp16 loss on accelerators only; on a CPU fp16 gradients underflow as they
        # would on a GPU: the same dynamic loss scaling (before `prepare`, which hands the scaler on)
        accelerator.scaler, accelerator.native_amp = torch.amp.GradScaler("cpu"), True
    return accelerator


def _forget_an_earlier_precision(choice: PrecisionChoice | None) -> None:
    """accelerate keeps one precision per process: an earlier run in this process (a notebook, a
    test session, the quickstart) that chose another one would make `Accelerator()` refuse."""
    from accelerate.state import AcceleratorState

    if choice is None or not AcceleratorState._shared_state:  # nothing chosen yet in this process
        return
    if str(AcceleratorState().mixed_precision) != choice.precision:
        AcceleratorState._reset_state()


def run_precision(recipe: TrainRecipe) -> PrecisionChoice | None:
    """The recipe's `mixed_precision` on this process's device (`aiayn_cli.precision`); None: accelerate's.

    Training's `auto` on a CUDA GPU without native bf16 (T4, V100) takes fp16 with dynamic loss scaling
    (`torch.amp.GradScaler`, through accelerate): its tensor cores compute fp16, and fp32 there is
    several times slower."""
    if recipe.mixed_precision is None:
        return None
    # As `Accelerator()` would: ACCELERATE_USE_CPU=1 (processes on CPUs) must reach the first
    # PartialState, which every later one shares, or each process thinks it runs alone.
    device = process_state().device
    choice = choose_precision(recipe.mixed_precision, device)
    if recipe.mixed_precision == "auto" and choice.precision == "no" and torch.device(device).type == "cuda":
        return PrecisionChoice("fp16", f"{choice.reason}: fp16 with dynamic loss scaling")
    return choice


def accelerate_precision() -> str:
    """The precision `Accelerator()` takes where the recipe leaves it to accelerate (`mixed_precision:
    null`): what `accelerate launch` / `accelerate config` put in the environment, else "no" (read as
    `AcceleratorState` reads it)."""
    from accelerate.utils import parse_choice_from_env

    return parse_choice_from_env("ACCELERATE_MIXED_PRECISION", "no").lower()


def process_state():
    """accelerate's state of this process (as `Accelerator()` makes it: ACCELERATE_USE_CPU=1 honoured)."""
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    return PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))


__all__ = ["accelerate_precision", "make_accelerator", "process_state", "run_precision"]
