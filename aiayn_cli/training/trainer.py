"""`aiayn train`: the paper's training recipe (§5) on accelerate, from one CPU to many GPUs.

One `Accelerator` runs the loop: `accelerate launch` (or `accelerate config`) decides the
processes, devices, DDP/FSDP and mixed precision; a recipe only sets mixed precision when it asks
for it explicitly. The loop, phase by phase:

1. the output folder (a new run, or the checkpoint to resume: by default the newest one of this
   run), the tokenizer checked against the model, the accelerator;
2. the tokenizer, the model (its vocabulary checked against the tokenizer), the data in
   token-count batches, each process reading its own shard (§5.1);
3. Adam(0.9, 0.98, 1e-9) and the learning-rate schedule of equation (3) (§5.3);
4. every step: `update_freq` batches; the non-pad target tokens of all of them on all processes
   are counted first, so that the label-smoothed loss (§5.4) is a sum divided by that global
   count -- every token weighs the same, whatever the batch shapes and the number of processes;
5. validation (loss, perplexity, BLEU on a fixed sample), checkpoints (every N steps and/or M
   minutes, and at every new best), logs, until max_steps / max_epochs / max_time / early stop;
6. at the end: a last checkpoint, the average of the last checkpoints (§6.1), the learning curve.

Exact resume: a checkpoint holds the model, Adam, the RNG states (safetensors and JSON, never a
pickle: `training_state.py`), the step (the schedule is rebuilt from it) and the data position
(epoch, batch), with the data's fingerprint (resuming over other data is refused). Dropout does not depend on the
RNG's history either: before each batch the RNG is seeded from (seed, step, the batch's index in
the global batch), as fairseq seeds from (seed, step). So a resumed run, and a run with the same
global batch spread over another number of processes, draws the same dropout masks.
"""

from __future__ import annotations

import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import xxhash
from torch.utils.data import DataLoader

from .. import allocator
from ..data.batching import Seq2SeqCollator, TokenBatchSampler
from ..data.prepare import prepare_split
from ..data.tokenization import load_tokenizer
from ..data.vocabulary import SPECIAL_IDS, check_tokenizer
from ..errors import Interrupted, LostProcess, first_line
from ..model.modeling_aiayn import AiaynForConditionalGeneration
from ..precision import PrecisionChoice
from .accelerator import accelerate_precision, make_accelerator, process_state, run_precision
from .checkpoint import list_checkpoints, load_checkpoint, remove_incomplete
from .curves import plot_learning_curve, read_metrics
from .finish import average_last_checkpoints, choose_length_penalty
from .heartbeat import Heartbeat
from .loop import RunContext, interrupted, micro_batch_seed, train_loop
from .recipe import TrainRecipe, parse_duration, save_recipe
from .run_folder import (
    RECIPE_FILE,
    MetricsLog,
    TrainState,
    check_resumable,
    locked_run_folder,
    prepare_output_dir,
)
from .schedule import build_scheduler
from .validation import load_validation


@dataclass
class TrainResult:
    """What a finished run reports."""

    output_dir: Path
    step: int
    epoch: int
    train_seconds: float
    cpu_seconds: float  # of the main process, all its threads, in the loop
    tokens_per_second: float  # non-pad source + target tokens per second of training loop, all processes
    stopped_by: str
    last_checkpoint: Path | None = None
    best_checkpoint: Path | None = None
    best_metric: float | None = None
    averaged: Path | None = None
    last_valid: dict[str, float] = field(default_factory=dict)
    averaged_valid: dict[str, float] = field(default_factory=dict)
    length_penalty: str | None = None  # the alpha chosen on validation, described (main process)
    is_main_process: bool = True  # under `accelerate launch`, only the main process reports


