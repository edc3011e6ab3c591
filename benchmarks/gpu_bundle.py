"""`make gpu-bundle`: what must travel to a GPU machine that has no network, in one folder of at most 64 MiB.

    python benchmarks/gpu_bundle.py [--output .gpu-bundle] [--multi30k DIR]

The machine to plan for has Python 3.12 with torch, transformers, accelerate, tokenizers, safetensors,
sacrebleu, typer, rich, matplotlib, tensorboard, pyarrow and pandas (`PRESENT`), and none of datasets,
evaluate, pydantic, sacremoses. The bundle holds:

- `wheels/`: the wheels of every package aiayn (and pytest, for the GPU tests) needs that is not among
  those or their own dependencies, for CPython 3.12 on this platform (`pip download --python-version 3.12
  --only-binary=:all: --no-deps`), each at the version installed here (the one the tests ran with);
- `multi30k/`: Multi30k's English and German files from `$AIAYN_MULTI30K` (train, val, test2016);
- `source.json`: the commit this checkout is at, whether it is dirty, and each tracked file's git hash,
  so that `gpu_check` records the commit of the tree that ran (`results.source_of`), whatever git
  metadata travels with the copy (none, or an older clone's);
- `manifest.json`: each file and its size.

`benchmarks/gpu_check.py` installs the wheels there with `pip install --no-index --no-deps --target`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.local_data import MULTI30K
from benchmarks.results import source_record

REPO = Path(__file__).resolve().parents[1]

LIMIT = 64 * 2**20
PYTHON = "3.12"
# What the GPU machine has (with their own dependencies).
PRESENT = (
    "torch",
    "transformers",
    "accelerate",
    "tokenizers",
    "safetensors",
    "sacrebleu",
    "typer",
    "rich",
    "matplotlib",
    "tensorboard",
    "pyarrow",
    "pandas",
)
# What it lacks (though a present package's newer version here may depend on one: typer on pydantic).
ABSENT = ("datasets", "evaluate", "pydantic", "sacremoses", "fastapi")
# What the GPU check runs besides aiayn's own requirements.
EXTRA = ("pytest",)
MULTI30K_FILES = tuple(f"{split}.{lang}" for split in ("train", "val", "test2016") for lang in ("en", "de"))
MARKERS = {
    "python_version": PYTHON,
    "python_full_version": f"{PYTHON}.0",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(name: str, extras: frozenset[str] = frozenset()) -> list[tuple[str, frozenset[str]]]:
    """The installed distribution `name`'s requirements that apply on the GPU machine, with `extras`."""
    from packaging.requirements import Requirement

    found = []
    for line in importlib.metadata.requires(name) or []:
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is not None and not any(
            marker.evaluate({**MARKERS, "extra": extra}) for extra in (sorted(extras) or [""])
        ):
            continue
        found.append((canonical(requirement.name), frozenset(requirement.extras)))
    return found


def closure(roots: list[str], stop: tuple[str, ...] = ()) -> set[str]:
    """The distributions `roots` need, themselves included (extras followed; ones not installed here
    skipped; `stop` neither included nor followed)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(canonical(r), frozenset()) for r in roots]
    while todo:
        item = todo.pop()
        if item in seen or item[0] in stop:
            continue
        seen.add(item)
        try:
            todo += requirements(*item)
        except importlib.metadata.PackageNotFoundError:
            continue
    return {name for name, _ in seen}


def needed() -> dict[str, str]:
    """Distribution -> version (installed here) of what the GPU machine lacks."""
    lacking = closure(["aiayn-cli", *EXTRA]) - closure(list(PRESENT), stop=ABSENT) - {"aiayn-cli"}
    return {name: importlib.metadata.version(name) for name in sorted(lacking)}


def download(pins: dict[str, str], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", PYTHON, "--dest", str(folder)]
    subprocess.run(command + [f"{name}=={version}" for name, version in pins.items()], check=True)


def build(output: Path, multi30k: Path) -> dict:
    """The bundle in `output` (replaced whole on success); its manifest."""
    missing = [name for name in MULTI30K_FILES if not (multi30k / name).is_file()]
    if missing:
        raise SystemExit(f"error: {multi30k}: no {', '.join(missing)} (set AIAYN_MULTI30K to Multi30k's folder)")
    pins = needed()
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.") as tmp:
        staging = Path(tmp) / "bundle"
        download(pins, staging / "wheels")
        (staging / "multi30k").mkdir(parents=True)
        for name in MULTI30K_FILES:
            shutil.copyfile(multi30k / name, staging / "multi30k" / name)
        (staging / "source.json").write_text(json.dumps(source_record(REPO)) + "\n")
        files = {str(p.relative_to(staging)): p.stat().st_size for p in sorted(staging.rglob("*")) if p.is_file()}
        manifest = {"python": PYTHON, "present": list(PRESENT), "packages": pins, "files": files}
        manifest["bytes"] = sum(files.values())
        if manifest["bytes"] > LIMIT:
            raise SystemExit(f"error: the bundle holds {manifest['bytes'] / 2**20:.1f} MiB, more than 64 MiB")
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if output.exists():
            shutil.rmtree(output)
        staging.rename(output)
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=REPO / ".gpu-bundle")
    parser.add_argument("--multi30k", type=Path, default=MULTI30K, help="default: $AIAYN_MULTI30K")
    args = parser.parse_args(argv)
    manifest = build(args.output.resolve(), args.multi30k)
    wheels = [name for name in manifest["files"] if name.startswith("wheels/")]
    print(f"{args.output}: {len(wheels)} wheels ({', '.join(manifest['packages'])}) and Multi30k en-de")
    print(f"{manifest['bytes'] / 2**20:.1f} MiB of at most 64")


if __name__ == "__main__":
    main()
