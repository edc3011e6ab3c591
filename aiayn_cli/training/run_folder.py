"""The output folder of a training run: what it holds, whether a new run may use it, where to resume.

OUTPUT/
    .aiayn-run.lock        held (flock) by the run that uses the folder, naming its process
    recipe.yaml            the resolved recipe (written before the first step)
    metrics.jsonl          one JSON record per log line and per validation
    logs/                  accelerate's trackers (TensorBoard, ...)
    checkpoint-<step>/     the last `keep_last` checkpoints and the best one
    history/checkpoint-<step>/  the model alone at each of `history_steps` (no optimizer state), kept
    averaged/              the final model, at the end (§6.1): the last checkpoint, the best one or the
                           mean of the last k <= `average_last` of the decayed tail, the best on
                           validation (`selection.py`); its averaged_from.json says which and why
    learning_curve.png     train and validation loss, validation BLEU, at the end
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import typing
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AiaynError
from ..files import atomic_write, node_kind
from .checkpoint import latest_checkpoint, read_trainer_state
from .curves import read_metrics
from .recipe import TrainRecipe, load_recipe, recipe_differences
from .training_state import check_no_pickles

RECIPE_FILE = "recipe.yaml"
HISTORY_DIR = "history"
METRICS_FILE = "metrics.jsonl"
LOCK_FILE = ".aiayn-run.lock"


@dataclass
class TrainState:
    """Where a run is; saved as `trainer_state.json` in every checkpoint."""

    step: int = 0
    """Optimizer updates done."""
    epoch: int = 0
    """The epoch the next batch comes from."""
    batch_in_epoch: int = 0
    """The next batch of this epoch, in each process's shard."""
    train_seconds: float = 0.0
    """Wall time of the training loop, over all resumes."""
    cpu_seconds: float = 0.0
    """CPU time of the main process in the training loop, over all resumes (all its threads)."""
    target_tokens: int = 0
    """Non-pad target tokens trained on, all processes."""
    source_tokens: int = 0
    """Non-pad source tokens trained on, all processes."""
    best_metric: float | None = None
    best_step: int | None = None
    bad_validations: int = 0
    """Validations since the last improvement (early stopping)."""
    last_valid: dict[str, float] = field(default_factory=dict)
    num_processes: int = 1
    tokenizer_hash: str = ""
    data_fingerprint: str = ""
    """The training data's fingerprint (from the files' contents and the tokenizer)."""
    scheduler_steps: int = 0
    """Updates applied (an fp16 update skipped for overflow is not): the schedule is rebuilt from it."""

    @classmethod
    def from_checkpoint(cls, checkpoint: Path) -> TrainState:
        """The state saved in `checkpoint`, each value of the type this class gives it (else one line)."""
        from pydantic import TypeAdapter, ValidationError

        data = read_trainer_state(checkpoint)
        if not isinstance(data, dict):
            raise AiaynError(f"{checkpoint / 'trainer_state.json'}: not a JSON object; resume from another checkpoint")
        hints = typing.get_type_hints(cls)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for key, value in known.items():
            try:
                TypeAdapter(hints[key]).validate_python(value, strict=True)
            except ValidationError as err:
                expected = err.errors()[0]["msg"].lower()
                raise AiaynError(
                    f"{checkpoint / 'trainer_state.json'}: {key}: {expected}, got {value!r}; resume from another checkpoint"
                ) from None
        return cls(**known)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prepare_output_dir(recipe: TrainRecipe, resume: str | os.PathLike | None = None) -> Path | None:
    """Check that the run may use `recipe.output_dir`; the checkpoint to resume from, if any.

    Args:
        resume: a checkpoint folder to continue from; None: the newest checkpoint of the output
            folder when it holds this run (the same recipe, up to `RESUMABLE_CHANGES`), else a new run.

    Raises:
        AiaynError: the output folder holds a different run or files of something else, or `resume`
            is not a complete checkpoint of this run.
    """
    output = Path(recipe.output_dir)
    _check_folder(output)
    _check_same_run(output, recipe, "output folder", "choose another --output-dir")
    if not (output / RECIPE_FILE).is_file() and output.is_dir() and any(p.name != LOCK_FILE for p in output.iterdir()):
        raise AiaynError(
            f"output folder {output} is not empty and holds no aiayn run ({RECIPE_FILE} is missing); choose a new or empty {{output_dir}}",
            mentions=("output_dir",),
        )
    if resume is None:
        checkpoint = latest_checkpoint(output)
    else:
        checkpoint = Path(resume)
        if not (checkpoint / "trainer_state.json").is_file():
            raise AiaynError(f"{resume}: not a complete checkpoint (no trainer_state.json)", key="resume")
        _check_same_run(checkpoint.parent, recipe, "--resume: the run of", "resume with its own recipe")
    if checkpoint is not None:
        check_no_pickles(checkpoint)  # before anything is loaded
    return checkpoint


