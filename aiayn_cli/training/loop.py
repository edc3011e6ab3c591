"""The training loop of `aiayn train` (phases 4 and 5 of `training.py`): steps, logs, validation,
checkpoints, stopping, and the average of the last checkpoints at the end.

SIGINT (Ctrl-C) and SIGTERM (a cluster's preemption notice) stop the run cleanly: the current step
is finished, a checkpoint is written, and `train()` raises `Interrupted` (exit 130 / 143); a second
signal ends the process at once. Under `accelerate launch` the processes agree on the step through
the flags every step already shares, so they stop one step later, together.

A loss that is NaN or infinite stops the run (not skipped and retried, as fairseq does for fp16
overflows: the loss scaler already handles those in the gradients) with a message naming the step
and the last good checkpoint. Its update, and any after it, is skipped on the device (`guard.py`);
the host reads the flag, and the losses, only at a log line, a validation or a checkpoint: it never
waits for the device inside a step.
"""

from __future__ import annotations

import math
import shutil
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
from tqdm.auto import tqdm

from ..errors import Interrupted
from .checkpoint import (
    list_checkpoints,
    rotate_checkpoints,
    save_checkpoint,
)
from .guard import NonFiniteGuard
from .loss import batch_loss, target_mask
from .recipe import parse_duration
from .run_folder import HISTORY_DIR
from .schedule import cooldown_factor
from .signals import StopSignals
from .validation import evaluate_model


def micro_batch_seed(seed: int, step: int, index: int) -> int:
    """The RNG seed for batch `index` of the global batch of update `step` (its dropout masks).

    `index` counts over processes and accumulation steps: batch j of process r of W is j * W + r,
    which is the position that batch has in the one-process run with the same global batch.
    """
    return ((seed * 1_000_003 + step) * 4099 + index) & (2**63 - 1)


class Agreement(NamedTuple):
    """What the processes agree on before each update, in the step's one collective (each field summed
    over the processes): the global batch's non-pad token counts, the events by the main process's
    clock (0 elsewhere), and whether any process received a stop signal. `to_tensor` and
    `from_tensor` are the one place where it is packed and unpacked."""

    target_tokens: float
    source_tokens: float
    checkpoint_due: float
    validation_due: float
    time_up: float
    signalled: float
    time_fraction: float  # of max_time spent, by the main process's clock

    def to_tensor(self) -> torch.Tensor:
        return torch.tensor(self, dtype=torch.float64)

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor) -> Agreement:
        return cls(*tensor.tolist())


class StepSums(NamedTuple):
    """One update's sums over the global batch: token losses and NLLs (on the device, read at the log
    lines), non-pad token counts."""

    losses: torch.Tensor  # (loss, nll), float64
    target_tokens: float
    source_tokens: float


@dataclass
class Window:
    """The sums of the updates since the last train log line (the losses on the device)."""

    losses: torch.Tensor | float = 0.0
    target_tokens: float = 0.0
    source_tokens: float = 0.0
    steps: int = 0
    start: float = field(default_factory=time.monotonic)

    def add(self, sums: StepSums) -> None:
        self.losses = self.losses + sums.losses
        self.target_tokens += sums.target_tokens
        self.source_tokens += sums.source_tokens
        self.steps += 1


