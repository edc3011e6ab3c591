"""The `ctranslate2` engine: the model converted once (`ctranslate2_cache`) and decoded by CTranslate2.

    engine = CTranslate2Engine("~/.cache/aiayn/ctranslate2/<key>", device="cpu", compute_type="int8")
    engine.decode([[12, 7, 2]], DecodingOptions(length_penalty_style="hf"))

As CTranslate2's own `Translator(model_path, device, compute_type)`: the engine reads only the
converted folder (its vocabulary maps aiayn's token ids to CTranslate2's tokens). CTranslate2 does
what aiayn's search does (`ctranslate2_options`). Its beam search ranks finished hypotheses by
|Y|^alpha (`length_penalty_style hf`); for the paper's GNMT penalty, aiayn's default, it returns
the beam's finished hypotheses with their summed log-probabilities, which are ranked here by
((5 + |Y|) / 6)^alpha (`search.length_penalty`). Where aiayn forces `</s>` at a sentence's maximum
length, CTranslate2 returns the hypothesis unfinished: it is cut to that length and scored with
`</s>` after it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import AiaynError
from .defaults import DecodingOptions, Hypothesis, length_penalty, max_output_lengths

# aiayn's dtype (--precision, --quantization int8) -> CTranslate2's compute_type. CTranslate2 has no bfloat16 or float16 on CPUs
# (`ctranslate2.get_supported_compute_types("cpu")`); auto is float32 there, the precision whose
# translations are the torch engine's (its int8 is a choice, as for the torch engine).
COMPUTE_TYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}


def ctranslate2_device(device) -> tuple[str, int]:
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


def compute_type(dtype: str | None, device: str) -> str:
    """CTranslate2's compute_type for aiayn's dtype (--precision, --quantization) on `device` (cpu or cuda), or an `AiaynError`."""
    import ctranslate2

    supported = ctranslate2.get_supported_compute_types(device)
    if dtype in (None, "auto"):
        chosen = "bfloat16" if device == "cuda" and "bfloat16" in supported else "float32"
    elif dtype in COMPUTE_TYPES:
        chosen = COMPUTE_TYPES[dtype]
    else:
        raise AiaynError(f"{dtype}: choose one of auto, {', '.join(COMPUTE_TYPES)}", key="dtype")
    if chosen not in supported:
        names = [name for name, kind in COMPUTE_TYPES.items() if kind in supported and name != "int8"]
        int8 = "; {quantization} int8 for its int8" if COMPUTE_TYPES["int8"] in supported else ""
        raise AiaynError(
            f"{dtype}: CTranslate2 has no {chosen} on {device} here; choose one of auto, {', '.join(names)}{int8}",
            key="dtype",
            mentions=("quantization",),
        )
    return chosen


def ctranslate2_options(options: DecodingOptions) -> dict:
    """`translate_batch`'s arguments for `options` (the length limits apart). CTranslate2's beam search
    ranks finished hypotheses by log p / |Y|^alpha (`length_penalty_style hf`); for the paper's GNMT
    penalty it is asked for alpha 0, and returns the beam's finished hypotheses with their summed log p,
    which `CTranslate2Engine.decode` ranks by log p / ((5 + |Y|) / 6)^alpha."""
    arguments = dict(
        num_hypotheses=options.nbest,
        length_penalty=ctranslate2_alpha(options),
        return_scores=True,
        return_end_token=True,
        max_input_length=0,  # the sources are cut to the model's limit already (`on_long`)
    )
    if options.num_beams > 1 and not options.do_sample:
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


def ctranslate2_alpha(options: DecodingOptions) -> float:
    """The alpha CTranslate2 divides by |Y|^alpha with: the one asked for under `hf`, else 0 (log p)."""
    return options.length_penalty if options.length_penalty_style == "hf" else 0.0


def read_vocabulary(folder: Path) -> list[str]:
    """The converted folder's tokens, by id (CTranslate2 writes `shared_vocabulary.json`, older versions `.txt`)."""
    if (folder / "shared_vocabulary.json").is_file():
        return json.loads((folder / "shared_vocabulary.json").read_text(encoding="utf-8"))
    return (folder / "shared_vocabulary.txt").read_text(encoding="utf-8").split("\n")[:-1]


