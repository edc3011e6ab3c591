"""The README and the docs: short, their numbers in step with the results files, the CLI reference in
the site, and every shell and Python block run (or marked with the reason it is not).

A block is run unless the line right before its fence is a marker, `<!-- not run: REASON -->`; the
markers are counted (`MAX_MARKERS`) so that they stay few. The blocks of each page run in order in a
folder of their own (the slow tier), beside a small quickstart run (`aiayn-quickstart/`), with an
`aiayn` first on the PATH that runs this checkout at tiny sizes where the text shows a long run:
`aiayn train` makes 2 steps of the tiny model, and the Hub dataset `bentrevett/multi30k` is a local
folder laid out like it (the tests never touch the network).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from corpora import write_hub_layout
from helpers import REPO_ROOT, cli_env

sys.path.insert(0, str(REPO_ROOT / "docs"))

import tables  # noqa: E402  (docs/tables.py: the generated tables)

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<fence>```|~~~)(?P<lang>[\w+-]*)[^\n]*\n(?P<code>.*?)^(?P=fence)\s*$", re.M | re.S)
MARKER = re.compile(r"^<!-- not run: (?P<reason>.+?) -->$")
SHELL, PYTHON = {"bash", "sh", "shell", "console"}, {"python", "py"}
MAX_MARKERS = 22


def blocks(page: Path) -> list[dict]:
    """The fenced blocks of a page: language, code, line, and the marker's reason (None: to be run)."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.match(before)
        found.append(
            {
                "lang": match["lang"].lower(),
                "code": match["code"],
                "line": line,
                "reason": marker["reason"] if marker else None,
            }
        )
    return found


def runnable(page: Path) -> list[dict]:
    return [b for b in blocks(page) if b["lang"] in SHELL | PYTHON and b["reason"] is None]


def test_the_readme_is_a_front_door():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert "<!-- table: quality-summary -->" in readme  # the results table, generated


def test_every_block_says_its_language_and_every_marker_why():
    markers = []
    for page in PAGES:
        for block in blocks(page):
            where = f"{page.relative_to(REPO_ROOT)}:{block['line']}"
            assert block["lang"], f"{where}: a block without a language (bash, python, text, json, ...)"
            if block["reason"] is not None:
                assert block["lang"] in SHELL | PYTHON, f"{where}: a marker on a block that is never run"
                assert len(block["reason"].split()) >= 3, f"{where}: say why the block is not run"
                markers.append(where)
    assert len(markers) <= MAX_MARKERS, f"{len(markers)} blocks are not run (at most {MAX_MARKERS}): {markers}"
    assert sum(len(runnable(page)) for page in PAGES) >= 20  # most blocks run


COMMAND_WORDS = ("aiayn ", "python ", "python3 ", "accelerate ", "pip ", "make ", "curl ", "bash ", "export ")


def indented_commands(page: Path) -> list[int]:
    """Lines where an indented (unfenced) code block of commands starts: blocks the tests cannot see."""
    lines, found = page.read_text(encoding="utf-8").splitlines(), []
    inside_fence = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            inside_fence = not inside_fence
        starts_block = i > 0 and not lines[i - 1].strip() and line.startswith("    ")
        if not inside_fence and starts_block and line.strip().startswith(COMMAND_WORDS):
            found.append(i + 1)
    return found


def test_commands_sit_in_fenced_blocks_the_tests_can_run():
    found = [f"{page.relative_to(REPO_ROOT)}:{line}" for page in PAGES for line in indented_commands(page)]
    assert not found, f"indented command blocks (make them ```bash blocks, run or marked): {found}"


