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
from typing import Any, NamedTuple

import torch
from tqdm.auto import tqdm

from ..allocator import KeptMemory
from ..errors import Interrupted
from .checkpoint import (
    list_checkpoints,
    rotate_checkpoints,
    save_checkpoint,
)
from .guard import NonFiniteGuard
from .loss import batch_loss, target_mask
from .recipe import parse_duration
from .run_folder import HISTORY_DIR, MetricsLog, TrainState
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


@dataclass
class RunContext:
    """What a run holds: the recipe, the accelerator with the prepared model (and its maybe compiled
    forward), optimizer and schedule, the tokenizer, the data, the state that checkpoints save, and the
    metrics log. `train()` builds it; the loop and the end of the run (`finish.py`) read it."""

    recipe: Any
    accelerator: Any
    model: Any  # prepared by the accelerator
    forward_model: Any  # the model, or its `torch.compile`d forward
    optimizer: Any
    scheduler: Any
    tokenizer: Any
    data: Any  # trainer's `_Data`: the loaders, the sampler, the validation text
    state: TrainState
    metrics: MetricsLog
    output: Path = field(init=False)
    config: Any = field(init=False)

    def __post_init__(self) -> None:
        self.output = Path(self.recipe.output_dir)
        self.config = self.accelerator.unwrap_model(self.model).config

    def evaluate(self, model) -> dict[str, float]:
        """The run's validation of `model` (loss on the split, BLEU on its sample)."""
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


class Clock:
    """The run's time, over resumes: training and CPU seconds, and when the last checkpoint and
    validation were (training seconds). Started once, when the loop starts."""

    def __init__(self, state: TrainState, max_time: str | None):
        self.max_seconds = parse_duration(max_time) if max_time is not None else None
        self.t0, self.seconds0 = time.monotonic(), state.train_seconds
        self.cpu0, self.cpu_seconds0 = time.process_time(), state.cpu_seconds
        self.last_checkpoint = self.last_valid = state.train_seconds

    def elapsed(self) -> float:
        return self.seconds0 + time.monotonic() - self.t0

    def cpu_seconds(self) -> float:
        return self.cpu_seconds0 + time.process_time() - self.cpu0

    def events(self, recipe) -> tuple[float, float, float, float]:
        """By this clock: checkpoint due, validation due, time up, and the fraction of max_time spent.

        A timed checkpoint or validation that falls due takes the other with it where that is within a
        tenth of its own period, and neither comes within a tenth of its period of the time limit, whose
        step validates and saves anyway: two checkpoints a few steps apart (one timed, one for a new
        best, or one just before the end) would count as two in an average of the last k."""
        now = self.elapsed()
        left = self.max_seconds - now if self.max_seconds is not None else math.inf
        checkpoint, checkpoint_near = _due(now - self.last_checkpoint, recipe.checkpoint_every_minutes, left)
        valid, valid_near = _due(now - self.last_valid, recipe.valid_every_minutes, left)
        checkpoint, valid = checkpoint or (valid and checkpoint_near), valid or (checkpoint and valid_near)
        time_up = left <= 0
        time_fraction = now / self.max_seconds if self.max_seconds else 0.0
        return float(checkpoint), float(valid), float(time_up), time_fraction


def _due(since: float, minutes: float | None, left: float) -> tuple[bool, bool]:
    """Whether an event every `minutes` is due `since` seconds after the last one, and whether it is
    near (within a tenth of its period); neither within a tenth of its period of the time limit (`left`)."""
    if not minutes:
        return False, False
    period = minutes * 60
    if left <= period / 10:
        return False, False
    return since >= period, since >= period * 0.9


class LoopEnd(NamedTuple):
    """Why the loop stopped (max_steps, max_epochs, max_time, early_stopping, signal), and the signal
    this process received (None: none, or another process's)."""

    stopped_by: str
    signal: int | None = None


# ---------------------------------------------------------------------------------------------
# 4-5. The loop
# ---------------------------------------------------------------------------------------------


