"""`--mode change`: beam-4 decoding speed of this checkout against another revision of aiayn, in one run.

    python benchmarks/bench_decode.py --mode change --baseline 4fb1409^   # against the decoder before that commit
    python benchmarks/bench_decode.py --mode change --baseline main --dims base --batch 1 --repeats 9
    python benchmarks/bench_decode.py --mode change --baseline HEAD --dtype int8  # int8 linear maps (bf16: the model)

A change to the model's modules or to the fast decoder can slow `aiayn translate` down by a few
percent, less than the noise between two runs of `--mode engines`. This benchmark makes the
comparison in one run: it checks the baseline revision out into a temporary git worktree, starts
one Python process per revision (each imports its own `aiayn_cli`), gives both the same model
(random float32 weights, the `small` or `base` preset, saved once and loaded by both; `--dtype bf16`
or `int8` as `aiayn translate` takes them) and the same batch, and alternates them: each repetition
times one decode in each process, in turn. Times are CPU seconds of the decoding process
(`time.process_time`, 1 thread by default), which other jobs on the machine disturb far less than
wall-clock time. Decoding is `--mode engines`': beam 4 and exactly `--new-tokens` steps per
sentence. The ratio is baseline time / current time (above 1:
the current checkout is faster), of the medians, and in brackets the median of the per-repetition
ratios. Two processes running the same code can differ by several percent for as long as they live
(the core and memory they were given), so the comparison is made `--rounds` times with new
processes; "per round" gives the lowest and highest ratio of the rounds' medians.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
from pathlib import Path

from benchmarks import common
from benchmarks.common import Worker
from benchmarks.decoding import DEFAULT_VOCAB, build_aiayn, make_batch

# The worker: one per revision, reading one JSON request per line, answering with CPU seconds.
WORKER = r"""
import json, sys, time
import torch
from transformers.utils import logging
from aiayn_cli.model.modeling_aiayn import AiaynForConditionalGeneration
from aiayn_cli.decoding import incremental, search

torch.set_num_threads(int(sys.argv[2]))
logging.disable_progress_bar()
model = AiaynForConditionalGeneration.from_pretrained(sys.argv[1]).eval()
prepare = getattr(incremental, "PreparedModel", None) or getattr(incremental, "PreparedWeights")
if sys.argv[3] == "bf16":
    model = model.to(torch.bfloat16)
prepared = prepare(model, "int8") if sys.argv[3] == "int8" else prepare(model)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    ids, mask = torch.tensor(request["ids"]), torch.tensor(request["mask"])
    steps = request["steps"]
    options = search.DecodingOptions(
        num_beams=request["beams"], length_penalty=0.6, max_len_a=0, max_len_b=steps - 1, min_len=steps - 1
    )
    with torch.inference_mode():
        start = time.process_time()
        hyps = search.decode(model, ids, mask, options, prepared)
        seconds = time.process_time() - start
    assert {len(h[0].tokens) + 1 for h in hyps} == {steps}
    print(json.dumps({"seconds": seconds}), flush=True)
"""


DEFAULTS = {"dims": ["small", "base"], "batch": [1, 8, 32], "threads": [1], "dtype": ["fp32"], "repeats": 7}
DTYPES = ("fp32", "bf16", "int8")  # the model in bf16, or int8 linear maps
RESULTS = "bench_decode_change"


def add_arguments(parser) -> None:
    parser.add_argument("--baseline", required=True, help="a git revision of this repository")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of new worker processes")


def check(parser, args) -> None:
    common.at_least(parser, args, 1, "rounds")
    for name in ("threads", "dtype"):
        if len(getattr(args, name)) != 1:
            parser.error(f"--{name}: --mode change takes one, got {' '.join(map(str, getattr(args, name)))}")


def run(args) -> dict:
    from transformers.utils import logging

    logging.disable_progress_bar()
    threads, dtype, rows = args.threads[0], args.dtype[0], []
    with (
        tempfile.TemporaryDirectory(prefix="aiayn-bench-") as tmp,
        common.baseline_tree(args.baseline, Path(tmp)) as tree,
    ):
        print(f"beam {args.beams}, {args.new_tokens} steps per sentence, {threads} thread(s), {dtype}, CPU seconds")
        print("| dims | batch | baseline ms | current ms | baseline / current | per round |")
        print("|---|---|---|---|---|---|")
        for dims in args.dims:
            folder, vocab = Path(tmp) / dims, args.vocab or DEFAULT_VOCAB.get(dims, 10000)
            build_aiayn(dims, vocab).save_pretrained(folder)
            requests = {}
            for batch in args.batch:
                ids, mask, _ = make_batch(batch, vocab, args.min_src, args.max_src, args.seed, eos=2, pad=0, low=4)
                requests[batch] = {
                    "ids": ids.tolist(),
                    "mask": mask.tolist(),
                    "steps": args.new_tokens,
                    "beams": args.beams,
                }
            times = {batch: {"baseline": [], "current": []} for batch in args.batch}
            rounds = {batch: [] for batch in args.batch}
            for round_ in range(args.rounds):
                # New processes every round (started in turn first), so that where a process
                # happens to run (its core, its memory) is not counted for one side only.
                sides = [("baseline", tree), ("current", common.REPO)][:: 1 if round_ % 2 == 0 else -1]
                workers = {
                    name: Worker(path, WORKER, [str(folder), str(threads), dtype], "decoder") for name, path in sides
                }
                for batch, request in requests.items():
                    for worker in workers.values():  # warm-up
                        worker.ask(request)["seconds"]
                    pairs = {name: [] for name in workers}
                    for _ in range(args.repeats):
                        for name, worker in workers.items():
                            pairs[name].append(worker.ask(request)["seconds"])
                    for name in pairs:
                        times[batch][name] += pairs[name]
                    rounds[batch].append(statistics.median(pairs["baseline"]) / statistics.median(pairs["current"]))
                for worker in workers.values():
                    worker.close()
            for batch in args.batch:
                base, cur = statistics.median(times[batch]["baseline"]), statistics.median(times[batch]["current"])
                within = statistics.median(b / c for b, c in zip(times[batch]["baseline"], times[batch]["current"]))
                spread = f"{min(rounds[batch]):.3f}-{max(rounds[batch]):.3f}"
                rows.append(
                    {"dims": dims, "vocab": vocab, "batch": batch, "threads": threads, "dtype": dtype}
                    | {"baseline_seconds": base, "current_seconds": cur, "baseline/current": base / cur}
                    | {"within": within, "rounds": rounds[batch], "times": times[batch]}
                )
                print(
                    f"| {dims} | {batch} | {base * 1e3:.1f} | {cur * 1e3:.1f} | {base / cur:.3f} ({within:.3f}) "
                    f"| {spread} |"
                )
    found = subprocess.run(["git", "rev-parse", args.baseline], cwd=common.REPO, capture_output=True, text=True)
    return {"baseline": args.baseline, "baseline_commit": found.stdout.strip(), "rows": rows}
