"""The sweep of hostile inputs: every option of every command, given absurd sizes, wrong types and
hostile strings, each case in its own process and its own temporary folder.

Every file of the case's folder (a tiny model, a tokenizer, data, an input text) is fingerprinted
before and after. A case ends one of these ways:

- refused: a non-zero exit whose last line on stderr is `error: ...` (the rule: one line);
- completed: exit code 0 (the value was one the option takes);
- traceback: a Python traceback on stderr;
- abort: ended by a signal (a segfault, the kernel's OOM killer);
- timed out: still running after `--case-seconds`;
- unclear: a non-zero exit without an `error:` line;
- and, whichever of these, files lost: a file of the case's inputs changed or removed.

The goal is 0 tracebacks, 0 aborts, 0 files lost. `serve` (it runs until stopped; its requests are
fuzzed by tests/serving/test_serving.py and schemathesis) and `quickstart` (minutes of training) are left out.

    nice python benchmarks/sweep_inputs.py                  # every case; results file and a summary
    python benchmarks/sweep_inputs.py --only translate --limit 20

The results file (`benchmarks/results/sweep_inputs.<machine>.json`) holds a row per command with the
counts, and every case that was not refused or completed; docs/reliability.md's table is made from it
(`python docs/tables.py`).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from benchmarks import results

REPO = Path(__file__).resolve().parents[1]

LEFT_OUT = {"serve", "quickstart", "recipes"}
INVALID_UTF8 = b"w5 \xff w6"  # a byte that is not UTF-8, as a shell passes it
# Hostile values by the option's type. Each is tried alone, over a command line that otherwise works.
INTS = ["0", "-1", "1000000", str(10**20), "x", "1.5", ""]
FLOATS = ["nan", "inf", "-1", "1e400", "x", ""]
TEXTS = ["", "x" * 100_000, INVALID_UTF8, "../../../etc/passwd", "-", "w5\tw6\rw7"]
PATHS = ["missing", "model/model.safetensors", "model", "/dev/null", "/dev/full", "", INVALID_UTF8]


@dataclass
class Case:
    command: str
    option: str
    value: str | bytes
    argv: list  # str or bytes items


def _base(workdir: Path) -> dict[str, list]:
    """A command line that works, for each command (the option under test is added to it)."""
    data = ["--data-dir", "data", "-s", "en", "-t", "de"]
    return {
        "train-tokenizer": ["train-tokenizer", *data, "--vocab-size", "60", "-o", "out"],
        "prepare": ["prepare", "tiny", *data, "--tokenizer", "model", "--cache-dir", "out"],
        "train": [
            "train",
            "tiny",
            *data,
            "--tokenizer",
            "model",
            "--output-dir",
            "out",
            "--max-steps",
            "2",
            "--set",
            "trackers=[]",
        ],  # fmt: skip
        "average": ["average", "model", "model2", "-o", "out"],
        "translate": ["translate", "-m", "model", "-i", "src.txt", "-o", "out.txt", "--beam", "2"],
        "evaluate": ["evaluate", "-i", "src.txt", "-r", "ref.txt", "--json", "out.json"],
        "push": ["push", "-m", "model", "--repo-id", "u/m", "--dry-run", "--output-dir", "out"],
        "export": ["export", "-m", "model", "-o", "out"],
        "attention": ["attention", "-m", "model", "w5 w6 w7", "-o", "out"],
        "heads": ["heads", "-m", "model", *data, "--split", "test", "--sample-size", "2", "--beam", "1", "-o", "out"],
        "layers": ["layers", "-m", "model", *data, "--split", "test", "--sample-size", "2", "-o", "out"],
        "paper": ["paper", "masks", "-m", "model", "-o", "out"],
    }


def _values(kind: str) -> list:
    return {"int": INTS, "float": FLOATS, "path": PATHS}.get(kind, TEXTS)


def cases(workdir: Path, only: str | None = None) -> list[Case]:
    """Every (command, option, hostile value), from the commands' own parameters."""
    import typer.main

    from aiayn_cli.cli.app import app

    group = typer.main.get_command(app)
    found = []
    for command, argv in _base(workdir).items():
        if only and command != only:
            continue
        for param in group.commands[command].params:
            flags = [o for o in param.opts if o.startswith("--")]
            if not flags or getattr(param, "is_flag", False) or getattr(param, "hidden", False) or flags[0] == "--help":
                continue
            flag = max(flags, key=len)
            hint = str(param.bare_type())  # "int", "Path | None", "typing.Literal[...]"
            kind = next((k for k in ("Path", "int", "float") if k in hint.split("[")[0]), "text").lower()
            for value in _values(kind):
                found.append(Case(command, flag, value, [*_without(argv, param.opts), flag, value]))
        found += [Case(command, "--set", v, [*argv, "--set", v]) for v in _SETS if command in ("train", "prepare")]
    # Round robin over the commands: a run cut short by --budget-minutes has walked each of them.
    by_command = {c: [case for case in found if case.command == c] for c in dict.fromkeys(x.command for x in found)}
    return [case for group in zip_longest(*by_command.values()) for case in group if case is not None]


_SETS = ["model.d_ff=1000000000", ".=1", "a=" + "[" * 5000 + "]" * 5000, "lr_scale=x", "max_steps=1e400"]


