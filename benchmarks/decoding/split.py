"""`--mode split`: where a beam-4 decode's time goes, aiayn's decoder and Hugging Face `generate()`, by
kind of operator.

    python benchmarks/bench_decode.py --mode split                            # base, batch 8, 2 threads
    python benchmarks/bench_decode.py --mode split --dims small --batch 1 32 --dtype fp32 bf16
    python benchmarks/bench_decode.py --mode split --width 64 --vocab 64      # the step's fixed cost

`--mode engines` says how fast each system decodes; this says where the time of a decode goes, so
that a ratio between two systems can be read against what each one's steps are made of. Every
system decodes the engines mode's batch with its models and work (random weights,
beam 4, exactly `--new-tokens` steps per sentence): `--repeats` times, alternating the systems
(the median wall time is the system's time), then once more under PyTorch's profiler. The
profiled decode's operators (their self CPU time, on the thread that calls them, with the threads
each operator shares its work with inside it) are summed into kinds:

* matrix products: the linear maps (`mkldnn::_linear_pointwise`, `quantized::linear_dynamic`,
  `aten::addmm`, ...) and any other matrix product;
* attention: the fused kernel (`scaled_dot_product_attention`) or its written-out parts' softmax;
* output distribution and search: log-softmax, top-k, sorting and maxima over the vocabulary;
* cache reorder: `index_select` and indexing, which carry the key/value cache to the surviving
  hypotheses (and look the embeddings up);
* other operators: every other operator (additions, LayerNorm, copies, views, masks, ...);
* outside operators: the median unprofiled time less the operators' (Python, the framework's
  dispatch; at least 0).

Each kind is reported in milliseconds per decoder step. The operators' times are the profiled
decode's; the profiler's own cost falls between operators, which is why "outside operators" is taken
from the unprofiled time. Where aiayn splits a batch over threads (`parallel_parts`), its operators run
on threads of their own, which PyTorch's profiler does not see: its kinds are then not measured (`-`,
null in the results file), and only its step is.

With `--width W`, every system's d_model and d_ff are W (the layers and heads as `--dims` has them):
the same operators and the same Python for each step, on arithmetic too small to count. What a step
costs then is its fixed cost, which no faster kernel removes.

The rows also go to a results file (`benchmarks/results.py`),
`benchmarks/results/bench_decode_split.<machine>.json` unless `--results FILE` says where.
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from aiayn_cli.decoding.parallel import SPLIT_MIN_ROWS
from aiayn_cli.model.configuration_aiayn import PRESETS
from benchmarks import common
from benchmarks.decoding import DEFAULT_VOCAB, build_models, in_process_systems, source_batches

# The kinds of operator, in order: the first whose pattern matches an operator's name takes its time.
KINDS = (
    ("matrix products", re.compile(r"linear|addmm|::mm$|bmm|matmul|int8pack_mm")),
    ("attention", re.compile(r"scaled_dot_product|flash_attention|::_?softmax$")),
    ("output distribution and search", re.compile(r"log_softmax|topk|::sort$|::amax$|::max$|argmax")),
    ("cache reorder", re.compile(r"index_select|::index$")),
)
OTHER, OUTSIDE = "other operators", "outside operators"
KIND_NAMES = tuple(name for name, _ in KINDS) + (OTHER, OUTSIDE)


def kind_of(operator: str) -> str:
    return next((name for name, pattern in KINDS if pattern.search(operator)), OTHER)


def profiled(run) -> tuple[float, dict[str, float], list[tuple[str, float]]]:
    """(wall seconds, seconds by kind, the operators' self seconds, largest first) of one profiled call."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        run()
        wall = time.perf_counter() - start
    operators = sorted(
        ((event.key, event.self_cpu_time_total / 1e6) for event in prof.key_averages()), key=lambda p: -p[1]
    )
    kinds = dict.fromkeys(KIND_NAMES, 0.0)
    for name, seconds in operators:
        kinds[kind_of(name)] += seconds
    return wall, kinds, operators


def split_row(dims: str, batch: int, threads: int, args, models: dict) -> dict:
    """One row: every system's median time and its time per step by kind."""
    torch.set_num_threads(threads)
    vocab, steps, beams = models["vocab"], args.new_tokens, args.beams
    systems = in_process_systems(models, *source_batches(batch, vocab, args), steps, beams)
    times = common.alternate(systems, args.repeats, turn=False)  # after a warm-up: first calls allocate and pack
    split_over_threads = threads > 1 and batch * beams >= SPLIT_MIN_ROWS * threads
    row = {"dims": dims, "vocab": vocab, "batch": batch, "beams": beams, "new_tokens": steps, "threads": threads}
    if args.width:
        row["width"] = args.width
    for name, run in systems.items():
        median = statistics.median(times[name])
        row[name] = {"seconds": median, "times": [round(t, 4) for t in times[name]]}
        if split_over_threads and name.startswith("aiayn"):  # its operators run where the profiler does not look
            row[name] |= {"ms_per_step": dict.fromkeys(KIND_NAMES), "operators_ms_per_step": []}
            continue
        time.sleep(common.PAUSE)
        wall, kinds, operators = profiled(run)
        kinds[OUTSIDE] = max(0.0, median - sum(kinds.values()))
        row[name] |= {
            "ms_per_step": {k: v / steps * 1e3 for k, v in kinds.items()},
            "profiled_seconds": wall,
            "operators_ms_per_step": [[op, s / steps * 1e3] for op, s in operators[: args.top]],
        }
    return row


def print_row(row: dict) -> None:
    names = [k for k, v in row.items() if isinstance(v, dict)]
    width = f" at width {row['width']}" if "width" in row else ""
    print(f"\n{row['dims']}{width}, batch {row['batch']}, {row['threads']} threads: ms per decoder step")
    print("| kind | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for kind in KIND_NAMES:
        cells = [row[n]["ms_per_step"][kind] for n in names]
        print(f"| {kind} | " + " | ".join("-" if c is None else f"{c:.2f}" for c in cells) + " |")
    totals = [row[n]["seconds"] / row["new_tokens"] * 1e3 for n in names]
    print("| **step** | " + " | ".join(f"**{t:.2f}**" for t in totals) + " |")
    ours = min((n for n in names if n.startswith("aiayn")), key=lambda n: row[n]["seconds"])
    peer = min((n for n in names if n.startswith("hf_marian")), key=lambda n: row[n]["seconds"])
    kernels = [row[ours]["ms_per_step"][k] for k, _ in KINDS]
    print(
        f"fastest: {ours} {row[ours]['seconds']:.3f} s, {peer} {row[peer]['seconds']:.3f} s "
        f"({row[peer]['seconds'] / row[ours]['seconds']:.2f}x); twice {peer}'s speed needs "
        f"{row[peer]['seconds'] / row['new_tokens'] / 2 * 1e3:.2f} ms a step, and {ours}'s matrix products, "
        "attention, output distribution and cache reorder take "
        + ("(not profiled: split over threads)" if None in kernels else f"{sum(kernels):.2f}")
    )


DEFAULTS = {"dims": ["base"], "batch": [8], "threads": [2], "dtype": ["fp32", "bf16", "int8"], "repeats": 7}
DTYPES = ("fp32", "bf16", "int8")
RESULTS = "bench_decode_split"


def add_arguments(parser) -> None:
    parser.add_argument("--top", type=int, default=8, help="the largest operators kept per system")
    parser.add_argument(
        "--width", type=int, default=None, help="d_model and d_ff of every system (default: the preset's)"
    )


def check(parser, args) -> None:
    common.at_least(parser, args, 1, "top")
    for dims in args.dims if args.width is not None else ():
        if args.width < 1 or args.width % PRESETS[dims]["num_heads"]:
            heads = PRESETS[dims]["num_heads"]
            parser.error(f"--width must be a positive multiple of {dims}'s {heads} heads, got {args.width}")


def run(args) -> dict:
    rows = []
    width = {"d_model": args.width, "d_ff": args.width} if args.width else {}
    with tempfile.TemporaryDirectory() as tmp:
        for dims in args.dims:
            vocab = args.vocab or DEFAULT_VOCAB.get(dims, 10000)
            models = build_models(dims, vocab, args.dtype, Path(tmp) / dims, **width)
            for batch in args.batch:
                for threads in args.threads:
                    rows.append(split_row(dims, batch, threads, args, models))
                    print_row(rows[-1])
    return {"rows": rows, "repeats": args.repeats}