def train_loop(ctx: RunContext, show_progress: bool) -> LoopEnd:
    """Train until a stopping condition: every step, the global batch's update (4), then its logs,
    validation, checkpoints and the stop decision (5)."""
    recipe, state = ctx.recipe, ctx.state
    clock = Clock(state, recipe.max_time)
    stopped_by = stop_reason(ctx, clock, time_up=False, epoch_done=False)
    if stopped_by:
        return LoopEnd(stopped_by)  # a resumed run that had already finished
    guard = NonFiniteGuard(ctx.accelerator, ctx.optimizer, kept=lambda: last_good_checkpoint(ctx.output))
    # One process reads the signal after each step, several in the step's agreement before it (so they
    # stop together): what `poll` is given is the step a signal coming after that read stops at.
    alone = ctx.accelerator.num_processes == 1
    signals = StopSignals(
        stops_at=state.step + 1,
        on_abort=lambda: remove_partial_checkpoint(ctx),
        kept=lambda: kept_checkpoint(ctx),
    )
    bar = tqdm(
        total=total_steps(ctx),
        initial=state.step,
        unit="step",
        file=sys.stderr,
        disable=not show_progress,
        dynamic_ncols=True,
    )
    window, lr = Window(), ctx.scheduler.get_last_lr()[0]
    memory = KeptMemory()
    ctx.model.train()
    try:
        with signals:
            for group, epoch_done in global_batches(ctx):
                # 4a. What every process agrees on before the update: token counts, the main clock's events, signals.
                agreed = agree(ctx, group, clock, False if alone else signals.poll(state.step + 2))
                # 4b. The update (forward, backward, guard, clip, Adam, schedule): the host never waits for the device.
                losses, lr = train_step(ctx, group, agreed, guard)
                # 4c. The state moves on.
                state.step += 1
                state.epoch, state.batch_in_epoch = (
                    (state.epoch + 1, 0) if epoch_done else (state.epoch, state.batch_in_epoch + len(group))
                )
                state.target_tokens += int(agreed.target_tokens)
                state.source_tokens += int(agreed.source_tokens)
                window.add(StepSums(losses, agreed.target_tokens, agreed.source_tokens))
                bar.update(1)
                memory.check()  # what the allocator kept beyond the steps' own pages goes back
                # 5a. Train metrics (the host reads the device here).
                if state.step % recipe.log_every_steps == 0:
                    log_train(ctx, clock, guard, window, lr, bar, memory)
                    window = Window()
                # 5b. Stop? Validate? Save? (A signal: save at once, no validation.)
                signalled = signals.poll(state.step + 1) if alone else agreed.signalled > 0
                stopped_by = after_step(ctx, clock, guard, bar, agreed, epoch_done, signalled, memory)
                if stopped_by:
                    break
    finally:
        bar.close()
    return LoopEnd(stopped_by, signals.received)


def after_step(
    ctx: RunContext,
    clock: Clock,
    guard,
    bar,
    agreed: Agreement,
    epoch_done: bool,
    signalled: bool,
    memory: KeptMemory,
) -> str:
    """Validate, save and stop as the step's agreement and the recipe say; why the run stops ("" to go on).
    What validation and saving freed goes back to the kernel after them (`memory`)."""
    recipe, state = ctx.recipe, ctx.state
    stopped_by = stop_reason(ctx, clock, time_up=agreed.time_up > 0, epoch_done=epoch_done)
    save = bool(stopped_by) or agreed.checkpoint_due > 0 or _every(state.step, recipe.checkpoint_every_steps)
    validated = (
        not signalled
        and ctx.data.valid_loader is not None
        and (bool(stopped_by) or agreed.validation_due > 0 or _every(state.step, recipe.valid_every_steps))
    )
    if signalled:
        stopped_by, save = "signal", True
    elif validated:
        save |= validate(ctx, clock, guard, bar)
        if recipe.early_stopping_patience and state.bad_validations >= recipe.early_stopping_patience:
            stopped_by, save = stopped_by or "early_stopping", True
    if save:
        checkpoint(ctx, clock, guard)
    if recipe.history_steps and state.step in recipe.history_steps:
        guard.raise_if_found()
        save_checkpoint(ctx.accelerator, ctx.model, ctx.tokenizer, state.to_dict(), ctx.output / HISTORY_DIR)
        save = True
    if save or validated:
        memory.release()
    return stopped_by


