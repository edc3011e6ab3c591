"""Help and docs in step with the commands: the root summary, help at 80 columns, the recipes' list,
required options marked, and every option a page names on an `aiayn` command line is one the command has.

Nothing runs but the parser and the help (no model, no data)."""

from __future__ import annotations

import re
import shlex

import pytest
import typer
from helpers import REPO_ROOT, run_cli

from aiayn_cli.cli.app import app
from aiayn_cli.cli.command import RENAMED
from aiayn_cli.training.recipe import shipped_recipes

GROUP = typer.main.get_command(app)
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def test_the_root_summary_names_every_command():
    summary = " ".join(GROUP.help.split())
    missing = [name for name in GROUP.commands if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", summary)]
    assert not missing, f"the root help's summary does not name {missing}"


def test_the_root_flags_show_no_type(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "120")
    code, out, _ = run_cli("--help", capsys=capsys)
    assert code == 0 and "--debug" in out
    assert not re.search(r"<(bool|int|str|path)>", out), out


@pytest.mark.parametrize("command", [None, *sorted(GROUP.commands)])
def test_help_at_80_columns_cuts_no_word(command, monkeypatch, capsys):
    """Rich cuts a word wider than its column with an ellipsis unless told to fold it."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(*([command] if command else []), "--help", capsys=capsys)
    assert code == 0, err
    assert max(map(len, out.splitlines())) <= 80
    cut = [line for line in out.splitlines() if "…" in line]
    assert not cut, f"aiayn {command or ''} --help at 80 columns cuts: {cut}"


def test_each_recipe_is_listed_with_a_whole_line(capsys):
    """The list shows each recipe's first comment line: a line that a second one does not continue."""
    for name, purpose in shipped_recipes().items():
        lines = (REPO_ROOT / "recipes" / f"{name}.yaml").read_text(encoding="utf-8").splitlines()
        second = lines[1].lstrip("#").strip() if len(lines) > 1 and lines[1].startswith("#") else ""
        continues = second[:1].islower() or second[:1].isdigit()
        assert not continues or lines[0].rstrip().endswith(":"), f"{name}: {purpose!r} goes on: {second!r}"
    code, out, _ = run_cli("recipes", capsys=capsys)
    assert code == 0 and all(purpose in out for purpose in shipped_recipes().values())


@pytest.mark.parametrize(("command", "flags"), [("export", ["--model", "--output-dir"]), ("push", ["--model"])])
def test_options_needed_are_marked_required(command, flags, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(command, "--help", capsys=capsys)
    assert code == 0
    for flag in flags:
        row = next(line for line in out.splitlines() if f" {flag} " in line)
        assert row.lstrip("│ ").startswith("*") and "[required]" in row, row


# ---------------------------------------------------------------------------------------------
# Every option the docs name on a command line
# ---------------------------------------------------------------------------------------------

FENCE = re.compile(r"^```[\w+-]*[^\n]*\n(.*?)^```\s*$", re.M | re.S)
INLINE = re.compile(r"`(aiayn [^`]+)`")


def command_lines(page) -> list[tuple[int, str]]:
    """Each `aiayn ...` command line of a page (code blocks, continuations joined, and inline code),
    with its line number; comments and what follows a pipe or `&&` left out."""
    text = page.read_text(encoding="utf-8")
    found = []
    for block in FENCE.finditer(text):
        start = text.count("\n", 0, block.start()) + 2
        joined = block[1].replace("\\\n", " \n")
        for offset, line in enumerate(joined.splitlines()):
            found.extend((start + offset, part) for part in re.split(r"\|\||&&|\||;|\$\(", line))
    for match in INLINE.finditer(text):
        found.append((text.count("\n", 0, match.start()) + 1, match[1]))
    lines = []
    for number, part in found:
        part = part.split(" #", 1)[0].strip().removeprefix("$ ")
        at = re.search(r"(?:^|\s)aiayn\s", part)
        if at:
            lines.append((number, part[at.start() :].strip()))
    return lines


def words_of(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:  # a quote closed on a line left out (after a pipe)
        return line.split()


def test_every_option_the_docs_name_is_the_commands():
    wrong = []
    renamed = {(command, r.old): r for command, spellings in RENAMED.items() for r in spellings}
    for page in PAGES:
        for number, line in command_lines(page):
            words = words_of(line)
            command = GROUP.commands.get(words[1]) if len(words) > 1 else None
            if command is None:
                continue
            params = {opt: p for p in command.params for opt in [*p.opts, *p.secondary_opts]}
            for i, word in enumerate(words[2:], start=2):
                flag = word.split("=", 1)[0]
                if not re.fullmatch(r"--?[a-z][\w-]*", flag) or flag in ("-h", "--help"):
                    continue
                where = f"{page.relative_to(REPO_ROOT)}:{number}: aiayn {words[1]} {flag}"
                value = word.split("=", 1)[1] if "=" in word else (words[i + 1] if i + 1 < len(words) else None)
                old = renamed.get((words[1], flag))
                if old is not None and (old.new != old.old or value in old.values):
                    if page.name != "cli.md":  # its table of old spellings
                        wrong.append(f"{where} {value or ''}: an old spelling")
                elif flag not in params:
                    wrong.append(f"{where}: no option of the command")
                else:
                    choices = getattr(getattr(params[flag], "type_descriptor", None), "choices", None)
                    if choices and value is not None and not value.isupper() and value not in map(str, choices):
                        wrong.append(f"{where} {value}: not one of {list(choices)}")
    assert not wrong, "\n".join(wrong)


def test_the_docs_name_every_command_on_a_command_line():
    named = {words_of(line)[1] for page in PAGES for _, line in command_lines(page) if len(line.split()) > 1}
    assert set(GROUP.commands) <= named, set(GROUP.commands) - named