def test_no_user_facing_text_names_this_repositorys_data_folder():
    texts = [REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md"), *(REPO_ROOT / "recipes").glob("*.yaml")]
    texts += (REPO_ROOT / "aiayn_cli").rglob("*.py")
    named = [str(p.relative_to(REPO_ROOT)) for p in texts if "shared/data" in p.read_text(encoding="utf-8")]
    assert not named, named


def test_every_table_agrees_with_its_results_files():
    assert tables.disagreements() == []
    names = {name for page in tables.PAGES for name, _ in tables.tables_in(page)}
    assert {"quality", "quality-summary", "quickstart-runs"} <= names


def test_the_readme_summary_holds_every_run_of_the_full_table():
    # one row a run and hardware kind in the README, every score of the full table in its row
    lines = [row.text for row in tables.render("quality-summary")]
    runs = tables._quality_runs()
    for run in runs:
        [line] = [x for x in lines if x.startswith(f"| {run['run']} | {run['hardware']} | {run['budget']} |")]
        assert f" {run['bleu']:.2f}" in line, (run, line)
    scores = [x.rstrip(" |").rsplit(" | ", 1)[1] for x in lines[2:] if x.startswith("| ")]
    assert sum(cell.count(", ") + 1 for cell in scores) == len(runs), scores


def test_a_table_edited_by_hand_is_named_with_its_results_file(tmp_path):
    generated = [
        (page, name, row)
        for page in tables.PAGES
        for name, _ in tables.tables_in(page)
        for row in tables.render(name)
        if row.source and re.search(r"\d", row.text)
    ]
    if not generated:
        pytest.skip("no results file yet")
    page, name, row = generated[0]
    edited = re.sub(r"\d", lambda m: str((int(m[0]) + 1) % 10), row.text, count=1)
    copy = tmp_path / page.name
    copy.write_text(page.read_text(encoding="utf-8").replace(row.text, edited), encoding="utf-8")
    [problem] = tables.disagreements([copy])
    assert f"table '{name}' disagrees with {row.source.relative_to(REPO_ROOT)}" in problem, problem
    assert "make docs-tables" in problem


def test_the_cli_reference_is_in_the_site_and_lists_every_command():
    """docs/cli.md is generated from the commands (`python -m aiayn_cli.cli.reference`;
    tests/cli/test_cli_options.py keeps it equal to them); here: it is in the site's nav and names every command of the app."""
    import typer

    from aiayn_cli.cli.app import app

    page = (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "CLI: cli.md" in (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for name in typer.main.get_command(app).commands:
        assert f"aiayn {name}" in page, name


# ---------------------------------------------------------------------------------------------
# The blocks, run (slow tier)
# ---------------------------------------------------------------------------------------------

SHIM = """#!{python}
# aiayn at the sizes of a test: `train` makes 2 steps of a tiny model (3 + 3 layers, 4 heads, as the
# Multi30k recipe's), `heads` measures 8 pairs; the Hub's Multi30k is a local folder.
import sys

LOCAL = {local!r}
args = [LOCAL if arg == "bentrevett/multi30k" else arg for arg in sys.argv[1:]]
if args[:1] == ["train"]:
    if not {{"--dataset", "--data-dir", "--prefix", "--source-file", "--data-file"}} & set(args):
        args += ["--dataset", LOCAL]
    args += ["--max-steps", "2", "--preset", "tiny", "--max-tokens", "256", "--no-progress"]
    for key in ("compile_loss=false", "tokenizer_training.vocab_size=300", "length_penalty_grid=null",
                "valid_bleu_samples=4", "trackers=[]", "model.num_encoder_layers=3", "model.num_decoder_layers=3"):
        args += ["--set", key]
if args[:1] == ["heads"]:  # every head masked, then pruned: a few pairs, greedy
    args += ["--sample-size", "8", "--beam", "1"]
sys.argv = ["aiayn", *args]
from aiayn_cli.cli.app import script

script()
"""


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    from aiayn_cli.quickstart.pipeline import run_quickstart

    root = tmp_path_factory.mktemp("docs")
    run_quickstart(root / "aiayn-quickstart", minutes=0.8, train_pairs=1500, test_pairs=20, show_progress=False)
    local = write_hub_layout(root / "hub-multi30k")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "aiayn"
    shim.write_text(SHIM.format(python=sys.executable, local=str(local)))
    shim.chmod(0o755)
    env = cli_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(REPO_ROOT))
    return root, env


# Models that a page's marked blocks train for minutes, stood in for by the sandbox's quickstart model.
STAND_INS = {
    "tour": ["runs/quickstart-sinusoidal/checkpoint-177", "runs/quickstart-learned/averaged"],
}


@pytest.mark.slow  # every block of every page: a quickstart run and a few dozen commands
@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p)], ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_the_blocks_of_a_page_run(page, sandbox):
    root, env = sandbox
    folder = root / "pages" / page.stem
    folder.mkdir(parents=True)
    (folder / "docs").mkdir()  # the pages' commands run from the repository's root (the tour writes into docs/tour)
    (folder / "aiayn-quickstart").symlink_to(root / "aiayn-quickstart")
    for stand_in in STAND_INS.get(page.stem, []):
        (folder / stand_in).parent.mkdir(parents=True, exist_ok=True)
        (folder / stand_in).symlink_to(root / "aiayn-quickstart" / "run" / "averaged")
    for block in runnable(page):
        if block["lang"] in SHELL:
            command = ["bash", "-euo", "pipefail", "-c", block["code"]]
        else:
            command = [sys.executable, "-c", block["code"]]
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        where = f"{page.relative_to(REPO_ROOT)}:{block['line']}"
        assert done.returncode == 0, f"{where} failed ({done.returncode}):\n{block['code']}\n{done.stderr[-3000:]}"
    shutil.rmtree(folder, ignore_errors=True)
