"""Results files: what a benchmark (or a measured run) writes, and what the docs' tables are made of.

A results file is one JSON object: the command, the commit, the machine (CPU model and the flags
that decide speed: avx2, avx512f, avx512_bf16, amx_bf16; the GPU if any), the versions, the threads,
the load average before and after, the date, and the figures measured. The docs never hold a number
that no results file holds (`docs/tables.py` renders the tables, `tests/project/test_docs.py` keeps them in
step).

    from benchmarks.results import Recorder

    recorder = Recorder("bench_decode")      # the command, the load average and the start, taken now
    ...                                      # measure
    path = recorder.write({"rows": rows})    # benchmarks/results/bench_decode.<machine>.json

`Recorder.write(figures, path=...)` writes elsewhere (a benchmark's `--results` option); the name of
the default file holds the machine (`machine_slug`), so that runs on different machines sit side by
side and a run on the same machine replaces the last one.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

SCHEMA = 1
REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"

# The CPU flags that decide which kernels run (and whether bf16 is native), as /proc/cpuinfo names them.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
# Environment variables that hold a CPU to fewer instructions than it has.
ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "CT2_FORCE_CPU_ISA")
# Libraries whose versions a result depends on, where installed.
PACKAGES = (
    "aiayn-cli",
    "torch",
    "transformers",
    "tokenizers",
    "datasets",
    "accelerate",
    "sacrebleu",
    "ctranslate2",
    "fastapi",
    "uvicorn",
)
REQUIRED_KEYS = ("schema", "name", "command", "commit", "date", "machine", "versions", "threads", "load_average")


def cpu_info() -> dict[str, Any]:
    """The CPU's model name, logical cores, the flags of `CPU_FLAGS`, ATen's kernel level and any
    variables of `ISA_VARIABLES` that are set."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model") and model in ("", platform.processor(), platform.machine()):
                model = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    info: dict[str, Any] = {
        "model": model,
        "cores": os.cpu_count(),
        "flags": {name: name in flags for name in CPU_FLAGS},
    }
    try:
        import torch

        info["aten_capability"] = torch.backends.cpu.get_cpu_capability()
        if not flags:  # no /proc/cpuinfo (macOS, Windows): what torch can tell
            info["flags"]["avx512_bf16"] = torch.cpu._is_avx512_bf16_supported()
            info["flags"]["amx_bf16"] = torch.cpu._is_amx_tile_supported()
    except ImportError:
        pass
    limits = {name: os.environ[name] for name in ISA_VARIABLES if name in os.environ}
    if limits:
        info["isa_limits"] = limits
    return info


def gpu_info() -> dict[str, Any] | None:
    """The CUDA GPU's name, count, compute capability and memory, or None without one."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {
        "model": props.name,
        "count": torch.cuda.device_count(),
        "capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "cuda": torch.version.cuda,
    }


def versions() -> dict[str, str]:
    """Python's version and those of `PACKAGES` that are installed."""
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def git_commit(repo: Path = REPO) -> dict[str, Any]:
    """The checked-out commit and whether tracked files differ from it (None outside a git checkout)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(status)}


def blob_hash(path: Path) -> str:
    """git's object name of the file's bytes (`git hash-object`), computed without git."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def tree_files(repo: Path = REPO) -> dict[str, str]:
    """Every tracked file of the checkout (`git ls-files`) -> `blob_hash` of what the work tree holds."""
    done = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True, timeout=30)
    names = [n for n in done.stdout.decode().split("\0") if n]
    return {n: blob_hash(repo / n) for n in names if (repo / n).is_file() and not (repo / n).is_symlink()}


