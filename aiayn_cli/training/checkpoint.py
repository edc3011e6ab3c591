"""Checkpoints: Hub-format folders plus the training state, written atomically; averaging (§6.1).

A checkpoint is a folder `checkpoint-<step>/` that `from_pretrained` loads as it is:

    model.safetensors, config.json, generation_config.json   the model (`save_pretrained`)
    tokenizer.json, tokenizer_config.json, ...               the tokenizer (`save_pretrained`)
    training_state/                                          optimizer, RNG states of every process
                                                             (safetensors + JSON: `training_state.py`)
    trainer_state.json                                       step, data position, best metric, ...

Nothing in a checkpoint is a pickle, so resuming from a folder someone else prepared runs no code of
theirs; a checkpoint holding one is refused (`load_checkpoint`).

It is written as `checkpoint-<step>.tmp/` and renamed when complete (`trainer_state.json` is
written last), so a kill at any moment leaves every earlier checkpoint whole; names with a
suffix (`.tmp`, `.old`) are never loaded and are cleaned up by the next run.

"[...] for the base models, we used a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals. For the big models, we averaged the
last 20 checkpoints." (§6.1) -- `average_checkpoints`, `write_averaged_checkpoint`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ..errors import AiaynError, first_line
from ..files import as_os_error, atomic_write, check_not_an_input, check_output_folder, remove_dir, staging_dir
from .heartbeat import whole_write
from .training_state import check_no_pickles, load_training_state, save_training_state

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE = "trainer_state.json"
TRAINING_STATE_DIR = "training_state"
_NOT_COPIED = {TRAINER_STATE, TRAINING_STATE_DIR, "model.safetensors", "model.safetensors.index.json"}
# What a model folder holds besides its weights; `average` copies these (and the tokenizer's files) only.
MODEL_FILES = frozenset(
    {"config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json", "averaged_from.json"}
    | {"configuration_aiayn.py", "modeling_aiayn.py"}  # written from the package's own code, never copied
)


def checkpoint_step(path: Path) -> int | None:
    """The step of a complete checkpoint folder's name (`checkpoint-1200` -> 1200), else None."""
    match = CHECKPOINT_PATTERN.match(Path(path).name)
    return int(match.group(1)) if match else None


def list_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints in `output_dir`, oldest first (temporary or half-deleted ones excluded)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [
        p
        for p in output_dir.iterdir()
        if p.is_dir() and checkpoint_step(p) is not None and (p / TRAINER_STATE).is_file()
    ]
    return sorted(found, key=checkpoint_step)


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    checkpoints = list_checkpoints(output_dir)
    return checkpoints[-1] if checkpoints else None


def remove_incomplete(output_dir: str | os.PathLike) -> list[Path]:
    """Delete what a killed run left half-written (`checkpoint-*.tmp`, `checkpoint-*.old`)."""
    removed = []
    for path in Path(output_dir).glob("checkpoint-*.*"):
        if path.is_dir() and path.suffix in (".tmp", ".old"):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def read_trainer_state(checkpoint: str | os.PathLike) -> dict[str, Any]:
    path = Path(checkpoint) / TRAINER_STATE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise AiaynError(f"{path}: not a readable checkpoint state ({first_line(err)})") from None


def save_checkpoint(
    accelerator, model, tokenizer, trainer_state: dict[str, Any], output_dir: Path, optimizer=None
) -> Path:
    """Write `checkpoint-<step>/` atomically; every process must call this (it saves their RNG states).

    Args:
        accelerator (`accelerate.Accelerator`): the run's accelerator (the model and optimizer prepared).
        model: the prepared model. tokenizer: saved beside it. optimizer: the prepared optimizer
            (None: a model-only checkpoint, not resumable).
        trainer_state (`dict`): must hold "step"; written last, as `trainer_state.json`.
    """
    final = output_dir / f"checkpoint-{trainer_state['step']}"
    tmp = final.with_name(final.name + ".tmp")
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / TRAINING_STATE_DIR).mkdir(parents=True)
    accelerator.wait_for_everyone()
    try:
        # 1. The training state: optimizer, RNG of every process (tensors and JSON only).
        if optimizer is not None:
            save_training_state(accelerator, optimizer, tmp / TRAINING_STATE_DIR)
        # 2. The Hub-format model and tokenizer (the full state dict is gathered on every process).
        state_dict = accelerator.get_state_dict(model)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            # whole_write: a process that finds another lost waits for these files before it ends
            with whole_write(), staging_dir(final, name=tmp.name) as folder:  # fsynced, then renamed
                accelerator.unwrap_model(model).save_pretrained(folder, state_dict=state_dict)
                tokenizer.save_pretrained(folder)
                _write_json(folder / TRAINER_STATE, trainer_state)
            # 3. The rename (at the end of the block): before it the checkpoint does not exist, after it
            #    it is complete.
    except BaseException as err:
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)  # a full disk leaves nothing half-written
        converted = as_os_error(err, final)  # safetensors' "No space left on device (os error 28)"
        if converted is not None:
            raise converted from err
        raise
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator, model, optimizer, checkpoint: Path) -> None:
    """Restore the model, the optimizer and the RNG states from `checkpoint` (every process calls this).

    Refuses, before reading anything, a checkpoint that holds a pickle or a file aiayn does not write.
    """
    check_no_pickles(checkpoint)
    state = checkpoint / TRAINING_STATE_DIR
    if not (state / "optimizer.safetensors").is_file():
        raise AiaynError(f"{checkpoint}: no training state ({TRAINING_STATE_DIR}/optimizer.safetensors); not resumable")
    unwrapped = accelerator.unwrap_model(model)
    weights, expected = load_weights(checkpoint), unwrapped.state_dict()
    for name, tensor in weights.items():
        if name in expected and tuple(tensor.shape) != tuple(expected[name].shape):
            raise AiaynError(
                f"{checkpoint}: its weights do not fit the recipe's model ('{name}' is {tuple(tensor.shape)} "
                f"there, {tuple(expected[name].shape)} in the recipe's model): resume with the recipe it was trained with"
            )
    result = unwrapped.load_state_dict(weights, strict=False)
    tied = set(getattr(unwrapped, "_tied_weights_keys", None) or ())
    missing = [k for k in result.missing_keys if k not in tied]
    if missing or result.unexpected_keys:
        name = (missing or result.unexpected_keys)[0]
        raise AiaynError(f"{checkpoint}: its weights do not fit the recipe's model (e.g. '{name}')")
    unwrapped.tie_weights()
    load_training_state(accelerator, optimizer, state)


