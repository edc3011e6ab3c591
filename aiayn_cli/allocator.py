"""The memory allocator a training process runs with on Linux: jemalloc where it is installed.

A training step on a CPU allocates and frees tensors of a few MB to a few hundred MB (activations,
logits and their gradients, in shapes that change with every batch). glibc's malloc hands the
large ones back to the kernel at every free and faults their pages in again at the next step, and
its arenas fragment as the shapes change. jemalloc keeps and reuses that memory. This is the advice
of PyTorch's CPU performance guide, and what its launcher does (`python -m torch.backends.xeon.run_cpu
--enable-jemalloc` sets `LD_PRELOAD`).

jemalloc's defaults still give unused pages back to the kernel after 10 seconds (`dirty_decay_ms`,
`muzzy_decay_ms`): with steps of one to a few seconds the same hundreds of MB are given back and
faulted in again all the time, in the kernel. The restart therefore sets `MALLOC_CONF` to keep them
where the environment has no `MALLOC_CONF` of its own. (Any positive decay is no middle way: jemalloc
then gives the arena of its allocations of 8 MiB and more, the activations, a decay of 0.) What
validation, checkpoints and a batch of a new shape free is kept as well, in extents the steps do not
all reuse, and a run's memory grew by gigabytes an hour: `KeptMemory` hands the kept pages back after
each validation and checkpoint, and wherever the resident memory has grown by a quarter
(`release_free_memory`). The measurements behind these choices: CHANGELOG.md (0.1.0 and Unreleased)
and `benchmarks/bench_allocator.py`.

An allocator can only be chosen before the process starts, so the `aiayn` commands that train
start again, once, with `LD_PRELOAD` naming the library (`os.execve`: the same process id, the same
arguments and environment). `AIAYN_ALLOCATOR=system` keeps glibc's malloc, `jemalloc` or `tcmalloc`
insists on that one; a `LD_PRELOAD` that already names an allocator is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from collections.abc import Callable, Mapping

from .errors import AiaynError

# The commands that train, and so allocate at every step.
TRAINING_COMMANDS = frozenset({"train", "quickstart"})
# Libraries tried in this order (Debian/Ubuntu: libjemalloc2; libtcmalloc-minimal4).
ALLOCATORS = ("jemalloc", "tcmalloc_minimal", "tcmalloc")
# What `AIAYN_ALLOCATOR` may name, the libraries each stands for, and where to get them.
CHOICES = {"jemalloc": ("jemalloc",), "tcmalloc": ("tcmalloc_minimal", "tcmalloc")}
CHOICES_PACKAGES = {"jemalloc": "apt-get install libjemalloc2", "tcmalloc": "apt-get install libtcmalloc-minimal4"}
# Set by the restart: the library preloaded (and so never a second restart).
PRELOADED = "AIAYN_ALLOCATOR_PRELOADED"
# jemalloc's options for training: freed pages stay with the process, to serve the next step.
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"


def allocator_environment(library: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that configure `library` (a soname) for training: `MALLOC_CONF` for jemalloc,
    unless `environ` sets one already (an empty one included: jemalloc's defaults)."""
    if "jemalloc" in library and "MALLOC_CONF" not in environ:
        return {"MALLOC_CONF": JEMALLOC_CONF}
    return {}


def preload_environment(
    argv: list[str], environ: Mapping[str, str], find: Callable[[str], str | None] = ctypes.util.find_library
) -> dict[str, str] | None:
    """The environment to start `argv` again in with a faster allocator preloaded, or None where the
    process should go on as it is (not a training command, not Linux, `AIAYN_ALLOCATOR=system`, an
    allocator already preloaded, a restart already made, none installed). `AIAYN_ALLOCATOR=jemalloc`
    or `tcmalloc` asks for that one only: `AiaynError` where it is not installed, as for any other value."""
    choice = environ.get("AIAYN_ALLOCATOR", "auto")
    if choice not in ("auto", "system", *CHOICES):
        raise AiaynError(
            f"AIAYN_ALLOCATOR={choice}: expected auto (jemalloc where installed, else tcmalloc), "
            "jemalloc, tcmalloc or system"
        )
    command = next((arg for arg in argv[1:] if not arg.startswith("-")), None)  # after --debug, if any
    if not sys.platform.startswith("linux") or command not in TRAINING_COMMANDS:
        return None
    if choice == "system" or PRELOADED in environ:
        return None
    preloaded = environ.get("LD_PRELOAD", "")
    if any(name in preloaded for name in ALLOCATORS):
        return None
    for name in CHOICES.get(choice, ALLOCATORS):
        library = find(name)  # a soname such as "libjemalloc.so.2", which the loader finds by name
        if library:
            preload = f"{library} {preloaded}".strip()
            return {**environ, "LD_PRELOAD": preload, PRELOADED: library, **allocator_environment(library, environ)}
    if choice in CHOICES:
        raise AiaynError(f"AIAYN_ALLOCATOR={choice}: not installed (Debian, Ubuntu: {CHOICES_PACKAGES[choice]})")
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