def source_of(repo: Path, recorded: dict[str, Any]) -> dict[str, Any]:
    """The commit of a tree copied without (or with stale) git metadata: `recorded` (what `source_record`
    wrote where the copy was made) holds where each file has the bytes recorded; else `dirty`, with
    the files that differ or are gone."""
    changed = [n for n, h in recorded["files"].items() if not (repo / n).is_file() or blob_hash(repo / n) != h]
    found = {
        "commit": recorded["commit"],
        "dirty": bool(recorded["dirty"] or changed),
        "commit_from": "recorded file hashes",
    }
    if changed:
        found["changed"] = sorted(changed)[:20]
    return found


def source_record(repo: Path = REPO) -> dict[str, Any]:
    """The checkout's commit, whether it is dirty, and each tracked file's hash (for `source_of`)."""
    return {**git_commit(repo), "files": tree_files(repo)}


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def threads() -> int | None:
    try:
        import torch

        return torch.get_num_threads()
    except ImportError:
        return None


def machine() -> dict[str, Any]:
    return {"cpu": cpu_info(), "gpu": gpu_info(), "os": platform.platform()}


def top_feature(flags: dict[str, bool]) -> str:
    """The feature that matters most of those the CPU has: amx, avx512-bf16, avx512, avx2 (or none)."""
    for flag, name in (("amx_bf16", "amx"), ("avx512_bf16", "avx512-bf16"), ("avx512f", "avx512"), ("avx2", "avx2")):
        if flags.get(flag):
            return name
    return "no-avx2"


FEATURE_ORDER = ("no-avx2", "avx2", "avx512", "avx512-bf16", "amx")


def limit_feature(value: str) -> str:
    """The feature of `FEATURE_ORDER` an ISA variable's value allows at most: `avx2` for ATen's `avx2`,
    oneDNN's `AVX2_VNNI` or MKL's `AVX2`; `avx512-bf16` for oneDNN's `AVX512_CORE_BF16` and the AVX10 levels."""
    v = value.strip().upper()
    if "AMX" in v:
        return "amx"
    if v.startswith(("AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10")):
        return "avx512-bf16"
    if v.startswith("AVX512"):
        return "avx512"
    if v.startswith("AVX2"):
        return "avx2"
    return "no-avx2"  # ATen's default, SSE4, AVX, CTranslate2's GENERIC


def held_feature(cpu: dict[str, Any]) -> str | None:
    """The feature the run was held to by `isa_limits` (ONEDNN_MAX_CPU_ISA=AVX2, ...), where that is below
    the CPU's own top feature; None where nothing held it."""
    top = top_feature(cpu["flags"])
    held = min(
        (limit_feature(v) for v in cpu.get("isa_limits", {}).values()),
        key=FEATURE_ORDER.index,
        default=top,
    )
    return held if top in FEATURE_ORDER and FEATURE_ORDER.index(held) < FEATURE_ORDER.index(top) else None


