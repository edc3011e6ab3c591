"""The project's one model loader: a folder or Hub id to an `AiaynForConditionalGeneration` and its
tokenizer, checked whole (`load_pretrained`); every command that reads a saved model goes through it.

It is not part of the remote code (`configuration_aiayn.py`, `modeling_aiayn.py`): a saved folder
loads without it, with `transformers` alone. Whether a generation_config.json's values can be decoded
with is decoding's question (`aiayn_cli.decoding.defaults.check_saved_options`), asked by its callers.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import AiaynError, first_line
from ..lookup import check_hub_model


def _check_config_values(path: Path, key: str | None) -> None:
    """A local config.json is aiayn's (`model_type`), and each number in it is a finite number (a
    `layer_norm_eps` of "x" or NaN went as far as the first layer norm)."""
    import math

    from .configuration_aiayn import AiaynConfig

    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # missing or unreadable: the loader's own line names it
    if not isinstance(values, dict):
        raise AiaynError(f"{path}: must be a JSON object", key=key)
    if values.get("model_type", AiaynConfig.model_type) != AiaynConfig.model_type:
        raise AiaynError(f"{path}: model_type is {values['model_type']!r}, not {AiaynConfig.model_type!r}: "
                         "not a model aiayn reads", key=key)  # fmt: skip
    defaults = AiaynConfig().to_dict()
    for name, value in values.items():
        default = defaults.get(name)
        if isinstance(default, bool) or not isinstance(default, (int, float)) or value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise AiaynError(f"{path}: {name} must be a finite number, got {json.dumps(value)}", key=key)


def load_pretrained(path_or_hub_id: str, revision: str | None = None, key: str | None = None):
    """The model and tokenizer of a folder or Hub id (`AutoModelForSeq2SeqLM`, `AutoTokenizer`), checked
    whole, or an `AiaynError` line naming what is wrong (`key`: the option that named the model):

    - a local path that is not a folder; pickled weights (`pytorch_model.bin`), which are never loaded
      (unpickling can run code): safetensors only;
    - a damaged model.safetensors; a config.json whose sizes are not those of the weights; weights the
      config expects but the file lacks, or weights it holds that the config does not use;
    - a weight that holds NaN or infinity;
    - a generation_config.json that cannot be read; a tokenizer that cannot be loaded.
    """
    import transformers
    from safetensors import SafetensorError
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

    check_hub_model(str(path_or_hub_id), revision, key=key)
    where = str(path_or_hub_id)
    folder = Path(where).expanduser()
    _refuse_pickled_weights(folder, key)
    _check_config_values(folder / "config.json", key)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # its report of mismatched weights: the line below says it
    try:
        model, info = AutoModelForSeq2SeqLM.from_pretrained(
            where, revision=revision, output_loading_info=True, use_safetensors=True
        )
    except SafetensorError as err:
        raise AiaynError(
            f"{where}: its model.safetensors is damaged or truncated ({first_line(err)})", key=key
        ) from None
    except RuntimeError as err:
        if "mismatch" not in str(err):
            raise
        raise AiaynError(
            f"{where}: config.json does not match model.safetensors (weights of other sizes); "
            "the config saved with the weights belongs beside them",
            key=key,
        ) from None
    except (OSError, ValueError, KeyError) as err:
        raise AiaynError(f"{where}: cannot load a model ({first_line(err)})", key=key) from None
    finally:
        transformers.logging.set_verbosity(verbosity)
    _check_weights(model, info, where, key)
    if (folder / "generation_config.json").is_file():
        try:
            GenerationConfig.from_pretrained(folder)
        except (OSError, ValueError) as err:
            raise AiaynError(f"{folder / 'generation_config.json'}: cannot be read ({first_line(err)})") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, revision=revision)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise AiaynError(
            f"{_broken_json(folder) or where}: cannot load its tokenizer ({first_line(err)})", key=key
        ) from None
    return model, tokenizer


PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth", "model.ckpt")


def _refuse_pickled_weights(folder: Path, key: str | None) -> None:
    """A local folder whose weights are only pickled: one line (they are never unpickled)."""
    if not folder.is_dir() or any(folder.glob("*.safetensors")) or (folder / "model.safetensors.index.json").exists():
        return
    pickled = [name for name in PICKLED_WEIGHTS if (folder / name).exists()]
    if pickled:
        raise AiaynError(
            f"{folder}: its weights are pickled ({pickled[0]}), and pickles are not loaded (loading one can run "
            "code); convert them to model.safetensors (safetensors' convert script, or save_pretrained)",
            key=key,
        )


def _check_weights(model, info: dict, where: str, key: str | None) -> None:
    """Every weight the config asks for is in the file, every weight in the file is used, all finite."""
    if info.get("missing_keys"):
        missing = sorted(info["missing_keys"])
        raise AiaynError(
            f"{where}: model.safetensors lacks {len(missing)} weight(s) that config.json asks for (e.g. {missing[0]})",
            key=key,
        )
    if info.get("unexpected_keys"):
        unused = sorted(info["unexpected_keys"])
        raise AiaynError(
            f"{where}: model.safetensors holds {len(unused)} weight(s) that config.json does not use (e.g. "
            f"{unused[0]}); the config saved with the weights belongs beside them",
            key=key,
        )
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            bad = int((~torch.isfinite(tensor)).sum())
            raise AiaynError(
                f"{where}: the weight {name} holds {bad} NaN or infinite value(s) of {tensor.numel()}; the model "
                "cannot translate (a diverged run? use an earlier checkpoint)",
                key=key,
            )


def _broken_json(folder: Path) -> Path | None:
    """The first of a model folder's tokenizer files that is not valid JSON, if any."""
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        path = folder / name
        try:
            if path.is_file():
                json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            return path
    return None


__all__ = ["PICKLED_WEIGHTS", "load_pretrained"]
