"""One vocabulary of options across the commands, help that reads as written, old spellings for a version.

Walks every command's parameters (no model, no data: nothing runs but the parser and the help)."""

from __future__ import annotations

import re

import pytest
import typer
from helpers import REPO_ROOT, run_cli

from aiayn_cli.cli.app import app
from aiayn_cli.cli.command import RENAMED
from aiayn_cli.cli.reference import VOCABULARY, cli_reference, command_options

COMMANDS = command_options()
GROUP = typer.main.get_command(app)

# Each thing's one spelling (the option test's rules, as docs/cli.md states them).
OUTPUT_FLAGS = {"--output": "FILE", "--output-dir": "FOLDER"}
OLD_SPELLINGS = {"--dtype", "--mixed-precision", "--alpha", "--reference-file"}


def test_every_command_is_walked():
    assert set(COMMANDS) == set(GROUP.commands) and len(COMMANDS) >= 13


def test_no_word_with_two_meanings():
    """An option that two commands share is in the vocabulary and shows the same placeholder in both."""
    users: dict[str, set[str]] = {}
    for command, rows in COMMANDS.items():
        for row in rows:
            if row.long is not None:
                users.setdefault(row.long, set()).add(command)
                placeholder = VOCABULARY.get(row.long, (None, ""))[0]
                if placeholder is not None:
                    assert row.placeholder == placeholder, (command, row.long, row.placeholder)
    shared = {flag for flag, commands in users.items() if len(commands) > 1}
    assert shared <= set(VOCABULARY), sorted(shared - set(VOCABULARY))


def test_a_short_option_stands_for_one_long_one():
    longs: dict[str, set[str]] = {}
    for rows in COMMANDS.values():
        for row in rows:
            if row.short is not None:
                longs.setdefault(row.short, set()).add(row.long)
    # -o is the output, a file (--output) or a folder (--output-dir) as the command writes one or the other
    assert longs.pop("-o") <= set(OUTPUT_FLAGS)
    # -i is the file a command reads: sentences (--input), or evaluate's translations (--hypotheses)
    assert longs.pop("-i") == {"--input", "--hypotheses"}
    assert all(len(names) == 1 for names in longs.values()), longs


def test_no_thing_with_two_words():
    """A model is -m/--model, an output -o/--output FILE or -o/--output-dir FOLDER, a precision
    --precision, a device --device with one default; the old spellings are gone from the help."""
    for command, rows in COMMANDS.items():
        for row in rows:
            assert row.long not in OLD_SPELLINGS, (command, row.long)
            if row.long is None:
                assert row.flags not in ("MODEL", "MODEL_DIR"), f"{command}: a model is -m/--model, not an argument"
                continue
            if row.placeholder == "MODEL" or row.long == "--model":
                assert (row.long, row.short, row.placeholder) == ("--model", "-m", "MODEL"), (command, row)
            if row.long.startswith("--output"):
                assert OUTPUT_FLAGS.get(row.long) == row.placeholder and row.short == "-o", (command, row)
            if row.long == "--device":
                assert row.default == "auto", (command, row)
            if row.long in ("--precision", "--quantization"):
                assert row.short is None
            if row.long == "--progress":
                assert row.flags == "--progress/--no-progress" and row.default == "", (command, row)
    assert sum(row.long == "--precision" for rows in COMMANDS.values() for row in rows) >= 5


