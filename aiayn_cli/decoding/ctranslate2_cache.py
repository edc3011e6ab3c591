"""The `ctranslate2` engine's cache: each model converted once (`ctranslate2_convert.save_ctranslate2`,
float32: CTranslate2 quantizes when it loads, so one folder serves every precision) into
`cache_dir()/ctranslate2/<key>`, the key made of the weights, the configuration, the vocabulary and
the converter's version: a second run with the same model loads the converted folder as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..errors import AiaynError

# Part of the cache key: a change to what `save_ctranslate2` writes makes every cached folder stale.
CONVERTER_VERSION = 1


def cache_dir() -> Path:
    """Where converted models are kept: $AIAYN_CACHE, else $XDG_CACHE_HOME/aiayn, else ~/.cache/aiayn."""
    if os.environ.get("AIAYN_CACHE"):
        return Path(os.environ["AIAYN_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "aiayn"


def model_key(model, tokenizer) -> str:
    """A hash of everything the converted folder depends on: the weights (names, dtypes, shapes and
    bytes), the configuration, the vocabulary and its special tokens, and the converter's version."""
    import ctranslate2
    import torch

    digest = hashlib.sha256()
    digest.update(f"aiayn-ctranslate2 {CONVERTER_VERSION} ctranslate2 {ctranslate2.__version__}\n".encode())
    config = {k: v for k, v in model.config.to_dict().items() if not k.startswith("_") and k != "transformers_version"}
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    tokens = tokenizer.convert_ids_to_tokens(list(range(model.config.vocab_size)))
    specials = [tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token, tokenizer.pad_token]
    digest.update(json.dumps([tokens, specials]).encode())
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}\n".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()[:32]


def converted_folder(model, tokenizer, cache: str | Path | None = None) -> tuple[Path, bool]:
    """The model's CTranslate2 folder in the cache, converted now if it is not there yet; (folder,
    whether it was converted now). Two processes converting at once both succeed: the first folder
    in place stays (`staging_dir(keep_existing=True)`)."""
    from .ctranslate2_convert import save_ctranslate2

    folder = Path(cache if cache is not None else cache_dir()) / "ctranslate2" / model_key(model, tokenizer)
    if (folder / "model.bin").is_file():
        return folder, False
    try:
        save_ctranslate2(model.float(), tokenizer, folder, keep_existing=True)
    except OSError as err:
        raise AiaynError(
            f"{folder}: cannot write the converted model there ({err.strerror or err}); "
            "set AIAYN_CACHE to a writable folder"
        ) from None
    return folder, True


__all__ = ["CONVERTER_VERSION", "cache_dir", "converted_folder", "model_key"]
