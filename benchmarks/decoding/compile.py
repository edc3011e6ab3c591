"""`--mode compile`: the `torch` engine's decoder step eager, as `aiayn translate` runs it, against the
same step compiled by `torch.compile`.

    python benchmarks/bench_decode.py --mode compile                   # small and base, batch 1 and 8, fp32 and bf16
    python benchmarks/bench_decode.py --mode compile --dims base --batch 8 --dtype fp32

Beside its kernels a decoding step spends time in Python, in the framework's dispatch and in small
operators (`--mode split`, and its `--width` for the fixed cost). A compiler is the usual
remedy; this measures what it gives the engine. Both sides run one `IncrementalDecoder` (the model's
own modules, the same preallocated cache, the modes' source batch and random weights) on
`--batch` x `--beams` rows, each fed its own argmax for `--new-tokens` steps: no search, so that both
do the decoder's work only.

* eager: `IncrementalDecoder.step`, on the prepared modules (the linear maps prepacked for oneDNN);
* compiled: `torch.compile(dynamic=True)` of the model's `Decoder` and pre-softmax projection on the
  same state (inductor, PyTorch's default compiler, which needs a C++ compiler at run time). The cache
  grows by a position every step: with `dynamic=True` one compilation serves every length. inductor's
  `freezing`, which prepacks the linear maps as the eager side does, is tried first; where it does not
  compile, the row keeps the error's last line and the step is compiled without it.

Each row: the seconds of the first compiled decode (tracing and compiling, paid once a process; the
row keeps inductor's caches in a new folder, so that every compilation starts cold), the
median milliseconds per step of both over `--repeats` decodes, alternating, eager's time over the
compiled one's, and whether both fed the same tokens. int8 is not compiled: the engine's int8 maps call
PyTorch's quantized operators, which the compiler does not trace.

The rows also go to a results file (`benchmarks/results.py`),
`benchmarks/results/bench_decode_compile.<machine>.json` unless `--results FILE` says where.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from unittest import mock

import torch

from aiayn_cli.decoding.incremental import IncrementalDecoder, PreparedModel
from benchmarks import common
from benchmarks.decoding import DEFAULT_VOCAB, build_aiayn, make_batch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def started_decoder(model, prepared, ids, mask, beams: int, steps: int) -> IncrementalDecoder:
    """An `IncrementalDecoder` on the batch (the encoder run), with `beams` rows per sentence."""
    decoder = IncrementalDecoder(model, ids, mask, steps + 1, ids.size(0) * beams, prepared)
    sentences = torch.arange(ids.size(0))
    decoder.select(sentences.repeat_interleave(beams), sentences)
    return decoder


def eager_decode(model, prepared, ids, mask, beams: int, steps: int) -> torch.Tensor:
    """The tokens fed at each step `(steps, rows)`, by `IncrementalDecoder.step`."""
    with torch.inference_mode():  # as `decode()` runs
        decoder = started_decoder(model, prepared, ids, mask, beams, steps)
        tokens = torch.full((ids.size(0) * beams,), model.config.decoder_start_token_id)
        fed = []
        for _ in range(steps):
            tokens = decoder.step(tokens).argmax(-1)
            fed.append(tokens)
        decoder.release()
    return torch.stack(fed)


def compiled_step(model):
    """`torch.compile` of one step of the model's decoder and pre-softmax projection, on a `DecodingState`."""
    decoder, lm_head = model.get_decoder(), model.get_output_embeddings()

    def step(tokens, memory, source_mask, state):
        hidden = decoder(tokens[:, None], memory, encoder_attention_mask=source_mask, cache=state, return_dict=False)[0]
        return lm_head(hidden[:, 0])

    return torch.compile(step, dynamic=True)


def compiled_decode(step, model, prepared, ids, mask, beams: int, steps: int) -> torch.Tensor:
    """As `eager_decode`, with `compiled_step`'s step (under `no_grad`: inductor's freezing needs it)."""
    with torch.no_grad():
        decoder = started_decoder(model, prepared, ids, mask, beams, steps)
        tokens = torch.full((ids.size(0) * beams,), model.config.decoder_start_token_id)
        memory, fed = decoder.memory, []
        for _ in range(steps):
            tokens = step(tokens, memory, decoder.source_mask, decoder.state).argmax(-1)
            decoder.state.position += 1
            fed.append(tokens)
        decoder.release()
    return torch.stack(fed)