class CTranslate2Engine:
    """CTranslate2 decoding the converted model in `model_path` on `device` (cpu or cuda, `device_index`)
    with `compute_type` (float32, int8, bfloat16, ...). `output_cap`: the most tokens before `</s>` the
    model can give (`search.output_length_cap`).

    Threads: on a CPU, a batch of fewer than two sentences per thread is decoded by one replica with
    every thread on each operation (`intra_threads`), a larger one by one single-thread replica per
    thread, each decoding a part of it (`inter_threads`; `translator_for`).
    """

    name = "ctranslate2"
    converted = False  # `engines.make_engine` converted the model into `model_path` just now

    def __init__(
        self,
        model_path: str | Path,
        output_cap: int,
        device: str = "cpu",
        device_index: int = 0,
        compute_type: str = "float32",
        threads: int = 1,
    ):
        self.folder = Path(model_path)
        self.kind, self.index = device, device_index
        self.device = f"cuda:{device_index}" if device == "cuda" else "cpu"
        self.compute_type = self.precision = compute_type
        self.threads, self.output_cap = threads, output_cap
        self.tokens = read_vocabulary(self.folder)
        self.ids = {token: i for i, token in enumerate(self.tokens)}
        self.eos = json.loads((self.folder / "config.json").read_text(encoding="utf-8"))["eos_token"]
        self.ctranslate2 = self._load()
        self.replicas = None  # one replica per thread, loaded for the first batch that takes them

    def _load(self, replicas: bool = False):
        import ctranslate2

        return ctranslate2.Translator(
            str(self.folder),
            device=self.kind,
            device_index=self.index,
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
        if self.kind != "cpu" or self.threads < 2 or sentences < 2 * self.threads:
            return self.ctranslate2, 0
        if self.replicas is None:
            self.replicas = self._load(replicas=True)
        return self.replicas, -(-sentences // self.threads)

    def decode(self, sources: list[list[int]], options: DecodingOptions) -> list[list[Hypothesis]]:
        """Each source's hypotheses, best first: `sources` are token ids ending with `</s>`."""
        import ctranslate2

        arguments = ctranslate2_options(options)
        tokens = [[self.tokens[i] for i in ids] for ids in sources]
        max_lens = max_output_lengths([len(s) for s in sources], options, self.output_cap)
        seeded = None
        if options.do_sample and options.seed is not None:
            # CTranslate2's workers seed their generators when they start: a seeded call gets its own.
            ctranslate2.set_random_seed(options.seed)
            seeded = self._load()
        search = options.num_beams > 1 and not options.do_sample
        if search:  # every candidate the beam ends with, ranked again below (GNMT's penalty, the length limit)
            arguments["num_hypotheses"] = options.num_beams
        # One call per maximum length: CTranslate2 stops there with the beam's live hypotheses of that
        # many tokens, which `_end_at_the_limit` ends with </s>, as aiayn's search forces it there.
        results: list = [None] * len(tokens)
        for limit in sorted(set(max_lens)):
            rows = [i for i, n in enumerate(max_lens) if n == limit]
            translator, part = (seeded, 0) if seeded is not None else self.translator_for(len(rows))
            found = translator.translate_batch(
                [tokens[i] for i in rows],
                max_batch_size=part,  # parts decoded at once by the replicas (0: the whole batch)
                max_decoding_length=limit,  # </s> included: a hypothesis of `limit` tokens is cut there
                min_decoding_length=options.min_len,
                **arguments,
            )
            for i, result in zip(rows, found):
                results[i] = result
        hypotheses = [self._hypotheses(result, limit, options) for result, limit in zip(results, max_lens)]
        self._end_at_the_limit(seeded or self.ctranslate2, tokens, hypotheses, options)
        for i, hyps in enumerate(hypotheses):
            if search:  # a prefix cut at the limit may be another candidate too: the better one stays
                hyps = list({tuple(h.tokens): h for h in sorted(hyps, key=lambda h: h.score)}.values())
            hypotheses[i] = sorted(hyps, key=lambda h: h.score, reverse=True)[: options.nbest]
        return hypotheses

    def _hypotheses(self, result, limit: int, options: DecodingOptions) -> list[Hypothesis]:
        """aiayn's hypotheses from CTranslate2's: ids without `</s>`, log p, and the score under the
        penalty asked for (CTranslate2's score is log p / |Y|^alpha with `ctranslate2_alpha`, |Y|
        counting `</s>`).
        A hypothesis that did not end within `limit` tokens is cut there, its log p left as NaN for
        `_end_at_the_limit`."""
        alpha, hypotheses = ctranslate2_alpha(options), []
        for tokens, score in zip(result.hypotheses, result.scores):
            ended = bool(tokens) and tokens[-1] == self.eos
            tokens = tokens[:-1] if ended else tokens
            if ended and len(tokens) <= limit:
                log_prob = score * length_penalty(len(tokens) + 1, alpha, "hf")
                lp = length_penalty(len(tokens) + 1, options.length_penalty, options.length_penalty_style)
                hypotheses.append(Hypothesis([self.ids[t] for t in tokens], log_prob / lp, log_prob))
            else:
                hypotheses.append(Hypothesis([self.ids[t] for t in tokens[:limit]], math.nan, math.nan))
        return hypotheses

    def _end_at_the_limit(self, translator, sources: list[list[str]], hypotheses, options: DecodingOptions) -> None:
        """As aiayn's search forces `</s>` at a sentence's maximum length: the hypotheses cut there are
        scored with `</s>` after them (CTranslate2's `score_batch`: log p of the tokens and `</s>`)."""
        cut = [(i, h) for i, hyps in enumerate(hypotheses) for h in hyps if math.isnan(h.log_prob)]
        if not cut:
            return
        targets = [[self.tokens[t] for t in h.tokens] for _, h in cut]
        scored = translator.score_batch([sources[i] for i, _ in cut], targets, max_input_length=0)
        for (_, hypothesis), result in zip(cut, scored):
            hypothesis.log_prob = float(sum(result.log_probs))
            lp = length_penalty(len(hypothesis.tokens) + 1, options.length_penalty, options.length_penalty_style)
            hypothesis.score = hypothesis.log_prob / lp


__all__ = ["COMPUTE_TYPES", "CTranslate2Engine", "compute_type", "ctranslate2_device", "ctranslate2_options"]
