"""`--mode engines` (the default): beam-4 decoding throughput, aiayn's decoder against Hugging Face
`MarianMTModel.generate` and CTranslate2, on a CPU.

    python benchmarks/bench_decode.py                     # small and base dimensions, 2 threads
    python benchmarks/bench_decode.py --dims base --batch 8 32 --repeats 7
    python benchmarks/bench_decode.py --dims base --batch 32 --dtype fp32 int8 --no-hf   # int8 against fp32
    python benchmarks/bench_decode.py --dims small --batch 1 8 --threads 1 2             # threads per batch size
    python benchmarks/bench_decode.py --dtype fp32 bf16                                  # + bf16 where native
    python benchmarks/bench_decode.py --no-hf --no-ctranslate2 --dtype fp32 int8 --repeats 9 \
        --systems aiayn_ct2 ct2_direct aiayn_ct2_int8 ct2_direct_int8                    # the engine's own cost

How the comparison is made fair:

* The same dimensions in all systems: `small` (d_model 256, d_ff 1024, h 4, 3 + 3 layers) and
  `base` (512, 2048, 8, 6 + 6), post-LayerNorm, ReLU, sinusoidal positions, shared and tied
  embeddings scaled by sqrt(d_model), the same vocabulary size; random weights in float32.
* The same work: every system decodes the same batch of source sentences (random token ids, lengths
  drawn once) with beam size 4, and is made to decode exactly `--new-tokens` (T) steps for every
  sentence: `</s>` is suppressed before the last step and forced at it (aiayn: min_len = T - 1
  and max length T - 1 tokens before `</s>`; Hugging Face: min_new_tokens = T - 1,
  max_new_tokens = T, forced_eos_token_id; CTranslate2: min and max decoding length T). Random
  weights would otherwise give arbitrary lengths; this way each system computes T decoder steps
  for B sentences x 4 beams, and throughput is B * T / seconds, encoder included.
* The same threads: `torch.set_num_threads(n)` for both PyTorch systems and `intra_threads=n`,
  `inter_threads=1` for CTranslate2. n is a budget that aiayn's `decode()` uses its own way: a batch
  with at least 64 rows (sentences x beams) per thread is split into n parts, each decoded on one
  thread of its own (`parallel_parts` in `aiayn_cli/decoding/parallel.py`), and a batch whose steps
  hold few rows decodes on one thread (`one_thread_max_elements()`: not on AVX2-only CPUs nor on CPUs
  with AMX, where two threads win), as in `aiayn translate`.
  CTranslate2 can split a batch too, so with n > 1 it is also measured that way from 2 sentences a
  thread on (`ctranslate2_inter`: `inter_threads=n`, `intra_threads=1`, `max_batch_size` = the
  batch / n, so that its n model replicas decode the parts at once); the better of its two is the
  peer to compare with. CTranslate2 runs in a process of its own: in the same process its OpenMP
  calls reached PyTorch's OpenMP runtime (they set PyTorch's thread count, and PyTorch's two-thread
  decoding ran at half speed after a CTranslate2 run). With `--threads 1 2` a second table gives
  every system at its fastest measured thread count, so that a peer is not held to a thread count
  that slows it.
* Measured in one run, alternating the systems within each repetition, each run 0.3 s after the
  previous one (whose OpenMP threads may spin for up to 200 ms); the median of the repetitions is
  reported (other processes on the machine make single timings noisy).
* `--dtype int8` adds aiayn with int8 weights for the linear maps (`aiayn translate --dtype int8`) and
  CTranslate2 with `compute_type="int8"` (its own int8 GEMM, quantized from the same float model).
* `--dtype bf16` adds aiayn in bfloat16 (what `aiayn translate --dtype auto`, the default, chooses
  where the CPU computes bf16 natively) and Hugging Face `generate()` with the Marian model in
  bfloat16 (`model.to(torch.bfloat16)`). CTranslate2 has no bfloat16 on CPUs (its CPU compute types
  are float32, int8 and int8_float32), so its float32 is the reference there.
* `--threads 1 2` measures every row at each thread count (the header says which kernels the CPU
  gets: `ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2` make an
  AVX-512 CPU run the AVX2 kernels of ATen, oneDNN and MKL; `CT2_FORCE_CPU_ISA=AVX2` does the same
  for CTranslate2).

CTranslate2 (`pip install ctranslate2`) converts the saved `MarianMTModel` with
`TransformersConverter` (float32, no quantization); it is skipped with a message where it is absent.

aiayn's CTranslate2 engine (`aiayn translate --engine ctranslate2`) is measured against CTranslate2
called directly on the same converted model (`aiayn_ct2` and `ct2_direct`, `_int8` with `--dtype
int8`): the aiayn model saved with a word-level tokenizer, loaded by `Translator.from_pretrained(...,
engine="ctranslate2")` (which converts it into a cache folder of the run), and decoded from token ids
as `Translator` decodes a batch, with `length_penalty_style hf`, at most T - 1 tokens before `</s>`
and at least T - 1 (so T decoder steps; its last LayerNorm leans towards `</s>` so that every
hypothesis ends there, `ending_at_once`); the direct calls pass the same limits to `translate_batch`,
with every thread on each operation (`ct2_direct`) and, from 2 sentences a thread on, one replica of
one thread per part (`ct2_direct_inter`). `aiayn_ct2/ct2_direct` is the engine's cost (> 0.9: within
10%); where other load makes that ratio noisy, `aiayn_ct2_own_share` says the same within one call: the
share of the engine's time spent outside CTranslate2's `translate_batch`. `--no-engine` leaves them out.

The rows also go to a results file (`benchmarks/results.py`: the command, commit, CPU model and flags,
versions, threads, load average before and after, date), `benchmarks/results/bench_decode.<machine>.json`
unless `--results FILE` says where.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from aiayn_cli import AiaynForConditionalGeneration
from aiayn_cli.decoding.search import DecodingOptions
from benchmarks import common
from benchmarks.decoding import DEFAULT_VOCAB, build_models, in_process_systems, source_batches


class _Vocabulary:
    """The little a converter needs from a tokenizer: the token strings of the ids."""

    def __init__(self, vocab: int):
        self.tokens = ["</s>", "<unk>"] + [f"t{i}" for i in range(2, vocab - 1)] + ["<pad>"]
        self.eos_token, self.unk_token, self.pad_token = "</s>", "<unk>", "<pad>"
        self.special_tokens_map = {}

    def get_vocab(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tokens)}


def build_ctranslate2(folder: Path, vocab: int) -> str:
    """CTranslate2's model folder for the saved Marian model, or a string saying why there is none."""
    try:
        from ctranslate2.converters import TransformersConverter
    except ImportError as err:
        return f"ctranslate2 is not installed ({err}); pip install ctranslate2"

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return _Vocabulary(vocab)

    out = folder / "ct2"
    if not out.is_dir():
        Converter(str(folder)).convert(str(out), quantization=None, force=True)
    return str(out)