@functools.cache
def _release_function() -> Callable[[], object] | None:
    """The call that gives the allocator's free pages back to the kernel, for the allocator this process
    runs with (None where there is none, or not on Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    process = ctypes.CDLL(None)
    mallctl = getattr(process, "mallctl", None)  # jemalloc, preloaded: every arena (MALLCTL_ARENAS_ALL)
    if mallctl is not None:
        mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        return lambda: mallctl(b"arena.4096.purge", None, None, None, 0)
    tcmalloc = getattr(process, "MallocExtension_ReleaseFreeMemory", None)
    if tcmalloc is not None:
        return tcmalloc
    trim = getattr(process, "malloc_trim", None)  # glibc
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        return lambda: trim(0)
    return None


def release_free_memory() -> None:
    """Give the kernel back the freed pages the allocator keeps for reuse: jemalloc's dirty and muzzy
    pages (`arena.<all>.purge`), tcmalloc's free page heap, glibc's free chunks (`malloc_trim(0)`).

    A training run keeps jemalloc's freed pages (`JEMALLOC_CONF`) so that the next step reuses them;
    validation and checkpoints allocate in other sizes (whole-split decoding, the serialized weights
    and optimizer state), and the extents they leave are kept too, one new set at each: the resident
    memory of a run grew by gigabytes an hour until the kernel stopped it. The run calls this after
    each validation and checkpoint, once every few minutes: what the steps need is faulted in again
    once, what they do not is gone."""
    release = _release_function()
    if release is not None:
        release()


def resident_bytes() -> int | None:
    """The process's resident memory now, in bytes (Linux: `/proc/self/statm`); None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class KeptMemory:
    """When a training run gives the allocator's kept pages back (`release_free_memory`): after each
    validation and checkpoint (`release`), and in between wherever the resident memory, read after
    every step (`check`), has grown by more than `growth` over the least it held since the last release.

    The steps reuse what they free from one step to the next; only what piles up beyond that goes
    back, and the next steps fault their own pages in again once. The pile can grow fast: a 4+4-layer
    Multi30k hour kept 120-450 MB more a step for minutes on end, 2 GB to 11 GB between two log lines
    20 steps apart; read after every step (a file of one line), it is bounded by a step's growth."""

    def __init__(
        self,
        growth: float = 0.5,
        resident: Callable[[], int | None] = resident_bytes,
        release: Callable[[], None] = release_free_memory,
    ):
        self.growth, self._resident, self._release = growth, resident, release
        self.floor: int | None = None  # the least resident memory since the last release
        self.resident: int | None = None  # the last reading

    def release(self) -> None:
        self._release()
        self.floor = None

    def check(self) -> int | None:
        """The resident memory now (bytes, None where unknown), after a release where it had grown."""
        resident = self.resident = self._resident()
        if resident is None:
            return None
        if self.floor is None or resident < self.floor:
            self.floor = resident
        elif resident > self.floor * (1 + self.growth):
            self.release()
        return resident


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
    settings = (
        f"; MALLOC_CONF={os.environ['MALLOC_CONF']}"
        if loaded and "jemalloc" in loaded and "MALLOC_CONF" in os.environ
        else ""
    )
    if loaded and PRELOADED in os.environ:
        return f"allocator: {loaded} (preloaded{settings}; AIAYN_ALLOCATOR=system keeps glibc's malloc)"
    if loaded:
        return f"allocator: {loaded} (LD_PRELOAD{settings})"
    if not sys.platform.startswith("linux"):
        return "allocator: the system's"
    if os.environ.get("AIAYN_ALLOCATOR", "auto") == "system":
        return "allocator: glibc malloc (AIAYN_ALLOCATOR=system)"
    return "allocator: glibc malloc (install jemalloc, e.g. apt-get install libjemalloc2, for faster CPU training)"


__all__ = [
    "ALLOCATORS",
    "KeptMemory",
    "JEMALLOC_CONF",
    "TRAINING_COMMANDS",
    "allocator_environment",
    "describe",
    "preload_environment",
    "release_free_memory",
    "resident_bytes",
    "restart_with_a_faster_allocator",
]
