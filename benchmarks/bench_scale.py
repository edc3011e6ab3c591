"""Data at the paper's sizes: `train-tokenizer`, `prepare` and the first training step, 0.5M-4.5M pairs.

    python benchmarks/bench_scale.py --sizes 500000 1500000 4500000
    python benchmarks/bench_scale.py --sizes 36000000 --tokenizer-sample 2000000   # WMT14 en-fr's size

For each size, a parallel corpus is written under --workdir (Multi30k's training pairs repeated, each
copy marked with a token of its own, ` @k`, so that no two lines of different copies are identical),
then each command runs as a subprocess of its own, watched every 0.1 s:

- `aiayn train-tokenizer` on the whole corpus (vocabulary 8,000);
- `aiayn prepare` (read, clean, tokenize with the default `num_proc`), then the same command again
  (it opens the cache);
- `aiayn train --max-steps 1` from the prepared cache (tiny model, no validation; the batches are cut
  here): the time to the first training step is when its first record reaches metrics.jsonl, from
  the command's start.

Reported: wall seconds, CPU seconds (user + system of the whole process tree) and peak memory: the
RSS summed over the process tree (pages shared between processes, and memory-mapped Arrow pages,
counted in each: an upper bound). The corpora and caches are deleted at the end (unless --keep).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common
from benchmarks.local_data import MULTI30K

REPO = Path(__file__).resolve().parents[1]


def write_corpus(multi30k: Path, pairs: int, folder: Path) -> None:
    """`pairs` pairs: Multi30k's training pairs, copy k marked ` @k` on both sides."""
    folder.mkdir(parents=True, exist_ok=True)
    base = {lang: (multi30k / f"train.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("en", "de")}
    size = len(base["en"])
    for lang, lines in base.items():
        with open(folder / f"train.{lang}", "w", encoding="utf-8") as out:
            for copy in range(-(-pairs // size)):
                count = min(size, pairs - copy * size)
                out.write("".join(f"{line} @{copy}\n" for line in lines[:count]))


def run(command: list[str], env: dict[str, str], first_step_file: Path | None = None) -> dict[str, float]:
    """Run `command`; its wall and CPU seconds, the peak RSS of its process tree, and the first step time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = psutil.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak, first_step = 0, None
    while process.poll() is None:
        try:
            tree = [process] + process.children(recursive=True)
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        if first_step is None and first_step_file is not None and first_step_file.is_file():
            if first_step_file.read_text(encoding="utf-8").strip():
                first_step = time.perf_counter() - start
        time.sleep(0.1)
    seconds = time.perf_counter() - start
    output = process.stdout.read()
    if process.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({process.returncode}):\n{output[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result = {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_mb": peak / 2**20,
        "output": output.strip().splitlines()[-1],
    }
    if first_step_file is not None:
        result["first_step_seconds"] = first_step if first_step is not None else float("nan")
    return result


def recipe_file(folder: Path) -> Path:
    path = folder / "recipe.yaml"
    path.write_text(
        "\n".join(
            [
                "model: {preset: tiny}",
                f"data: {{data_dir: {folder / 'data'}, source_lang: en, target_lang: de, cache_dir: {folder / 'cache'}}}",
                f"tokenizer: {folder / 'tokenizer'}",
                f"output_dir: {folder / 'run'}",
                "valid_split: null",
                "best_metric: loss",
                "max_length: 128",
                "max_tokens: 4096",
                "max_steps: 1",
                "log_every_steps: 1",
                "checkpoint_every_minutes: null",
                "average_last: null",
                "trackers: []",
                "",
            ]
        )
    )
    return path


def measure(multi30k: Path, pairs: int, folder: Path, row: dict, save, tokenizer_sample: int | None = None) -> None:
    """Fill `row` phase by phase, calling `save()` after each (a long run keeps what it measured)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="true")
    aiayn = [sys.executable, "-m", "aiayn_cli"]
    write_corpus(multi30k, pairs, folder / "data")
    recipe = recipe_file(folder)
    row.update(pairs=pairs, corpus_mb=sum(f.stat().st_size for f in (folder / "data").iterdir()) / 2**20)
    data = ["--data-dir", str(folder / "data"), "-s", "en", "-t", "de"]
    sample = ["--sample", str(tokenizer_sample)] if tokenizer_sample and tokenizer_sample < pairs else []
    row["tokenizer_sample"] = min(tokenizer_sample or pairs, pairs)
    row["train_tokenizer"] = run(
        aiayn + ["train-tokenizer", *data, "--vocab-size", "8000", *sample, "-o", str(folder / "tokenizer")], env
    )
    save()
    row["prepare"] = run(aiayn + ["prepare", str(recipe), "--no-progress"], env)
    save()
    row["prepare_again"] = run(aiayn + ["prepare", str(recipe), "--no-progress"], env)
    row["cache_mb"] = sum(f.stat().st_size for f in (folder / "cache").rglob("*") if f.is_file()) / 2**20
    save()
    row["first_step"] = run(
        aiayn + ["train", str(recipe), "--no-progress"], env, first_step_file=folder / "run" / "metrics.jsonl"
    )
    save()


def table(rows: list[dict]) -> str:
    lines = [
        "| pairs | corpus | train-tokenizer | prepare | prepare again (cache) | first training step from the cache | cache on disk |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        tok, prep, again, first = row["train_tokenizer"], row["prepare"], row["prepare_again"], row["first_step"]
        sample = row.get("tokenizer_sample", row["pairs"])
        sampled = f" (a sample of {sample / 1e6:g}M)" if sample < row["pairs"] else ""
        lines.append(
            f"| {row['pairs'] / 1e6:g}M | {row['corpus_mb']:,.0f} MB "
            f"| {tok['seconds']:.0f} s ({tok['cpu_seconds']:.0f} CPU-s){sampled}, {tok['peak_mb']:,.0f} MB "
            f"| {prep['seconds']:.0f} s ({prep['cpu_seconds']:.0f} CPU-s), {prep['peak_mb']:,.0f} MB "
            f"| {again['seconds']:.1f} s ({again['cpu_seconds']:.1f} CPU-s), {again['peak_mb']:,.0f} MB "
            f"| {first['first_step_seconds']:.1f} s ({first['cpu_seconds']:.1f} CPU-s for the command), "
            f"{first['peak_mb']:,.0f} MB "
            f"| {row['cache_mb']:,.0f} MB |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--multi30k", type=Path, default=MULTI30K, help="a folder of train.en, train.de, ... (default: $AIAYN_MULTI30K)"
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[500_000, 1_500_000, 4_500_000])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/aiayn-bench-scale"))
    parser.add_argument(
        "--tokenizer-sample",
        type=int,
        help="train-tokenizer --sample N: learn the vocabulary from N random pairs (for the largest corpora)",
    )
    parser.add_argument("--json", type=Path, help="Also write the measurements here.")
    parser.add_argument("--keep", action="store_true", help="Keep the generated corpora and caches.")
    parser.add_argument("--table", type=Path, help="Only print the table of measurements saved with --json.")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    print(common.machine_line(), flush=True)
    rows: list[dict] = []

    def save() -> None:
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))

    for pairs in args.sizes:
        folder = args.workdir / str(pairs)
        shutil.rmtree(folder, ignore_errors=True)
        rows.append({})
        try:
            measure(args.multi30k, pairs, folder, rows[-1], save, args.tokenizer_sample)
        finally:
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
        print(json.dumps(rows[-1]), flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