def ctranslate2_translator(folder: str, compute_type: str, threads: int, inter: bool = False):
    """`threads` for each operation (`intra_threads`), or with `inter`, one thread per batch and
    `threads` batches at once (`inter_threads`: one model replica per thread)."""
    import ctranslate2

    intra, inter = (1, threads) if inter else (threads, 1)
    return ctranslate2.Translator(
        folder, device="cpu", compute_type=compute_type, intra_threads=intra, inter_threads=inter
    )


def run_ctranslate2(translator, sentences: list[list[str]], steps: int, beams: int, max_batch_size: int = 0) -> int:
    results = translator.translate_batch(
        sentences,
        beam_size=beams,
        length_penalty=0.6,
        max_batch_size=max_batch_size,
        min_decoding_length=steps,
        max_decoding_length=steps,
        max_input_length=0,
    )
    lengths = {len(r.hypotheses[0]) for r in results}
    assert lengths == {steps}, lengths
    return steps * len(sentences)


# CTranslate2 runs in a process of its own: in the same process its OpenMP calls reached PyTorch's
# OpenMP runtime (they set its thread count), and after one CTranslate2 run PyTorch's two-thread
# decoding was measured at about half its speed (small dimensions, 8 sentences: 1,464 -> 782 tokens/s).
_TRANSLATORS: dict = {}  # in that process: the current row's translators, by system name


def _ct2_load(name: str, folder: str, compute_type: str, threads: int, inter: bool) -> None:
    if name == "ctranslate2":  # a new row: the last row's translators go
        _TRANSLATORS.clear()
    _TRANSLATORS[name] = ctranslate2_translator(folder, compute_type, threads, inter)


def _ct2_timed(name: str, sentences: list[list[str]], steps: int, beams: int, max_batch_size: int) -> tuple[float, int]:
    start = time.perf_counter()
    tokens = run_ctranslate2(_TRANSLATORS[name], sentences, steps, beams, max_batch_size)
    return time.perf_counter() - start, tokens


