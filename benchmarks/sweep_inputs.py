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

Each case's process is forked from the sweep's own, which has imported the command line once (and has
run no torch computation, so that forking is safe): the same as a new `python -m aiayn_cli` (its own
process group, working folder, stdin from /dev/null) but for the seconds of imports, which made a sweep
of every case take hours. `--fresh-process` starts a new interpreter for each case instead. A command
that restarts itself (`train`, with jemalloc) does so in the case's process, as it would alone.

The goal is 0 tracebacks, 0 aborts, 0 files lost. `serve` (it runs until stopped; its requests are
fuzzed by tests/serving/test_serving.py and schemathesis) and `quickstart` (minutes of training) are left out.

    nice python benchmarks/sweep_inputs.py                  # every case, 2 at a time; results file, summary
    python benchmarks/sweep_inputs.py --only translate --limit 20 --workers 1
    python benchmarks/sweep_inputs.py --fresh-process       # a new interpreter for each case

The results file (`benchmarks/results/sweep_inputs.<machine>.json`) holds a row per command with the
counts, and every case that was not refused or completed; docs/reliability.md's table is made from it
(`python docs/tables.py`).
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
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


class Running:
    """One case under way: its folder (a copy of the fixtures, fingerprinted), its process, its stderr file."""

    def __init__(self, case: Case, fixtures: Path, fork: bool):
        self.case, self.fork = case, fork
        self.tmp = tempfile.TemporaryDirectory(prefix="aiayn-sweep-")
        self.work, self.err_path = Path(self.tmp.name) / "case", Path(self.tmp.name) / "stderr"
        shutil.copytree(fixtures, self.work)
        self.before = fingerprint(self.work)
        self.inputs = named_inputs(case, self.work)
        env = {"AIAYN_CACHE": str(Path(self.tmp.name) / "cache")}
        argv = [os.fsencode(a) if isinstance(a, str) else a for a in case.argv]
        self.started = time.monotonic()
        if fork:
            self.pid = _forked(argv, self.work, env, self.err_path)
            self.process = None
        else:
            with open(self.err_path, "wb") as err:
                self.process = subprocess.Popen(
                    [sys.executable.encode(), b"-m", b"aiayn_cli", *argv], cwd=self.work, env={**os.environ, **env},
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                )  # fmt: skip
            self.pid = self.process.pid
        self.returncode: int | None = None
        self.timed_out = False

    def poll(self, seconds: float) -> bool:
        """True once the case's process has ended (killed with its process group after `seconds`)."""
        if self.returncode is not None:
            return True
        if self.process is not None:
            self.returncode = self.process.poll()
        else:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        if self.returncode is None and time.monotonic() - self.started > seconds:
            self.timed_out = True
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if self.process is not None:
                self.returncode = self.process.wait()
            else:
                self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode is not None

    def result(self) -> dict:
        err = self.err_path.read_bytes().decode("utf-8", "replace")
        after = fingerprint(self.work)
        seconds = time.monotonic() - self.started
        self.tmp.cleanup()
        return outcome(self.case, self.before, after, err, self.returncode, self.timed_out, seconds, self.inputs)


