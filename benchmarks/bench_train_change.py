"""Training-step speed of this checkout against another revision of aiayn, in one run.

    python benchmarks/bench_train_change.py --baseline main
    python benchmarks/bench_train_change.py --baseline 4fb1409^ --steps 40 --rounds 4 --precision bf16

A change to the training loop (how a step is driven, its bookkeeping) can slow `aiayn train` down
by a few percent, less than the noise between two runs of `bench_train.py`. This benchmark makes
the comparison in one run, as `bench_decode.py --mode change` does for decoding: it checks the baseline
revision out into a temporary git worktree and starts one Python process per revision (each imports
its own `aiayn_cli`). Both train the same model (`--preset`, dropout as shipped) on the same data (the
first `--sentences` pairs of Multi30k's train split, `$AIAYN_MULTI30K`) with the same tokenizer (a
4,000-token BPE trained once, by the baseline), through `aiayn_cli.training.trainer.train` with
`recipes/multi30k_en_de.yaml` of each revision and `--steps` updates, no validation and no
checkpoint but the last. The figure is `TrainResult.cpu_seconds / steps`: CPU seconds of the
training process in the loop (all its threads), which other jobs disturb far less than wall-clock
time. Each round starts new processes (the side that starts first alternates), runs one unmeasured
training in each, then `--repeats` measured trainings in turn. The ratio is baseline / current of
the medians (above 1: the current checkout is faster), in brackets the median of the per-repetition
ratios, and "per round" the lowest and highest ratio of the rounds' medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common, results
from benchmarks.common import Worker
from benchmarks.local_data import MULTI30K

REPO = Path(__file__).resolve().parents[1]

# The worker: one per revision, reading one JSON request per line (a run folder), answering with
# the loop's CPU seconds and steps.
WORKER = r"""
import json, sys
import torch
from pathlib import Path
from aiayn_cli.training.recipe import load_recipe
from aiayn_cli.training.trainer import quiet_libraries, train

settings = json.loads(sys.argv[1])
torch.set_num_threads(settings["threads"])
quiet_libraries()
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    overrides = {**settings["overrides"], "output_dir": json.loads(line)["output"]}
    recipe = load_recipe(Path("recipes/multi30k_en_de.yaml"), overrides)
    result = train(recipe, show_progress=False)
    print(json.dumps({"cpu": result.cpu_seconds, "steps": result.step}), flush=True)
"""

TOKENIZER = r"""
import sys
try:  # where DataSpec lives depends on the revision
    from aiayn_cli.data.spec import DataSpec
except ImportError:
    from aiayn_cli.data.corpus import DataSpec
from aiayn_cli.data.tokenization import train_tokenizer

train_tokenizer(DataSpec(data_dir=sys.argv[1], source_lang="en", target_lang="de"), vocab_size=4000,
                output_dir=sys.argv[2], show_progress=False)
"""


def seconds_per_step(worker: Worker, output: Path) -> float:
    """CPU seconds per training step of one run into `output`."""
    result = worker.ask({"output": str(output)})
    return result["cpu"] / result["steps"]


def _subset(source: Path, target: Path, sentences: int) -> None:
    """The first `sentences` lines of each language's train split, and its validation split."""
    target.mkdir()
    for lang in ("en", "de"):
        for split in ("train", "val"):
            lines = (source / f"{split}.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)
            (target / f"{split}.{lang}").write_text("".join(lines[:sentences]), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="a git revision of this repository")
    parser.add_argument("--multi30k", type=Path, default=MULTI30K, help="default: $AIAYN_MULTI30K")
    parser.add_argument("--sentences", type=int, default=4000, help="pairs of the train split used")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--steps", type=int, default=30, help="updates per measured training")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="measured trainings per side, per round")
    parser.add_argument("--rounds", type=int, default=2, help="pairs of new worker processes")
    results.add_argument(parser, "bench_train_change")
    args = parser.parse_args()
    recorder = results.Recorder("bench_train_change")
    common.at_least(parser, args, 1, "sentences", "steps", "max_tokens", "threads", "repeats", "rounds")
    if not (args.multi30k / "train.en").is_file():
        sys.exit(f"error: --multi30k {args.multi30k}: no train.en there (set $AIAYN_MULTI30K)")

    print(common.machine_line())
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"preset {args.preset}, {args.precision}, max_tokens {args.max_tokens}, {args.steps} steps per training, "
        f"{args.threads} thread(s), CPU seconds per step"
    )
    with tempfile.TemporaryDirectory(prefix="aiayn-bench-") as tmp:
        tmp = Path(tmp)
        with common.baseline_tree(args.baseline, tmp) as tree:
            _subset(args.multi30k, tmp / "data", args.sentences)
            env = {**os.environ, "PYTHONPATH": str(tree)}
            subprocess.run(
                [sys.executable, "-c", TOKENIZER, str(tmp / "data"), str(tmp / "bpe")], cwd=tree, env=env, check=True
            )
            settings = {
                "threads": args.threads,
                "overrides": {
                    "tokenizer": str(tmp / "bpe"),
                    "data.data_dir": str(tmp / "data"),
                    "model.preset": args.preset,
                    "max_tokens": args.max_tokens,
                    "max_steps": args.steps,
                    "max_epochs": None,
                    "max_time": None,
                    **common.STEPS_ONLY,
                    "mixed_precision": "bf16" if args.precision == "bf16" else "no",
                    "log_every_steps": 10,
                },
            }
            times = {"baseline": [], "current": []}
            rounds, run = [], 0
            for round_ in range(args.rounds):
                sides = [("baseline", tree), ("current", REPO)][:: 1 if round_ % 2 == 0 else -1]
                workers = {name: Worker(path, WORKER, [json.dumps(settings)], "trainer") for name, path in sides}
                for worker in workers.values():  # warm-up: imports, first allocations, compiled loss
                    run += 1
                    seconds_per_step(worker, tmp / f"run{run}")
                pairs = {name: [] for name in workers}
                for _ in range(args.repeats):
                    for name, worker in workers.items():
                        run += 1
                        pairs[name].append(seconds_per_step(worker, tmp / f"run{run}"))
                for name in pairs:
                    times[name] += pairs[name]
                rounds.append(statistics.median(pairs["baseline"]) / statistics.median(pairs["current"]))
                for worker in workers.values():
                    worker.close()
                print(f"round {round_ + 1}: baseline / current {rounds[-1]:.3f}", file=sys.stderr, flush=True)
    base, cur = statistics.median(times["baseline"]), statistics.median(times["current"])
    within = statistics.median(b / c for b, c in zip(times["baseline"], times["current"]))
    print("| baseline ms/step | current ms/step | baseline / current | per round |")
    print("|---|---|---|---|")
    print(
        f"| {base * 1e3:.1f} | {cur * 1e3:.1f} | {base / cur:.3f} ({within:.3f}) | {min(rounds):.3f}-{max(rounds):.3f} |"
    )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    figures = {
        "baseline": args.baseline,
        "settings": {k: v for k, v in vars(args).items() if k not in ("multi30k", "results")},
        "baseline_ms_per_step": round(base * 1e3, 2),
        "current_ms_per_step": round(cur * 1e3, 2),
        "baseline_over_current": round(base / cur, 4),
        "median_of_pairs": round(within, 4),
        "rounds": [round(r, 4) for r in rounds],
    }
    common.write_results(recorder, figures, args.results)


if __name__ == "__main__":
    main()