def train(
    recipe: TrainRecipe, resume: str | Path | None = None, show_progress: bool = True, accept_new_data: bool = False
) -> TrainResult:
    """Train a model as `recipe` says, holding the output folder's lock for the whole run.

    Args:
        resume: a checkpoint folder to continue from; None: the newest checkpoint in the output
            folder if it holds this run (so that re-running a killed command continues it), else a new run.
        accept_new_data: resume even where the training data is not the data the checkpoint was
            trained on (its fingerprint differs).

    Raises:
        AiaynError: a user mistake, another run in the output folder, a non-finite loss.
        Interrupted: SIGINT or SIGTERM; a checkpoint of the step reached was written.
    """
    output = Path(recipe.output_dir)
    with locked_run_folder(output), LostProcessWatch(recipe, output) as watch, attention_kernels(recipe):
        try:
            return _train(recipe, resume, show_progress, accept_new_data, watch)
        except RuntimeError as err:
            if not watch.lost_contact(err):
                raise
            raise LostProcess(f"another process of the run was lost ({_why(err)}): {watch.advice()}") from None


def attention_kernels(recipe: TrainRecipe):
    """The recipe's `attention_kernels` for fused attention (`sdpa_kernel`), or PyTorch's own choice."""
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    if recipe.attention_kernels is None:
        return nullcontext()
    names = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
    return sdpa_kernel([getattr(SDPBackend, names[name]) for name in recipe.attention_kernels])


def _why(err: BaseException) -> str:
    """A collective's error in a few words: gloo's `[file:line] Read error ...: Connection reset by
    peer. This is typically ...` -> `Read error ...: Connection reset by peer`."""
    return re.sub(r"^\[[^\]]*\]\s*", "", first_line(err)).split(". ")[0].rstrip(".")


class LostProcessWatch:
    """The heartbeat (`heartbeat.py`) of this process while it trains with others: started once the
    processes have met, stopped at the end (finished where the run ended well or by a signal)."""

    def __init__(self, recipe: TrainRecipe, output: Path):
        self.lost_after, self.output = parse_duration(recipe.lost_process_after), output
        self.heartbeat: Heartbeat | None = None
        self.main = True

    def start(self, accelerator) -> None:
        self.main = accelerator.is_main_process
        self.heartbeat = Heartbeat.from_environment(self.lost_after, self._on_lost)
        if self.heartbeat is not None:
            self.heartbeat.start()

    def _on_lost(self, message: str) -> None:  # in the heartbeat's thread, which then ends the process
        if self.main:
            remove_incomplete(self.output)
        print(f"error: {message}: this process stops; {self.advice()}", file=sys.stderr, flush=True)

    def advice(self) -> str:
        last = list_checkpoints(self.output)
        if not last:
            return "no checkpoint was written yet: the same command on every machine starts the run again"
        return f"the same command on every machine resumes from {last[-1]}"

    def lost_contact(self, err: BaseException) -> bool:
        """Whether `err` is a collective's failure in a run of several processes (a peer gone)."""
        import torch.distributed as dist

        if self.heartbeat is None:
            return False
        return isinstance(err, dist.DistError) or any(word in str(err) for word in ("gloo", "NCCL"))

    def __enter__(self) -> LostProcessWatch:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop(finished=kind is None or issubclass(kind, Interrupted))


