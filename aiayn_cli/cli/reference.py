"""The CLI reference, drawn from the Typer app itself: the shared vocabulary of options and a table of
every command's options (docs/cli.md is this module's output; a test keeps the two in step).

    from aiayn_cli.cli.reference import cli_reference, command_options
    print(cli_reference())                      # the Markdown page
    command_options()["translate"]              # [OptionRow(flags='-m, --model', placeholder='MODEL', ...)]

    python -m aiayn_cli.cli.reference > docs/cli.md
"""

from __future__ import annotations

from dataclasses import dataclass

# One spelling for each thing, one meaning for each spelling: every option that two commands share is
# here, with the placeholder it shows everywhere (None: a flag, or values that depend on the command).
VOCABULARY: dict[str, tuple[str | None, str]] = {
    "--model": ("MODEL", "a model folder (written by aiayn train or aiayn average) or a Hub id"),
    "--output": ("FILE", "the file the command writes"),
    "--output-dir": ("FOLDER", "the folder the command writes"),
    "--input": ("FILE", "sentences, one per line"),
    "--references": ("FILE", "reference translations, one per line, line-aligned with the sentences"),
    "--precision": ("auto|fp32|bf16|fp16", "what the model computes in (export: the type of the saved weights)"),
    "--quantization": (None, "int8 (or int16) weights for the linear maps"),
    "--engine": ("torch|ctranslate2", "which decoder runs the model"),
    "--device": ("DEVICE", "where the model runs: auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps"),
    "--threads": ("N", "the most CPU threads"),
    "--max-tokens": ("N", "tokens per batch, padding included"),
    "--batch-size": ("N", "sentences per batch"),
    "--on-long": ("truncate|skip|error", "what happens to an input longer than the model's limit"),
    "--progress": (None, "progress bars on stderr (default: only when stderr is a terminal)"),
    "--seed": ("N", "a random seed"),
    "--overwrite": (None, "replace an output folder that exists"),
    "--tokenizer": ("FOLDER", "the folder written by aiayn train-tokenizer"),
    "--set": ("KEY=VALUE", "a recipe key (YAML value)"),
    "--alignment-layer": ("N", "the decoder layer whose averaged heads give word alignments"),
    "--dataset": ("NAME", "a Hub dataset"),
    "--dataset-config": ("NAME", "the Hub dataset's configuration"),
    "--data-dir": ("FOLDER", "a folder of {split}.{lang} files"),
    "--prefix": ("PREFIX", "PREFIX.{source-lang} and PREFIX.{target-lang}"),
    "--source-file": ("FILE", "source sentences, one per line"),
    "--target-file": ("FILE", "target sentences, one per line"),
    "--data-file": ("FILE", "one TSV or JSONL file of pairs"),
    "--data-format": ("tsv|jsonl", "the format of --data-file"),
    "--source-lang": ("LANG", "the source language code"),
    "--target-lang": ("LANG", "the target language code"),
    "--source-column": ("COLUMN", "the column of the source sentences"),
    "--target-column": ("COLUMN", "the column of the target sentences"),
    "--split": ("SPLIT", "the data split: train, validation, test or a dataset's own name"),
    "--max-length": ("N", "drop pairs with a side longer than N tokens"),
    "--max-ratio": ("X", "drop pairs whose sides' lengths differ more than X times"),
    "--dedup": (None, "drop repeated pairs"),
    "--sample-size": ("N", "how many sentence pairs a sample takes"),
    "--reference": ("TEXT", "a reference translation, as text"),
    "--beam": ("N", "beam size; 1 is greedy search"),
    "--nbest": ("N", "hypotheses per input"),
    "--length-penalty": ("ALPHA", "alpha of the length penalty"),
    "--length-penalty-style": ("gnmt|hf", "the length penalty's formula"),
    "--max-len-a": ("A", "at most A * input length + B tokens"),
    "--max-len-b": ("B", "see --max-len-a"),
    "--sample": (None, "sample instead of searching"),
    "--temperature": ("T", "sampling temperature"),
    "--top-k": ("K", "sample among the K most likely tokens"),
    "--top-p": ("P", "sample within probability P"),
}


@dataclass(frozen=True)
class OptionRow:
    """One option (or argument) of a command, as its help shows it."""

    flags: str  # "-m, --model", or an argument's placeholder ("SENTENCE...")
    placeholder: str  # "MODEL", "auto|fp32|bf16|fp16", "" for a flag
    default: str  # "" when there is none to show
    help: str
    long: str | None  # the longest flag ("--model"); None for an argument
    short: str | None  # "-m"
    required: bool


def _app():
    from .app import app

    return app


def _placeholder(param) -> str:
    if param.param_type_name == "argument" or getattr(param, "is_flag", False):
        return ""
    if param.metavar is not None:
        return param.metavar
    choices = getattr(getattr(param, "type_descriptor", None), "choices", None)
    return "|".join(map(str, choices)) if choices else ""


