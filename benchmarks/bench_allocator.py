"""The memory allocator's settings in a real training run: tokens/s and resident memory, side by side.

    python benchmarks/bench_allocator.py --data-dir $AIAYN_MULTI30K [--recipe multi30k_en_de] [--minutes 12]
                                         [--conf CONF ...] [--set KEY=VALUE ...]

Each `--conf` is one run of `aiayn train RECIPE --max-time MINUTES` in a process of its own, one after
the other: a jemalloc `MALLOC_CONF` (`""` for jemalloc's own defaults), or `system` for glibc's
malloc (`AIAYN_ALLOCATOR=system`). The default compares the options `aiayn train` sets
(`aiayn_cli.allocator.JEMALLOC_CONF`: every freed page kept, all of them given back after each
validation and checkpoint) with a decay of 30 seconds (pages given back as they age, between steps
too) and with glibc's malloc. A warm-up run of one step builds the tokenizer and the prepared data
that every run then shares.

For each run: the training tokens/s (`trainer_state.json`: tokens over training seconds, as the
recipe's hour reports them), its steps, and the process's resident memory sampled every 2 seconds
(`VmRSS`): the peak, the largest of its last quarter, and the largest of each minute. The figure
that matters is the pair: tokens/s as a ratio to the first `--conf`, and whether memory stays flat.
Memory growth that takes minutes to appear needs runs of minutes: the default is 12 (about 45 minutes
for the three runs). Run it alone: other work on the machine changes both figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli.allocator import JEMALLOC_CONF
from benchmarks import common, results

DECAY_30_S = "dirty_decay_ms:30000,muzzy_decay_ms:30000"
WARM_UP = [f"{key}={json.dumps(value)}" for key, value in common.STEPS_ONLY.items()]


def resident_mb(pid: int) -> float | None:
    """The resident memory of process `pid` in MB (`VmRSS`), or None once it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def environment(conf: str) -> dict[str, str]:
    """The environment of the run of `conf`: glibc's malloc for `system`, else jemalloc with `conf`."""
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_CONF", "AIAYN_ALLOCATOR", "LD_PRELOAD")}
    env["PYTHONPATH"] = os.pathsep.join([str(results.REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if conf == "system":
        env["AIAYN_ALLOCATOR"] = "system"
    else:
        env["MALLOC_CONF"] = conf
    return env


def train(args, conf: str, tokenizer: Path, output: Path, extra: list[str], log: Path) -> list[tuple[float, float]]:
    """Run `aiayn train` with `conf`; the (seconds, MB) samples of its resident memory. Exits with the
    log's path where the run fails."""
    command = [sys.executable, "-m", "aiayn_cli", "train", args.recipe, "--data-dir", str(args.data_dir)]
    command += ["--tokenizer", str(tokenizer), "--output-dir", str(output), "--no-progress", *extra]
    for item in args.set:
        command += ["--set", item]
    samples: list[tuple[float, float]] = []
    with log.open("w") as out:
        process = subprocess.Popen(command, env=environment(conf), stdout=out, stderr=subprocess.STDOUT)
        start = time.monotonic()

        def sample() -> None:  # the restart with the allocator preloaded keeps the process id
            while process.poll() is None:
                mb = resident_mb(process.pid)
                if mb is not None:
                    samples.append((time.monotonic() - start, mb))
                time.sleep(2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            code = process.wait(timeout=args.minutes * 60 * 2 + 900)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        sampler.join()
    if code != 0:
        sys.exit(
            f"error: aiayn train with MALLOC_CONF={conf!r} exited with {code}; the end of its log:\n{log.read_text()[-2000:]}"
        )
    return samples


def summary(conf: str, output: Path, samples: list[tuple[float, float]]) -> dict:
    """One run's figures: tokens/s, steps, and its memory (peak, last quarter, by minute)."""
    checkpoints = sorted(output.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    state = json.loads((checkpoints[-1] / "trainer_state.json").read_text())
    tokens = state["source_tokens"] + state["target_tokens"]
    last = samples[-1][0] if samples else 0.0
    by_minute: dict[int, float] = {}
    for seconds, mb in samples:
        by_minute[int(seconds // 60)] = max(by_minute.get(int(seconds // 60), 0.0), mb)
    return {
        "conf": conf,
        "steps": state["step"],
        "train_seconds": round(state["train_seconds"], 1),
        "tokens_per_second": round(tokens / state["train_seconds"]),
        "peak_rss_mb": round(max((mb for _, mb in samples), default=0.0)),
        "last_quarter_peak_rss_mb": round(max((mb for s, mb in samples if s >= 0.75 * last), default=0.0)),
        "rss_mb_by_minute": [round(by_minute[m]) for m in sorted(by_minute)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=os.environ.get("AIAYN_MULTI30K"), help="train.en, ...")
    parser.add_argument("--recipe", default="multi30k_en_de")
    parser.add_argument("--minutes", type=float, default=12.0, help="training minutes of each run")
    parser.add_argument("--conf", action="append", help="a MALLOC_CONF, '' or system (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a recipe override")
    results.add_argument(parser, "bench_allocator")
    args = parser.parse_args()
    recorder = results.Recorder("bench_allocator")
    confs = args.conf or [JEMALLOC_CONF, DECAY_30_S, "system"]
    if args.minutes <= 0:
        parser.error(f"--minutes must be > 0, got {args.minutes}")
    if args.data_dir is None or not (Path(args.data_dir) / "train.en").is_file():
        parser.error(f"--data-dir {args.data_dir}: no train.en there (or set $AIAYN_MULTI30K)")

    print(common.machine_line())
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{args.recipe}, {args.minutes:g} minutes each, overrides: {' '.join(args.set) or 'none'}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="aiayn-bench-") as tmp:
        tmp = Path(tmp)
        warm_up = [arg for item in WARM_UP for arg in ("--set", item)] + ["--max-steps", "1"]
        train(args, confs[0], tmp / "bpe", tmp / "warm-up", warm_up, tmp / "warm-up.log")
        for i, conf in enumerate(confs):
            samples = train(
                args, conf, tmp / "bpe", tmp / f"run{i}", ["--max-time", f"{args.minutes * 60:g}s"], tmp / "log"
            )
            runs.append(summary(conf, tmp / f"run{i}", samples))
            run = runs[-1]
            print(
                f"MALLOC_CONF={conf!r}: {run['tokens_per_second']:,} tokens/s, {run['steps']} steps, "
                f"RSS peak {run['peak_rss_mb']:,} MB, by minute {run['rss_mb_by_minute']}",
                flush=True,
            )
    print("| MALLOC_CONF | tokens/s | ratio | steps | peak RSS MB | last quarter |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        run["ratio_to_first"] = round(run["tokens_per_second"] / runs[0]["tokens_per_second"], 4)
        print(
            f"| {run['conf'] or '(defaults)'} | {run['tokens_per_second']:,} | {run['ratio_to_first']:.3f} "
            f"| {run['steps']} | {run['peak_rss_mb']:,} | {run['last_quarter_peak_rss_mb']:,} |"
        )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    settings = {"recipe": args.recipe, "minutes": args.minutes, "overrides": args.set}
    common.write_results(recorder, {"settings": settings, "runs": runs}, args.results)


if __name__ == "__main__":
    main()