class Run:
    """One run of the loop; `train()` builds it, calls `loop()`, then maybe `average()`."""

    def __init__(
        self, recipe, accelerator, model, forward_model, optimizer, scheduler, tokenizer, data, state, metrics
    ):
        self.recipe, self.accelerator, self.state, self.metrics = recipe, accelerator, state, metrics
        self.model, self.forward_model = model, forward_model  # prepared; and maybe compiled
        self.optimizer, self.scheduler, self.tokenizer, self.data = optimizer, scheduler, tokenizer, data
        self.config = accelerator.unwrap_model(model).config
        self.output = Path(recipe.output_dir)
        self.max_seconds = parse_duration(recipe.max_time) if recipe.max_time is not None else None
        self.bar = None
        self.lr = scheduler.get_last_lr()[0]  # the last update's learning rate, cooldown included
        self.t0, self.seconds0 = time.monotonic(), state.train_seconds
        self.cpu0, self.cpu_seconds0 = time.process_time(), state.cpu_seconds
        self.last_checkpoint = self.last_valid = self.seconds0
        self.signals = StopSignals(step=lambda: self.state.step + 1, on_abort=self._remove_partial_checkpoint)
        self.guard = NonFiniteGuard(accelerator, optimizer, kept=self._kept)

    def elapsed(self) -> float:
        return self.seconds0 + time.monotonic() - self.t0

    def loop(self, show_progress: bool) -> str:
        """Train until a stopping condition; the name of that condition."""
        state = self.state
        stopped_by = self._stop_reason(time_up=False, epoch_done=False)
        if stopped_by:
            return stopped_by  # a resumed run that had already finished
        self.t0, self.seconds0 = time.monotonic(), state.train_seconds
        self.cpu0, self.cpu_seconds0 = time.process_time(), state.cpu_seconds
        self.last_checkpoint = self.last_valid = state.train_seconds
        self.bar = tqdm(
            total=self._total_steps(),
            initial=state.step,
            unit="step",
            file=sys.stderr,
            disable=not show_progress,
            dynamic_ncols=True,
        )
        try:
            with self.signals:
                return self._loop()
        finally:
            self.bar.close()

    def _loop(self) -> str:
        state = self.state
        window = Window()
        self.model.train()
        for group, epoch_done in self._global_batches():
            # 4a. The main process's clock decides time-based events; the decision travels with the token counts.
            sums, agreed = self._step(group)
            state.step += 1
            state.epoch, state.batch_in_epoch = (
                (state.epoch + 1, 0) if epoch_done else (state.epoch, state.batch_in_epoch + len(group))
            )
            state.target_tokens += int(sums.target_tokens)
            state.source_tokens += int(sums.source_tokens)
            window.add(sums)
            self.bar.update(1)
            # 5a. Train metrics.
            if state.step % self.recipe.log_every_steps == 0:
                self._log_train(window)
                window = Window()
            # 5b. Stop? Validate? Save? (A signal: save at once, no validation.)
            stopped_by = self._after_step(agreed, epoch_done)
            if stopped_by:
                break
        return stopped_by

    def _after_step(self, agreed: Agreement, epoch_done: bool) -> str:
        """Validate, save and stop as the step's agreement and the recipe say; why the run stops ("" to go on)."""
        recipe, state = self.recipe, self.state
        stopped_by = self._stop_reason(time_up=agreed.time_up > 0, epoch_done=epoch_done)
        save = bool(stopped_by) or agreed.checkpoint_due > 0 or _every(state.step, recipe.checkpoint_every_steps)
        alone = self.accelerator.num_processes == 1
        if agreed.signalled > 0 or (alone and self.signals.received is not None):
            stopped_by, save = "signal", True
        elif self.data.valid_loader is not None and (
            stopped_by or agreed.validation_due > 0 or _every(state.step, recipe.valid_every_steps)
        ):
            save |= self._validate()
            if recipe.early_stopping_patience and state.bad_validations >= recipe.early_stopping_patience:
                stopped_by, save = stopped_by or "early_stopping", True
        if save:
            self._checkpoint()
        if recipe.history_steps and state.step in recipe.history_steps:
            self._save_history()
        return stopped_by

    def _remove_partial_checkpoint(self) -> None:
        """A checkpoint being written when a second signal ends the run: its `checkpoint-<step>.tmp` goes
        (the complete checkpoints are never touched)."""
        if self.accelerator.is_main_process:
            for path in self.output.glob("checkpoint-*.tmp"):
                shutil.rmtree(path, ignore_errors=True)

    def interrupted(self) -> Interrupted:
        """The error that ends a run stopped by a signal (after its checkpoint)."""
        number = self.signals.received or signal.SIGTERM  # another process received it
        name = signal.Signals(number).name
        return Interrupted(
            f"{name} at step {self.state.step}: saved {self.output / f'checkpoint-{self.state.step}'}; "
            "the same command resumes the run",
            number,
        )

    # -- the global batches ----------------------------------------------------------------------

    def _global_batches(self):
        """Groups of `update_freq` batches of this process, from the saved position; (group, epoch_done)."""
        sampler, state, update_freq = self.data.train_sampler, self.state, self.recipe.update_freq
        while True:
            sampler.set_epoch(state.epoch)
            sampler.set_start(state.batch_in_epoch)
            remaining, group = len(sampler), []
            for batch in self.data.train_loader:
                group.append(batch)
                remaining -= 1
                if len(group) == update_freq or remaining == 0:
                    yield group, remaining == 0  # the caller moves `state` on before we continue
                    group = []

    def _step(self, group: list[dict]) -> tuple[StepSums, Agreement]:
        """One optimizer update on the global batch: its sums, and what the processes agreed on before it."""
        agreed = self._agree(group)
        losses = self._forward_backward(group, agreed.target_tokens)
        self.guard.record(losses, self.state.step + 1)  # a non-finite loss: this update and the later ones skipped
        self._update(agreed.time_fraction)
        return StepSums(losses, agreed.target_tokens, agreed.source_tokens), agreed

    def _agree(self, group: list[dict]) -> Agreement:
        """4b. Count the non-pad tokens of the global batch (all accumulation steps, all processes): on the
        host, from the collated batches, so that one process never waits for its device here; they travel
        with the clock's events in the one collective before the forward passes."""
        accelerator, pad = self.accelerator, self.config.pad_token_id
        local = Agreement(  # numpy: the collated batches are on the host
            float(sum(target_mask(b["labels"], pad).numpy().sum() for b in group)),
            float(sum(b["attention_mask"].numpy().sum() for b in group)),
            *self._clock(),
        )
        if accelerator.num_processes == 1:
            return local
        return Agreement.from_tensor(
            accelerator.reduce(local.to_tensor().to(accelerator.device), reduction="sum").cpu()
        )

    def _forward_backward(self, group: list[dict], ntokens: float) -> torch.Tensor:
        """4c. Forward and backward each batch: sum of the token losses / global token count (DDP averages
        gradients over the W processes, hence the factor W); the sums of the token losses and NLLs, on the
        device (the host does not wait for them)."""
        accelerator, recipe, config = self.accelerator, self.recipe, self.config
        world, rank = accelerator.num_processes, accelerator.process_index
        batches = [{k: v.to(accelerator.device, non_blocking=True) for k, v in b.items()} for b in group]
        scale = world / max(ntokens, 1.0)
        sums = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
        for j, batch in enumerate(batches):
            torch.manual_seed(micro_batch_seed(recipe.seed, self.state.step, j * world + rank))
            sync = accelerator.no_sync(self.model) if j < len(batches) - 1 else nullcontext()
            with sync:
                out = batch_loss(
                    self.forward_model,
                    batch,
                    config,
                    recipe.label_smoothing,
                    accelerator.autocast(),
                    recipe.compile_loss,
                )
                scaled = out.loss * scale
                if accelerator.scaler is not None:  # fp16: the scaler skips the update of a NaN gradient
                    scaled = self.guard.poison(out.loss.detach(), scaled)
                accelerator.backward(scaled)
            sums += torch.stack([out.loss.detach(), out.nll.detach()]).double()
        return sums

    def _update(self, time_fraction: float) -> None:
        """4d. Clip, update, schedule (§5.3), and the cooldown at the end of the run's budget."""
        accelerator, recipe = self.accelerator, self.recipe
        if recipe.clip_norm:
            accelerator.clip_grad_norm_(self.model.parameters(), recipe.clip_norm)
        factor = cooldown_factor(self._progress(time_fraction), recipe.lr_cooldown)
        for group, lr in zip(self.optimizer.param_groups, self.scheduler.get_last_lr()):
            group["lr"] = lr * factor  # the scheduler's next step sets it from the schedule again
        self.lr = self.scheduler.get_last_lr()[0] * factor
        self.guard.update(self.optimizer.step)
        if not accelerator.optimizer_step_was_skipped:
            self.scheduler.step()
            self.state.scheduler_steps += 1
        self.optimizer.zero_grad(set_to_none=True)

    def _progress(self, time_fraction: float) -> float:
        """How much of the run's budget is spent before this step: the largest of its fractions of
        max_steps, max_epochs and max_time (0 without a limit)."""
        recipe, state = self.recipe, self.state
        fractions = [time_fraction]
        if recipe.max_steps:
            fractions.append(state.step / recipe.max_steps)
        if recipe.max_epochs:
            epochs = state.epoch + state.batch_in_epoch / max(self.data.train_sampler.num_batches, 1)
            fractions.append(epochs / recipe.max_epochs)
        return max(fractions)

    def _kept(self) -> str:
        """What a run stopped by a non-finite loss keeps, for its message."""
        checkpoints = list_checkpoints(self.output)
        return f"the last good checkpoint is {checkpoints[-1]}" if checkpoints else "no checkpoint was written yet"

    def _clock(self) -> tuple[float, float, float, float, float]:
        """`Agreement`'s events as this process sees them: checkpoint due, validation due, time up, and the
        fraction of max_time spent by the main process's clock (0 elsewhere); a signal received by its own."""
        signalled = float(self.signals.received is not None)
        if not self.accelerator.is_main_process:
            return 0.0, 0.0, 0.0, signalled, 0.0
        recipe, now = self.recipe, self.elapsed()
        checkpoint = (
            recipe.checkpoint_every_minutes and now - self.last_checkpoint >= recipe.checkpoint_every_minutes * 60
        )
        valid = recipe.valid_every_minutes and now - self.last_valid >= recipe.valid_every_minutes * 60
        time_up = self.max_seconds is not None and now >= self.max_seconds
        time_fraction = now / self.max_seconds if self.max_seconds else 0.0
        return float(bool(checkpoint)), float(bool(valid)), float(time_up), signalled, time_fraction

    def _stop_reason(self, time_up: bool, epoch_done: bool) -> str:
        recipe, state = self.recipe, self.state
        if recipe.max_steps is not None and state.step >= recipe.max_steps:
            return "max_steps"
        if recipe.max_epochs is not None and state.epoch >= recipe.max_epochs and state.batch_in_epoch == 0:
            return "max_epochs"
        if time_up or self.max_seconds is not None and state.train_seconds >= self.max_seconds and state.step:
            return "max_time"
        return ""

    def _total_steps(self) -> int | None:
        per_epoch = math.ceil(self.data.train_sampler.num_batches / self.recipe.update_freq)
        limits = [self.recipe.max_steps] if self.recipe.max_steps else []
        if self.recipe.max_epochs:
            limits.append(self.recipe.max_epochs * per_epoch)
        return min(limits) if limits else None

    # -- logs, validation, checkpoints ------------------------------------------------------------

    def _log_train(self, window: Window) -> None:
        accelerator, seconds = self.accelerator, time.monotonic() - window.start
        self.guard.raise_if_found()
        local = window.losses
        loss, nll = (accelerator.reduce(local, reduction="sum") if accelerator.num_processes > 1 else local).tolist()
        ntokens, src_tokens = window.target_tokens, window.source_tokens
        lr = self.lr
        record = {
            "step": self.state.step,
            "epoch": self.state.epoch,
            "train/loss": loss / ntokens,
            "train/nll": nll / ntokens,
            "train/ppl": math.exp(min(nll / ntokens, 50)),
            "lr": lr,
            "tokens_per_s": (ntokens + src_tokens) / max(seconds, 1e-9),
            "target_tokens_per_s": ntokens / max(seconds, 1e-9),
            "elapsed_s": self.elapsed(),
        }
        self.metrics.write(record)
        accelerator.log({k: v for k, v in record.items() if k != "step"}, step=self.state.step)
        postfix = {"loss": f"{record['train/loss']:.3f}", "lr": f"{lr:.2e}", "tok/s": f"{record['tokens_per_s']:.0f}"}
        if self.max_seconds is not None:  # the time limit's ETA (tqdm's is the step limit's)
            postfix["time left"] = tqdm.format_interval(max(self.max_seconds - self.elapsed(), 0))
        self.bar.set_postfix(postfix, refresh=False)

    def evaluate(self, model) -> dict[str, float]:
        data = self.data
        return evaluate_model(
            model,
            self.recipe,
            self.tokenizer,
            data.valid_loader,
            data.bleu_sources,
            data.bleu_references,
            self.accelerator,
        )

    def _validate(self) -> bool:
        """Validate; True when the result is the best so far."""
        recipe, state = self.recipe, self.state
        self.guard.raise_if_found()
        metrics = self.evaluate(self.accelerator.unwrap_model(self.model))
        self.last_valid = self.elapsed()
        value = metrics["valid/bleu" if recipe.best_metric == "bleu" else "valid/loss"]
        better = state.best_metric is None or (
            value > state.best_metric if recipe.best_metric == "bleu" else value < state.best_metric
        )
        if better:
            state.best_metric, state.best_step, state.bad_validations = value, state.step, 0
        else:
            state.bad_validations += 1
        state.last_valid = metrics
        self.metrics.write({"step": state.step, "epoch": state.epoch, **metrics, "elapsed_s": self.elapsed()})
        self.accelerator.log(metrics, step=state.step)
        shown = ", ".join(f"{k.split('/')[1]} {v:.3f}" for k, v in metrics.items())
        if self.accelerator.is_main_process:
            self.bar.write(f"step {state.step}: validation {shown}" + (" (best)" if better else ""), file=sys.stderr)
        return better

    def _checkpoint(self) -> None:
        self.guard.raise_if_found()  # never a checkpoint after a non-finite loss
        self.state.train_seconds = self.elapsed()
        self.state.cpu_seconds = self.cpu_seconds0 + time.process_time() - self.cpu0
        save_checkpoint(
            self.accelerator, self.model, self.tokenizer, self.state.to_dict(), self.output, optimizer=self.optimizer
        )
        if self.accelerator.is_main_process:
            best = self.output / f"checkpoint-{self.state.best_step}" if self.state.best_step else None
            rotate_checkpoints(self.output, self.recipe.keep_last, keep=best)
        self.accelerator.wait_for_everyone()
        self.last_checkpoint = self.elapsed()

    def _save_history(self) -> None:
        """The model alone at this step, into `history/` (the recipe's `history_steps`), kept for good."""
        self.guard.raise_if_found()
        save_checkpoint(self.accelerator, self.model, self.tokenizer, self.state.to_dict(), self.output / HISTORY_DIR)


def _every(step: int, interval: int | None) -> bool:
    return bool(interval) and step % interval == 0


__all__ = ["Agreement", "Run", "StepSums", "Window", "micro_batch_seed"]
