"""The decoding benchmark's modes (`python benchmarks/bench_decode.py --mode MODE`) and what they share:
the source batch, the models of a preset with random weights, and one decode of each system.

Every mode gives every system the same work: the same dimensions and random weights, the same batch of
source sentences (random ids, lengths drawn once), beam `--beams`, and exactly `--new-tokens` (T) decoder
steps for every sentence: `</s>` is suppressed before the last step and forced at it (aiayn: min_len =
T - 1 and at most T - 1 tokens before `</s>`; Hugging Face: min_new_tokens = T - 1, max_new_tokens = T,
forced_eos_token_id). Random weights would otherwise give arbitrary lengths; this way each system
computes T decoder steps for B sentences x beams, encoder included.

| mode | module | what it measures |
|---|---|---|
| `engines` | `engines.py` | tokens/s of aiayn, `generate()` and CTranslate2 on a CPU (and aiayn's CTranslate2 engine) |
| `change` | `change.py` | this checkout's decoder against another revision's, in processes of their own |
| `compile` | `compile.py` | the engine's decoder step eager against `torch.compile` |
| `gpu` | `gpu.py` | sentences/s of aiayn and `generate()` on a GPU, or aiayn's two cache paths |
| `split` | `split.py` | where a decode's time goes, by kind of operator |
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration
from aiayn_cli.decoding.incremental import PreparedModel
from aiayn_cli.decoding.search import DecodingOptions, decode
from benchmarks import common

DEFAULT_VOCAB = {"small": 10000, "base": 37000}


def make_batch(
    batch: int, vocab: int, min_len: int, max_len: int, seed: int, eos: int, pad: int, low: int
) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """Random source sentences (ids in [low, vocab - 1), ending with `eos`), padded on the right."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (batch,), generator=generator).tolist()
    sentences = [torch.randint(low, vocab - 1, (n - 1,), generator=generator).tolist() + [eos] for n in lengths]
    width = max(lengths)
    ids = torch.full((batch, width), pad, dtype=torch.long)
    mask = torch.zeros(batch, width, dtype=torch.long)
    for i, s in enumerate(sentences):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask, sentences


def build_aiayn(dims: str, vocab: int, **overrides) -> AiaynForConditionalGeneration:
    """The model of preset `dims` (random weights, seed 0); `overrides`: config fields set otherwise
    (`d_model`, `d_ff`)."""
    torch.manual_seed(0)
    config = AiaynConfig.from_preset(dims, vocab_size=vocab, max_position_embeddings=512, **overrides)
    return AiaynForConditionalGeneration(config).eval()


def build_marian(dims: str, vocab: int, folder: Path, **overrides):
    """A MarianMTModel of the same dimensions (`overrides` as `build_aiayn`'s), saved to `folder` (for
    CTranslate2's converter).

    Marian's conventions: `</s>` = 0, `<unk>` = 1, `<pad>` = the last id, which is also the decoder
    start token (its embedding is zero)."""
    from transformers import MarianMTModel

    config = common.marian_config(
        dims,
        vocab,
        **overrides,
        max_position_embeddings=512,
        pad_token_id=vocab - 1,
        decoder_start_token_id=vocab - 1,
        eos_token_id=0,
        forced_eos_token_id=0,
        dropout=0.1,
    )
    torch.manual_seed(0)
    model = MarianMTModel(config).eval()
    model.save_pretrained(folder)
    return model


def source_batches(batch: int, vocab: int, args) -> tuple[tuple, tuple]:
    """The same source sentences in aiayn's special ids (`</s>` 2, `<pad>` 0) and in Marian's (`</s>` 0,
    `<pad>` the last id): `(ids, mask, sentences)` of each, on `args.device` where it has one."""
    device = getattr(args, "device", "cpu")
    batches = []
    for eos, pad in ((2, 0), (0, vocab - 1)):
        ids, mask, sentences = make_batch(batch, vocab, args.min_src, args.max_src, args.seed, eos=eos, pad=pad, low=4)
        batches.append((ids.to(device), mask.to(device), sentences))
    return batches[0], batches[1]


def build_models(dims: str, vocab: int, dtypes: list[str], folder: Path, device: str = "cpu", **overrides) -> dict:
    """aiayn in each of `dtypes` (`bf16`: the model in bfloat16; `int8`: the float model with int8 linear
    maps) with its prepared modules, and Marian in each but int8 (`generate()` has none), saved to
    `folder`; `overrides` as `build_aiayn`'s."""
    aiayn = build_aiayn(dims, vocab, **overrides).to(device)
    marian = build_marian(dims, vocab, folder, **overrides).to(device)
    models = {"vocab": vocab, "folder": folder, "aiayn": {}, "prepared": {}, "marian": {}}
    for dtype in dtypes:
        model = copy.deepcopy(aiayn).to(torch.bfloat16) if dtype == "bf16" else aiayn
        models["aiayn"][dtype] = model
        models["prepared"][dtype] = PreparedModel(model, "int8" if dtype == "int8" else "float")
        if dtype != "int8":
            models["marian"][dtype] = copy.deepcopy(marian).to(torch.bfloat16) if dtype == "bf16" else marian
    return models


def in_process_systems(models: dict, ours: tuple, theirs: tuple, steps: int, beams: int, hf: bool = True) -> dict:
    """name -> one decode of the batch, for aiayn in each dtype of `models` (`aiayn`, `aiayn_bf16`, ...)
    and, with `hf`, `generate()` (`hf_marian`, `hf_marian_bf16`); `ours`, `theirs`: `source_batches`'."""
    systems = {}
    for dtype, model in models["aiayn"].items():
        prepared = models["prepared"][dtype]
        name = "aiayn" if dtype == "fp32" else f"aiayn_{dtype}"
        systems[name] = lambda model=model, prepared=prepared: run_aiayn(model, prepared, *ours[:2], steps, beams)
    for dtype, marian in models["marian"].items() if hf else ():
        name = "hf_marian" if dtype == "fp32" else f"hf_marian_{dtype}"
        systems[name] = lambda marian=marian: run_marian(marian, *theirs[:2], steps, beams)
    return systems


def run_aiayn(model, prepared: PreparedModel, ids, mask, steps: int, beams: int) -> int:
    """As `aiayn translate` decodes: the projections prepared once per model (by its `Translator`)."""
    options = DecodingOptions(num_beams=beams, length_penalty=0.6, max_len_a=0, max_len_b=steps - 1, min_len=steps - 1)
    hyps = decode(model, ids, mask, options, prepared)
    lengths = {len(h[0].tokens) + 1 for h in hyps}  # + </s>
    assert lengths == {steps}, lengths
    return steps * ids.size(0)


def run_marian(model, ids, mask, steps: int, beams: int) -> int:
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            num_beams=beams,
            do_sample=False,
            min_new_tokens=steps - 1,
            max_new_tokens=steps,
            length_penalty=0.6,
            early_stopping=True,
        )
    assert out.size(1) == steps + 1, out.shape  # decoder start + T tokens
    return steps * ids.size(0)
