"""The quickstart as a user runs it, end to end, with a results file: `aiayn quickstart` in a process
of its own (start-up, corpus, tokenizer, training, averaging, translation, scoring), then the
held-out sentences scored again from the files it wrote.

    python benchmarks/bench_quickstart.py                  # as shipped: 1,000 steps, a 10-minute cap
    python benchmarks/bench_quickstart.py --busy-cores 1   # with one core kept busy throughout
    python benchmarks/bench_quickstart.py --steps 20       # a smoke run

Writes `benchmarks/results/quickstart.<machine>.json` (`quickstart.<machine>.one-core-busy.json` with
`--busy-cores 1`, beside the idle run's; or `--results FILE`): sacreBLEU with its signature, the seconds
of the command, the training steps, whether the time cap stopped them, the final model chosen
(`training/selection.py`) and the precision the run chose. `--busy-cores N` runs N processes that spin
for the whole command (a loaded machine), and ends them after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli.evaluation.scoring import score
from benchmarks import common, results


def run(options: list[str], folder: Path) -> tuple[float, str]:
    """`aiayn quickstart OPTIONS` into `folder`; (wall seconds, its standard output)."""
    aiayn = shutil.which("aiayn")
    command = [aiayn] if aiayn else [sys.executable, "-m", "aiayn_cli"]
    command += ["quickstart", "--output-dir", str(folder), "--overwrite", *options]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"aiayn quickstart failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.stdout


@contextlib.contextmanager
def busy_cores(n: int):
    """`n` processes that each keep one core busy until the block ends (then they are ended)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def figures(folder: Path, seconds: float, stdout: str) -> dict:
    hypotheses = (folder / "test.hyp.de").read_text(encoding="utf-8").splitlines()
    references = (folder / "data" / "test.de").read_text(encoding="utf-8").splitlines()
    sacrebleu = score(hypotheses, references, metrics=("sacrebleu",))["scores"]["sacrebleu"]
    records = [json.loads(line) for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    precision = next(r["precision"] for r in records if "precision" in r)
    steps = max(r["step"] for r in records)
    chosen = json.loads((folder / "run" / "averaged" / "averaged_from.json").read_text()).get("selection", {})
    return {
        "sacrebleu": round(float(sacrebleu["score"]), 2),
        "signature": sacrebleu["signature"],
        "sentences": len(references),
        "seconds": round(seconds, 1),
        "train_steps": steps,
        "time_cap_reached": "the time cap (--minutes) was reached" in stdout,
        "final_model": chosen.get("chosen"),
        "final_checkpoints": chosen.get("checkpoints"),
        "precision": {"no": "fp32"}.get(precision, precision),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="the training steps (default: the command's)")
    parser.add_argument("--minutes", type=float, default=None, help="the time cap (default: the command's)")
    parser.add_argument("--busy-cores", type=int, default=0, help="processes keeping a core busy throughout")
    parser.add_argument("--keep", type=Path, help="keep the quickstart's folder here (default: a temporary one)")
    results.add_argument(parser, "quickstart")
    args = parser.parse_args()
    print(common.machine_line(), flush=True)
    options = [
        *(["--steps", str(args.steps)] if args.steps else []),
        *(["--minutes", str(args.minutes)] if args.minutes else []),
    ]
    busy = f" (with {args.busy_cores} other process{'es' if args.busy_cores > 1 else ''} spinning on a core)"
    recorder = results.Recorder(
        "quickstart", " ".join(["aiayn quickstart", *options]) + (busy if args.busy_cores else "")
    )
    with tempfile.TemporaryDirectory() as tmp, busy_cores(args.busy_cores):
        folder = args.keep or Path(tmp) / "aiayn-quickstart"
        seconds, stdout = run(options, folder)
        found = figures(folder, seconds, stdout)
    found["busy_cores"] = args.busy_cores
    target = args.results
    if target is None and args.busy_cores:  # beside the idle run's file, never over it
        busy_name = "one-core-busy" if args.busy_cores == 1 else f"{args.busy_cores}-cores-busy"
        idle = results.default_path("quickstart", results.machine())
        target = idle.with_name(f"{idle.stem}.{busy_name}.json")
    path = recorder.write(found, target)
    print(json.dumps(found, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