def slug(text: str) -> str:
    text = re.sub(r"\((r|tm)\)|\bcpu\b|\bprocessor\b|@.*$", " ", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "unknown"


def machine_slug(machine: dict[str, Any]) -> str:
    """A file-name part for the machine: the GPU's model, else the CPU's and its top feature, and the
    feature ISA variables held it to (`amd-epyc-avx512-bf16-as-avx2`), so a held run has a file of its own."""
    if machine.get("gpu"):
        return slug(machine["gpu"]["model"])
    cpu = machine["cpu"]
    held = held_feature(cpu)
    return f"{slug(cpu['model'])}-{top_feature(cpu['flags'])}" + (f"-as-{held}" if held else "")


def describe(machine: dict[str, Any]) -> str:
    """One line for a table: `Intel Xeon (2 cores; AVX2, AVX512-BF16, AMX)`, or the GPU's model."""
    if machine.get("gpu"):
        gpu = machine["gpu"]
        return f"{gpu['count']} x {gpu['model']}" if gpu.get("count", 1) > 1 else gpu["model"]
    cpu = machine["cpu"]
    name = re.sub(r"\s+", " ", re.sub(r"\((R|TM|r|tm)\)|\bProcessor\b|\bCPU\b", " ", cpu["model"])).strip()
    labels = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_bf16": "AVX512-BF16", "amx_bf16": "AMX"}
    has = [labels[f] for f in CPU_FLAGS if cpu["flags"].get(f)]
    limits = cpu.get("isa_limits")
    extra = f"; held to {', '.join(f'{k}={v}' for k, v in limits.items())}" if limits else ""
    return f"{name} ({cpu['cores']} cores; {', '.join(has) or 'no AVX2'}{extra})"


class Recorder:
    """Takes the command, the date and the load average when made; `write` adds the rest and the figures."""

    def __init__(self, name: str, command: list[str] | str | None = None, source: dict | None = None) -> None:
        """`source`: the commit and dirtiness to record, where this checkout's own git metadata is not the
        tree's (`source_of`); None: `git_commit()`."""
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise ValueError(f"a results name is letters, digits, _ and -: {name!r}")
        self.name = name
        self.command = command if isinstance(command, str) else command_line(command or sys.argv)
        self.source = source
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.load_before = load_average()

    def record(self, figures: dict[str, Any], notes: str | None = None) -> dict[str, Any]:
        """The whole results object, with the machine and load average taken now."""
        record: dict[str, Any] = {
            "schema": SCHEMA,
            "name": self.name,
            "command": self.command,
            **(self.source or git_commit()),
            "date": self.started.isoformat(timespec="seconds"),
            "seconds": round((datetime.datetime.now(datetime.timezone.utc) - self.started).total_seconds(), 1),
            "machine": machine(),
            "versions": versions(),
            "threads": threads(),
            "load_average": {"before": self.load_before, "after": load_average()},
        }
        if notes:
            record["notes"] = notes
        record["figures"] = figures
        return record

    def write(self, figures: dict[str, Any], path: str | Path | None = None, notes: str | None = None) -> Path:
        """Write the results file (atomically: a temporary file renamed) and return its path."""
        record = self.record(figures, notes)
        target = Path(path) if path is not None else default_path(self.name, record["machine"])
        write_json(target, record)
        return target


def command_line(argv: list[str]) -> str:
    """`argv` as a user types it: a script of this repository as `python benchmarks/x.py ...`."""
    first = Path(argv[0])
    if first.suffix == ".py" and first.resolve().is_relative_to(REPO):
        return shlex.join(["python", str(first.resolve().relative_to(REPO)), *argv[1:]])
    return shlex.join([first.name if first.is_absolute() else str(first), *argv[1:]])


def default_path(name: str, machine: dict[str, Any]) -> Path:
    return RESULTS_DIR / f"{name}.{machine_slug(machine)}.json"


def write_json(path: Path, record: dict[str, Any]) -> None:
    """The file whole or not at all, with the mode `open` gives (the umask's, as every file in the repository)."""
    from aiayn_cli.files import atomic_open

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "w") as f:
        json.dump(record, f, indent=2, ensure_ascii=False)
        f.write("\n")


def read(path: str | Path) -> dict[str, Any]:
    """A results file, checked: the keys every file has, and a machine named by its CPU (model and
    flags) or its GPU. Raises ValueError naming the file and what is missing."""
    path = Path(path)
    record = json.loads(path.read_text(encoding="utf-8"))
    missing = [key for key in REQUIRED_KEYS if key not in record] + (["figures"] if "figures" not in record else [])
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)}")
    cpu, gpu = record["machine"].get("cpu") or {}, record["machine"].get("gpu")
    if not gpu and not (cpu.get("model") and set(CPU_FLAGS) <= set(cpu.get("flags", {}))):
        raise ValueError(
            f"{path}: the machine names neither a GPU nor a CPU model with the flags {', '.join(CPU_FLAGS)}"
        )
    return record


def add_argument(parser, name: str) -> None:
    """`--results FILE` on a benchmark's argparse parser (default: `benchmarks/results/NAME.<machine>.json`)."""
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help=f"where to write the results file (default: benchmarks/results/{name}.<machine>.json)",
    )
