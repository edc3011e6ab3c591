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
        "error: AIAYN_ALLOCATOR=jemallocc: expected auto (jemalloc where installed) or system"
    ]
