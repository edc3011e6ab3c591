"""The training loop of `aiayn train` (phases 4 and 5 of `training.py`): steps, logs, validation,
checkpoints, stopping, and the average of the last checkpoints at the end.

SIGINT (Ctrl-C) and SIGTERM (a cluster's preemption notice) stop the run cleanly: the current step
is finished, a checkpoint is written, and `train()` raises `Interrupted` (exit 130 / 143); a second
signal ends the process at once. Under `accelerate launch` the processes agree on the step through
the flags every step already shares, so they stop one step later, together.

A loss that is NaN or infinite stops the run before its update is applied (not skipped and
retried, as fairseq does for fp16 overflows: the loss scaler already handles those in the
gradients), with a message naming the step and the last good checkpoint.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..errors import AiaynError, Interrupted
from ..model.modeling_aiayn import AiaynForConditionalGeneration, shift_tokens_right
from .checkpoint import (
    average_checkpoints,
    list_checkpoints,
    rotate_checkpoints,
    save_checkpoint,
    write_averaged_checkpoint,
)
from .heartbeat import whole_write
from .loss import label_smoothed_cross_entropy, target_mask
from .recipe import parse_duration
from .run_folder import HISTORY_DIR
from .schedule import cooldown_factor
from .validation import validation_bleu, validation_loss


def micro_batch_seed(seed: int, step: int, index: int) -> int:
    """The RNG seed for batch `index` of the global batch of update `step` (its dropout masks).

    `index` counts over processes and accumulation steps: batch j of process r of W is j * W + r,
    which is the position that batch has in the one-process run with the same global batch.
    """
    return ((seed * 1_000_003 + step) * 4099 + index) & (2**63 - 1)


class StopSignals:
    """While active (in the main thread), SIGINT and SIGTERM set `received` instead of killing the
    process; a second one kills it at once with the signal's default action."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, step=lambda: 0, on_abort=lambda: None):
        self.received: int | None = None
        self.previous: dict = {}
        self.step = step  # the step being computed, for the message
        self.on_abort = on_abort  # before the second signal ends the process: remove what is half-written

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)

    def _handle(self, number: int, frame) -> None:
        name = signal.Signals(number).name
        if self.received is not None:
            os.write(2, f"\n{name} again: stopping now, without a checkpoint\n".encode())
            with contextlib.suppress(Exception):
                self.on_abort()
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
            return
        self.received = number
        message = f"{name}: finishing step {self.step()}, then saving a checkpoint ({name} again stops at once)"
        os.write(2, f"\n{message}\n".encode())


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
        recipe, state = self.recipe, self.state
        window = torch.zeros(5, dtype=torch.float64)  # loss, nll, target tokens, source tokens, steps
        window_start = time.monotonic()
        self.model.train()
        for group, epoch_done in self._global_batches():
            # 4a. The main process's clock decides time-based events; the decision travels with the token counts.
            step_sums, flags = self._step(group, self._clock_flags())
            state.step += 1
            state.epoch, state.batch_in_epoch = (
                (state.epoch + 1, 0) if epoch_done else (state.epoch, state.batch_in_epoch + len(group))
            )
            state.target_tokens += int(step_sums[2])
            state.source_tokens += int(step_sums[3])
            window += torch.cat([step_sums, torch.ones(1, dtype=torch.float64)])
            self.bar.update(1)
            # 5a. Train metrics.
            if state.step % recipe.log_every_steps == 0:
                self._log_train(window, time.monotonic() - window_start)
                window.zero_()
                window_start = time.monotonic()
            # 5b. Stop? Validate? Save? (A signal: save at once, no validation.)
            stopped_by = self._stop_reason(time_up=flags[2], epoch_done=epoch_done)
            save = bool(stopped_by) or flags[0] or _every(state.step, recipe.checkpoint_every_steps)
            alone = self.accelerator.num_processes == 1
            if flags[3] or (alone and self.signals.received is not None):
                stopped_by, save = "signal", True
            elif self.data.valid_loader is not None and (
                stopped_by or flags[1] or _every(state.step, recipe.valid_every_steps)
            ):
                save |= self._validate()
                if recipe.early_stopping_patience and state.bad_validations >= recipe.early_stopping_patience:
                    stopped_by, save = stopped_by or "early_stopping", True
            if save:
                self._checkpoint()
            if recipe.history_steps and state.step in recipe.history_steps:
                self._save_history()
            if stopped_by:
                break
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

    def _step(self, group: list[dict], clock_flags: list[float]) -> tuple[torch.Tensor, list[bool]]:
        """One optimizer update on the global batch; its sums (loss, nll, target and source tokens)."""
        accelerator, recipe, config = self.accelerator, self.recipe, self.config
        world, rank = accelerator.num_processes, accelerator.process_index
        # 4b. Count the non-pad tokens of the global batch (all accumulation steps, all processes): on
        #     the host, from the collated batches, so that one process never waits for its device here.
        counts = [
            sum(int(target_mask(b["labels"], config.pad_token_id).sum()) for b in group),
            sum(int(b["attention_mask"].sum()) for b in group),
        ]
        shared = torch.tensor(counts + list(clock_flags), dtype=torch.float64)
        if world > 1:  # the one collective before the forward passes
            shared = accelerator.reduce(shared.to(accelerator.device), reduction="sum").cpu()
        batches = [{k: v.to(accelerator.device, non_blocking=True) for k, v in b.items()} for b in group]
        ntokens = float(shared[0])
        flags, time_fraction = [bool(f > 0) for f in shared[2:6].tolist()], float(shared[6])
        # 4c. Forward and backward each batch: sum of the token losses / global token count.
        # DDP averages gradients over the W processes, hence the factor W.
        scale = world / max(ntokens, 1.0)
        sums = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
        step = self.state.step + 1
        for j, batch in enumerate(batches):
            torch.manual_seed(micro_batch_seed(recipe.seed, self.state.step, j * world + rank))
            sync = accelerator.no_sync(self.model) if j < len(batches) - 1 else nullcontext()
            with sync:
                decoder_input_ids = shift_tokens_right(
                    batch["labels"], config.pad_token_id, config.decoder_start_token_id
                )
                with accelerator.autocast():  # the scores stay in the autocast dtype: the loss reads them
                    logits = self.forward_model(
                        input_ids=batch["input_ids"],
                        attention_mask=batch["attention_mask"],
                        decoder_input_ids=decoder_input_ids,
                        use_cache=False,
                    ).logits
                out = label_smoothed_cross_entropy(
                    logits, batch["labels"], recipe.label_smoothing, config.pad_token_id, recipe.compile_loss
                )
                accelerator.backward(out.loss * scale)
            sums += torch.stack([out.loss.detach(), out.nll.detach()]).double()
        sums = sums.cpu()  # the step's one wait for the device: a non-finite loss is refused before the update
        self._check_finite(sums, step)
        # 4d. Clip, update, schedule (§5.3), and the cooldown at the end of the run's budget.
        if recipe.clip_norm:
            accelerator.clip_grad_norm_(self.model.parameters(), recipe.clip_norm)
        factor = cooldown_factor(self._progress(time_fraction), recipe.lr_cooldown)
        for group, lr in zip(self.optimizer.param_groups, self.scheduler.get_last_lr()):
            group["lr"] = lr * factor  # the scheduler's next step sets it from the schedule again
        self.lr = self.scheduler.get_last_lr()[0] * factor
        self.optimizer.step()
        if not accelerator.optimizer_step_was_skipped:
            self.scheduler.step()
            self.state.scheduler_steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        step_sums = torch.cat([sums, shared[:2]])
        return step_sums, flags

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

    def _check_finite(self, sums: torch.Tensor, step: int) -> None:
        """Stop, before the update, where the loss of any process is NaN or infinite."""
        bad = (~torch.isfinite(sums)).any().double().reshape(1)
        if self.accelerator.num_processes > 1:
            bad = self.accelerator.reduce(bad.to(self.accelerator.device), reduction="sum")
        if not bad.item():
            return
        self.optimizer.zero_grad(set_to_none=True)
        checkpoints = list_checkpoints(self.output)
        kept = f"the last good checkpoint is {checkpoints[-1]}" if checkpoints else "no checkpoint was written yet"
        raise AiaynError(
            f"step {step}: the loss is not finite ({float(sums[0])}); stopped before applying this update, {kept}; "
            "resume from it with a lower lr, a clip_norm, or mixed_precision: no"
        )

    def _clock_flags(self) -> list[float]:
        """[checkpoint due, validation due, time up] by the main process's clock (0 elsewhere),
        [signal received] by each process's, and [fraction of max_time spent] by the main process's."""
        signalled = float(self.signals.received is not None)
        if not self.accelerator.is_main_process:
            return [0.0, 0.0, 0.0, signalled, 0.0]
        recipe, now = self.recipe, self.elapsed()
        checkpoint = (
            recipe.checkpoint_every_minutes and now - self.last_checkpoint >= recipe.checkpoint_every_minutes * 60
        )
        valid = recipe.valid_every_minutes and now - self.last_valid >= recipe.valid_every_minutes * 60
        time_up = self.max_seconds is not None and now >= self.max_seconds
        time_fraction = now / self.max_seconds if self.max_seconds else 0.0
        return [float(bool(checkpoint)), float(bool(valid)), float(time_up), signalled, time_fraction]

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

    def _log_train(self, window: torch.Tensor, seconds: float) -> None:
        accelerator = self.accelerator
        local = window[:2].to(accelerator.device)
        loss, nll = (accelerator.reduce(local, reduction="sum") if accelerator.num_processes > 1 else local).tolist()
        ntokens, src_tokens, steps = window[2:].tolist()
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

    def _evaluate(self, model) -> dict[str, float]:
        recipe = self.recipe
        metrics = validation_loss(
            model, self.data.valid_loader, self.accelerator, recipe.label_smoothing, recipe.compile_loss
        )
        if self.data.bleu_sources:
            metrics["valid/bleu"], _ = validation_bleu(
                model,
                self.tokenizer,
                self.data.bleu_sources,
                self.data.bleu_references,
                self.accelerator,
                beam_size=recipe.valid_beam_size,
                max_tokens=recipe.valid_max_tokens or recipe.max_tokens,
            )
        return metrics

    def _validate(self) -> bool:
        """Validate; True when the result is the best so far."""
        recipe, state = self.recipe, self.state
        metrics = self._evaluate(self.accelerator.unwrap_model(self.model))
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
        save_checkpoint(self.accelerator, self.model, self.tokenizer, self.state.to_dict(), self.output / HISTORY_DIR)

    def average(self, last: int, choose: bool = False) -> tuple[Path, dict[str, float]]:
        """Average the last checkpoints into `averaged/` (§6.1) and validate the result; with `choose`,
        only as many of them as give the lowest validation loss."""
        accelerator = self.accelerator
        paths = list_checkpoints(self.output)[-last:]
        if choose and len(paths) > 1 and self.data.valid_loader is not None:
            paths = self._choose_average(paths)
        averaged = self.output / "averaged"
        if accelerator.is_main_process:
            with whole_write():
                write_averaged_checkpoint(paths, averaged, overwrite=True)  # the run's own average
        accelerator.wait_for_everyone()
        metrics: dict[str, float] = {}
        if self.data.valid_loader is not None:
            model = AiaynForConditionalGeneration.from_pretrained(averaged).to(accelerator.device)
            metrics = {f"averaged/{k}": v for k, v in self._evaluate(model).items()}
            self.metrics.write({"step": self.state.step, **metrics, "averaged_from": [p.name for p in paths]})
            accelerator.log(metrics, step=self.state.step)
            if accelerator.is_main_process:
                shown = ", ".join(f"{k.split('/')[-1]} {v:.3f}" for k, v in metrics.items())
                what = f"{len(paths)} checkpoints" if len(paths) > 1 else "1 checkpoint (the last)"
                print(f"average of {what}: validation {shown}", file=sys.stderr, flush=True)
        return averaged, metrics

    def _choose_average(self, paths: list[Path]) -> list[Path]:
        """The newest k of `paths` whose mean has the lowest loss on the whole validation split (ties: the
        larger k, the paper's side); each mean is built in memory, nothing is written."""
        recipe, accelerator = self.recipe, self.accelerator
        model = AiaynForConditionalGeneration.from_pretrained(paths[-1]).to(accelerator.device)
        losses: dict[int, float] = {}
        for k in range(1, len(paths) + 1):
            weights = average_checkpoints(paths[-k:])
            _, unexpected = model.load_state_dict(weights, strict=False)  # tied copies are not saved
            if unexpected:
                raise AiaynError(f"average: {paths[-1]} holds tensors the model does not have (e.g. '{unexpected[0]}')")
            metrics = validation_loss(
                model, self.data.valid_loader, accelerator, recipe.label_smoothing, recipe.compile_loss
            )
            losses[k] = metrics["valid/loss"]
        best = min(losses, key=lambda k: (round(losses[k], 6), -k))
        self.metrics.write({"step": self.state.step, "average_choice": best, "average_valid_loss": losses})
        if accelerator.is_main_process:
            shown = ", ".join(f"{k}: {loss:.3f}" for k, loss in losses.items())
            print(
                f"checkpoints averaged: the last {best} of {len(paths)}, chosen by validation loss ({shown})",
                file=sys.stderr,
                flush=True,
            )
        return paths[-best:]

    def choose_length_penalty(self, model_dir: Path) -> str | None:
        """§6.1: the length penalty of the recipe's grid with the best BLEU on the whole validation
        split, written into `model_dir`'s generation_config.json (the main process decodes); the
        choice, described (None on the other processes)."""
        from ..decoding.translator import Translator
        from ..evaluation.length_penalty import choose_length_penalty, save_length_penalty

        accelerator, described = self.accelerator, None
        if accelerator.is_main_process:
            model = AiaynForConditionalGeneration.from_pretrained(model_dir).to(accelerator.device)
            translator = Translator(model, self.tokenizer, device=accelerator.device, dtype="auto")  # as translate
            choice = choose_length_penalty(
                translator,
                self.data.valid_sources,
                self.data.valid_references,
                list(self.recipe.length_penalty_grid),
                max_tokens=self.recipe.valid_max_tokens or self.recipe.max_tokens,
            )
            save_length_penalty(model_dir, choice.alpha)
            self.metrics.write(
                {
                    "step": self.state.step,
                    "length_penalty": choice.alpha,
                    "length_penalty_bleu": {f"{a:g}": b for a, b in choice.bleu.items()},
                    "length_penalty_model": model_dir.name,
                }
            )
            described = f"{model_dir}: {choice.describe()}"
        accelerator.wait_for_everyone()
        return described


def _every(step: int, interval: int | None) -> bool:
    return bool(interval) and step % interval == 0


__all__ = ["Run", "micro_batch_seed"]
