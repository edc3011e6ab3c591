"""Decoding on a GPU: the decoder of `aiayn translate --device cuda` against Hugging Face `generate()`,
in sentences per second, at batches of 1, 64 and 512 sentences.

    python benchmarks/bench_decode_gpu.py [--device cuda] [--dims small base] [--batch 1 64 512]

The fairness rules of `bench_decode.py` (which measures CPUs, and whose model builders and runs this
uses): the same dimensions and random weights for both, the same source batch (random ids, lengths
15-35), beam 4, exactly `--new-tokens` decoder steps for every sentence (`</s>` suppressed before the
last step and forced at it), encoder included. Each in the dtype `aiayn translate --precision auto` takes
on the device (bf16 on Ampere and later GPUs; the Marian model cast to it too): ours with its
projections prepared once, as a `Translator` holds them. A warm-up run, then `--repeats` runs
alternating the two systems; the median time of each.

    python benchmarks/bench_decode_gpu.py --cache-paths [--device cuda]

times aiayn's two ways of keeping the beams' key/value cache instead, side by side on the same batches:
`slots` (each row's cache stays in its slot, only rows continued more than once are copied; the CPU's
path) and `gather` (one `index_select` moves every row; the path on other devices), with
`CACHE_SLOT_DEVICES` (`aiayn_cli/decoding/incremental.py`) forced each way; the ratio is `gather`'s
speed over `slots`'.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli.decoding import incremental
from aiayn_cli.decoding.incremental import PreparedModel
from aiayn_cli.precision import inference_precision
from benchmarks import common
from benchmarks.bench_decode import DEFAULT_VOCAB, build_aiayn, build_marian, make_batch, run_aiayn, run_marian


def bench(dims: str, batches: list[int], args, folder: Path) -> list[dict]:
    vocab = args.vocab or DEFAULT_VOCAB.get(dims, 10000)
    dtype = inference_precision("auto", device=args.device).torch_dtype
    ours = build_aiayn(dims, vocab).to(device=args.device, dtype=dtype)
    prepared = PreparedModel(ours, "float")
    marian = None if args.cache_paths else build_marian(dims, vocab, folder / dims).to(device=args.device, dtype=dtype)
    rows = []
    for batch in batches:
        ids, mask, _ = make_batch(batch, vocab, args.min_src, args.max_src, args.seed, eos=2, pad=0, low=4)
        m_ids, m_mask, _ = make_batch(batch, vocab, args.min_src, args.max_src, args.seed, eos=0, pad=vocab - 1, low=4)
        ids, mask, m_ids, m_mask = (t.to(args.device) for t in (ids, mask, m_ids, m_mask))
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


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dims", nargs="+", default=["small", "base"])
    parser.add_argument("--vocab", type=int, default=None, help="default: small 10000, base 37000")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 64, 512])
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--min-src", type=int, default=15)
    parser.add_argument("--max-src", type=int, default=35)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--cache-paths", action="store_true", help="aiayn's two cache paths (slots, gather) instead of generate()"
    )
    args = parser.parse_args(argv)
    print(f"beam {args.beams}, {args.new_tokens} steps a sentence, on {args.device}; sentences/s (median)")
    names = ("slots", "gather") if args.cache_paths else ("aiayn", "generate()")
    print(f"{'dims':<6}{'batch':>6}{names[0]:>14}{names[1]:>14}{'ratio':>9}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dims in args.dims:
            rows += bench(dims, args.batch, args, Path(tmp))
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()  # the last dims' models are gone
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
