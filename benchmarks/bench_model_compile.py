"""`torch.compile(fullgraph=True)` of the model itself against eager: a training step and one decoding step.

    python benchmarks/bench_model_compile.py                         # tiny and small, fp32
    python benchmarks/bench_model_compile.py --dims small --batch 32 --repeats 7

The model has no graph break (tests/model/test_modeling.py checks it), so the whole forward is one graph for
inductor, PyTorch's default compiler. Two rows per size, each timed alternately eager and compiled over
`--repeats` runs, the median kept:

* train: forward with labels (the mean cross-entropy) and backward, on `--batch` sentence pairs of
  `--length` tokens (train mode: dropout; the compiled graph draws its masks with inductor's random numbers);
* decode step: `AiaynForConditionalGeneration.forward` on one new target position per row, reading a
  fixed-size `StaticCache` (the one `generate(cache_implementation="static")` makes), filled to `--length`.

Each row also has the seconds of the first compiled call (tracing and compiling, paid once a process).
The rows go to a results file (`benchmarks/results.py`), `benchmarks/results/bench_model_compile.<machine>.json`
unless `--results FILE` says where.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from transformers.cache_utils import EncoderDecoderCache, StaticCache

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration
from aiayn_cli.model.configuration_aiayn import PRESETS
from benchmarks import common
from benchmarks import results as results_file


def compare(name: str, eager, compiled, repeats: int) -> dict:
    """First compiled call (compiling), then eager and compiled alternately, `repeats` times each."""
    first = common.timed(compiled)[0]
    eager()  # warm
    times = common.alternate({"eager": eager, "compiled": compiled}, repeats, pause=0, warm_up=False, turn=False)
    eager_ms, compiled_ms = common.median_ms(times["eager"]), common.median_ms(times["compiled"])
    return {
        "step": name,
        "first_compiled_seconds": round(first, 2),
        "eager_ms": round(eager_ms, 3),
        "compiled_ms": round(compiled_ms, 3),
        "speedup": round(eager_ms / compiled_ms, 3),
    }


def rows_for(dims: str, args) -> list[dict]:
    torch.manual_seed(args.seed)
    config = AiaynConfig.from_preset(dims, vocab_size=args.vocab, max_position_embeddings=2 * args.length + 8)
    model = AiaynForConditionalGeneration(config)
    ids = torch.randint(3, args.vocab, (args.batch, args.length))
    labels = torch.randint(3, args.vocab, (args.batch, args.length))
    mask = torch.ones_like(ids)

    def loss(ids, mask, labels):
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss

    compiled_loss = torch.compile(loss, fullgraph=True)  # forward and backward graphs (AOTAutograd)
    model.train()
    rows = [
        compare(
            "train",
            lambda: loss(ids, mask, labels).backward(),
            lambda: compiled_loss(ids, mask, labels).backward(),
            args.repeats,
        )
    ]

    model.eval()
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        self_cache = StaticCache(config=config, max_cache_len=args.length + 1)
        cache = EncoderDecoderCache(self_cache, StaticCache(config=config, max_cache_len=args.length))
        prefix = labels[:, : args.length - 1]
        model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=prefix, cache=cache)
        filled = int(self_cache.get_seq_length())  # (a 0-d tensor that the cache keeps counting in place)
        new = labels[:, -1:]

        def decode_step():
            # one new position each time: the cache's length is set back, so every call is the same step
            for layer in self_cache.layers:
                layer.cumulative_length.fill_(filled)
            return model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=new, cache=cache)

        step = torch.compile(decode_step, fullgraph=True)
        rows.append(compare("decode step", decode_step, step, args.repeats))
    for row in rows:
        row.update(dims=dims, batch=args.batch, length=args.length, vocab=args.vocab)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dims", nargs="+", default=["tiny", "small"], choices=sorted(PRESETS))
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=24, help="tokens per source and target sentence")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    results_file.add_argument(parser, "bench_model_compile")
    args = parser.parse_args()
    common.at_least(parser, args, 1, "repeats", "threads", "batch", "vocab")
    if args.length < 2:
        parser.error(f"--length must be >= 2, got {args.length}")
    torch.set_num_threads(args.threads)
    recorder = results_file.Recorder("bench_model_compile")
    print(common.machine_line(), flush=True)
    rows = []
    for dims in args.dims:
        for row in rows_for(dims, args):
            rows.append(row)
            print(
                f"{dims}, {row['step']}: first compiled call {row['first_compiled_seconds']:.1f} s, eager "
                f"{row['eager_ms']:.2f} ms, compiled {row['compiled_ms']:.2f} ms ({row['speedup']:.2f}x)",
                flush=True,
            )
    common.write_results(recorder, {"rows": rows, "repeats": args.repeats, "threads": args.threads}, args.results)


if __name__ == "__main__":
    main()
