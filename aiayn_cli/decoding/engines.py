"""Decoding engines: what turns a batch of source token ids into hypotheses. `Translator` (text <->
ids, batching, the order of the outputs) holds one and calls its one method, `decode`.

    from aiayn_cli.decoding import Translator

    translator = Translator.from_pretrained("runs/base", engine="ctranslate2", dtype="int8")
    translator.translate(["A man rides a bike."])

* `torch` (`torch_engine.TorchEngine(model, device, dtype)`): aiayn's own decoder, every option.
* `ctranslate2` (`ctranslate2_engine.CTranslate2Engine(model_path, output_cap, device, compute_type)`):
  the model converted once into a cache folder (`ctranslate2_cache`) and decoded by CTranslate2.

The two differ by their constructor's arguments, as CTranslate2's own `Translator(model_path,
device, compute_type)` and torch's `device` and `dtype` do; `make_engine` builds either from a
loaded model and aiayn's names for the device and the precision.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import AiaynError
from .defaults import ENGINES, DecodingOptions, output_length_cap

if TYPE_CHECKING:  # pragma: no cover
    from .defaults import Hypothesis


class Engine(Protocol):
    """A decoder: `name` (the --engine value), `device` and `precision` (what decodes, as reported)."""

    name: str
    precision: str

    def decode(self, sources: list[list[int]], options: DecodingOptions) -> list[list[Hypothesis]]:
        """Each source's hypotheses, best first (`options.nbest` of them): `sources` are token ids
        ending with `</s>`, `Hypothesis.tokens` ids without `<s>` and `</s>`."""
        ...


def check_engine(engine: str) -> None:
    """An `AiaynError` keyed `engine` unless `engine` is one of `ENGINES`."""
    if engine not in ENGINES:
        raise AiaynError(f"{engine}: choose one of {', '.join(ENGINES)}", key="engine")


def make_engine(
    engine: str, model, tokenizer, device=None, dtype=None, cache: str | Path | None = None, key: str | None = None
) -> Engine:
    """The engine named `engine` for a loaded `model` and `tokenizer`, on aiayn's `device` (auto, cpu,
    cuda[:N], mps) in aiayn's `dtype` (auto, fp32, bf16, fp16, int8). The ctranslate2 engine converts
    the model into `cache` (default `ctranslate2_cache.cache_dir()`, under `key`: see
    `converted_folder`) unless it is there, and leaves the model's weights on the meta device (the
    configuration stays readable); its threads are PyTorch's (`torch.set_num_threads`)."""
    check_engine(engine)
    if engine == "torch":
        from .torch_engine import TorchEngine

        return TorchEngine(model, device=device, dtype=dtype)

    import torch

    from .ctranslate2_cache import converted_folder

    needs_ctranslate2()
    from .ctranslate2_engine import compute_type, ctranslate2_device

    if isinstance(dtype, torch.dtype):
        dtype = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    compute_type(dtype, ctranslate2_device(device)[0])  # refused before the conversion
    folder, converted = converted_folder(model, tokenizer, cache, key=key)
    model.to("meta")  # the weights live in CTranslate2 now
    ct2 = ctranslate2_engine(folder, model, device, dtype, torch.get_num_threads())
    ct2.converted = converted
    return ct2


def ctranslate2_engine(folder: Path, model, device=None, dtype=None, threads: int | None = None):
    """`CTranslate2Engine` on the converted `folder` of `model` (its configuration and generation_config
    give the longest output), with aiayn's names for the device and the precision; `threads`: default
    one per CPU this process may run on."""
    from .ctranslate2_engine import CTranslate2Engine, compute_type, ctranslate2_device

    needs_ctranslate2()
    kind, index = ctranslate2_device(device)
    return CTranslate2Engine(
        folder,
        output_length_cap(model),
        device=kind,
        device_index=index,
        compute_type=compute_type(dtype, kind),
        threads=threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()),
    )


def needs_ctranslate2() -> None:
    """An `AiaynError` keyed `engine` where the ctranslate2 extra is not installed."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise AiaynError("ctranslate2: needs CTranslate2: pip install 'aiayn-cli[ctranslate2]'", key="engine") from None


__all__ = ["ENGINES", "Engine", "check_engine", "make_engine"]