def test_every_option_shows_a_placeholder_not_a_type():
    for command, rows in COMMANDS.items():
        for row in rows:
            click_param = next(p for p in GROUP.commands[command].params if row.long is None or row.long in p.opts)
            if row.long is not None and not getattr(click_param, "is_flag", False):
                assert row.placeholder, f"{command} {row.long}: no metavar"
                assert row.placeholder.upper() == row.placeholder or "|" in row.placeholder, (command, row)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_reads_as_written(command, monkeypatch, capsys):
    """Every help renders; bracketed text survives rich (no markup swallowed), and no Python type
    name (<int>, <str>, <bool>, <path>, <list[...]>) leaks into it."""
    monkeypatch.setenv("COLUMNS", "250")
    code, out, err = run_cli(command, "--help", capsys=capsys)
    assert code == 0, err
    shown = " ".join(out.replace("│", " ").split())
    assert not re.search(r"<(int|str|bool|path|float|list|file|text)\b", shown, re.IGNORECASE), shown
    assert "int range" not in shown and "float range" not in shown
    for param in GROUP.commands[command].params:
        text = " ".join((param.help or "").split())
        if getattr(param, "hidden", False) or not text:
            continue
        for bracketed in re.findall(r"\[[^\]]*\]", text):
            assert bracketed in shown, f"{command}: {bracketed!r} was swallowed"
        assert text[:40] in shown, (command, text[:40])


