"""The quickstart as a user runs it, end to end, with a results file: `aiayn quickstart` in a process
of its own (start-up, corpus, tokenizer, training, averaging, translation, scoring), then the
held-out sentences scored again from the files it wrote.

    python benchmarks/bench_quickstart.py                  # as shipped: --minutes 2.5
    python benchmarks/bench_quickstart.py --minutes 0.2    # a smoke run

Writes `benchmarks/results/quickstart.<machine>.json` (or `--results FILE`): sacreBLEU with its
signature, the seconds of the command, the training steps and the precision the run chose.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli.evaluation.scoring import score  # noqa: E402
from aiayn_cli.precision import machine_summary  # noqa: E402
from benchmarks import results  # noqa: E402


def run(minutes: float | None, folder: Path) -> tuple[float, str]:
    """`aiayn quickstart` into `folder`; (wall seconds, its standard output)."""
    aiayn = shutil.which("aiayn")
    command = [aiayn] if aiayn else [sys.executable, "-m", "aiayn_cli"]
    command += ["quickstart", "--output-dir", str(folder), "--overwrite"]
    if minutes is not None:
        command += ["--minutes", str(minutes)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"aiayn quickstart failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def figures(folder: Path, seconds: float) -> dict:
    hypotheses = (folder / "test.hyp.de").read_text(encoding="utf-8").splitlines()
    references = (folder / "data" / "test.de").read_text(encoding="utf-8").splitlines()
    sacrebleu = score(hypotheses, references, metrics=("sacrebleu",))["scores"]["sacrebleu"]
    records = [json.loads(line) for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    precision = next(r["precision"] for r in records if "precision" in r)
    steps = max(r["step"] for r in records)
    return {
        "sacrebleu": round(float(sacrebleu["score"]), 2),
        "signature": sacrebleu["signature"],
        "sentences": len(references),
        "seconds": round(seconds, 1),
        "train_steps": steps,
        "precision": {"no": "fp32"}.get(precision, precision),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=None, help="the training budget (default: the command's)")
    results.add_argument(parser, "quickstart")
    args = parser.parse_args()
    print(machine_summary(), flush=True)
    recorder = results.Recorder(
        "quickstart", "aiayn quickstart" + (f" --minutes {args.minutes}" if args.minutes else "")
    )
    with tempfile.TemporaryDirectory() as tmp:
        seconds, _ = run(args.minutes, Path(tmp) / "aiayn-quickstart")
        found = figures(Path(tmp) / "aiayn-quickstart", seconds)
    path = recorder.write(found, args.results)
    print(json.dumps(found, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
