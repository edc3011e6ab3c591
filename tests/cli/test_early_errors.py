"""Errors that need no model come before the heavy imports: a missing model folder, input file, recipe
or checkpoint is one line at once, in a process that never imported torch or transformers (the import
alone takes seconds). Each case runs the command line in a subprocess and reads its `sys.modules`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, cli_env

HEAVY = ("torch", "transformers", "accelerate", "datasets")
RUN = f"""
import json, sys
from aiayn_cli.cli.app import main
try:
    main()
except SystemExit as stop:
    print(json.dumps({{"code": stop.code, "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""

# (the command line, with {missing} for a path that does not exist; words of its error line)
CASES = [
    (["translate", "-m", "{missing}", "A dog sleeps."], "no such model folder"),
    (["translate", "-m", "{folder}", "-i", "{missing}"], "--input {missing}: no such file"),
    (["train", "{missing}.yaml"], "no such recipe file or shipped recipe"),
    (["train", "no_such_recipe"], "no such recipe file or shipped recipe"),
    (["prepare", "no_such_recipe"], "no such recipe file or shipped recipe"),
    (["prepare", "tiny", "--source-file", "{folder}/x", "--target-file", "/dev/null"], "/dev/null: is a character"),
    (["train", "tiny", "--data-file", "/dev/null", "-o", "{folder}/run"], "/dev/null: is a character device"),
    (["average", "{missing}", "{folder}", "-o", "{folder}/avg"], "{missing}: not a checkpoint folder"),
    (["average", "--last", "2", "{missing}", "-o", "{folder}/avg"], "{missing}: no such run folder"),
    (["export", "-m", "{missing}", "-o", "{folder}/ct2"], "no such model folder"),
    (["attention", "-m", "{missing}", "A dog sleeps."], "no such model folder"),
    (["attention", "-m", "{folder}", "-i", "{missing}"], "--input {missing}: no such file"),
    (["layers", "-m", "{missing}"], "no such model folder"),
    (["heads", "-m", "{missing}"], "no such model folder"),
    (["serve", "-m", "{missing}"], "no such model folder"),
    (["evaluate", "--hypotheses", "{missing}", "--references", "{missing}"], "{missing}"),
]


@pytest.mark.parametrize(("args", "words"), CASES, ids=lambda case: " ".join(case) if isinstance(case, list) else "")
def test_an_error_that_needs_no_model_comes_before_the_heavy_imports(args, words, tmp_path):
    names = {"missing": str(tmp_path / "missing"), "folder": str(tmp_path)}
    argv = [arg.format(**names) for arg in args]
    done = subprocess.run(
        [sys.executable, "-c", RUN, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=cli_env(PYTHONPATH=str(REPO_ROOT), HF_HUB_OFFLINE="1"),
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 2 and words.format(**names) in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert result["heavy"] == [], f"aiayn {' '.join(args)} imported {result['heavy']} before its error"