def test_the_root_help_and_no_arguments(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = run_cli(capsys=capsys)
    assert code == 0 and "translate" in out and "train-tokenizer" in out


def parsed(command: str, *args: str) -> dict:
    """The values `command` parses from `args` (nothing runs)."""
    click_command = GROUP.commands[command]
    with click_command.make_context(command, list(args)) as ctx:
        return dict(ctx.params)


# (command, old spelling, new spelling, the arguments every parse needs)
OLD_AND_NEW = [
    ("translate", ["--dtype", "fp32"], ["--precision", "fp32"], ["-m", "m"]),
    ("translate", ["--dtype=bf16"], ["--precision", "bf16"], ["-m", "m"]),
    ("translate", ["--dtype", "int8"], ["--quantization", "int8"], ["-m", "m"]),
    ("translate", ["--alpha", "1.5"], ["--length-penalty", "1.5"], ["-m", "m"]),
    ("serve", ["--dtype", "int8"], ["--quantization", "int8"], ["-m", "m"]),
    ("train", ["--mixed-precision", "no"], ["--precision", "fp32"], []),
    ("train", ["--mixed-precision", "bf16"], ["--precision", "bf16"], []),
    ("train", ["--mixed-precision", "null"], ["--set", "mixed_precision=null"], []),
    ("train-tokenizer", ["--output", "tok"], ["--output-dir", "tok"], []),
    ("train-tokenizer", ["--model", "unigram"], ["--algorithm", "unigram"], ["-o", "t"]),
    ("train-tokenizer", ["--sample", "9"], ["--sample-size", "9"], ["-o", "t"]),
    ("train-tokenizer", ["--max-sentences", "9"], ["--sample-size", "9"], ["-o", "t"]),
    ("average", ["--output", "avg"], ["--output-dir", "avg"], ["ckpt"]),
    ("export", ["--output", "out"], ["--output-dir", "out"], ["-m", "m"]),
    ("export", ["--quantization", "float16"], ["--precision", "fp16"], ["-m", "m"]),
    ("export", ["--quantization", "int8_float32"], ["--quantization", "int8"], ["-m", "m"]),
    ("heads", ["--output", "out"], ["--output-dir", "out"], ["-m", "m"]),
    ("heads", ["--sample", "3"], ["--sample-size", "3"], ["-m", "m"]),
    ("heads", ["--dtype", "bf16"], ["--precision", "bf16"], ["-m", "m"]),
    ("layers", ["--output", "out"], ["--output-dir", "out"], ["-m", "m"]),
    ("layers", ["--sample", "3"], ["--sample-size", "3"], ["-m", "m"]),
    ("attention", ["--output", "out"], ["--output-dir", "out"], ["-m", "m"]),
    ("attention", ["-r", "Ein Hund."], ["--reference", "Ein Hund."], ["-m", "m"]),
    ("attention", ["--reference-file", "refs.txt"], ["--references", "refs.txt"], ["-m", "m"]),
]


@pytest.mark.parametrize(
    ("command", "old", "new", "needed"), OLD_AND_NEW, ids=lambda x: " ".join(x) if isinstance(x, list) else x
)
def test_an_old_spelling_parses_as_the_new_one_with_a_notice(command, old, new, needed, capsys):
    assert parsed(command, *needed, *old) == parsed(command, *needed, *new)
    notices = capsys.readouterr().err.splitlines()
    assert len(notices) == 1 and notices[0].startswith(f"warning: {old[0].split('=')[0]}"), notices
    assert "deprecated" in notices[0] and " ".join(new) in notices[0]


def test_every_old_spelling_is_tested():
    tested = {(command, old[0].split("=")[0]) for command, old, _, _ in OLD_AND_NEW}
    listed = {(command, rename.old) for command, renames in RENAMED.items() for rename in renames}
    assert listed <= tested, listed - tested


def test_an_old_spelling_after_double_dash_is_a_sentence(capsys):
    assert parsed("translate", "-m", "m", "--", "--dtype")["sentences"] == ["--dtype"]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command", ["export", "push"])
def test_the_positional_model_of_export_and_push_still_works(command, tmp_path, capsys):
    """`aiayn export MODEL` / `aiayn push MODEL`: a notice, then the model is read (here: missing)."""
    extra = ["-o", tmp_path / "out"] if command == "export" else ["--repo-id", "a/b", "--dry-run"]
    code, _, err = run_cli(command, tmp_path / "nope", *extra, capsys=capsys)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 2, err
    assert "deprecated" in lines[0] and "-m/--model" in lines[0]
    assert lines[1].startswith("error: ") and "nope" in lines[1]


def test_a_usage_error_is_one_line(capsys):
    cases = {
        ("translate", "-m", "m", "--beam", "0", "hi"): "--beam",
        ("translate", "-m", "m", "--precision", "fp8", "hi"): "--precision: 'fp8' is not one of",
        ("translate", "--no-such-flag"): "No such option: --no-such-flag",
        ("translate", "hi"): "Missing option '--model'",
        ("train-tokenizer", "-o", "t", "--algorithm", "wordpiece"): "--algorithm",
    }
    for args, expected in cases.items():
        code, out, err = run_cli(*args, capsys=capsys)
        assert code == 2 and out == "" and len(err.splitlines()) == 1, (args, err)
        assert err.startswith("error: ") and expected in err, (args, err)


def test_the_cli_reference_page_is_generated_from_the_commands():
    page = REPO_ROOT / "docs" / "cli.md"
    assert page.read_text(encoding="utf-8") == cli_reference(), (
        "docs/cli.md differs from the commands: python -m aiayn_cli.cli.reference > docs/cli.md"
    )


def test_decoding_options_are_declared_once():
    """translate's, evaluate's and attention's decoding options and the serve requests' fields all come
    from `DecodingOptions`: the same names, bounds and help."""
    from aiayn_cli.decoding.defaults import decoding_flags
    from aiayn_cli.serving.attention import AttentionRequest
    from aiayn_cli.serving.requests import TranslateRequest

    flags = decoding_flags()
    for command, left_out in (("translate", set()), ("evaluate", {"--nbest"}), ("attention", {"--nbest"})):
        rows = {row.long: row for row in COMMANDS[command] if row.long is not None}
        for spec in flags.values():
            if spec.flag in left_out:
                assert spec.flag not in rows
                continue
            assert rows[spec.flag].help == spec.help and rows[spec.flag].short == spec.short, (command, spec.flag)
    translate = TranslateRequest.model_json_schema()["properties"]
    attention = AttentionRequest.model_json_schema()["properties"]
    for spec in flags.values():
        field = translate[spec.request_name]
        assert field["description"] == spec.help
        if spec.request_high is not None:
            assert field["anyOf"][0]["maximum"] == spec.request_high, spec.flag
        if spec.request_name in attention:
            assert attention[spec.request_name] == field
    assert {"beam", "length_penalty", "max_len_a"} <= set(attention)