def stop_reason(ctx: RunContext, clock: Clock, time_up: bool, epoch_done: bool) -> str:
    recipe, state = ctx.recipe, ctx.state
    if recipe.max_steps is not None and state.step >= recipe.max_steps:
        return "max_steps"
    if recipe.max_epochs is not None and state.epoch >= recipe.max_epochs and state.batch_in_epoch == 0:
        return "max_epochs"
    if time_up or clock.max_seconds is not None and state.train_seconds >= clock.max_seconds and state.step:
        return "max_time"
    return ""


def total_steps(ctx: RunContext) -> int | None:
    recipe = ctx.recipe
    per_epoch = math.ceil(ctx.data.train_sampler.num_batches / recipe.update_freq)
    limits = [recipe.max_steps] if recipe.max_steps else []
    if recipe.max_epochs:
        limits.append(recipe.max_epochs * per_epoch)
    return min(limits) if limits else None


def interrupted(ctx: RunContext, number: int | None) -> Interrupted:
    """The error that ends a run stopped by a signal (after its checkpoint)."""
    number = number or signal.SIGTERM  # another process received it
    step = ctx.state.step
    return Interrupted(
        f"{signal.Signals(number).name} at step {step}: saved {ctx.output / f'checkpoint-{step}'}; "
        "the same command resumes the run",
        number,
    )


# ---------------------------------------------------------------------------------------------
# 4. The step
# ---------------------------------------------------------------------------------------------


def global_batches(ctx: RunContext):
    """Groups of `update_freq` batches of this process, from the saved position; (group, epoch_done)."""
    sampler, state, update_freq = ctx.data.train_sampler, ctx.state, ctx.recipe.update_freq
    while True:
        sampler.set_epoch(state.epoch)
        sampler.set_start(state.batch_in_epoch)
        remaining, group = len(sampler), []
        for batch in ctx.data.train_loader:
            group.append(batch)
            remaining -= 1
            if len(group) == update_freq or remaining == 0:
                yield group, remaining == 0  # the caller moves `state` on before we continue
                group = []


def agree(ctx: RunContext, group: list[dict], clock: Clock, signal_received: bool) -> Agreement:
    """Count the non-pad tokens of the global batch (all accumulation steps, all processes): on the host,
    from the collated batches, so that one process never waits for its device here; they travel with the
    main process's clock events and the signals in the one collective before the forward passes."""
    accelerator, pad = ctx.accelerator, ctx.config.pad_token_id
    events = clock.events(ctx.recipe) if accelerator.is_main_process else (0.0, 0.0, 0.0, 0.0)
    checkpoint_due, validation_due, time_up, time_fraction = events
    local = Agreement(  # numpy: the collated batches are on the host
        float(sum(target_mask(b["labels"], pad).numpy().sum() for b in group)),
        float(sum(b["attention_mask"].numpy().sum() for b in group)),
        checkpoint_due,
        validation_due,
        time_up,
        float(signal_received),
        time_fraction,
    )
    if accelerator.num_processes == 1:
        return local
    return Agreement.from_tensor(accelerator.reduce(local.to_tensor().to(accelerator.device), reduction="sum").cpu())


def train_step(
    ctx: RunContext, group: list[dict], agreed: Agreement, guard: NonFiniteGuard
) -> tuple[torch.Tensor, float]:
    """One optimizer update on the global batch: the sums of its token losses and NLLs (on the device),
    and the update's learning rate."""
    losses = forward_backward(ctx, group, agreed.target_tokens, guard)
    guard.record(losses, ctx.state.step + 1)  # a non-finite loss: this update and the later ones skipped
    lr = update(ctx, agreed.time_fraction, guard)
    return losses, lr


