"""`--mode gpu`: decoding on a GPU, the decoder of `aiayn translate --device cuda` against Hugging Face
`generate()`, in sentences per second, at batches of 1, 64 and 512 sentences.

    python benchmarks/bench_decode.py --mode gpu [--device cuda] [--dims small base] [--batch 1 64 512]

The fairness rules of `--mode engines` (which measures CPUs, and whose model builders and runs this
uses): the same dimensions and random weights for both, the same source batch (random ids, lengths
15-35), beam 4, exactly `--new-tokens` decoder steps for every sentence (`</s>` suppressed before the
last step and forced at it), encoder included. Each in the dtype `aiayn translate --precision auto` takes
on the device (bf16 on Ampere and later GPUs; the Marian model cast to it too): ours with its
projections prepared once, as a `Translator` holds them. A warm-up run, then `--repeats` runs
alternating the two systems; the median time of each.

    python benchmarks/bench_decode.py --mode gpu --cache-paths [--device cuda]

times aiayn's two ways of keeping the beams' key/value cache instead, side by side on the same batches:
`slots` (each row's cache stays in its slot, only rows continued more than once are copied; the CPU's
path) and `gather` (one `index_select` moves every row; the path on other devices), with
`CACHE_SLOT_DEVICES` (`aiayn_cli/decoding/incremental.py`) forced each way; the ratio is `gather`'s
speed over `slots`'.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from unittest import mock

import torch

from aiayn_cli.decoding import incremental
from aiayn_cli.decoding.incremental import PreparedModel
from aiayn_cli.precision import inference_precision
from benchmarks import common
from benchmarks.decoding import DEFAULT_VOCAB, build_aiayn, build_marian, run_aiayn, run_marian, source_batches


def bench(dims: str, batches: list[int], args, folder: Path) -> list[dict]:
    vocab = args.vocab or DEFAULT_VOCAB.get(dims, 10000)
    dtype = inference_precision("auto", device=args.device).torch_dtype
    ours = build_aiayn(dims, vocab).to(device=args.device, dtype=dtype)
    prepared = PreparedModel(ours, "float")
    marian = None if args.cache_paths else build_marian(dims, vocab, folder / dims).to(device=args.device, dtype=dtype)
    rows = []
    for batch in batches:
        (ids, mask, _), (m_ids, m_mask, _) = source_batches(batch, vocab, args)
        if args.cache_paths:
            systems = {
                path: lambda keep=keep: in_cache_path(keep, ours, prepared, ids, mask, args)
                for path, keep in (("slots", True), ("gather", False))
            }
        else:
            systems = {
                "aiayn": lambda: run_aiayn(ours, prepared, ids, mask, args.new_tokens, args.beams),
                "hf_generate": lambda: run_marian(marian, m_ids, m_mask, args.new_tokens, args.beams),
            }
        first, second = systems
        times = common.alternate(systems, args.repeats, device=args.device, pause=0)
        row = {"dims": dims, "vocab": vocab, "batch": batch, "beams": args.beams, "new_tokens": args.new_tokens}
        row["dtype"] = str(dtype).removeprefix("torch.")
        for name in systems:
            row[f"{name}_sentences_per_s"] = batch / statistics.median(times[name])
            row[f"{name}_times"] = [round(t, 5) for t in times[name]]
        # aiayn's speed over generate()'s; gather's over slots'
        pairs = zip(times[first], times[second])
        row["ratio"] = statistics.median(a / b if args.cache_paths else b / a for a, b in pairs)
        rows.append(row)
        print(
            f"{dims:<6}{batch:>6}{row[f'{first}_sentences_per_s']:>14,.1f}{row[f'{second}_sentences_per_s']:>14,.1f}"
            f"{row['ratio']:>8.2f}x",
            flush=True,
        )
    return rows


def in_cache_path(keep_slots: bool, model, prepared, ids, mask, args) -> int:
    """`run_aiayn` with the beams' cache kept in slots (`keep_slots`) or moved by one gather, whatever
    the device's own choice."""
    devices = frozenset({ids.device.type}) if keep_slots else frozenset()
    with mock.patch.object(incremental, "CACHE_SLOT_DEVICES", devices):
        return run_aiayn(model, prepared, ids, mask, args.new_tokens, args.beams)


DEFAULTS = {"dims": ["small", "base"], "batch": [1, 64, 512], "repeats": 3, "new_tokens": 32}
RESULTS = None  # benchmarks/gpu_check.py records the rows with the rest of a GPU's check


def add_arguments(parser) -> None:
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--cache-paths", action="store_true", help="aiayn's two cache paths (slots, gather) instead of generate()"
    )


def run(args) -> dict:
    print(f"beam {args.beams}, {args.new_tokens} steps a sentence, on {args.device}; sentences/s (median)")
    names = ("slots", "gather") if args.cache_paths else ("aiayn", "generate()")
    print(f"{'dims':<6}{'batch':>6}{names[0]:>14}{names[1]:>14}{'ratio':>9}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dims in args.dims:
            rows += bench(dims, args.batch, args, Path(tmp))
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()  # the last dims' models are gone
    return {"rows": rows}
