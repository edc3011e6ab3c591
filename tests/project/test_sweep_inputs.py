"""The sweep of hostile inputs (`benchmarks/sweep_inputs.py`): it names a case for every option of every
command it walks, and a few of its cases, run here as the sweep runs them (own process, own folder,
inputs fingerprinted), end as the rule says: refused in one line, no traceback, nothing lost."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import sweep_inputs  # noqa: E402


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    sweep_inputs._fixtures(folder)
    return folder


def test_every_option_of_every_command_has_cases(fixtures):
    import typer.main

    from aiayn_cli.cli.app import app

    found = {(case.command, case.option) for case in sweep_inputs.cases(fixtures)}
    group = typer.main.get_command(app)
    for command in sweep_inputs._base(fixtures):
        for param in group.commands[command].params:
            flags = [o for o in param.opts if o.startswith("--")]
            if flags and not getattr(param, "is_flag", False) and flags[0] != "--help" and not param.hidden:
                assert (command, max(flags, key=len)) in found
    assert set(sweep_inputs._base(fixtures)) | sweep_inputs.LEFT_OUT == set(group.commands)


@pytest.mark.slow  # a process each, seconds of imports
@pytest.mark.parametrize(
    "command, option, value",
    [
        ("translate", "--beam", str(10**20)),
        ("translate", "--output", "model/model.safetensors"),
        ("average", "--output-dir", "model"),
        ("train", "--set", "model.d_ff=1000000000"),
    ],
)
def test_some_of_the_sweeps_cases(fixtures, command, option, value):
    (case,) = [c for c in sweep_inputs.cases(fixtures, command) if c.option == option and c.value == value]
    done = sweep_inputs.run_case(case, fixtures, seconds=300)
    assert done["outcome"] == "refused" and done["files_lost"] == [], done