def word_level_tokenizer(vocab: int):
    """aiayn's special ids (<pad> 0, <s> 1, </s> 2, <unk> 3) and words t4 .. t{vocab - 1}: what the
    CTranslate2 engine needs of a tokenizer (the engine is measured from token ids)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{f"t{i}": i for i in range(4, vocab)}}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def ending_at_once(model: AiaynForConditionalGeneration) -> AiaynForConditionalGeneration:
    """`model` with the last LayerNorm's bias leaning far towards `</s>`, so that every hypothesis ends
    as soon as `</s>` is allowed (at T - 1 tokens): the engine and CTranslate2 then do the same T steps,
    and no hypothesis reaches the length limit (where the engine scores `</s>` after it, as aiayn's
    search forces it there, and CTranslate2 alone would not)."""
    decoder = model.model.decoder
    last_norm = decoder.final_norm or decoder.layers[-1].feed_forward_sublayer.norm
    eos = model.lm_head.weight[model.config.eos_token_id]
    with torch.no_grad():
        last_norm.bias.add_(50.0 * eos / eos.norm())
    return model


def engine_options(steps: int, beams: int) -> DecodingOptions:
    """The engine's work: beam search with |Y|^alpha, exactly T decoder steps (T - 1 tokens and </s>,
    or T tokens cut at the limit)."""
    return DecodingOptions(
        num_beams=beams,
        length_penalty=0.6,
        length_penalty_style="hf",
        max_len_a=0,
        max_len_b=steps - 1,
        min_len=steps - 1,
    )


class _TimedTranslator:
    """CTranslate2's translator, timing each `translate_batch` call: the engine's own share of a batch is
    the rest of its `_decode` call (a ratio within one call, which other load on the machine moves little)."""

    def __init__(self, translator):
        self.translator, self.seconds = translator, []

    def __getattr__(self, name: str):
        return getattr(self.translator, name)

    def translate_batch(self, *args, **kwargs):
        start = time.perf_counter()
        results = self.translator.translate_batch(*args, **kwargs)
        self.seconds.append(time.perf_counter() - start)
        return results


_ENGINE_SHARES: dict[str, list[float]] = {}  # in CTranslate2's process: the engine's own share of each call


def _engine_share(name: str) -> float:
    """The median over this row's timed calls of (engine call - translate_batch) / engine call."""
    return statistics.median(_ENGINE_SHARES[name])


def _engine_load(name: str, folder: str, cache: str, dtype: str, threads: int) -> None:
    """aiayn's CTranslate2 engine on the saved model, and CTranslate2 itself on the folder the engine
    converted it into (`ct2_direct`, and with `_inter` one replica per thread)."""
    from aiayn_cli.decoding.translator import Translator

    os.environ["AIAYN_CACHE"] = cache
    torch.set_num_threads(threads)
    translator = Translator.from_pretrained(folder, device="cpu", dtype=dtype, engine="ctranslate2")
    engine = translator.engine
    engine.translator_for(2 * threads)  # loads the replicas where a batch takes them
    engine.ctranslate2 = _TimedTranslator(engine.ctranslate2)
    if engine.replicas is not None:
        engine.replicas = _TimedTranslator(engine.replicas)
    _TRANSLATORS[name], _ENGINE_SHARES[name] = engine, []
    direct = name.replace("aiayn_ct2", "ct2_direct")
    compute_type = engine.compute_type
    _TRANSLATORS[direct] = ctranslate2_translator(str(engine.folder), compute_type, threads)
    if threads > 1:
        _TRANSLATORS[direct + "_inter"] = ctranslate2_translator(str(engine.folder), compute_type, threads, inter=True)


def _engine_timed(name: str, sources: list[list[int]], steps: int, beams: int) -> tuple[float, int]:
    engine = _TRANSLATORS[name]
    options = engine_options(steps, beams)
    timed = [t for t in (engine.ctranslate2, engine.replicas) if t is not None]
    for translator in timed:
        translator.seconds.clear()
    start = time.perf_counter()
    hyps = engine.decode(sources, options)  # a batch, as `Translator.hypotheses` decodes it
    seconds = time.perf_counter() - start
    _ENGINE_SHARES[name].append((seconds - sum(sum(t.seconds) for t in timed)) / seconds)
    assert {len(h[0].tokens) for h in hyps} == {steps - 1}, {len(h[0].tokens) for h in hyps}
    assert all(len(h) == 1 and h[0].log_prob < 0 for h in hyps)  # ended with </s>
    return seconds, steps * len(sources)


