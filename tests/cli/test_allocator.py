"""The allocator a training command runs with (aiayn_cli/allocator.py): when `aiayn` starts again
with jemalloc preloaded, and when it leaves the process as it is."""

from __future__ import annotations

import sys

import pytest

from aiayn_cli.allocator import JEMALLOC_CONF, PRELOADED, describe, preload_environment
from aiayn_cli.errors import AiaynError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD is Linux's")


def installed(*names: str):
    """A `ctypes.util.find_library` that finds only `names` (as sonames)."""
    return lambda name: f"lib{name}.so.2" if name in names else None


@pytest.mark.parametrize("argv", [["aiayn", "train", "r.yaml"], ["aiayn", "--debug", "quickstart"]])
def test_a_training_command_starts_again_with_jemalloc(argv):
    env = preload_environment(argv, {"PATH": "/bin", "LD_PRELOAD": "libother.so"}, installed("jemalloc", "tcmalloc"))
    assert env == {
        "PATH": "/bin",
        "LD_PRELOAD": "libjemalloc.so.2 libother.so",
        PRELOADED: "libjemalloc.so.2",
        "MALLOC_CONF": JEMALLOC_CONF,
    }


def test_jemalloc_keeps_its_pages_unless_the_user_configured_it():
    assert JEMALLOC_CONF == "dirty_decay_ms:-1,muzzy_decay_ms:-1"
    for own in ("background_thread:true", ""):  # an empty MALLOC_CONF: jemalloc's defaults, as asked
        env = preload_environment(["aiayn", "train"], {"MALLOC_CONF": own}, installed("jemalloc"))
        assert env["MALLOC_CONF"] == own and env["LD_PRELOAD"] == "libjemalloc.so.2"


def test_tcmalloc_where_jemalloc_is_missing():
    env = preload_environment(["aiayn", "train"], {}, installed("tcmalloc_minimal"))
    assert env["LD_PRELOAD"] == "libtcmalloc_minimal.so.2"
    assert "MALLOC_CONF" not in env  # jemalloc's options mean nothing to tcmalloc


@pytest.mark.parametrize(
    "choice, libraries, preloaded",
    [
        ("jemalloc", ("jemalloc", "tcmalloc"), "libjemalloc.so.2"),
        ("tcmalloc", ("jemalloc", "tcmalloc_minimal"), "libtcmalloc_minimal.so.2"),  # jemalloc passed over
        ("tcmalloc", ("tcmalloc",), "libtcmalloc.so.2"),
    ],
)
def test_the_user_names_the_allocator(choice, libraries, preloaded):
    env = preload_environment(["aiayn", "train"], {"AIAYN_ALLOCATOR": choice}, installed(*libraries))
    assert env["LD_PRELOAD"] == preloaded and env[PRELOADED] == preloaded
    assert ("MALLOC_CONF" in env) == (choice == "jemalloc")


@pytest.mark.parametrize(
    "choice, libraries, message",
    [
        ("jemalloc", ("tcmalloc",), "AIAYN_ALLOCATOR=jemalloc: not installed (Debian, Ubuntu: apt-get install libjemalloc2)"),
        ("tcmalloc", ("jemalloc",), "AIAYN_ALLOCATOR=tcmalloc: not installed (Debian, Ubuntu: apt-get install libtcmalloc-minimal4)"),
    ],
)  # fmt: skip
def test_an_allocator_that_cannot_be_had_is_one_clear_error(choice, libraries, message):
    with pytest.raises(AiaynError) as error:
        preload_environment(["aiayn", "train"], {"AIAYN_ALLOCATOR": choice}, installed(*libraries))
    assert str(error.value) == message


@pytest.mark.parametrize(
    "argv, environ, libraries",
    [
        (["aiayn", "translate", "--input", "train"], {}, ("jemalloc",)),  # "train" is a value here
        (["aiayn", "--version"], {}, ("jemalloc",)),
        (["aiayn", "train"], {"AIAYN_ALLOCATOR": "system"}, ("jemalloc",)),
        (["aiayn", "train"], {PRELOADED: "libjemalloc.so.2"}, ("jemalloc",)),  # restarted once already
        (["aiayn", "train"], {"LD_PRELOAD": "/opt/lib/libtcmalloc.so.4"}, ("jemalloc",)),  # the user's choice
        (["aiayn", "train"], {}, ()),  # none installed
    ],
)
def test_the_process_goes_on_as_it_is(argv, environ, libraries):
    assert preload_environment(argv, environ, installed(*libraries)) is None


