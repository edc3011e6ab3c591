"""The non-finite guard: no update is applied from a loss that is NaN or infinite, and the run stops
with a message naming the step, without the host waiting for the device every step.

As AMP's `GradScaler` skips an fp16 update on the device (`found_inf`), the guard keeps on the device
a flag (1 once any step's loss was not finite: every later update is skipped too, so the weights stay
those of the last good step), the first such step and its loss. The fused Adam kernels (CPU and CUDA)
read the flag and leave the weights, the moments and the step count as they were. The host reads the
flag only where it reads the device anyway: at a log line, a validation, a checkpoint. Under fp16 the
scaler sets the optimizer's flag itself: there the loss that reaches `backward` is made NaN instead,
so that the scaler's own check skips the update (`poison`).

An optimizer that cannot skip on the device (not fused: another device kind) is checked by the host
every step, as before (`every_step`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..errors import AiaynError


class NonFiniteGuard:
    """The flag, the first bad step and its loss, on `device`; summed over the processes every step.
    `kept()` says what the run keeps (its last good checkpoint) for the message."""

    def __init__(self, accelerator, optimizer, kept: Callable[[], str]):
        self.accelerator, self.kept = accelerator, kept
        device = accelerator.device
        self.found = torch.zeros((), dtype=torch.float32, device=device)  # fused Adam's `found_inf`
        self.step = torch.zeros((), dtype=torch.int64, device=device)
        self.loss = torch.zeros((), dtype=torch.float64, device=device)
        inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper holds torch's optimizer
        self.inner = inner
        self.every_step = not all(group.get("fused") for group in inner.param_groups)

    def bad(self, loss: torch.Tensor) -> torch.Tensor:
        """This loss, or an earlier step's, not finite (a bool tensor; this process only)."""
        return ~torch.isfinite(loss) | (self.found > 0)

    def poison(self, loss: torch.Tensor, scaled: torch.Tensor) -> torch.Tensor:
        """`scaled` (the loss that reaches `backward`), NaN where `loss` or an earlier step's is not finite:
        every gradient is NaN then, and the loss scaler skips the update."""
        factor = torch.where(self.bad(loss), float("nan"), 1.0).to(scaled.dtype)  # a product: its gradient is NaN too
        return scaled * factor

    def record(self, sums: torch.Tensor, step: int) -> None:
        """After the step's forward and backward passes, before its update: `sums` (the step's loss and NLL
        sums) not finite on any process raises the flag and keeps the step and its loss (the first one)."""
        bad = (~torch.isfinite(sums)).any().float()
        if self.accelerator.num_processes > 1:
            bad = self.accelerator.reduce(bad.reshape(1), reduction="sum").reshape(())
        first = (bad > 0) & (self.found == 0)
        self.step = torch.where(first, step, self.step)
        self.loss = torch.where(first, sums[0], self.loss)
        self.found = torch.maximum(self.found, (bad > 0).float())
        if self.every_step:
            self.raise_if_found()

    def update(self, step) -> None:
        """`step()` (the optimizer's) with the flag: a fused optimizer leaves everything as it was where it is set."""
        if self.every_step or getattr(self.accelerator, "scaler", None) is not None:
            step()  # the scaler gives the optimizer its own flag (the poisoned loss raised it)
            return
        self.inner.found_inf = self.found
        try:
            step()
        finally:
            del self.inner.found_inf

    def raise_if_found(self) -> None:
        """The host reads the flag (a wait for the device): the run stops where it is set."""
        found, step, loss = torch.stack([self.found.double(), self.step.double(), self.loss]).tolist()
        if not found:
            return
        self.inner.zero_grad(set_to_none=True)
        raise AiaynError(
            f"step {int(step)}: the loss is not finite ({loss}); stopped before applying this update, {self.kept()}; "
            "resume from it with a lower lr, a clip_norm, or mixed_precision: no"
        )


__all__ = ["NonFiniteGuard"]