def _forked(argv: list[bytes], work: Path, env: dict[str, str], err_path: Path) -> int:
    """`aiayn ARGV` in a child forked from this process, which has imported the command line once: the
    same as a new `python -m aiayn_cli` but for the seconds of imports. The child leads its own process
    group, reads /dev/null, writes stdout to /dev/null and stderr to `err_path`; an exception that
    escapes the command is printed as Python prints it, with exit code 1."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        os.chdir(work)
        os.environ.update(env)
        sys.argv = ["aiayn", *map(os.fsdecode, argv)]  # as Python decodes a command line: surrogateescape
        from aiayn_cli.cli import script

        try:
            script()
            code = 0
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def named_inputs(case: Case, work: Path) -> set[str]:
    """The fixtures (`model`, `data`, `src.txt`, ...) that the case's command line names outside the option
    under test (its last two items): the command's inputs. A file the option under test names is an output
    where the option is one: writing it is what was asked, unless it belongs to an input."""
    named = set()
    for item in case.argv[:-2]:
        if isinstance(item, str) and item and (work / Path(item).parts[0]).exists():
            named.add(Path(item).parts[0])
    return named


def outcome(
    case: Case,
    before: dict,
    after: dict,
    err: str,
    returncode: int,
    timed_out: bool,
    seconds: float,
    inputs: set[str] | None = None,
) -> dict:
    """The row of a case that has ended: how (refused, completed, traceback, ...) and what it changed: files
    lost (a file of an input changed or removed; every fixture where `inputs` is None) and other files written."""
    changed = sorted(k for k in before if after.get(k) != before[k])
    lost = [k for k in changed if inputs is None or Path(k).parts[0] in inputs]
    lines = [line for line in err.strip().splitlines() if line.strip()]
    if timed_out:
        ended = "timed out"
    elif "Traceback (most recent call last)" in err:
        ended = "traceback"
    elif returncode < 0:
        ended = "abort"
    elif returncode == 0:
        ended = "completed"
    elif lines and lines[-1].startswith("error: "):
        ended = "refused"
    else:
        ended = "unclear"
    value = case.value if isinstance(case.value, str) else ascii(case.value)
    return {
        "command": case.command,
        "option": case.option,
        "value": value if len(value) <= 40 else value[:30] + f"... ({len(value)} characters)",
        "outcome": ended,
        "exit": returncode,
        "files_lost": lost,
        "files_written": [k for k in changed if k not in lost],
        "seconds": round(seconds, 1),
        "last_line": (lines[-1] if lines else "")[:300],
    }


def run_case(case: Case, fixtures: Path, seconds: float, fork: bool = False) -> dict:
    """One case to its end (in a new process, or `fork`ed from this one)."""
    running = Running(case, fixtures, fork)
    while not running.poll(seconds):
        time.sleep(0.02)
    return running.result()


def run_cases(todo: list[Case], fixtures: Path, seconds: float, fork: bool, workers: int, deadline: float | None):
    """The cases, `workers` at a time, in order; yields each case and its row as it ends (in the order they end).
    Starts no case after `deadline` (a `time.monotonic()`)."""
    waiting, running = list(reversed(todo)), []
    while waiting or running:
        while waiting and len(running) < workers and (deadline is None or time.monotonic() < deadline):
            running.append(Running(waiting.pop(), fixtures, fork))
        if deadline is not None and time.monotonic() >= deadline:
            waiting.clear()
        ended = [r for r in running if r.poll(seconds)]
        for r in ended:
            running.remove(r)
            yield r.case, r.result()
        if not ended:
            time.sleep(0.02)


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
    parser.add_argument("--workers", type=int, default=2, help="cases at a time (default 2)")
    parser.add_argument(
        "--fresh-process",
        action="store_true",
        help="start each case as a new `python -m aiayn_cli` (default: forked from this process, which has "
        "imported the command line once: the same process but for the seconds of imports)",
    )
    results.add_argument(parser, "sweep_inputs")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1 or args.case_seconds <= 0 or args.start < 0 or args.workers < 1:
        parser.error("--limit, --workers and --case-seconds must be positive, --start at least 0")
    if not hasattr(os, "fork"):
        args.fresh_process = True
    recorder = results.Recorder("sweep_inputs")
    print(results.describe(results.machine()), flush=True)
    with tempfile.TemporaryDirectory(prefix="aiayn-sweep-fixtures-") as tmp:
        fixtures, shared = Path(tmp) / "fixtures", Path(tmp) / "shared"
        fixtures.mkdir()
        # The Hub libraries read these when imported (here, before the forks): offline, and a home of the
        # sweep's own for every case (each case has its own converted-model cache, AIAYN_CACHE).
        os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(shared / "hf"))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        # The fixtures (tiny models: torch computes) in a process of their own: this one forks the cases,
        # and a process forks safely only before torch has started its threads.
        maker = multiprocessing.get_context("spawn").Process(target=_fixtures, args=(fixtures,))
        maker.start()
        maker.join()
        if maker.exitcode != 0:
            sys.exit(f"error: making the fixtures failed (exit {maker.exitcode})")
        todo = cases(fixtures, args.only)[args.start :][: args.limit]
        if not args.fresh_process:
            import aiayn_cli.cli.app  # noqa: F401  (what every forked case would import)
        deadline = time.monotonic() + args.budget_minutes * 60 if args.budget_minutes else None
        order = {id(case): number for number, case in enumerate(todo)}
        done = []
        fork = not args.fresh_process
        for number, (case, d) in enumerate(run_cases(todo, fixtures, args.case_seconds, fork, args.workers, deadline)):
            done.append((order[id(case)], d))
            print(f"[{number + 1}/{len(todo)}] {d['command']} {d['option']} {d['value']!r}: {d['outcome']}"
                  + (f", files lost: {d['files_lost']}" if d["files_lost"] else ""), flush=True)  # fmt: skip
        done = [d for _, d in sorted(done, key=lambda pair: pair[0])]
    rows = summary(done)
    notable = [d for d in done if d["outcome"] not in ("refused", "completed") or d["files_lost"]]
    path = recorder.write(
        {
            "rows": rows,
            "cases_skipped": args.start,
            "cases_planned": len(todo),
            "cases_run": len(done),
            "workers": args.workers,
            "processes": "new" if args.fresh_process else "forked",
            "notable": notable,
        },
        path=args.results,
    )
    print(f"{len(done)} of {len(todo)} cases; " + ", ".join(f"{k}: {v}" for k, v in rows[-1].items() if k != "command"))
    print(f"results: {path}")
    return 1 if any(rows[-1][k] for k in ("traceback", "abort", "files lost")) else 0


if __name__ == "__main__":
    sys.exit(main())