def error_line(error: Exception) -> str:
    """The line of a compiler's failure that names the error (its message is pages long)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    return next((line for line in lines if re.match(r"\w+(Error|Exception): ", line)), lines[0])[:200]


def compile_row(dims: str, vocab: int, batch: int, threads: int, dtype: str, args) -> dict:
    import torch._dynamo
    import torch._inductor.config

    torch.set_num_threads(threads)
    model = build_aiayn(dims, vocab).to(DTYPES[dtype])
    ids, mask, _ = make_batch(batch, vocab, args.min_src, args.max_src, args.seed, eos=2, pad=0, low=4)
    # A prepared model each: the eager side's cache memory is made in inference mode, the compiled side's not
    work = (model, PreparedModel(model), ids, mask, args.beams, args.new_tokens)
    compiled_work = (model, PreparedModel(model), *work[2:])
    eager_tokens = eager_decode(*work)  # warm-up: the first call packs and allocates
    row = {"dims": dims, "vocab": vocab, "batch": batch, "beams": args.beams, "new_tokens": args.new_tokens}
    row |= {"threads": threads, "dtype": dtype, "freezing": None}
    for freezing in (True, False):
        torch._dynamo.reset()  # a fresh compilation for every row, as a new process pays it
        step = compiled_step(model)
        try:
            with (
                torch._inductor.config.patch(freezing=freezing),
                tempfile.TemporaryDirectory(prefix="bench_decode_compile-") as cache,
                mock.patch.dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache),  # no compiled code of an earlier row or run
            ):
                start = time.perf_counter()
                compiled_tokens = compiled_decode(step, *compiled_work)
                row["first_compiled_seconds"] = time.perf_counter() - start
        except Exception as error:  # noqa: BLE001 - freezing's failure is a result here
            if not freezing:  # the step does not compile at all: nothing to measure
                raise
            row["freezing"] = f"failed: {error_line(error)}"
            continue
        row["freezing"] = row["freezing"] or freezing
        break
    sides = {"eager": lambda: eager_decode(*work), "compiled": lambda: compiled_decode(step, *compiled_work)}
    with torch._inductor.config.patch(freezing=row["freezing"] is True):
        times = common.alternate(sides, args.repeats, warm_up=False)
    for name, seconds in times.items():
        row[f"{name}_ms_per_step"] = common.median_ms(seconds) / args.new_tokens
        row[f"{name}_times"] = [round(t, 6) for t in seconds]
    row["eager/compiled"] = common.ratio(times["compiled"], times["eager"])
    row["same_tokens"] = bool(torch.equal(eager_tokens, compiled_tokens))
    return row


def print_rows(rows: list[dict]) -> None:
    print("\n| dims | batch | dtype | threads | freezing | first compiled decode | eager ms/step | compiled ms/step "
          "| compiled speed-up | same tokens |")  # fmt: skip
    print("|---" * 10 + "|")
    for r in rows:
        freezing = r["freezing"] if isinstance(r["freezing"], bool) else "no (failed)"
        print(
            f"| {r['dims']} | {r['batch']} | {r['dtype']} | {r['threads']} | {freezing} | "
            f"{r['first_compiled_seconds']:.1f} s | {r['eager_ms_per_step']:.2f} | {r['compiled_ms_per_step']:.2f} | "
            f"{r['eager/compiled']:.2f}x | {r['same_tokens']} |"
        )


DEFAULTS = {"dims": ["small", "base"], "batch": [1, 8], "threads": [2], "dtype": ["fp32", "bf16"], "repeats": 5}
RESULTS = "bench_decode_compile"


def add_arguments(parser) -> None:
    pass


def run(args) -> dict:
    rows = []
    for dims in args.dims:
        for batch in args.batch:
            for threads in args.threads:
                for dtype in args.dtype:
                    vocab = args.vocab or DEFAULT_VOCAB.get(dims, 10000)
                    rows.append(r := compile_row(dims, vocab, batch, threads, dtype, args))
                    print(
                        f"{dims}, batch {batch}, {threads} threads, {dtype}: first compiled decode "
                        f"{r['first_compiled_seconds']:.1f} s, eager {r['eager_ms_per_step']:.2f} ms/step, compiled "
                        f"{r['compiled_ms_per_step']:.2f} (freezing: {r['freezing']})",
                        flush=True,
                    )
    print_rows(rows)
    return {"rows": rows, "repeats": args.repeats}
