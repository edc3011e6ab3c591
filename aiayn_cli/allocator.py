"""The memory allocator a training process runs with on Linux: jemalloc where it is installed.

A training step on a CPU allocates and frees tensors of a few MB to a few hundred MB (activations,
logits and their gradients, in shapes that change with every batch). glibc's malloc hands the
large ones back to the kernel at every free and faults their pages in again at the next step, and
its arenas fragment as the shapes change: on the Multi30k recipe (2-core AMD EPYC, bf16) the
process grew from 1.8 to 3.4 GB in ten minutes. jemalloc keeps and reuses that memory: 1.14x
the tokens per second there, in half the memory. This is the advice of PyTorch's CPU
performance guide, and what its launcher does (`python -m torch.backends.xeon.run_cpu
--enable-jemalloc` sets `LD_PRELOAD`).

An allocator can only be chosen before the process starts, so the `aiayn` commands that train
start again, once, with `LD_PRELOAD` naming the library (`os.execv`: the same process id, the same
arguments and environment). `AIAYN_ALLOCATOR=system` keeps glibc's malloc; a `LD_PRELOAD` that
already names an allocator is left as it is.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Callable, Mapping

from .errors import AiaynError

# The commands that train, and so allocate at every step.
TRAINING_COMMANDS = frozenset({"train", "quickstart"})
# Libraries tried in this order (Debian/Ubuntu: libjemalloc2; libtcmalloc-minimal4).
ALLOCATORS = ("jemalloc", "tcmalloc_minimal", "tcmalloc")
# Set by the restart: the library preloaded (and so never a second restart).
PRELOADED = "AIAYN_ALLOCATOR_PRELOADED"


def preload_environment(
    argv: list[str], environ: Mapping[str, str], find: Callable[[str], str | None] = ctypes.util.find_library
) -> dict[str, str] | None:
    """The environment to start `argv` again in with a faster allocator preloaded, or None where the
    process should go on as it is (not a training command, not Linux, `AIAYN_ALLOCATOR=system`, an
    allocator already preloaded, a restart already made, none installed). `AiaynError` for an
    `AIAYN_ALLOCATOR` other than auto or system."""
    choice = environ.get("AIAYN_ALLOCATOR", "auto")
    if choice not in ("auto", "system"):
        raise AiaynError(f"AIAYN_ALLOCATOR={choice}: expected auto (jemalloc where installed) or system")
    command = next((arg for arg in argv[1:] if not arg.startswith("-")), None)  # after --debug, if any
    if not sys.platform.startswith("linux") or command not in TRAINING_COMMANDS:
        return None
    if choice == "system" or PRELOADED in environ:
        return None
    preloaded = environ.get("LD_PRELOAD", "")
    if any(name in preloaded for name in ALLOCATORS):
        return None
    for name in ALLOCATORS:
        library = find(name)  # a soname such as "libjemalloc.so.2", which the loader finds by name
        if library:
            preload = f"{library} {preloaded}".strip()
            return {**environ, "LD_PRELOAD": preload, PRELOADED: library}
    return None


def restart_with_a_faster_allocator() -> None:
    """Replace this process by the same `python -m aiayn_cli` command with jemalloc (or tcmalloc)
    preloaded, where `preload_environment` says so; otherwise return."""
    environ = preload_environment(sys.argv, os.environ)
    if environ is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, "-m", "aiayn_cli", *sys.argv[1:]], environ)
    except OSError:  # no exec here (a frozen interpreter, a seccomp profile): go on with glibc's malloc
        return


def _loaded(maps: str = "/proc/self/maps") -> str | None:
    """The file name of the allocator mapped into this process, if any (None where it cannot be told)."""
    try:
        with open(maps) as f:
            names = {line.rsplit("/", 1)[-1].strip() for line in f if ".so" in line}
    except OSError:
        return None
    return next((n for n in sorted(names) for a in ALLOCATORS if n.startswith(f"lib{a}.so")), None)


def describe(maps: str = "/proc/self/maps") -> str:
    """One line for the run's log: the allocator this process runs with."""
    loaded = _loaded(maps)
    if loaded and PRELOADED in os.environ:
        return f"allocator: {loaded} (preloaded; AIAYN_ALLOCATOR=system keeps glibc's malloc)"
    if loaded:
        return f"allocator: {loaded} (LD_PRELOAD)"
    if not sys.platform.startswith("linux"):
        return "allocator: the system's"
    if os.environ.get("AIAYN_ALLOCATOR", "auto") == "system":
        return "allocator: glibc malloc (AIAYN_ALLOCATOR=system)"
    return "allocator: glibc malloc (install jemalloc, e.g. apt-get install libjemalloc2, for faster CPU training)"


__all__ = ["ALLOCATORS", "TRAINING_COMMANDS", "describe", "preload_environment", "restart_with_a_faster_allocator"]
