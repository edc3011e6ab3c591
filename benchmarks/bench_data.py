"""Data pipeline on Multi30k (en-de): tokenizer training, tokenization throughput, cache reuse, padding.

    python benchmarks/bench_data.py [--multi30k DIR] [--num-proc N]     # writes benchmarks/results/bench_data.*.json

Prints one table. The throughput is the best of `--repeats` runs, measured against a reference in the
same run: the bare `tokenizers` encoder on the same sentences, without `datasets` (`ratio`). On a
shared machine the wall-clock rate depends on the load; the rate per CPU-second much less.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli.data.batching import TokenBatchSampler
from aiayn_cli.data.corpus import load_split
from aiayn_cli.data.spec import DataSpec
from aiayn_cli.data.tokenization import (
    tokenize_split,
    train_tokenizer,
)
from benchmarks import common, results
from benchmarks.local_data import MULTI30K


def padding_of(batches, src, tgt) -> float:
    real = sum(int(src[b].sum() + tgt[b].sum()) for b in batches)
    padded = sum(len(b) * int(src[b].max() + tgt[b].max()) for b in batches)
    return 1 - real / padded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--multi30k", type=Path, default=MULTI30K, help="a folder of train.en, train.de, ... (default: $AIAYN_MULTI30K)"
    )
    parser.add_argument("--vocab-size", type=int, default=10000)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--num-proc", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3, help="best of this many timed runs")
    results.add_argument(parser, "bench_data")
    args = parser.parse_args()
    recorder = results.Recorder("bench_data")
    rows = []

    spec = DataSpec(data_dir=args.multi30k, source_lang="en", target_lang="de")
    start = time.perf_counter()
    train = load_split(spec, "train")
    rows.append(("load train split", f"{len(train)} pairs", f"{time.perf_counter() - start:.2f} s"))

    start = time.perf_counter()
    tokenizer = train_tokenizer(train, vocab_size=args.vocab_size, show_progress=False)
    rows.append((f"train joint BPE ({len(tokenizer)} tokens)", "en + de train", f"{time.perf_counter() - start:.2f} s"))

    validation = load_split(spec, "validation")
    for side in ("source", "target"):
        sentences = list(validation[side])
        ids = tokenizer(sentences)["input_ids"]
        decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
        exact = sum(d == s for d, s in zip(decoded, sentences))
        unknown = sum(row.count(tokenizer.unk_token_id) for row in ids)
        rows.append(
            (
                f"round trip, validation {side}",
                f"{exact}/{len(sentences)}",
                f"{exact / len(sentences):.4%}, <unk>: {unknown}",
            )
        )

    backend = tokenizer.backend_tokenizer
    sources, targets = list(train["source"]), list(train["target"])
    wall = cpu = float("inf")
    for _ in range(args.repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        backend.encode_batch_fast(sources)
        backend.encode_batch_fast(targets)
        wall, cpu = min(wall, time.perf_counter() - start), min(cpu, time.process_time() - start_cpu)
    reference = len(train) / wall
    rows.append(
        (
            "bare tokenizers encode (reference)",
            f"{len(train)} pairs",
            f"{reference:,.0f} pairs/s, {len(train) / cpu:,.0f} per CPU-second",
        )
    )

    with tempfile.TemporaryDirectory() as cache:
        wall = cpu = float("inf")
        for repeat in range(args.repeats):  # each in an empty cache folder
            start, start_cpu = time.perf_counter(), time.process_time()
            tokenized = tokenize_split(train, tokenizer, num_proc=args.num_proc, cache_dir=Path(cache) / str(repeat))
            wall, cpu = min(wall, time.perf_counter() - start), min(cpu, time.process_time() - start_cpu)
        per_cpu = f", {len(train) / cpu:,.0f} per CPU-second" if (args.num_proc or 1) == 1 else ""
        rows.append(
            (
                f"tokenize_split, num_proc={args.num_proc}",
                f"{len(train)} pairs",
                f"{len(train) / wall:,.0f} pairs/s (ratio {len(train) / wall / reference:.2f}){per_cpu}",
            )
        )
        start = time.perf_counter()
        again = tokenize_split(
            load_split(spec, "train"), tokenizer, num_proc=args.num_proc, cache_dir=Path(cache) / "0"
        )
        second = time.perf_counter() - start
        reused = again.cache_files[0]["filename"].startswith(str(Path(cache) / "0"))
        rows.append(
            (
                "second run (new load_split)",
                "cache reused" if reused else "NOT reused",
                f"{second:.3f} s ({wall / second:.0f}x faster)",
            )
        )

    src, tgt = tokenized.data.column("src_len").to_numpy(), tokenized.data.column("tgt_len").to_numpy()
    sampler = TokenBatchSampler(src, tgt, max_tokens=args.max_tokens, seed=0)
    batches = list(sampler)
    largest = max(len(b) * int(max(src[b].max(), tgt[b].max())) for b in batches)
    rows.append(
        (
            f"token batches, max-tokens {args.max_tokens}",
            f"{len(batches)} batches",
            f"padding {padding_of(batches, src, tgt):.2%}, largest side {largest} tokens",
        )
    )
    order = np.random.default_rng(0).permutation(len(src))
    random64 = [order[i : i + 64] for i in range(0, len(order), 64)]
    rows.append(
        ("random batches of 64 sentences", f"{len(random64)} batches", f"padding {padding_of(random64, src, tgt):.2%}")
    )

    print(common.machine_line())
    print(
        f"Multi30k en-de, {os.cpu_count()} CPUs, TOKENIZERS_PARALLELISM={os.environ.get('TOKENIZERS_PARALLELISM', '(unset)')}"
    )
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    path = recorder.write({"rows": [dict(zip(("measured", "on", "result"), row)) for row in rows]}, args.results)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
