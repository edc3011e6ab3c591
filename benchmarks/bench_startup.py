"""How long `aiayn translate` takes to translate one sentence from a fresh process, beside the floor the
libraries set: importing torch and the transformers classes the model is built on.

    python benchmarks/bench_startup.py --model aiayn-quickstart/run/averaged
    python benchmarks/bench_startup.py --model MODEL --baseline /tmp/aiayn-before   # an older checkout too

Each repeat runs, one after the other in the same conditions: the floor (`python -c "import torch;
from transformers import PreTrainedModel, GenerationMixin, AutoTokenizer"`), `echo 'The small dog
sees a red ball.' | python -m aiayn_cli translate -m MODEL`, the same with `--engine ctranslate2` on
the model converted already (converted once before the repeats, into a cache folder of this run;
where CTranslate2 is installed: that path imports neither torch nor transformers), `translate --help`,
a bad option (`--beam 0`), and with `--baseline` the same translation by another checkout. Per command: the median
wall time, the median CPU time (user + system: less moved by other load than the wall time), the peak
resident memory, and the ratios to the floor. The machine, its load average and the figures go to a
results file (benchmarks/results.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common
from benchmarks.results import Recorder

REPO = Path(__file__).resolve().parents[1]
SENTENCE = "The small dog sees a red ball.\n"
FLOOR = "import torch; from transformers import PreTrainedModel, GenerationMixin, AutoTokenizer"


CACHE = tempfile.mkdtemp(prefix="bench-startup-cache-")  # the ctranslate2 engine's converted models


def run(argv: list[str], stdin: str | None, pythonpath: Path) -> dict:
    """One fresh process: wall seconds, CPU seconds (user + system) and peak RSS in MB, from wait4."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["AIAYN_CACHE"] = CACHE
    start = time.perf_counter()
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True
    )
    process.stdin.write(stdin or "")
    process.stdin.close()
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "exit_code": process.returncode,
        "stderr": stderr.strip().splitlines()[-1:] if stderr.strip() else [],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="A model folder (e.g. the quickstart's run/averaged).")
    parser.add_argument("--repeats", type=int, default=3, help="Runs of each command (the median is reported).")
    parser.add_argument("--baseline", type=Path, help="Another checkout whose translate is timed beside this one.")
    parser.add_argument("--results", type=Path, help="Where the results file goes (default: benchmarks/results/).")
    args = parser.parse_args()

    recorder = Recorder("bench_startup")  # no torch in this process before the runs: a child's peak RSS
    print(f"load average before: {os.getloadavg()[0]:.2f}")  # counts its parent's size at the fork
    python = sys.executable
    commands = {
        "floor: import torch + transformers' model classes": ([python, "-c", FLOOR], None, REPO),
        "aiayn translate, one sentence": ([python, "-m", "aiayn_cli", "translate", "-m", args.model], SENTENCE, REPO),
        "aiayn translate --help": ([python, "-m", "aiayn_cli", "translate", "--help"], None, REPO),
        "aiayn translate --beam 0 (a bad option)": (
            [python, "-m", "aiayn_cli", "translate", "-m", args.model, "--beam", "0", "x"],
            None,
            REPO,
        ),
    }
    if importlib.util.find_spec("ctranslate2"):
        engine = [python, "-m", "aiayn_cli", "translate", "-m", args.model, "--engine", "ctranslate2"]
        converted = run(engine, SENTENCE, REPO)  # converts the model once, into this run's cache
        if converted["exit_code"] != 0:
            raise SystemExit(f"--engine ctranslate2 failed: {converted['stderr']}")
        commands["aiayn translate --engine ctranslate2, one sentence (converted)"] = (engine, SENTENCE, REPO)
    if args.baseline is not None:
        commands["baseline: aiayn translate, one sentence"] = (
            [python, "-m", "aiayn_cli", "translate", "-m", args.model],
            SENTENCE,
            args.baseline,
        )
    runs: dict[str, list[dict]] = {name: [] for name in commands}
    for _ in range(args.repeats):  # interleaved, so that every command sees the same load
        for name, (argv, stdin, path) in commands.items():
            runs[name].append(run(argv, stdin, path))
    floor = runs[next(iter(runs))]
    rows = []
    for name, measured in runs.items():
        row = {
            "command": name,
            "wall_s": statistics.median(r["wall_s"] for r in measured),
            "cpu_s": statistics.median(r["cpu_s"] for r in measured),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in measured),
            "exit_codes": sorted({r["exit_code"] for r in measured}),
            "last_stderr_line": measured[-1]["stderr"],
        }
        row["cpu_vs_floor"] = row["cpu_s"] / statistics.median(r["cpu_s"] for r in floor)
        row["wall_vs_floor"] = row["wall_s"] / statistics.median(r["wall_s"] for r in floor)
        rows.append(row)
        print(
            f"{name:45s} wall {row['wall_s']:6.2f} s  cpu {row['cpu_s']:5.2f} s  peak {row['peak_rss_mb']:6.0f} MB  "
            f"cpu/floor {row['cpu_vs_floor']:.2f}  exit {row['exit_codes']}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(common.machine_line())
    path = recorder.write({"model": args.model, "repeats": args.repeats, "rows": rows}, path=args.results)
    print(f"wrote {path}")
    import shutil

    shutil.rmtree(CACHE, ignore_errors=True)


if __name__ == "__main__":
    main()