def _direct_timed(name: str, sentences: list[list[str]], steps: int, beams: int, part: int) -> tuple[float, int]:
    """CTranslate2 called directly: the engine's limits written out (`max_decoding_length` counts </s>)."""
    start = time.perf_counter()
    results = _TRANSLATORS[name].translate_batch(
        sentences,
        beam_size=beams,
        length_penalty=0.6,
        max_batch_size=part,
        min_decoding_length=steps - 1,
        max_decoding_length=steps,
        max_input_length=0,
        num_hypotheses=beams,
        return_scores=True,
        return_end_token=True,
    )
    seconds = time.perf_counter() - start
    assert {len(r.hypotheses[0]) for r in results} == {steps} and results[0].hypotheses[0][-1] == "</s>"
    return seconds, steps * len(sentences)


class Models:
    """Each dims' models, built once: aiayn (prepared in float and in int8), Marian, CTranslate2's folder."""

    def __init__(self, args, workdir: Path):
        self.args, self.workdir, self.built = args, workdir, {}
        self.ct2_pool = None

    def ctranslate2_process(self):
        """The process CTranslate2 runs in (started once)."""
        if self.ct2_pool is None:
            self.ct2_pool = multiprocessing.get_context("spawn").Pool(1)
        return self.ct2_pool

    def close(self) -> None:
        if self.ct2_pool is not None:
            self.ct2_pool.close()
            self.ct2_pool.join()

    def get(self, dims: str, vocab: int) -> dict:
        if (dims, vocab) not in self.built:
            args = self.args
            folder = self.workdir / f"marian-{dims}-{vocab}"
            models = build_models(dims, vocab, args.dtype, folder, args.device)
            models["ct2"] = "not measured on GPUs" if args.device != "cpu" else "--no-ctranslate2"
            if not args.no_ctranslate2 and args.device == "cpu":
                models["ct2"] = build_ctranslate2(folder, vocab)
            models["engine"] = None
            if not args.no_engine and args.device == "cpu" and importlib.util.find_spec("ctranslate2"):
                models["engine"] = self.workdir / f"aiayn-{dims}-{vocab}"
                ending_at_once(copy.deepcopy(models["aiayn"]["fp32"]).cpu()).save_pretrained(models["engine"])
                word_level_tokenizer(vocab).save_pretrained(models["engine"])
            self.built = {(dims, vocab): models}  # one dims at a time in memory
        return self.built[(dims, vocab)]