def _without(argv: list, opts: list[str]) -> list:
    """`argv` without the option `opts` names (and its value), where the base line gives it."""
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
            continue
        if item in opts:
            skip = True
            continue
        out.append(item)
    return out


def _fixtures(folder: Path) -> None:
    from helpers import save_tiny_model

    save_tiny_model(folder / "model")
    save_tiny_model(folder / "model2", seed=1)
    lines = "".join(f"w{4 + i % 50} w{5 + i % 7} w{6 + i % 11}\n" for i in range(40))
    (folder / "src.txt").write_text(lines[:60])
    (folder / "ref.txt").write_text(lines[:60])
    (folder / "data").mkdir()
    for split in ("train", "validation", "test"):
        for lang in ("en", "de"):
            (folder / "data" / f"{split}.{lang}").write_text(lines)


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file under `folder` but the outputs (`out*`): its content's hash."""
    found = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if relative.parts[0].startswith("out") or not path.is_file() or path.is_symlink():
            continue
        found[str(relative)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def run_case(case: Case, fixtures: Path, seconds: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="aiayn-sweep-") as tmp:
        work = Path(tmp) / "case"
        shutil.copytree(fixtures, work)
        before = fingerprint(work)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "AIAYN_CACHE": str(Path(tmp) / "cache"),
               "HF_HOME": str(Path(tmp) / "hf"), "PYTHONPATH": str(REPO)}  # fmt: skip
        argv = [os.fsencode(a) if isinstance(a, str) else a for a in case.argv]
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable.encode(), b"-m", b"aiayn_cli", *argv], cwd=work, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        try:
            _, err = process.communicate(timeout=seconds)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, err = process.communicate()
            timed_out = True
        err = err.decode("utf-8", "replace")
        after = fingerprint(work)
    lost = sorted(k for k in before if after.get(k) != before[k])
    lines = [line for line in err.strip().splitlines() if line.strip()]
    if timed_out:
        outcome = "timed out"
    elif "Traceback (most recent call last)" in err:
        outcome = "traceback"
    elif process.returncode < 0:
        outcome = "abort"
    elif process.returncode == 0:
        outcome = "completed"
    elif lines and lines[-1].startswith("error: "):
        outcome = "refused"
    else:
        outcome = "unclear"
    value = case.value if isinstance(case.value, str) else ascii(case.value)
    return {
        "command": case.command,
        "option": case.option,
        "value": value if len(value) <= 40 else value[:30] + f"... ({len(value)} characters)",
        "outcome": outcome,
        "exit": process.returncode,
        "files_lost": lost,
        "seconds": round(time.monotonic() - started, 1),
        "last_line": (lines[-1] if lines else "")[:300],
    }


def summary(done: list[dict]) -> list[dict]:
    """A row per command, and a total: the counts of each outcome."""
    rows = []
    for command in [*dict.fromkeys(d["command"] for d in done), "all"]:
        mine = [d for d in done if command in ("all", d["command"])]
        row = {"command": command, "cases": len(mine)}
        for outcome in ("refused", "completed", "traceback", "abort", "timed out", "unclear"):
            row[outcome] = sum(d["outcome"] == outcome for d in mine)
        row["files lost"] = sum(bool(d["files_lost"]) for d in mine)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="one command's cases")
    parser.add_argument("--start", type=int, default=0, help="skip this many cases (a run going on from another)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many cases (in order)")
    parser.add_argument("--case-seconds", type=float, default=180, help="a case still running then is killed")
    parser.add_argument("--budget-minutes", type=float, default=None, help="stop starting cases after this long")
    results.add_argument(parser, "sweep_inputs")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1 or args.case_seconds <= 0 or args.start < 0:
        parser.error("--limit and --case-seconds must be positive, --start at least 0")
    recorder = results.Recorder("sweep_inputs")
    print(results.describe(results.machine()), flush=True)
    with tempfile.TemporaryDirectory(prefix="aiayn-sweep-fixtures-") as tmp:
        fixtures = Path(tmp)
        _fixtures(fixtures)
        todo = cases(fixtures, args.only)[args.start :][: args.limit]
        deadline = time.monotonic() + args.budget_minutes * 60 if args.budget_minutes else None
        done = []
        for number, case in enumerate(todo, 1):
            if deadline is not None and time.monotonic() > deadline:
                break
            done.append(run_case(case, fixtures, args.case_seconds))
            d = done[-1]
            print(f"[{number}/{len(todo)}] {d['command']} {d['option']} {d['value']!r}: {d['outcome']}"
                  + (f", files lost: {d['files_lost']}" if d["files_lost"] else ""), flush=True)  # fmt: skip
    rows = summary(done)
    notable = [d for d in done if d["outcome"] not in ("refused", "completed") or d["files_lost"]]
    path = recorder.write(
        {
            "rows": rows,
            "cases_skipped": args.start,
            "cases_planned": len(todo),
            "cases_run": len(done),
            "notable": notable,
        },
        path=args.results,
    )
    print(f"{len(done)} of {len(todo)} cases; " + ", ".join(f"{k}: {v}" for k, v in rows[-1].items() if k != "command"))
    print(f"results: {path}")
    return 1 if any(rows[-1][k] for k in ("traceback", "abort", "files lost")) else 0


if __name__ == "__main__":
    sys.exit(main())