def _train(
    recipe: TrainRecipe, resume, show_progress: bool, accept_new_data: bool, watch: LostProcessWatch
) -> TrainResult:
    # 1. The recipe in the precision the run will have (`when_fp32`); the output folder (a new run, or
    #    the checkpoint to resume), the tokenizer against the model: user mistakes surface before
    #    anything heavy starts. Then the accelerator.
    choice = run_precision(recipe)
    precision = choice.precision if choice is not None else accelerate_precision()
    changes = recipe.precision_changes(precision)
    recipe = recipe.in_precision(precision)
    output = Path(recipe.output_dir)
    checkpoint = prepare_output_dir(recipe, resume)
    saved = TrainState.from_checkpoint(checkpoint) if checkpoint is not None else None  # read (and checked) early
    building = tokenizer_missing(recipe)
    if building:  # the data is read now: say which first
        _say_data(recipe)
        build_missing_tokenizer(recipe, show_progress)
    tokenizer = load_tokenizer(recipe.tokenizer)
    config = recipe.model.to_config(vocab_size=check_vocabulary(tokenizer, recipe))
    if not building:
        _say_data(recipe)
    accelerator = make_accelerator(recipe, choice)
    watch.start(accelerator)
    main = accelerator.is_main_process
    choice = choice or PrecisionChoice(accelerator.mixed_precision, "accelerate config / accelerate launch")
    if choice.warning:
        _echo(accelerator, choice.warning)
    _echo(accelerator, choice.describe())
    if changes:
        _echo(accelerator, f"when_fp32: {', '.join(changes)}")
    _echo(accelerator, allocator.describe())

    # 2. Model and data.
    torch.manual_seed(recipe.seed)
    random.seed(recipe.seed)
    model = AiaynForConditionalGeneration(config)
    if recipe.gradient_checkpointing:
        # transformers' newer name (the old one warns), the old one where a 5.x release has not got it
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    data = load_data(recipe, tokenizer, accelerator, show_progress)
    state = TrainState(
        num_processes=accelerator.num_processes,
        tokenizer_hash=tokenizer_hash(tokenizer),
        data_fingerprint=data.fingerprint,
    )
    if saved is not None:
        check_resumable(
            saved, checkpoint, state.num_processes, state.tokenizer_hash, state.data_fingerprint, accept_new_data
        )
        saved.data_fingerprint = state.data_fingerprint  # the data trained on from here on
        state = saved

    # 3. Optimizer (§5.3), schedule, and the accelerator's wrapping.
    optimizer = make_optimizer(recipe, model, accelerator.device)
    scheduler = build_scheduler(
        optimizer,
        recipe.lr_schedule,
        config.d_model,
        recipe.warmup_steps,
        lr_scale=recipe.lr_scale,
        peak_lr=recipe.lr,
        warmup_init_lr=recipe.warmup_init_lr,
        done_steps=state.scheduler_steps,  # a function of the step: rebuilt, never unpickled
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    # Under mixed precision, accelerate wraps the model's forward in autocast and in a cast of its
    # outputs to float32: a (B, T, V) copy of the scores, and of their gradient, every step. The loss
    # reads half-precision scores itself (in float32), so that wrapper goes (in place, the prepared
    # model keeps its other wrappers) and the loop runs the forward under `accelerator.autocast()`.
    accelerator.unwrap_model(model, keep_fp32_wrapper=False)

    # 4. Resume, or start: the training state and the run's files.
    if checkpoint is not None:
        load_checkpoint(accelerator, model, optimizer, checkpoint)  # refuses a checkpoint holding a pickle
        _echo(accelerator, f"resuming from {checkpoint} (step {state.step}, epoch {state.epoch})")
    if main:
        output.mkdir(parents=True, exist_ok=True)
        remove_incomplete(output)
        save_recipe(recipe, output / RECIPE_FILE)
    accelerator.wait_for_everyone()
    metrics = MetricsLog(output, state.step if checkpoint is not None else None, enabled=main)
    metrics.write({"step": state.step, "precision": choice.precision, "precision_reason": choice.reason})
    accelerator.init_trackers("aiayn", config=_flat(recipe.to_dict()))
    forward_model = torch.compile(model, dynamic=True) if recipe.compile else model

    # 4-5. The loop (`loop.py`).
    run = RunContext(recipe, accelerator, model, forward_model, optimizer, scheduler, tokenizer, data, state, metrics)
    stopped_by, received = train_loop(run, show_progress and main)
    if stopped_by == "signal":  # its checkpoint is written: no average, no curve
        accelerator.end_training()
        raise interrupted(run, received)

    # 6. The end: the last checkpoint, the average of the last ones (§6.1), the learning curve.
    final = None
    if recipe.average_last:
        final = average_last_checkpoints(run, recipe.average_last, recipe.average_choose, recipe.average_choose_by)
    length_penalty = final.length_penalty if final else None
    if recipe.length_penalty_grid and data.valid_sources and not (final and final.alpha_chosen):
        length_penalty = choose_length_penalty(run, final.folder if final else list_checkpoints(output)[-1])
    if main:
        plot_learning_curve(read_metrics(metrics.path), output / "learning_curve.png", title=str(output))
    accelerator.end_training()
    checkpoints = list_checkpoints(output)
    return TrainResult(
        output_dir=output,
        step=state.step,
        epoch=state.epoch,
        train_seconds=state.train_seconds,
        cpu_seconds=state.cpu_seconds,
        tokens_per_second=(state.source_tokens + state.target_tokens) / max(state.train_seconds, 1e-9),
        stopped_by=stopped_by,
        last_checkpoint=checkpoints[-1] if checkpoints else None,
        best_checkpoint=output / f"checkpoint-{state.best_step}" if state.best_step else None,
        best_metric=state.best_metric,
        averaged=final.folder if final else None,
        last_valid=state.last_valid,
        averaged_valid=final.valid if final else {},
        length_penalty=length_penalty,
        is_main_process=main,
    )


# ---------------------------------------------------------------------------------------------
# Setup
# ---------------------------------------------------------------------------------------------


def make_optimizer(recipe: TrainRecipe, model, device: torch.device) -> torch.optim.Optimizer:
    """Adam(beta1, beta2, eps) of §5.3 (AdamW with a weight decay), at lr 1 (the schedule scales it).

    Fused where the device has the kernels (CPU, CUDA): one vectorized pass over each parameter and
    its moments, the same update as the textbook loop to rounding, and it skips an update on the
    device (`found_inf`: the non-finite guard, the fp16 loss scaler) without the host reading a flag.
    """
    optimizer_class = torch.optim.AdamW if recipe.weight_decay else torch.optim.Adam
    fused = torch.device(device).type in ("cpu", "cuda")
    return optimizer_class(
        model.parameters(),
        lr=1.0,
        betas=tuple(recipe.adam_betas),
        eps=recipe.adam_eps,
        weight_decay=recipe.weight_decay,
        fused=fused or None,
        foreach=not fused or None,
    )


def tokenizer_missing(recipe: TrainRecipe) -> bool:
    """Whether the recipe's tokenizer folder does not exist yet and `tokenizer_training` says how to make it."""
    return recipe.tokenizer_training is not None and not Path(recipe.tokenizer).exists()


def build_missing_tokenizer(recipe: TrainRecipe, show_progress: bool = False) -> bool:
    """Where `tokenizer_missing(recipe)`, train the tokenizer on the recipe's training split first
    (§5.1), saying so; True where it was built.

    Under `accelerate launch` each machine's main process builds it while the others wait, then find it.
    """
    if not tokenizer_missing(recipe):
        return False
    from ..data.tokenization import train_tokenizer

    settings, folder, state = recipe.tokenizer_training, Path(recipe.tokenizer), process_state()
    with state.local_main_process_first():
        if folder.exists():  # built by this machine's main process meanwhile
            return False
        print(
            f"tokenizer: {folder} does not exist: building it from the training data first "
            f"({settings.algorithm}, vocab_size {settings.vocab_size}: the recipe's tokenizer_training)",
            file=sys.stderr,
            flush=True,
        )
        tokenizer = train_tokenizer(
            recipe.data,
            split=recipe.train_split,
            vocab_size=settings.vocab_size,
            model=settings.algorithm,
            min_frequency=settings.min_frequency,
            max_sentences=settings.sample_size,
            seed=recipe.seed,
            output_dir=folder,
            show_progress=show_progress,
        )
        print(f"tokenizer: wrote {len(tokenizer)} tokens to {folder}", file=sys.stderr, flush=True)
    return True


def _say_data(recipe: TrainRecipe) -> None:
    """One line on stderr (main process): where the training data comes from."""
    from ..data.corpus import describe_source

    source = describe_source(recipe.data)
    hint = " (a local folder instead: --data-dir DIR)" if source.startswith("the Hub") else ""
    if process_state().is_main_process:
        print(
            f"data: {source}, {recipe.data.source_lang} -> {recipe.data.target_lang}{hint}", file=sys.stderr, flush=True
        )


def check_vocabulary(tokenizer, recipe: TrainRecipe) -> int:
    """The vocabulary size, after checking the tokenizer against the model's size and special ids."""
    check_tokenizer(
        tokenizer,
        vocab_size=recipe.model.vocab_size,
        special_ids=SPECIAL_IDS,
        where=f"the tokenizer {recipe.tokenizer}",
        model="model.vocab_size",
        advice="drop vocab_size from the recipe or use the matching tokenizer (`aiayn train-tokenizer` makes one)",
    )
    return len(tokenizer)


def tokenizer_hash(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return xxhash.xxh3_64_hexdigest(backend.to_str().encode()) if backend is not None else ""


def prepare_training_data(recipe: TrainRecipe, show_progress: bool = False):
    """The recipe's training split, prepared (`aiayn prepare`): a `PreparedSplit` whose `path` is the
    cache. The tokenizer is built first where it is missing (`build_missing_tokenizer`)."""
    build_missing_tokenizer(recipe, show_progress)
    return prepare_split(
        recipe.data,
        recipe.train_split,
        load_tokenizer(recipe.tokenizer),
        max_length=recipe.max_length,
        num_proc=recipe.num_proc,
        show_progress=show_progress,
    )


@dataclass
class _Data:
    train: Any  # the tokenized training split
    train_loader: DataLoader
    train_sampler: TokenBatchSampler
    valid_loader: DataLoader | None
    bleu_sources: list[str]
    bleu_references: list[str]
    valid_sources: list[str]  # the whole validation split's text
    valid_references: list[str]
    fingerprint: str  # of the prepared training data: the text, its cleaning and tokenization


def load_data(recipe: TrainRecipe, tokenizer, accelerator, show_progress: bool = False) -> _Data:
    """Tokenized splits (`prepare_split`: the main process first, the others open its cache) and this
    process's loaders."""
    collate = Seq2SeqCollator(tokenizer.pad_token_id)
    rank, world = accelerator.process_index, accelerator.num_processes
    main = accelerator.is_main_process
    with accelerator.main_process_first():  # the main process prepares; the others open its cache
        prepared = prepare_split(
            recipe.data,
            recipe.train_split,
            tokenizer,
            max_length=recipe.max_length,
            num_proc=recipe.num_proc,
            show_progress=show_progress and main,
        )
        train = prepared.dataset
        validation = load_validation(recipe, tokenizer, accelerator)
    _echo(
        accelerator,
        f"{prepared.report}; {prepared.num_too_long} longer than {recipe.max_length} subword tokens dropped; "
        f"prepared data {'opened from' if prepared.from_cache else 'written to'} {prepared.path}",
    )
    sampler = TokenBatchSampler.from_dataset(
        train,
        recipe.max_tokens,
        shuffle=True,
        seed=recipe.seed,
        num_replicas=world,
        rank=rank,
        show_progress=show_progress and main,
    )
    # A generator of its own: iterating the loader never touches the global RNG.
    # pin_memory: on a GPU the batches' copies to the device run beside its work instead of waiting for it
    train_loader = DataLoader(
        train,
        batch_sampler=sampler,
        collate_fn=collate,
        generator=torch.Generator().manual_seed(recipe.seed),
        pin_memory=accelerator.device.type == "cuda",
    )
    v = validation
    return _Data(
        train,
        train_loader,
        sampler,
        v.loader,
        v.bleu_sources,
        v.bleu_references,
        v.sources,
        v.references,
        prepared.path.name,
    )


def quiet_libraries() -> None:
    """Only the run's own progress bar and lines: no per-save bars or notes from the libraries."""
    import logging

    import datasets
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.utils.logging.disable_progress_bar()
    logging.getLogger("accelerate").setLevel(logging.ERROR)


def _flat(mapping: dict, prefix: str = "") -> dict[str, Any]:
    """Dotted keys and scalar values, as trackers want their hyperparameters."""
    flat = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value if isinstance(value, (int, float, str, bool)) else str(value)
    return flat


def _echo(accelerator, message: str) -> None:
    if accelerator.is_main_process:
        print(message, file=sys.stderr, flush=True)


__all__ = [
    "TrainResult",
    "build_missing_tokenizer",
    "tokenizer_missing",
    "check_vocabulary",
    "load_data",
    "make_optimizer",
    "micro_batch_seed",
    "prepare_training_data",
    "quiet_libraries",
    "train",
]