def forward_backward(ctx: RunContext, group: list[dict], ntokens: float, guard: NonFiniteGuard) -> torch.Tensor:
    """Forward and backward each batch: sum of the token losses / global token count (DDP averages
    gradients over the W processes, hence the factor W); the sums of the token losses and NLLs, on the
    device (the host does not wait for them)."""
    accelerator, recipe = ctx.accelerator, ctx.recipe
    world, rank = accelerator.num_processes, accelerator.process_index
    batches = [{k: v.to(accelerator.device, non_blocking=True) for k, v in b.items()} for b in group]
    scale = world / max(ntokens, 1.0)
    sums = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
    for j, batch in enumerate(batches):
        torch.manual_seed(micro_batch_seed(recipe.seed, ctx.state.step, j * world + rank))
        sync = accelerator.no_sync(ctx.model) if j < len(batches) - 1 else nullcontext()
        with sync:
            out = batch_loss(
                ctx.forward_model,
                batch,
                ctx.config,
                recipe.label_smoothing,
                accelerator.autocast(),
                recipe.compile_loss,
            )
            scaled = out.loss * scale
            if accelerator.scaler is not None:  # fp16: the scaler skips the update of a NaN gradient
                scaled = guard.poison(out.loss.detach(), scaled)
            accelerator.backward(scaled)
        sums += torch.stack([out.loss.detach(), out.nll.detach()]).double()
    return sums


def update(ctx: RunContext, time_fraction: float, guard: NonFiniteGuard) -> float:
    """Clip, update, schedule (§5.3), and the cooldown at the end of the run's budget; the update's
    learning rate (cooldown included)."""
    accelerator, recipe, optimizer, scheduler = ctx.accelerator, ctx.recipe, ctx.optimizer, ctx.scheduler
    if recipe.clip_norm:
        accelerator.clip_grad_norm_(ctx.model.parameters(), recipe.clip_norm)
    factor = cooldown_factor(progress(ctx, time_fraction), recipe.lr_cooldown)
    for group, lr in zip(optimizer.param_groups, scheduler.get_last_lr()):
        group["lr"] = lr * factor  # the scheduler's next step sets it from the schedule again
    lr = scheduler.get_last_lr()[0] * factor
    guard.update(optimizer.step)
    if not accelerator.optimizer_step_was_skipped:
        scheduler.step()
        ctx.state.scheduler_steps += 1
    optimizer.zero_grad(set_to_none=True)
    return lr


def progress(ctx: RunContext, time_fraction: float) -> float:
    """How much of the run's budget is spent before this step: the largest of its fractions of
    max_steps, max_epochs and max_time (0 without a limit)."""
    recipe, state = ctx.recipe, ctx.state
    fractions = [time_fraction]
    if recipe.max_steps:
        fractions.append(state.step / recipe.max_steps)
    if recipe.max_epochs:
        epochs = state.epoch + state.batch_in_epoch / max(ctx.data.train_sampler.num_batches, 1)
        fractions.append(epochs / recipe.max_epochs)
    return max(fractions)


# ---------------------------------------------------------------------------------------------
# 5. Logs, validation, checkpoints
# ---------------------------------------------------------------------------------------------


