"""Decoding engines: `torch`, aiayn's own decoder (`Translator`: the paper's search, every option), and
`ctranslate2`, the same model run by CTranslate2 (`CTranslate2Translator`).

    from aiayn_cli.decoding import Translator

    translator = Translator.from_pretrained("runs/base", engine="ctranslate2", dtype="int8")
    translator.translate(["A man rides a bike."], length_penalty_style="hf")

The `ctranslate2` engine converts the model once with `aiayn export --to ctranslate2`'s code
(float32; CTranslate2 quantizes when it loads, so one folder serves every precision) into the cache
folder (`cache_dir()`), under a key made of the weights, the configuration, the vocabulary and the
converter's version: a second run with the same model loads the converted folder as it is.
Everything around the decoder is `Translator`'s (tokenization, `on_long`, batching, the order of the
outputs, detokenization); only `_decode` differs.

CTranslate2 does what aiayn's search does where it has the option (`ctranslate2_options`), and an
option it has not is refused in one line rather than replaced by another: its beam search ranks
finished hypotheses by |Y|^alpha (`length_penalty_style hf`), not by the paper's GNMT penalty, so a
beam search with `gnmt` and alpha != 0 is refused. Greedy search and sampling do not depend on the
penalty, so there the score is computed under either style. Where aiayn forces `</s>` at a
sentence's maximum length, CTranslate2 returns the hypothesis unfinished (cut to that length here).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import torch

from ..errors import AiaynError
from ..precision import COMPUTE_DTYPES, InferencePrecision, inference_precision
from .defaults import ENGINES
from .search import DecodingOptions, Hypothesis, length_penalty, max_output_lengths, output_length_cap
from .translator import Translator

# Part of the cache key: a change to what `save_ctranslate2` writes makes every cached folder stale.
CONVERTER_VERSION = 1


def engine_class(engine: str) -> type[Translator]:
    """The `Translator` class of an engine name, or an `AiaynError` keyed `engine`."""
    if engine == "torch":
        return Translator
    if engine == "ctranslate2":
        return CTranslate2Translator
    raise AiaynError(f"{engine}: choose one of {', '.join(ENGINES)}", key="engine")


# ---------------------------------------------------------------------------------------------
# The converted folder, once per model
# ---------------------------------------------------------------------------------------------


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
    from ..serving.ctranslate2 import save_ctranslate2

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


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------


def ctranslate2_options(options: DecodingOptions) -> dict:
    """`translate_batch`'s arguments for `options` (the length limits apart), or an `AiaynError`
    naming the option CTranslate2 cannot honour."""
    search = options.num_beams > 1 and not options.do_sample
    if search and options.length_penalty_style == "gnmt" and options.length_penalty != 0:
        raise AiaynError(
            "gnmt: CTranslate2's beam search ranks by |Y|^alpha, not by the paper's GNMT penalty; "
            "use {length_penalty_style} hf (or {engine} torch)",
            key="length_penalty_style",
            mentions=("length_penalty_style", "engine"),
        )
    arguments = dict(
        num_hypotheses=options.nbest,
        length_penalty=options.length_penalty,
        return_scores=True,
        return_end_token=True,
        max_input_length=0,  # the sources are cut to the model's limit already (`on_long`)
    )
    if search:
        return {**arguments, "beam_size": options.num_beams, "sampling_topk": 1}
    if not options.do_sample:  # greedy
        return {**arguments, "beam_size": 1, "sampling_topk": 1}
    return {
        **arguments,
        "beam_size": 1,
        "sampling_topk": options.top_k,  # 0: the whole vocabulary, as aiayn's top_k 0
        "sampling_topp": options.top_p,
        "sampling_temperature": options.temperature,
    }


def compute_type(dtype, device: str) -> str:
    """CTranslate2's compute_type for aiayn's precision (`inference_precision`'s `dtype`: --precision,
    --quantization) on `device` (cpu or cuda), or an `AiaynError`. CTranslate2 has no bfloat16 or
    float16 on CPUs (`ctranslate2.get_supported_compute_types("cpu")`): auto is fp32 there."""
    import ctranslate2

    supported = ctranslate2.get_supported_compute_types(device)
    computes = tuple(name for name in COMPUTE_DTYPES if InferencePrecision(name).compute_type in supported)
    precision = inference_precision(dtype, device=device, computes=computes)
    if precision.compute_type not in supported:
        int8 = (
            "; {quantization} int8 for its int8"
            if InferencePrecision(int8_weights=True).compute_type in supported
            else ""
        )
        raise AiaynError(
            f"{precision.name}: CTranslate2 has no {precision.compute_type} on {device} here; choose one of auto, "
            f"{', '.join(computes)}{int8}",
            key="quantization" if precision.int8_weights else "dtype",
            mentions=("quantization",),
        )
    return precision.compute_type


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------


class CTranslate2Translator(Translator):
    """`Translator` decoding with CTranslate2 on the model converted once (`converted_folder`).

    The PyTorch weights are dropped once converted (the model stays on the meta device for its
    configuration and generation_config). Threads: PyTorch's count (`torch.set_num_threads`, as
    `aiayn translate --threads` sets it): on a CPU, a batch of fewer than two sentences per thread is
    decoded by one replica with every thread on each operation (`intra_threads`), a larger one by one
    single-thread replica per thread, each decoding a part of it (`inter_threads`; `translator_for`).
    """

    engine = "ctranslate2"

    def __init__(self, model, tokenizer, device=None, dtype=None, cache: str | Path | None = None):
        self.cache = cache
        super().__init__(model, tokenizer, device=device, dtype=dtype)

    def _prepare(self, device, dtype) -> None:
        try:
            import ctranslate2  # noqa: F401  (the extra is installed)
        except ImportError:
            raise AiaynError(
                "ctranslate2: needs CTranslate2: pip install 'aiayn-cli[ctranslate2]'", key="engine"
            ) from None
        kind, index = ctranslate2_device(device)
        self.compute_type = compute_type(dtype, kind)
        self.folder, self.converted = converted_folder(self.model, self.tokenizer, self.cache)
        self.model = self.model.to("meta")  # the weights live in CTranslate2 now
        self.device = torch.device(kind, index) if kind == "cuda" else torch.device("cpu")
        self.precision = self.compute_type
        self.threads = torch.get_num_threads()
        self.ctranslate2 = self._load(kind, index)
        self.replicas = None  # one replica per thread, loaded for the first batch that takes them

    def _load(self, kind: str, index: int, replicas: bool = False):
        import ctranslate2

        return ctranslate2.Translator(
            str(self.folder),
            device=kind,
            device_index=index,
            compute_type=self.compute_type,
            intra_threads=1 if replicas else self.threads,
            inter_threads=self.threads if replicas else 1,
        )

    def translator_for(self, sentences: int):
        """(CTranslate2 translator, `max_batch_size`) for a batch of `sentences`: one replica with every
        thread on each operation, or, on a CPU where each of several threads gets two sentences or more,
        one single-thread replica per thread decoding a part each. `benchmarks/bench_decode.py` measures
        both (ct2_direct, ct2_direct_inter): the parts run faster from two sentences a thread on, in
        float32 and int8 (docs/engines.md)."""
        if self.device.type != "cpu" or self.threads < 2 or sentences < 2 * self.threads:
            return self.ctranslate2, 0
        if self.replicas is None:
            self.replicas = self._load("cpu", 0, replicas=True)
        return self.replicas, -(-sentences // self.threads)

    def decoding_options(self, **overrides) -> DecodingOptions:
        """`Translator.decoding_options`, refused in one line where CTranslate2 cannot decode so."""
        options = super().decoding_options(**overrides)
        ctranslate2_options(options)
        return options

    def _decode(self, sources: list[list[int]], options: DecodingOptions) -> list[list[Hypothesis]]:
        import ctranslate2

        if self.head_masks is not None:
            raise AiaynError(
                "head masks change aiayn's own decoder: use them with {engine} torch", mentions=("engine",)
            )
        arguments = ctranslate2_options(options)
        tokens = [self.tokenizer.convert_ids_to_tokens(ids) for ids in sources]
        max_lens = max_output_lengths([len(s) for s in sources], options, output_length_cap(self.model))
        translator, part = self.translator_for(len(tokens))
        if options.do_sample and options.seed is not None:
            # CTranslate2's workers seed their generators when they start: a seeded call gets its own.
            ctranslate2.set_random_seed(options.seed)
            translator, part = self._load(self.device.type, self.device.index or 0), 0
        search = options.num_beams > 1 and not options.do_sample
        if search:  # every candidate the beam ends with: those cut at their limit are ranked again below
            arguments["num_hypotheses"] = options.num_beams
        results = translator.translate_batch(
            tokens,
            max_batch_size=part,  # parts decoded at once by the replicas (0: the whole batch)
            max_decoding_length=max(max_lens) + 1,  # the tokens and </s>
            min_decoding_length=options.min_len,
            **arguments,
        )
        hypotheses = [self._hypotheses(result, limit, options) for result, limit in zip(results, max_lens)]
        self._end_at_the_limit(translator, tokens, hypotheses, options)
        for i, hyps in enumerate(hypotheses):
            if search:  # a prefix cut at the limit may be another candidate too: the better one stays
                hyps = list({tuple(h.tokens): h for h in sorted(hyps, key=lambda h: h.score)}.values())
            hypotheses[i] = sorted(hyps, key=lambda h: h.score, reverse=True)[: options.nbest]
        return hypotheses

    def _hypotheses(self, result, limit: int, options: DecodingOptions) -> list[Hypothesis]:
        """aiayn's hypotheses from CTranslate2's: ids without `</s>`, log p, and the score under the
        style asked for (CTranslate2's score is log p / |Y|^alpha, |Y| counting `</s>` where it ended).
        A hypothesis that did not end within `limit` tokens is cut there, its log p left as NaN for
        `_end_at_the_limit`."""
        alpha, eos = options.length_penalty, self.tokenizer.eos_token
        hypotheses = []
        for tokens, score in zip(result.hypotheses, result.scores):
            ended = bool(tokens) and tokens[-1] == eos
            tokens = tokens[:-1] if ended else tokens
            if ended and len(tokens) <= limit:
                log_prob = score * length_penalty(len(tokens) + 1, alpha, "hf")
                lp = length_penalty(len(tokens) + 1, alpha, options.length_penalty_style)
                hypotheses.append(Hypothesis(self.tokenizer.convert_tokens_to_ids(tokens), log_prob / lp, log_prob))
            else:
                hypotheses.append(Hypothesis(self.tokenizer.convert_tokens_to_ids(tokens[:limit]), math.nan, math.nan))
        return hypotheses

    def _end_at_the_limit(self, translator, sources: list[list[str]], hypotheses, options: DecodingOptions) -> None:
        """As aiayn's search forces `</s>` at a sentence's maximum length: the hypotheses cut there are
        scored with `</s>` after them (CTranslate2's `score_batch`: log p of the tokens and `</s>`)."""
        cut = [(i, h) for i, hyps in enumerate(hypotheses) for h in hyps if math.isnan(h.log_prob)]
        if not cut:
            return
        targets = [self.tokenizer.convert_ids_to_tokens(h.tokens) for _, h in cut]
        scored = translator.score_batch([sources[i] for i, _ in cut], targets, max_input_length=0)
        for (_, hypothesis), result in zip(cut, scored):
            hypothesis.log_prob = float(sum(result.log_probs))
            lp = length_penalty(len(hypothesis.tokens) + 1, options.length_penalty, options.length_penalty_style)
            hypothesis.score = hypothesis.log_prob / lp


def ctranslate2_device(device: str | torch.device | None) -> tuple[str, int]:
    """CTranslate2's device and index for aiayn's --device: auto is cuda where CTranslate2 sees a GPU."""
    import ctranslate2

    name = str(device) if device is not None else "auto"
    if name == "auto":
        return ("cuda", 0) if ctranslate2.get_cuda_device_count() > 0 else ("cpu", 0)
    kind, _, index = name.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise AiaynError(f"{name}: CTranslate2 runs on cpu, cuda or cuda:N", key="device")
    if kind == "cuda" and ctranslate2.get_cuda_device_count() <= int(index or 0):
        raise AiaynError(f"{name}: CTranslate2 sees no such CUDA device here", key="device")
    return kind, int(index or 0)


__all__ = [
    "CONVERTER_VERSION",
    "ENGINES",
    "CTranslate2Translator",
    "cache_dir",
    "compute_type",
    "converted_folder",
    "ctranslate2_options",
    "engine_class",
    "model_key",
]
