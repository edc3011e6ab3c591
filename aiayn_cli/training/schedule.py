"""5.3 Optimizer: the learning-rate schedule.

    lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5)               (3)

"This corresponds to increasing the learning rate linearly for the first warmup_steps training
steps, and decreasing it thereafter proportionally to the inverse square root of the step
number. We used warmup_steps = 4000."

`step_num` counts optimizer updates from 1. Both schedules are `LambdaLR` multipliers of an
optimizer whose base learning rate is 1.0, so the multiplier *is* the learning rate.
`LambdaLR` evaluates its function at 0 for the first update, hence `step_num = index + 1`.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch.optim.lr_scheduler import LambdaLR

SCHEDULES = ("noam", "inverse_sqrt", "constant")


def noam_lrate(step_num: int, d_model: int, warmup_steps: int, lr_scale: float = 1.0) -> float:
    """Equation (3), times `lr_scale` (1.0 in the paper; tensor2tensor calls it `learning_rate`)."""
    step_num = max(step_num, 1)
    return lr_scale * d_model**-0.5 * min(step_num**-0.5, step_num * warmup_steps**-1.5)


def constant_lrate(step_num: int, peak_lr: float, warmup_steps: int, warmup_init_lr: float = 0.0) -> float:
    """Linear warmup from `warmup_init_lr` to `peak_lr` over `warmup_steps` updates, then `peak_lr`.

    Not in the paper. With `lr_cooldown` it is the "warmup-stable-decay" (trapezoidal) schedule of
    fixed-budget runs: the rate stays at its peak instead of decaying as step_num^-0.5, and the
    cooldown anneals it to 0 at the end of the budget.
    """
    step_num = max(step_num, 1)
    if step_num < warmup_steps:
        return warmup_init_lr + step_num * (peak_lr - warmup_init_lr) / warmup_steps
    return peak_lr


def inverse_sqrt_lrate(step_num: int, peak_lr: float, warmup_steps: int, warmup_init_lr: float = 0.0) -> float:
    """fairseq's `inverse_sqrt`: linear warmup from `warmup_init_lr` to `peak_lr` over `warmup_steps`
    updates (`constant_lrate`'s warmup), then `peak_lr * sqrt(warmup_steps / step_num)`.

    The same shape as equation (3), parameterised by the peak instead of d_model: equation (3)
    peaks at d_model^-0.5 * warmup_steps^-0.5 (7.0e-4 for the base model).
    """
    step_num = max(step_num, 1)
    return constant_lrate(step_num, peak_lr, warmup_steps, warmup_init_lr) * min(
        1.0, math.sqrt(warmup_steps / step_num)
    )


def cooldown_factor(progress: float, fraction: float | None) -> float:
    """The factor on the schedule's learning rate in a run's cooldown: 1 until the last `fraction` of
    the run, then falling linearly to 0 at its end (`progress` 0 -> 1; a "trapezoidal" or
    warmup-stable-decay tail). None or 0: no cooldown, the paper's schedule throughout.

    A run with a fixed budget ends on a model trained at the learning rate's low end instead of at
    the value equation (3) happens to reach when time is up.
    """
    if not fraction:
        return 1.0
    return min(max((1.0 - progress) / fraction, 0.0), 1.0)


def _at_update(index: int, lrate) -> float:
    """`LambdaLR` calls its function with the index of the update (from 0); the schedules count from 1."""
    return lrate(index + 1)


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    schedule: str,
    d_model: int,
    warmup_steps: int,
    lr_scale: float = 1.0,
    peak_lr: float = 5e-4,
    warmup_init_lr: float = 0.0,
    done_steps: int = 0,
) -> LambdaLR:
    """A `LambdaLR` giving the learning rate of each update; the optimizer's `lr` must be 1.0.

    The schedule is a function of the update count only, so a resumed run rebuilds it from
    `done_steps` (the updates already applied) instead of loading a saved state.

    Args:
        schedule: "noam" (equation (3), the paper), "inverse_sqrt" (fairseq) or "constant" (after warmup).
        d_model, warmup_steps, lr_scale: equation (3) and its scale factor (noam).
        peak_lr, warmup_init_lr: the inverse_sqrt and constant schedules.
    """
    for group in optimizer.param_groups:
        if group["lr"] != 1.0:
            raise ValueError("build_scheduler: the optimizer's base lr must be 1.0 (the schedule gives the lr)")
    if schedule == "noam":
        lrate = partial(noam_lrate, d_model=d_model, warmup_steps=warmup_steps, lr_scale=lr_scale)
    elif schedule == "inverse_sqrt":
        lrate = partial(inverse_sqrt_lrate, peak_lr=peak_lr, warmup_steps=warmup_steps, warmup_init_lr=warmup_init_lr)
    elif schedule == "constant":
        lrate = partial(constant_lrate, peak_lr=peak_lr, warmup_steps=warmup_steps, warmup_init_lr=warmup_init_lr)
    else:
        raise ValueError(f"unknown lr schedule {schedule!r}; choose one of: {', '.join(SCHEDULES)}")
    fn = partial(_at_update, lrate=lrate)
    scheduler = LambdaLR(optimizer, fn)
    if done_steps:
        scheduler.last_epoch = done_steps
        scheduler._last_lr = [base * fn(done_steps) for base in scheduler.base_lrs]
        for group, lr in zip(optimizer.param_groups, scheduler._last_lr):
            group["lr"] = lr
    return scheduler


__all__ = ["SCHEDULES", "build_scheduler", "constant_lrate", "cooldown_factor", "inverse_sqrt_lrate", "noam_lrate"]