def peak_rss_mb() -> float | None:
    """The process's peak resident memory so far, in MiB (host memory, what runs out on a CPU); None
    where the platform does not say (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


def log_train(
    ctx: RunContext, clock: Clock, guard: NonFiniteGuard, window: Window, lr: float, bar, memory: KeptMemory
) -> None:
    """The train log line of the window: metrics.jsonl, the trackers, the progress bar; the resident
    memory as `memory` last read it."""
    accelerator, seconds = ctx.accelerator, time.monotonic() - window.start
    guard.raise_if_found()
    local = window.losses
    loss, nll = (accelerator.reduce(local, reduction="sum") if accelerator.num_processes > 1 else local).tolist()
    ntokens, src_tokens = window.target_tokens, window.source_tokens
    record = {
        "step": ctx.state.step,
        "epoch": ctx.state.epoch,
        "train/loss": loss / ntokens,
        "train/nll": nll / ntokens,
        "train/ppl": math.exp(min(nll / ntokens, 50)),
        "lr": lr,
        "tokens_per_s": (ntokens + src_tokens) / max(seconds, 1e-9),
        "target_tokens_per_s": ntokens / max(seconds, 1e-9),
        "elapsed_s": clock.elapsed(),
    }
    if (rss := peak_rss_mb()) is not None:
        record["peak_rss_mb"] = rss
    if (resident := memory.resident) is not None:
        record["rss_mb"] = round(resident / 2**20, 1)
    ctx.metrics.write(record)
    accelerator.log({k: v for k, v in record.items() if k != "step"}, step=ctx.state.step)
    postfix = {"loss": f"{record['train/loss']:.3f}", "lr": f"{lr:.2e}", "tok/s": f"{record['tokens_per_s']:.0f}"}
    if clock.max_seconds is not None:  # the time limit's ETA (tqdm's is the step limit's)
        postfix["time left"] = tqdm.format_interval(max(clock.max_seconds - clock.elapsed(), 0))
    bar.set_postfix(postfix, refresh=False)


def validate(ctx: RunContext, clock: Clock, guard: NonFiniteGuard, bar) -> bool:
    """Validate; True when the result is the best so far."""
    recipe, state, accelerator = ctx.recipe, ctx.state, ctx.accelerator
    guard.raise_if_found()
    metrics = ctx.evaluate(accelerator.unwrap_model(ctx.model))
    clock.last_valid = clock.elapsed()
    value = metrics["valid/bleu" if recipe.best_metric == "bleu" else "valid/loss"]
    better = state.best_metric is None or (
        value > state.best_metric if recipe.best_metric == "bleu" else value < state.best_metric
    )
    if better:
        state.best_metric, state.best_step, state.bad_validations = value, state.step, 0
    else:
        state.bad_validations += 1
    state.last_valid = metrics
    ctx.metrics.write({"step": state.step, "epoch": state.epoch, **metrics, "elapsed_s": clock.elapsed()})
    accelerator.log(metrics, step=state.step)
    shown = ", ".join(f"{k.split('/')[1]} {v:.3f}" for k, v in metrics.items())
    if accelerator.is_main_process:
        bar.write(f"step {state.step}: validation {shown}" + (" (best)" if better else ""), file=sys.stderr)
    return better


def checkpoint(ctx: RunContext, clock: Clock, guard: NonFiniteGuard) -> None:
    """A checkpoint of this step (never after a non-finite loss), the old ones rotated out."""
    guard.raise_if_found()
    state, accelerator = ctx.state, ctx.accelerator
    state.train_seconds, state.cpu_seconds = clock.elapsed(), clock.cpu_seconds()
    save_checkpoint(accelerator, ctx.model, ctx.tokenizer, state.to_dict(), ctx.output, optimizer=ctx.optimizer)
    if accelerator.is_main_process:
        best = ctx.output / f"checkpoint-{state.best_step}" if state.best_step else None
        rotate_checkpoints(ctx.output, ctx.recipe.keep_last, keep=best)
    accelerator.wait_for_everyone()
    clock.last_checkpoint = clock.elapsed()


def last_good_checkpoint(output: Path) -> str:
    """What a run stopped by a non-finite loss keeps, for its message."""
    checkpoints = list_checkpoints(output)
    return f"the last good checkpoint is {checkpoints[-1]}" if checkpoints else "no checkpoint was written yet"


def remove_partial_checkpoint(ctx) -> None:
    """A checkpoint being written when a second signal ends the run: its `checkpoint-<step>.tmp` goes
    (the complete checkpoints are never touched)."""
    if ctx.accelerator.is_main_process:
        for path in ctx.output.glob("checkpoint-*.tmp"):
            shutil.rmtree(path, ignore_errors=True)


def kept_checkpoint(ctx) -> str:
    """What a run stopped at once by a second signal resumes from, for its message."""
    checkpoints = list_checkpoints(ctx.output)
    if not checkpoints:
        return "no checkpoint was written: the same command starts the run again"
    return f"the last complete checkpoint is {checkpoints[-1]}: the same command resumes from it"


def _every(step: int, interval: int | None) -> bool:
    return bool(interval) and step % interval == 0


__all__ = [
    "Agreement",
    "Clock",
    "LoopEnd",
    "RunContext",
    "StepSums",
    "Window",
    "interrupted",
    "micro_batch_seed",
    "train_loop",
    "train_step",
]