def rotate_checkpoints(output_dir: Path, keep_last: int, keep: Path | None = None) -> list[Path]:
    """Delete all but the `keep_last` newest checkpoints, and never `keep` (the best one)."""
    checkpoints = list_checkpoints(output_dir)
    doomed = [
        p
        for p in checkpoints[: max(len(checkpoints) - keep_last, 0)]
        if keep is None or p.resolve() != Path(keep).resolve()
    ]
    for path in doomed:
        remove_dir(path)  # a rename first: never a half-deleted "complete" folder
    return doomed


def _write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------------------
# 6.1 Checkpoint averaging
# ---------------------------------------------------------------------------------------------


def load_weights(checkpoint: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The saved tensors of a Hub-format folder (`model.safetensors`, or its shards)."""
    folder = Path(checkpoint)
    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.is_file():
        return _load_safetensors(single)
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise AiaynError(f"{index}: not a safetensors index ({type(err).__name__}: {err})") from None
        weights: dict[str, torch.Tensor] = {}
        for shard in shards:
            weights.update(_load_safetensors(folder / shard))
        return weights
    raise AiaynError(f"{folder}: no model.safetensors (not a saved model folder)")


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError

    try:
        return load_file(path)
    except SafetensorError as err:
        raise AiaynError(f"{path}: damaged or truncated ({str(err).strip().splitlines()[0]})") from None


def average_checkpoints(paths: list[str | os.PathLike]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the checkpoints' weights, accumulated in float64, in the original dtypes;
    a checkpoint holding a NaN or infinite weight is refused, naming it."""
    if not paths:
        raise AiaynError("average: no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for path in paths:
        weights = load_weights(path)
        if total and set(weights) != set(total):
            missing = sorted(set(total) ^ set(weights))[0]
            raise AiaynError(f"average: {path} does not hold the same tensors as {paths[0]} (e.g. '{missing}')")
        for name, tensor in weights.items():
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():  # it would make the average NaN
                raise AiaynError(f"average: {path}: '{name}' holds NaN or infinity (a diverged run); leave it out")
            if name not in total:
                total[name], dtypes[name] = tensor.to(torch.float64), tensor.dtype
            elif tensor.shape != total[name].shape:
                raise AiaynError(
                    f"average: '{name}' has shape {tuple(tensor.shape)} in {path} but {tuple(total[name].shape)} "
                    f"in {paths[0]}"
                )
            else:
                total[name] += tensor.to(torch.float64)
    return {name: (tensor / len(paths)).to(dtypes[name]).contiguous() for name, tensor in total.items()}


def write_averaged_checkpoint(
    paths: list[str | os.PathLike], output: str | os.PathLike, overwrite: bool = False, details: dict | None = None
) -> Path:
    """Average `paths` into a new Hub-format folder `output` (configs and tokenizer from the newest);
    `details` (JSON) go into its averaged_from.json beside the checkpoints' names.

    Raises:
        AiaynError: `output` is, or contains, one of `paths` or a run folder (replacing it would
            delete the checkpoints); or a checkpoint is damaged.
    """
    paths = [Path(p) for p in paths]
    output = check_average_output(paths, Path(output), overwrite)
    _check_same_model(paths)
    averaged = average_checkpoints(paths)
    _check_config_fits(paths[-1], averaged)
    with staging_dir(output) as tmp:  # removed on any error (a full disk included)
        for item in _files_to_copy(paths[-1]):
            shutil.copy2(item, tmp / item.name)
        save_file(averaged, tmp / "model.safetensors", metadata={"format": "pt"})
        _write_json(tmp / "averaged_from.json", {"checkpoints": [p.name for p in paths], **(details or {})})
    return output


def _files_to_copy(checkpoint: Path) -> list[Path]:
    """The newest checkpoint's configs and tokenizer files (JSON and the tokenizer's own), never anything
    else it may hold (a pickle, a script); its model code comes from the package itself."""
    from ..model import configuration_aiayn

    chosen = []
    for item in sorted(checkpoint.iterdir()):
        if item.name in _NOT_COPIED or not is_model_file(item):
            continue
        if item.suffix == ".py":  # the code `save_pretrained` writes: the package's, not the folder's
            item = Path(configuration_aiayn.__file__).with_name(item.name)
            if not item.is_file():
                continue
        chosen.append(item)
    return chosen


def _check_same_model(paths: list[Path]) -> None:
    """The checkpoints are one model's: the same config.json (but for what does not shape the weights
    or the outputs' meaning: dropout, versions) and the same tokenizer.json, which the average takes
    from the newest."""

    def read(path: Path) -> dict | None:
        try:
            config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        except FileNotFoundError:  # not a model folder: reading its weights says so
            return None
        except (ValueError, UnicodeDecodeError) as err:
            raise AiaynError(f"{path / 'config.json'}: not valid JSON ({err})") from None
        if not isinstance(config, dict):
            raise AiaynError(f"{path / 'config.json'}: not a JSON object (a model's configuration is one)")
        return {k: v for k, v in config.items() if "dropout" not in k and not k.endswith("_version")}

    newest, config = paths[-1], read(paths[-1])
    tokenizer = newest / "tokenizer.json"
    for path in paths[:-1]:
        other = read(path)
        if config is not None and other is not None and other != config:
            key = sorted(k for k in set(config) | set(other) if config.get(k) != other.get(k))[0]
            raise AiaynError(
                f"average: {path} and {newest} are different models ({key}: {other.get(key)!r} against "
                f"{config.get(key)!r} in config.json)"
            )
        theirs = path / "tokenizer.json"
        if theirs.is_file() and tokenizer.is_file() and theirs.read_bytes() != tokenizer.read_bytes():
            raise AiaynError(f"average: {theirs} is not {tokenizer}; checkpoints of one run share their tokenizer")


def _check_config_fits(path: Path, weights: dict[str, torch.Tensor]) -> None:
    """The config.json the average takes (the newest's) describes weights of these sizes."""
    from ..model.configuration_aiayn import AiaynConfig
    from ..model.modeling_aiayn import AiaynForConditionalGeneration

    try:
        config = AiaynConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise AiaynError(f"{path / 'config.json'}: cannot be read ({str(err).strip().splitlines()[0]})") from None
    with torch.device("meta"):
        shapes = {name: tuple(t.shape) for name, t in AiaynForConditionalGeneration(config).state_dict().items()}
    for name, tensor in weights.items():
        if name in shapes and shapes[name] != tuple(tensor.shape):
            raise AiaynError(
                f"{path / 'config.json'} does not match its weights ('{name}' is {tuple(tensor.shape)}, "
                f"the config makes it {shapes[name]})"
            )


def check_average_output(paths: list[Path], output: Path, overwrite: bool = False) -> Path:
    """Refuse an output that would replace an input checkpoint, a run folder, or a folder that is not a
    model (`files.check_output_folder`); with `overwrite`, a model folder is replaced. Returns the folder."""
    check_not_an_input(output, paths, key="output")
    if output.is_dir() and (list_checkpoints(output) or (output / "recipe.yaml").exists()):
        raise AiaynError(
            f"{output}: is a training run folder; choose a new folder (e.g. {output}/averaged)", key="output"
        )
    return check_output_folder(
        output, own=is_model_file, what="a model folder", overwrite=overwrite, inputs=paths, key="output"
    )


def is_model_file(path: Path) -> bool:
    """A file of a model folder as `average` writes it: the weights, configs, tokenizer and model code."""
    from ..data.tokenization import TOKENIZER_FILES

    name = path.name
    known = name in MODEL_FILES or name in TOKENIZER_FILES or re.fullmatch(r"model-\d+-of-\d+\.safetensors", name)
    return bool(known) and path.is_file() and not path.is_symlink()


__all__ = [
    "average_checkpoints",
    "checkpoint_step",
    "latest_checkpoint",
    "check_average_output",
    "is_model_file",
    "list_checkpoints",
    "load_checkpoint",
    "load_weights",
    "read_trainer_state",
    "remove_incomplete",
    "rotate_checkpoints",
    "save_checkpoint",
    "write_averaged_checkpoint",
]