def bench(dims: str, vocab: int, batch: int, threads: int, args, models: Models) -> dict:
    torch.set_num_threads(threads)
    m = models.get(dims, vocab)
    # The same source lengths and ids for all systems (each in its own special-id convention).
    ours, theirs = source_batches(batch, vocab, args)
    ct2_sentences = [[f"t{i}" if i != 0 else "</s>" for i in s] for s in theirs[2]]
    steps, beams = args.new_tokens, args.beams
    systems = in_process_systems(m, ours, theirs, steps, beams, hf=not args.no_hf)
    ct2_folder = m["ct2"]
    ct2_reason = None if Path(ct2_folder).is_dir() else ct2_folder
    if ct2_reason is None:
        pool = models.ctranslate2_process()
        for dtype in (d for d in args.dtype if d != "bf16"):  # no bfloat16 on CPUs
            compute_type = {"fp32": "float32"}.get(dtype, dtype)
            name = "ctranslate2" if dtype == "fp32" else f"ctranslate2_{dtype}"
            configurations = [(name, False, 0)]
            if threads > 1 and batch >= 2 * threads:  # as aiayn splits a batch: one part per thread
                # max_batch_size: CTranslate2 decodes the parts on its replicas at once
                configurations.append((f"{name}_inter", True, -(-batch // threads)))
            for system, inter, part in configurations:
                pool.apply(_ct2_load, (system, ct2_folder, compute_type, threads, inter))
                systems[system] = lambda system=system, part=part: pool.apply(
                    _ct2_timed, (system, ct2_sentences, steps, beams, part)
                )
    if m["engine"] is not None:
        pool = models.ctranslate2_process()
        sources = ours[2]  # aiayn's ids, for the engine; as words for CTranslate2 called directly
        words = [[f"t{i}" if i != 2 else "</s>" for i in s] for s in sources]
        cache = str(models.workdir / "cache")
        for dtype in (d for d in args.dtype if d != "bf16"):
            name = "aiayn_ct2" if dtype == "fp32" else f"aiayn_ct2_{dtype}"
            pool.apply(_engine_load, (name, str(m["engine"]), cache, dtype, threads))
            systems[name] = lambda name=name: pool.apply(_engine_timed, (name, sources, steps, beams))
            direct = name.replace("aiayn_ct2", "ct2_direct")
            configurations = [(direct, 0)]
            if threads > 1 and batch >= 2 * threads:
                configurations.append((f"{direct}_inter", -(-batch // threads)))
            for system, part in configurations:
                systems[system] = lambda system=system, part=part: pool.apply(
                    _direct_timed, (system, words, steps, beams, part)
                )
    if args.systems:
        systems = {name: fn for name, fn in systems.items() if name in args.systems}
    tokens = {name: common.timed(fn, args.device)[1] for name, fn in systems.items()}  # warm-up: tokens decoded
    times = common.alternate(systems, args.repeats, device=args.device, warm_up=False)
    row = {"dims": dims, "vocab": vocab, "batch": batch, "beams": beams, "new_tokens": steps, "threads": threads}
    for name in (n for n in systems if n.startswith("aiayn_ct2")):  # the engine's own share of its time
        row[f"{name}_own_share"] = models.ctranslate2_process().apply(_engine_share, (name,))
    row["device"] = args.device
    for name in systems:
        row[f"{name}_tok_s"] = tokens[name] / statistics.median(times[name])
        row[f"{name}_times"] = [round(t, 4) for t in times[name]]
    # Ratios: the median over repetitions of the ratio within the repetition (the systems ran one
    # after the other there, under the same load).
    for a, b in RATIOS:
        if a in systems and b in systems:
            row[f"{a}/{b}"] = common.ratio(times[a], times[b])
    if ct2_reason:
        row["ctranslate2"] = ct2_reason
    return row


RATIOS = [
    ("aiayn", "hf_marian"),
    ("aiayn", "ctranslate2"),
    ("aiayn", "ctranslate2_inter"),
    ("aiayn_bf16", "hf_marian_bf16"),
    ("aiayn_bf16", "hf_marian"),
    ("aiayn_bf16", "ctranslate2"),
    ("aiayn_bf16", "ctranslate2_inter"),
    ("aiayn_int8", "aiayn"),
    ("aiayn_int8", "ctranslate2_int8"),
    ("aiayn_int8", "ctranslate2_int8_inter"),
    ("ctranslate2_int8", "ctranslate2"),
    ("aiayn_ct2", "ct2_direct"),
    ("aiayn_ct2", "ct2_direct_inter"),
    ("aiayn_ct2_int8", "ct2_direct_int8"),
    ("aiayn_ct2_int8", "ct2_direct_int8_inter"),
]


def system_names(rows: list[dict]) -> list[str]:
    """The systems measured in any row, in the order they were first measured."""
    return list(dict.fromkeys(n[: -len("_tok_s")] for r in rows for n in r if n.endswith("_tok_s")))


def print_table(rows: list[dict]) -> None:
    names = system_names(rows)
    ratios = [f"{a}/{b}" for a, b in RATIOS if any(f"{a}/{b}" in r for r in rows)]
    print("| dims | batch | threads | " + " | ".join(f"{n} tok/s" for n in names) + " | " + " | ".join(ratios) + " |")
    print("|---" * (3 + len(names) + len(ratios)) + "|")
    for r in rows:
        cells = [f"{r[f'{n}_tok_s']:.0f}" if f"{n}_tok_s" in r else "-" for n in names]
        cells += [f"{r[k]:.2f}x" if k in r else "-" for k in ratios]
        print(f"| {r['dims']} | {r['batch']} | {r['threads']} | " + " | ".join(cells) + " |")


def print_best_table(rows: list[dict]) -> None:
    """Each system at its fastest of the measured thread counts, per dims and batch (ratios of those
    medians): the comparison with every peer configured as well as the measured counts allow."""
    names = system_names(rows)
    ratios = [(a, b) for a, b in RATIOS if a in names and b in names]
    print("\nEach system at its fastest measured thread count (in brackets):\n")
    header = " | ".join(f"{n} tok/s" for n in names) + " | " + " | ".join(f"{a}/{b}" for a, b in ratios)
    print(f"| dims | batch | {header} |")
    print("|---" * (2 + len(names) + len(ratios)) + "|")
    for dims, batch in dict.fromkeys((r["dims"], r["batch"]) for r in rows):
        group = [r for r in rows if (r["dims"], r["batch"]) == (dims, batch)]
        best = {
            n: max((r for r in group if f"{n}_tok_s" in r), key=lambda r: r[f"{n}_tok_s"], default=None) for n in names
        }
        cells = [f"{best[n][f'{n}_tok_s']:.0f} ({best[n]['threads']})" if best[n] else "-" for n in names]
        cells += [
            f"{best[a][f'{a}_tok_s'] / best[b][f'{b}_tok_s']:.2f}x" if best[a] and best[b] else "-" for a, b in ratios
        ]
        print(f"| {dims} | {batch} | " + " | ".join(cells) + " |")


def read_bandwidth(threads: int, gib: int = 1, repeats: int = 5) -> float:
    """GB/s that `threads` threads read from memory: the best of `repeats` sums over `gib` GiB of float32
    (far larger than any cache), the rate that bounds a decoding step whose weights do not fit in one."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        data = torch.ones(gib * 2**28)
        data.sum()
        best = min(common.timed(data.sum)[0] for _ in range(repeats))
        return data.numel() * 4 / best / 1e9
    finally:
        torch.set_num_threads(previous)


DEFAULTS = {"dims": ["small", "base"], "batch": [1, 8, 32], "threads": [2], "dtype": ["fp32"], "repeats": 7}
DTYPES = ("fp32", "int8", "bf16")  # int8: aiayn and CTranslate2; bf16: aiayn and generate()
RESULTS = "bench_decode"


def add_arguments(parser) -> None:
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (CTranslate2 is then not measured)")
    parser.add_argument("--no-ctranslate2", action="store_true")
    parser.add_argument("--no-hf", action="store_true", help="do not measure Hugging Face generate()")
    parser.add_argument(
        "--no-engine", action="store_true", help="do not measure aiayn's CTranslate2 engine against CTranslate2 itself"
    )
    parser.add_argument(
        "--systems",
        nargs="+",
        default=None,
        metavar="NAME",
        help="measure only these systems (the table's names, e.g. aiayn_ct2 ct2_direct): more repeats in the time",
    )


def run(args) -> dict:
    if "fp32" not in args.dtype:
        args.dtype.insert(0, "fp32")  # the reference of every ratio
    bandwidth = {threads: read_bandwidth(threads) for threads in args.threads} if args.device == "cpu" else {}
    for threads, rate in bandwidth.items():
        print(f"memory read rate, {threads} thread(s): {rate:.1f} GB/s (a sum over 1 GiB)", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = Models(args, Path(tmp))
        try:
            for dims in args.dims:
                vocab = args.vocab or DEFAULT_VOCAB.get(dims, 10000)
                for batch in args.batch:
                    for threads in args.threads:
                        row = bench(dims, vocab, batch, threads, args, models)
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            models.close()

    print(f"""
{common.machine_line()}
Same work for every system: the same source batch, beam {args.beams}, exactly {args.new_tokens} decoder steps per
sentence (</s> suppressed before the last step and forced at it), the same dimensions and vocabulary,
random float32 weights, the same threads, on {args.device}; systems alternate within each of
{args.repeats} repetitions. tokens/s = sentences x steps / median seconds (encoder included);
a/b = median over repetitions of b's time / a's time within the repetition (> 1: a is faster).
""")
    print_table(rows)
    shares = [(r, k) for r in rows for k in r if k.endswith("_own_share")]
    if shares:
        print("\naiayn's CTranslate2 engine: its own share of a call (outside translate_batch), median:")
        for r, k in shares:
            print(f"  {r['dims']} batch {r['batch']} threads {r['threads']} {k[: -len('_own_share')]}: {r[k]:.2%}")
    if len(args.threads) > 1:
        print_best_table(rows)
    reasons = {r["ctranslate2"] for r in rows if "ctranslate2" in r}
    if reasons:
        print(f"\nCTranslate2 not measured: {reasons.pop()}")
    figures = {"rows": rows, "beams": args.beams, "new_tokens": args.new_tokens, "repeats": args.repeats}
    if bandwidth:  # what a step bound by reading its weights can reach
        figures["memory_read_gb_s"] = {str(threads): rate for threads, rate in bandwidth.items()}
    return figures
