"""GFLOP/s of the decoder's projections: `F.linear` (PyTorch's BLAS call), the same on the weight stored
transposed, and oneDNN's prepacked kernel (what `Projection` calls on more than `FEW_ROWS` rows).

    python benchmarks/bench_gemm.py                 # 1 thread, base dimensions, 4 to 128 rows
    python benchmarks/bench_gemm.py --threads 2 --d-model 256 --d-ff 1024 --vocab 10000
    python benchmarks/bench_gemm.py --threads 2 --rows 4 8 32 128 --int8   # + int8: fbgemm against AMX

With `--int8`, a second table gives the int8 maps' GFLOP/s: fbgemm's kernel (PyTorch's dynamic
quantization, `quantized::linear_dynamic`) and, on CPUs with AMX, oneDNN's int8 GEMM with the input
quantized per call (`amx_int8_linear`), which `int8_linear_map` takes for calls of at least
`amx_int8_min_rows` rows (the rows of the table's threads that would take it are marked *).

The shapes are those of one decoding step with `rows` hypotheses (sentences x beams): the fused
self-attention projection, the feed-forward network's two maps and the pre-softmax projection.
Each number is the median of `--repeats` calls after warm-up. `linear_map` takes the BLAS GEMM on the
transposed weight for a float32 weight of at most `SMALL_WEIGHT` elements on at most `FEW_ROWS` rows, and
the prepacked kernel otherwise: the table is what that choice rests on, on the machine it runs on.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli.decoding.incremental import (
    FEW_ROWS,
    SMALL_WEIGHT,
    amx_int8_linear,
    amx_int8_min_rows,
    prepacked_linear,
)
from aiayn_cli.precision import onednn_amx
from benchmarks import common


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
    parser.add_argument("--int8", action="store_true", help="also the int8 kernels: fbgemm's and oneDNN's on AMX")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shapes = {
        "qkv": (args.d_model, 3 * args.d_model),
        "w_1": (args.d_model, args.d_ff),
        "w_2": (args.d_ff, args.d_model),
        "lm_head": (args.d_model, args.vocab),
    }
    print(common.machine_line())
    print("GFLOP/s of F.linear / F.linear on W^T stored / oneDNN prepacked (where it runs)")
    print(f"linear_map: BLAS on W^T for at most {FEW_ROWS} rows and {SMALL_WEIGHT:,} weight elements (float32)")
    print("| projection | in x out | " + " | ".join(f"{n} rows" for n in args.rows) + " |")
    print("|---|---|" + "---|" * len(args.rows))
    for name, (fan_in, fan_out) in shapes.items():
        weight, bias = torch.randn(fan_out, fan_in) / fan_in**0.5, torch.zeros(fan_out)
        transposed = weight.t().contiguous().t()
        prepacked = prepacked_linear(weight, bias)
        cells = []
        for n in args.rows:
            x = torch.randn(n, fan_in)
            flop = 2 * n * fan_in * fan_out
            functions = [lambda: F.linear(x, weight, bias), lambda: F.linear(x, transposed, bias)]
            if prepacked is not None:
                functions.append(lambda: prepacked(x))
            cells.append(" / ".join(f"{flop / median_seconds(fn, args.repeats) / 1e9:.0f}" for fn in functions))
        print(f"| {name} | {fan_in} x {fan_out} | " + " | ".join(cells) + " |")
    if args.int8:
        int8_table(shapes, args)


def int8_table(shapes: dict[str, tuple[int, int]], args) -> None:
    """GFLOP/s of fbgemm's int8 kernel / oneDNN's int8 GEMM on AMX (where oneDNN uses AMX)."""
    import warnings

    from torch import nn
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    print("\nint8: GFLOP/s of fbgemm (PyTorch's dynamic quantization) / oneDNN int8 on AMX (where oneDNN uses AMX)")
    print(
        f"int8_linear_map: AMX (*) from amx_int8_min_rows rows on, where oneDNN uses AMX (onednn_amx): {onednn_amx()}"
    )
    print("| projection | in x out | " + " | ".join(f"{n} rows" for n in args.rows) + " |")
    print("|---|---|" + "---|" * len(args.rows))
    for name, (fan_in, fan_out) in shapes.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyTorch announces the end of its quantized tensors
            quantized = quantize_dynamic(
                nn.Sequential(nn.Linear(fan_in, fan_out)), {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
            )[0]
        tiles = amx_int8_linear(quantized.weight(), quantized.bias())
        cells = []
        for n in args.rows:
            x = torch.randn(n, fan_in)
            flop = 2 * n * fan_in * fan_out
            functions = [lambda: quantized(x)] + ([lambda: tiles(x)] if tiles is not None else [])
            cell = " / ".join(f"{flop / median_seconds(fn, args.repeats) / 1e9:.0f}" for fn in functions)
            taken = tiles is not None and n >= amx_int8_min_rows(fan_in, fan_out, args.threads)
            cells.append(cell + (" *" if taken else ""))
        print(f"| {name} | {fan_in} x {fan_out} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
