"""GFLOP/s of the decoder's projections: `F.linear` (PyTorch's BLAS call) against `Projection` (oneDNN, prepacked).

    python benchmarks/bench_gemm.py                 # 1 thread, base dimensions, 4 to 128 rows
    python benchmarks/bench_gemm.py --threads 2 --d-model 256 --d-ff 1024 --vocab 10000

The shapes are those of one decoding step with `rows` hypotheses (sentences x beams): the fused
self-attention projection, the feed-forward network's two maps and the pre-softmax projection.
Each number is the median of `--repeats` calls after warm-up.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli.decoding.incremental import Projection  # noqa: E402
from aiayn_cli.precision import machine_summary  # noqa: E402


def median_seconds(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--d-ff", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 32, 128])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shapes = {
        "qkv": (args.d_model, 3 * args.d_model),
        "w_1": (args.d_model, args.d_ff),
        "w_2": (args.d_ff, args.d_model),
        "lm_head": (args.d_model, args.vocab),
    }
    print(machine_summary())
    print(f"GFLOP/s of F.linear -> Projection (oneDNN prepacked: {Projection(nn.Linear(1, 1)).packed is not None})")
    print("| projection | in x out | " + " | ".join(f"{n} rows" for n in args.rows) + " |")
    print("|---|---|" + "---|" * len(args.rows))
    for name, (fan_in, fan_out) in shapes.items():
        linear = nn.Linear(fan_in, fan_out)
        weight, bias = linear.weight.detach(), linear.bias.detach()
        projection = Projection(linear)
        cells = []
        for n in args.rows:
            x = torch.randn(n, fan_in)
            flop = 2 * n * fan_in * fan_out
            blas = flop / median_seconds(lambda: F.linear(x, weight, bias), args.repeats) / 1e9
            onednn = flop / median_seconds(lambda: projection(x), args.repeats) / 1e9
            cells.append(f"{blas:.0f} -> {onednn:.0f}")
        print(f"| {name} | {fan_in} x {fan_out} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