def _default(param) -> str:
    default = param.default
    if param.param_type_name == "argument" or param.required or default is None or callable(default):
        return ""
    if getattr(param, "is_flag", False):
        if getattr(param, "secondary_opts", None) and default is not None:
            return (param.opts if default else param.secondary_opts)[0]
        return ""
    if getattr(param, "show_default", None) is False:
        return ""
    if isinstance(default, (list, tuple)):
        return " ".join(map(str, default))
    return str(getattr(default, "value", default))


def command_options(app=None) -> dict[str, list[OptionRow]]:
    """Each command's visible arguments and options (without --help), in the order of its help."""
    import typer

    from .command import shown_required

    group = typer.main.get_command(app or _app())
    found: dict[str, list[OptionRow]] = {}
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        rows = []
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            if param.param_type_name == "argument":
                label = param.metavar or param.name.upper()
                rows.append(OptionRow(label, "", "", param.help or "", None, None, shown_required(name, param)))
                continue
            longs = [opt for opt in [*param.opts, *param.secondary_opts] if opt.startswith("--")]
            shorts = [opt for opt in param.opts if not opt.startswith("--")]
            flags = ", ".join([*shorts, "/".join(longs)])
            long = max((o for o in param.opts if o.startswith("--")), key=len, default=None)
            rows.append(
                OptionRow(
                    flags,
                    _placeholder(param),
                    _default(param),
                    param.help or "",
                    long,
                    shorts[0] if shorts else None,
                    shown_required(name, param),
                )
            )
        found[name] = rows
    return found


def _cell(text: str) -> str:
    """Text for a Markdown table cell: pipes and angle brackets escaped, on one line."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def vocabulary_table(app=None) -> str:
    """The shared options as a Markdown table: option, placeholder, meaning, the commands that take it."""
    users: dict[str, list[str]] = {}
    for command, rows in command_options(app).items():
        for row in rows:
            if row.long is not None:
                users.setdefault(row.long, []).append(command)
    lines = ["| option | placeholder | means | commands |", "|---|---|---|---|"]
    for flag, (placeholder, meaning) in VOCABULARY.items():
        commands = ", ".join(users.get(flag, []))
        lines.append(f"| `{flag}` | {_cell(placeholder or '')} | {_cell(meaning)} | {commands} |")
    return "\n".join(lines)


def options_table(command: str, app=None) -> str:
    """One command's arguments and options as a Markdown table."""
    lines = ["| option | placeholder | default | what it does |", "|---|---|---|---|"]
    for row in command_options(app)[command]:
        flags = f"`{row.flags}`" + (" (required)" if row.required else "")
        default = f"`{row.default}`" if row.default else ""
        lines.append(f"| {flags} | {_cell(row.placeholder)} | {_cell(default)} | {_cell(row.help)} |")
    return "\n".join(lines)


def cli_reference(app=None) -> str:
    """The whole CLI reference page (docs/cli.md), in Markdown."""
    import typer

    from .command import RENAMED

    group = typer.main.get_command(app or _app())
    parts = [
        "# Command-line reference",
        "",
        "<!-- Generated by `python -m aiayn_cli.cli.reference > docs/cli.md` from the commands themselves; "
        "tests/cli/test_cli_options.py fails when this page and the code differ. -->",
        "",
        "`aiayn COMMAND --help` shows the same. One spelling for each thing, in every command: a model is "
        "always `-m/--model` (a folder or a Hub id), a file a command writes `-o/--output`, a folder it writes "
        "`-o/--output-dir`; what it computes in `--precision`, where `--device` (`auto` by default). A wrong "
        "value is one line on stderr and exit code 2, before any work. Progress bars are drawn only when "
        "stderr is a terminal (`--progress` / `--no-progress` decide otherwise), so a log file never holds "
        "a bar's carriage returns.",
        "",
        "## Options that several commands share",
        "",
        vocabulary_table(app),
        "",
        "## Old spellings (they work until the next version, with a one-line notice)",
        "",
        "| command | old | new |",
        "|---|---|---|",
    ]
    for command, renames in RENAMED.items():
        for rename in renames:
            if rename.values and rename.new == rename.old:
                for value, tokens in rename.values.items():
                    parts.append(f"| {command} | `{rename.old} {value}` | `{' '.join(tokens)}` |")
                continue
            parts.append(f"| {command} | `{rename.old}` | `{rename.new}` |")
            for value, tokens in rename.values.items():
                parts.append(f"| {command} | `{rename.old} {value}` | `{' '.join(tokens)}` |")
    for command in ("export", "push"):
        parts.append(f"| {command} | `aiayn {command} MODEL` | `aiayn {command} -m MODEL` |")
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        summary = " ".join((command.help or "").split("\n\n")[0].split())
        parts += ["", f"## aiayn {name}", "", summary, "", options_table(name, app)]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(cli_reference(), end="")
