"""The `ctranslate2` engine's cache: each model converted once (`ctranslate2_convert.save_ctranslate2`,
float32: CTranslate2 quantizes when it loads, so one folder serves every precision) into
`cache_dir()/ctranslate2/<key>`, the key made of the weights, the configuration, the vocabulary and
the converter's version: a second run with the same model loads the converted folder as it is.

Each folder holds a manifest (`MANIFEST`): the key of the model it was converted from, and each of its
files' size and sha256. A folder is used only where it matches its manifest and the manifest names
this model; else (a file truncated, emptied, overwritten or deleted, a folder in a file's place,
another model's conversion, no manifest) it is converted again, in a staging folder that then takes
the bad one's place.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import fields
from pathlib import Path

from ..errors import AiaynError
from ..files import node_kind

logger = logging.getLogger(__name__)

# Part of the cache key: a change to what `save_ctranslate2` writes makes every cached folder stale.
CONVERTER_VERSION = 1
MANIFEST = "aiayn-manifest.json"


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


def files_key(model_dir: str | Path) -> str | None:
    """The key of a saved model folder, from its files rather than the loaded model (no torch needed):
    a hash of its weights and JSON files (configuration, generation_config, tokenizer) and the
    converter's version; None where `model_dir` is not a folder holding model.safetensors."""
    import ctranslate2

    folder = Path(model_dir)
    if not (folder / "model.safetensors").is_file():
        return None
    digest = hashlib.sha256()
    digest.update(f"aiayn-ctranslate2 files {CONVERTER_VERSION} ctranslate2 {ctranslate2.__version__}\n".encode())
    for path in sorted(folder.iterdir()):
        if path.suffix in (".safetensors", ".json") and path.is_file():
            digest.update(f"{path.name} {file_record(path)['sha256']}\n".encode())
    return digest.hexdigest()[:32]


def cached_folder(model_dir: str | Path, cache: str | Path | None = None) -> tuple[Path, dict] | None:
    """The converted folder of the saved model in `model_dir` and the model's decoding defaults
    (`decoding_defaults`) where the cache holds a sound one, else None."""
    key = files_key(model_dir)
    if key is None:
        return None
    folder = cache_folder(key, cache)
    if manifest_problem(folder, key) is not None:
        return None
    generation = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("generation")
    return (folder, generation) if isinstance(generation, dict) else None


def cache_folder(key: str, cache: str | Path | None = None) -> Path:
    return Path(cache if cache is not None else cache_dir()) / "ctranslate2" / key


def converted_folder(model, tokenizer, cache: str | Path | None = None, key: str | None = None) -> tuple[Path, bool]:
    """The model's CTranslate2 folder in the cache, converted now unless a folder matching its manifest
    is there; (folder, whether it was converted now). `key`: the folder's name (default `model_key`;
    `files_key` for a model read from a folder). Two processes converting at once both succeed: the
    first folder in place stays where it matches its manifest (`staging_dir(keep_existing=True)`)."""
    key = key or model_key(model, tokenizer)
    folder = cache_folder(key, cache)
    problem = manifest_problem(folder, key)
    if problem is None:
        return folder, False
    if folder.is_dir():
        logger.warning("%s: %s; converting the model again", folder, problem)
    convert(model, tokenizer, folder, key, keep_existing=problem == "missing")
    problem = manifest_problem(folder, key)  # another process's folder, kept, is checked too
    if problem is not None:
        convert(model, tokenizer, folder, key, keep_existing=False)
    return folder, True


def convert(model, tokenizer, folder: Path, key: str, keep_existing: bool) -> None:
    """`save_ctranslate2` into `folder`, with the manifest of the model `key`; one line where the cache
    cannot be written, or where a file (not a folder) is in one of its folders' places."""
    from .ctranslate2_convert import save_ctranslate2

    for place in (folder, *folder.parents):
        kind = node_kind(place)
        if kind not in ("missing", "folder"):
            raise AiaynError(
                f"{place}: is a {kind}, where the converted models' cache folder goes; "
                "move it away or set AIAYN_CACHE to another folder"
            )
        if kind == "folder":
            break
    try:
        save_ctranslate2(
            model.float(),
            tokenizer,
            folder,
            keep_existing=keep_existing,
            finish=lambda staging: write_manifest(staging, key, decoding_defaults(model.generation_config)),
        )
    except OSError as err:
        raise AiaynError(
            f"{folder}: cannot write the converted model there ({err.strerror or err}); "
            "set AIAYN_CACHE to a writable folder"
        ) from None


def file_record(path: Path) -> dict:
    with open(path, "rb") as file:
        sha256 = hashlib.file_digest(file, "sha256").hexdigest()
    return {"size": path.stat().st_size, "sha256": sha256}


def decoding_defaults(generation_config) -> dict:
    """The generation_config's values of the decoding options and `max_length`, as transformers reads
    them (its file leaves out the values equal to `GenerationConfig`'s defaults): what
    `Translator.from_converted` decodes with, without transformers."""
    from .defaults import DecodingOptions

    names = [f.name for f in fields(DecodingOptions)] + ["max_length"]
    values = {name: getattr(generation_config, name, None) for name in names}
    return {k: v for k, v in values.items() if isinstance(v, (bool, int, float, str, type(None)))}


def write_manifest(folder: Path, key: str, generation: dict) -> None:
    """`folder`'s manifest: the model's key, its decoding defaults and each file's size and sha256."""
    files = {p.name: file_record(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}
    manifest = {"model": key, "converter": CONVERTER_VERSION, "generation": generation, "files": files}
    text = json.dumps(manifest, indent=1)
    (folder / MANIFEST).write_text(text + "\n", encoding="utf-8")


def manifest_problem(folder: Path, key: str) -> str | None:
    """What is wrong with the converted `folder` of the model `key`: None where every file its manifest
    lists is there, of that size and sha256, and the manifest names this model; "missing" where there
    is no folder; else a few words."""
    kind = node_kind(folder)
    if kind == "missing":
        return "missing"
    if kind != "folder":
        return f"is a {kind}, not a folder"
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files, model = manifest["files"], manifest["model"]
    except (OSError, ValueError, TypeError, KeyError):
        return f"no readable {MANIFEST}"
    if model != key:
        return "holds another model's conversion"
    if not isinstance(files, dict) or "model.bin" not in files:
        return f"{MANIFEST} lists no model.bin"
    for name, record in files.items():
        path = folder / name
        if node_kind(path) != "file":
            return f"{name} is {'missing' if node_kind(path) == 'missing' else 'not a file'}"
        if file_record(path) != record:
            return f"{name} differs from the one converted (size or sha256)"
    return None


__all__ = [
    "CONVERTER_VERSION",
    "MANIFEST",
    "cache_dir",
    "cached_folder",
    "converted_folder",
    "files_key",
    "manifest_problem",
    "model_key",
]
