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


@pytest.mark.slow  # a process each
def test_an_output_that_is_no_input_may_be_written_and_an_inputs_file_may_not(fixtures):
    """`evaluate -i src.txt -r ref.txt --json model/model.safetensors` writes the file it was given (the model
    is no input of that command): written, not lost. `translate -m model -o model/model.safetensors` is refused."""
    (written,) = [c for c in sweep_inputs.cases(fixtures, "evaluate") if c.option == "--json"
                  and c.value == "model/model.safetensors"]  # fmt: skip
    done = sweep_inputs.run_case(written, fixtures, seconds=300)
    assert done["outcome"] == "completed" and done["files_lost"] == []
    assert done["files_written"] == ["model/model.safetensors"]
    (refused,) = [c for c in sweep_inputs.cases(fixtures, "translate") if c.option == "--output"
                  and c.value == "model/model.safetensors"]  # fmt: skip
    done = sweep_inputs.run_case(refused, fixtures, seconds=300)
    assert done["outcome"] == "refused" and done["files_lost"] == [] and done["files_written"] == []


@pytest.mark.slow  # the sweep itself, in a process of its own (it forks its cases)
def test_the_sweep_forks_its_cases_two_at_a_time_and_writes_its_results(tmp_path):
    import json
    import subprocess

    from helpers import cli_env

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "sweep_inputs.py"
    result = subprocess.run(
        [sys.executable, str(script), "--only", "paper", "--limit", "4", "--workers", "2",
         "--results", str(tmp_path / "sweep.json")],
        capture_output=True, text=True, timeout=600, env=cli_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    figures = json.loads((tmp_path / "sweep.json").read_text())["figures"]
    assert figures["processes"] == "forked" and figures["workers"] == 2 and figures["cases_run"] == 4
    (total,) = [row for row in figures["rows"] if row["command"] == "all"]
    assert total["cases"] == 4 and total["refused"] + total["completed"] == 4, figures