def test_the_run_says_which_allocator_it_has(monkeypatch, tmp_path):
    """What is mapped into the process counts, not what LD_PRELOAD asked for (a library the loader
    could not preload is ignored by it, with a message)."""
    maps = tmp_path / "maps"
    mapped = "7f00-7f10 r-xp 0 08:01 42 /usr/lib/x86_64-linux-gnu/{}\n"
    maps.write_text(mapped.format("libc.so.6") + mapped.format("libjemalloc.so.2"))
    monkeypatch.delenv("MALLOC_CONF", raising=False)
    monkeypatch.setenv(PRELOADED, "libjemalloc.so.2")
    assert describe(maps).startswith("allocator: libjemalloc.so.2 (preloaded;")
    monkeypatch.setenv("MALLOC_CONF", JEMALLOC_CONF)
    assert describe(maps).startswith(f"allocator: libjemalloc.so.2 (preloaded; MALLOC_CONF={JEMALLOC_CONF};")
    monkeypatch.delenv("MALLOC_CONF")
    monkeypatch.delenv(PRELOADED)
    assert describe(maps).startswith("allocator: libjemalloc.so.2 (LD_PRELOAD)")
    maps.write_text(mapped.format("libc.so.6"))
    monkeypatch.setenv(PRELOADED, "libjemalloc.so.2")  # asked for, not loaded
    monkeypatch.delenv("AIAYN_ALLOCATOR", raising=False)
    assert describe(maps).startswith("allocator: glibc malloc (install jemalloc")
    monkeypatch.setenv("AIAYN_ALLOCATOR", "system")
    assert describe(maps) == "allocator: glibc malloc (AIAYN_ALLOCATOR=system)"


def test_an_unknown_choice_is_one_line_and_exit_2(monkeypatch, capsys):
    with pytest.raises(AiaynError, match="AIAYN_ALLOCATOR=jemallocc: expected auto"):
        preload_environment(["aiayn", "translate"], {"AIAYN_ALLOCATOR": "jemallocc"}, installed("jemalloc"))
    from aiayn_cli.cli import script

    monkeypatch.setenv("AIAYN_ALLOCATOR", "jemallocc")
    monkeypatch.setattr(sys, "argv", ["aiayn", "train", "tiny"])
    with pytest.raises(SystemExit) as exit_info:
        script()
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: AIAYN_ALLOCATOR=jemallocc: expected auto (jemalloc where installed, else tcmalloc), jemalloc, "
        "tcmalloc or system"
    ]


RELEASE = """
import ctypes, json
from aiayn_cli.allocator import release_free_memory

libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]

def resident_mb():
    return next(int(line.split()[1]) // 1024 for line in open("/proc/self/status") if line.startswith("VmRSS:"))

chunks = [libc.malloc(1 << 16) for _ in range(4096)]  # 256 MB in chunks below glibc's mmap threshold
last = libc.malloc(1 << 16)  # in use above them: nothing for glibc to trim at the top of its heap
for chunk in [*chunks, last]:
    ctypes.memset(chunk, 1, 1 << 16)
for chunk in chunks:
    libc.free(chunk)
kept = resident_mb()
release_free_memory()
print(json.dumps({"kept": kept, "released": resident_mb()}))
"""


@pytest.mark.parametrize("allocator", ["glibc", "jemalloc"])
def test_release_free_memory_gives_freed_pages_back(allocator):
    """256 MB freed and kept by the allocator (glibc's free chunks under one in use; jemalloc's dirty
    pages with `JEMALLOC_CONF`) leave the process's resident memory at `release_free_memory()`."""
    import ctypes.util
    import json
    import subprocess

    from helpers import cli_env

    env = cli_env()
    env.pop("LD_PRELOAD", None)
    if allocator == "jemalloc":
        library = ctypes.util.find_library("jemalloc")
        if library is None:
            pytest.skip("jemalloc is not installed (apt-get install libjemalloc2)")
        env.update(LD_PRELOAD=library, MALLOC_CONF=JEMALLOC_CONF)
    result = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    memory = json.loads(result.stdout)
    assert memory["kept"] - memory["released"] >= 200, memory  # MB


def test_kept_memory_goes_back_after_events_and_where_it_has_grown():
    """`KeptMemory`: `release` at validation and checkpoints; `check` (after every step) releases only once
    the resident memory has grown by more than `growth` over its least since the last release."""
    from aiayn_cli.allocator import KeptMemory

    readings, released = iter([100, 90, 110, 113, 80, None, 100]), []
    memory = KeptMemory(growth=0.25, resident=lambda: next(readings), release=lambda: released.append(True))
    assert [memory.check() for _ in range(3)] == [100, 90, 110] and memory.floor == 90 and not released
    assert memory.check() == 113 and len(released) == 1 and memory.floor is None  # 113 > 90 * 1.25
    assert memory.resident == 113  # the last reading, for the log line
    assert memory.check() == 80 and memory.floor == 80
    assert memory.check() is None and memory.floor == 80  # where the platform does not say
    memory.release()
    assert memory.floor is None and len(released) == 2
    assert memory.check() == 100 and memory.floor == 100
