"""The training state of a checkpoint, as tensors (safetensors) and JSON only: nothing is unpickled on resume.

    training_state/
        optimizer.safetensors    the optimizer's tensors (Adam's moments and step counts), "<param index>.<name>"
        optimizer.json           its param groups (betas, eps, the last learning rate, ...) and other values
        grad_scaler.json         the fp16 loss scale, when the run has one
        rng-<rank>.safetensors   each process's torch RNG states (CPU, CUDA)
        rng-<rank>.json          each process's Python and NumPy RNG states

The model's weights are the checkpoint's own `model.safetensors`; the learning-rate schedule is a
function of the update count (`scheduler_steps` in `trainer_state.json`) and is rebuilt from it.

torch.save / accelerate's save_state write pickles, and a pickle can run any code when it is
loaded: a checkpoint prepared by someone else would run it on `--resume`. So a checkpoint that
holds a pickle (or any file this module does not write) is refused before anything is read.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ..errors import AiaynError, first_line
from ..files import atomic_write

OPTIMIZER_TENSORS, OPTIMIZER_JSON, SCALER_JSON = "optimizer.safetensors", "optimizer.json", "grad_scaler.json"
# Files a checkpoint may hold: safetensors, JSON and the tokenizer's and model's text files.
SAFE_SUFFIXES = {".safetensors", ".json", ".txt", ".model", ".yaml", ".md", ".py", ".png", ".jinja"}
PICKLE_SUFFIXES = {".pkl", ".pickle", ".bin", ".pt", ".pth", ".ckpt", ".npy", ".npz", ".joblib"}


def check_no_pickles(checkpoint: Path) -> None:
    """Refuse a checkpoint holding a pickle (by name or by content) or a file aiayn does not write; links
    are followed, into linked folders too (each folder once)."""
    for path in _all_files(Path(checkpoint)):
        if not path.is_file():  # a FIFO would block the read below; a dangling link names nothing
            raise AiaynError(f"{path}: not a regular file in a checkpoint; it is refused")
        pickled = path.suffix in PICKLE_SUFFIXES
        if path.suffix in SAFE_SUFFIXES - {".safetensors", ".png"}:  # text: a pickle starts with b"\x80" (protocol 2+)
            with path.open("rb") as f:
                pickled = f.read(1) == b"\x80"
        if pickled or path.suffix not in SAFE_SUFFIXES:
            raise AiaynError(
                f"{path}: {'a pickle' if pickled else 'a file aiayn does not write'} in a checkpoint; loading it "
                "could run code, so it is refused (aiayn checkpoints hold only safetensors and JSON)"
            )


def _all_files(folder: Path) -> list[Path]:
    """Every file under `folder`, links to files and folders followed (a link loop is walked once)."""
    found, seen = [], set()
    for root, dirs, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs.clear()
            continue
        seen.add(real)
        found += [Path(root) / name for name in names]
    return sorted(found)


def save_training_state(accelerator, optimizer, folder: Path) -> None:
    """Write the optimizer (main process) and every process's RNG states into `folder` (it exists)."""
    rank = accelerator.process_index
    if accelerator.is_main_process:
        tensors, rest = _split_optimizer_state(optimizer.state_dict())
        save_file(tensors, folder / OPTIMIZER_TENSORS)
        atomic_write(folder / OPTIMIZER_JSON, json.dumps(rest, indent=1) + "\n")
        if accelerator.scaler is not None:
            atomic_write(folder / SCALER_JSON, json.dumps(accelerator.scaler.state_dict()) + "\n")
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng.update({f"cuda.{i}": state for i, state in enumerate(torch.cuda.get_rng_state_all())})
    save_file(rng, folder / f"rng-{rank}.safetensors")
    numpy_state = np.random.get_state()
    python_state = random.getstate()
    atomic_write(
        folder / f"rng-{rank}.json",
        json.dumps({"python": [python_state[0], list(python_state[1]), python_state[2]], "numpy": _numpy(numpy_state)})
        + "\n",
    )


def load_training_state(accelerator, optimizer, folder: Path) -> None:
    """Restore what `save_training_state` wrote (the caller has checked the folder with `check_no_pickles`);
    a file that is damaged, truncated or of another shape is one `AiaynError` naming it."""
    rest = _read_json(folder / OPTIMIZER_JSON)
    with _names(folder / OPTIMIZER_JSON):
        optimizer.load_state_dict(_join_optimizer_state(_load(folder / OPTIMIZER_TENSORS), rest))
    if accelerator.scaler is not None and (folder / SCALER_JSON).is_file():
        with _names(folder / SCALER_JSON):
            accelerator.scaler.load_state_dict(_read_json(folder / SCALER_JSON))
    rank = accelerator.process_index
    rng = _load(folder / f"rng-{rank}.safetensors")
    with _names(folder / f"rng-{rank}.safetensors"):
        torch.set_rng_state(rng["torch"])
        cuda = [rng[f"cuda.{i}"] for i in range(len(rng) - 1)]
        if cuda and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(cuda)
    states = _read_json(folder / f"rng-{rank}.json")
    with _names(folder / f"rng-{rank}.json"):
        version, internal, gauss = states["python"]
        random.setstate((version, tuple(internal), gauss))
        name, keys, pos, has_gauss, cached = states["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AiaynError(f"{path}: missing; the checkpoint is incomplete (resume from another one)") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise AiaynError(f"{path}: damaged or truncated ({first_line(err)}); resume from another checkpoint") from None


@contextlib.contextmanager
def _names(path: Path):
    """A state file whose contents do not have the shape this module writes: one line naming it."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as err:
        raise AiaynError(
            f"{path}: not the state aiayn saved ({type(err).__name__}: {first_line(err)}); resume from another checkpoint"
        ) from None


def _load(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError

    try:
        return load_file(path)
    except SafetensorError as err:
        raise AiaynError(f"{path}: damaged or truncated ({first_line(err)})") from None


def _split_optimizer_state(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """An optimizer's state_dict as (tensors, JSON-able rest)."""
    tensors, values = {}, {}
    for index, per_param in state["state"].items():
        for name, value in per_param.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                values[f"{index}.{name}"] = value
    groups = [
        {k: (v.item() if isinstance(v, torch.Tensor) else v) for k, v in g.items()} for g in state["param_groups"]
    ]
    return tensors, {"param_groups": groups, "values": values}


def _join_optimizer_state(tensors: dict[str, torch.Tensor], rest: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in [*tensors.items(), *rest["values"].items()]:
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    return {"state": state, "param_groups": rest["param_groups"]}


def _numpy(state) -> list:
    name, keys, pos, has_gauss, cached = state
    return [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]


__all__ = ["check_no_pickles", "load_training_state", "save_training_state"]