def _check_folder(output: Path) -> None:
    """The run folder is a folder or absent (the output rule of `files.py`: never a file, a device, a FIFO)."""
    kind = node_kind(output)
    if kind not in ("missing", "folder"):
        raise AiaynError(f"{output}: is a {kind}, not a folder", key="output_dir")


def _check_same_run(folder: Path, recipe: TrainRecipe, what: str, advice: str) -> None:
    saved = folder / RECIPE_FILE
    if not saved.is_file():
        return
    try:
        previous = load_recipe(saved)
    except AiaynError as err:
        raise AiaynError(f"{what} {folder} holds a recipe that does not load ({err})") from None
    differences = recipe_differences(previous, recipe)
    if differences:
        shown = "; ".join(differences[:3]) + (f"; and {len(differences) - 3} more" if len(differences) > 3 else "")
        raise AiaynError(f"{what} {folder} holds a different run ({shown}); {advice}")


@contextlib.contextmanager
def locked_run_folder(output: Path) -> Iterator[None]:
    """Hold an exclusive lock (`flock`) on `output` for the whole run; another run into it is refused.

    The lock goes with the process: a killed run leaves no stale lock. Under `accelerate launch`
    the process of rank 0 holds it for all.
    """
    output = Path(output)
    _check_folder(output)
    try:
        import fcntl
    except ImportError:  # no flock on this system: unlocked, as before
        yield
        return
    if int(os.environ.get("RANK", "0")) != 0:
        yield
        return
    named, output = output, Path(os.path.realpath(output))  # a link to a folder (even one not made yet): the folder
    created = [folder for folder in (output, *output.parents) if not folder.exists()]  # innermost first
    output.mkdir(parents=True, exist_ok=True)
    lock_created = not (output / LOCK_FILE).exists()
    fd = os.open(output / LOCK_FILE, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    locked = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            raise AiaynError(
                f"{named}: in use by another run ({holder}); wait for it to end or choose another {{output_dir}}",
                key="output_dir",
                mentions=("output_dir",),
            ) from None
        os.ftruncate(fd, 0)
        locked = True
        os.pwrite(fd, f"aiayn train, process {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield
    except BaseException:
        if locked and lock_created:  # a failed run leaves no lock file it made (flock is the lock, not the file)
            with contextlib.suppress(OSError):
                (output / LOCK_FILE).unlink()
                for folder in created:  # and the folders made for it (runs/), where still empty
                    folder.rmdir()
        raise
    finally:
        os.close(fd)  # releases the lock


def check_resumable(
    state: TrainState,
    checkpoint: Path,
    num_processes: int,
    tokenizer_hash: str,
    data_fingerprint: str = "",
    accept_new_data: bool = False,
) -> None:
    """The data position is per process, the vocabulary must be the one trained with, and the data the
    one the position counts in (unless `accept_new_data`)."""
    if state.num_processes != num_processes:
        raise AiaynError(
            f"{checkpoint} was written by {state.num_processes} process(es); resume it with the same "
            f"number (now {num_processes})"
        )
    if state.tokenizer_hash and state.tokenizer_hash != tokenizer_hash:
        raise AiaynError(
            f"{checkpoint} was trained with another tokenizer than the one given; use the run's own "
            f"tokenizer (it is saved in the checkpoint folder)"
        )
    if state.data_fingerprint and data_fingerprint and state.data_fingerprint != data_fingerprint:
        if not accept_new_data:
            raise AiaynError(
                f"{checkpoint} was trained on other data (the training files changed since: fingerprint {state.data_fingerprint[:12]}, now {data_fingerprint[:12]}); resume over the new data on purpose with {{accept_new_data}}, or start a new run in another {{output_dir}}",
                mentions=("accept_new_data", "output_dir"),
            )


class MetricsLog:
    """`metrics.jsonl`: appended line by line; on resume, records after the checkpoint's step are dropped."""

    def __init__(self, output_dir: Path, resume_step: int | None, enabled: bool = True):
        self.path = output_dir / METRICS_FILE
        self.enabled = enabled
        if not enabled:
            return
        if resume_step is None:
            self.path.unlink(missing_ok=True)
        elif self.path.is_file():
            kept = [record for record in read_metrics(self.path) if record.get("step", 0) <= resume_step]
            atomic_write(self.path, "".join(json.dumps(record) + "\n" for record in kept))

    def write(self, record: dict[str, Any]) -> None:
        if self.enabled:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")


__all__ = [
    "LOCK_FILE",
    "METRICS_FILE",
    "MetricsLog",
    "RECIPE_FILE",
    "TrainState",
    "check_resumable",
    "locked_run_folder",
    "prepare_output_dir",
]
