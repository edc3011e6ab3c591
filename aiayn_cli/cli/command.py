"""How every `aiayn` command parses and shows its options: `Command` (the click class Typer builds
each command with) and `Group` (the root).

* Help reads as written: rich markup is off for help text (a bracketed "[default: ...]" stays), and
  the placeholder column shows the option's metavar (FILE, N, auto|fp32|bf16|fp16), never a Python
  type name; a flag shows none.
* Help fits any terminal: at 80 columns a word longer than its column wraps onto the next line instead of
  being cut with an ellipsis.
* An option that is required but parsed as optional (the old positional MODEL of export and push still
  stands in for `--model`) is marked required all the same (`SHOWN_REQUIRED`).
* Old spellings keep working for one version: `RENAMED` lists, per command, the flags (and flag
  values) that were renamed; such a spelling is rewritten to the new one before parsing, with a
  one-line notice on stderr.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import typer
from typer import _click as click  # the click that typer vendors (since 0.2x); its classes are typer's own
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class Renamed:
    """An old spelling `old` of a flag, now `new`; `values` maps old values to the new tokens
    (`--dtype int8` -> `--quantization int8`). With `values` and `new` equal to `old`, only those
    values are renamed."""

    old: str
    new: str
    values: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def rewrite(self, value: str | None) -> tuple[list[str], str]:
        """The new tokens for `old VALUE` (or the flag alone), and the notice's suggestion."""
        if value is not None and value in self.values:
            tokens = list(self.values[value])
        else:
            tokens = [self.new] + ([value] if value is not None else [])
        return tokens, " ".join(tokens)


PRECISION_VALUES = {"int8": ("--quantization", "int8")}

# Spellings of the previous version, per command; they go away in the next one.
RENAMED: dict[str, list[Renamed]] = {
    "train-tokenizer": [
        Renamed("--output", "--output-dir"),
        Renamed("--model", "--algorithm"),
        Renamed("--sample", "--sample-size"),
        Renamed("--max-sentences", "--sample-size"),
    ],
    "train": [
        Renamed(
            "--mixed-precision",
            "--precision",
            values={"no": ("--precision", "fp32"), "null": ("--set", "mixed_precision=null")},
        )
    ],
    "average": [Renamed("--output", "--output-dir")],
    "translate": [Renamed("--dtype", "--precision", PRECISION_VALUES), Renamed("--alpha", "--length-penalty")],
    "serve": [Renamed("--dtype", "--precision", PRECISION_VALUES)],
    "export": [
        Renamed("--output", "--output-dir"),
        Renamed(
            "--quantization",
            "--quantization",
            values={
                "float32": ("--precision", "fp32"),
                "float16": ("--precision", "fp16"),
                "int8_float32": ("--quantization", "int8"),
            },
        ),
    ],
    "heads": [
        Renamed("--output", "--output-dir"),
        Renamed("--sample", "--sample-size"),
        Renamed("--dtype", "--precision"),
    ],
    "layers": [Renamed("--output", "--output-dir"), Renamed("--sample", "--sample-size")],
    "attention": [
        Renamed("--output", "--output-dir"),
        Renamed("-r", "--reference"),
        Renamed("--reference-file", "--references"),
    ],
}


# Options that each command needs although the parser takes them as optional (`aiayn export MODEL`, the
# previous version's spelling, still gives --model): their help marks them required.
SHOWN_REQUIRED: dict[str, set[str]] = {"export": {"model", "output"}, "push": {"model"}}


def shown_required(command: str | None, param: click.Parameter) -> bool:
    """Whether `command`'s help marks `param` required."""
    return bool(param.required) or param.name in SHOWN_REQUIRED.get(command or "", set())


def rewrite_renamed(command: str, args: list[str], flags_with_values: set[str]) -> list[str]:
    """`args` with the old spellings of `command` replaced by the new ones, one notice line each on
    stderr. Nothing after `--` is touched; `flags_with_values`: the old flags that take a value."""
    renamed = {r.old: r for r in RENAMED.get(command, [])}
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return out + args[i:]
        flag, sep, attached = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        rename = renamed.get(flag)
        if rename is None:
            out.append(arg)
            i += 1
            continue
        if sep:
            value, i = attached, i + 1
        elif flag in flags_with_values and i + 1 < len(args):
            value, i = args[i + 1], i + 2
        else:
            value, i = None, i + 1
        tokens, suggestion = rename.rewrite(value)
        if tokens == [flag] + ([value] if value is not None else []):
            out.extend(tokens)  # a value that kept its name (export --quantization int8)
            continue
        shown = flag if value is None else f"{flag} {value}"
        typer.echo(f"warning: {shown} is deprecated and goes away in the next version; use {suggestion}", err=True)
        out.extend(tokens)
    return out


def _placeholder(param: click.Parameter, ctx: click.Context) -> str | None:
    """What the help's placeholder column shows: the metavar, the choices, or nothing (a flag, or an
    argument, whose metavar is already its name)."""
    if param.param_type_name == "argument" or getattr(param, "is_flag", False):
        return None
    if param.metavar is not None:
        return param.metavar
    choices = getattr(getattr(param, "type_descriptor", None), "choices", None)
    return "|".join(map(str, choices)) if choices else None


def _folding_table(table: type) -> type:
    """rich's Table, whose cells fold a word longer than their column onto the next line, not cut it."""

    class FoldingTable(table):
        def add_row(self, *cells, **kwargs) -> None:
            super().add_row(*cells, **kwargs)
            for column in self.columns:
                column.overflow = "fold"

    return FoldingTable


def _folding_text(make_rich_text):
    """typer's maker of an option's help text, whose words fold too (rich lays the text out in a grid
    of its own, with the ellipsis as its default)."""

    def make(*args, **kwargs):
        text = make_rich_text(*args, **kwargs)
        if getattr(text, "overflow", "") is None:
            text.overflow = "fold"
        return text

    return make


@contextmanager
def _plain_help(
    command: click.Command | None, params: list[click.Parameter], name: str | None = None
) -> Iterator[None]:
    """While help is drawn: texts with rich markup escaped (rich would swallow "[default: x]"), long
    words folded rather than cut, and the `SHOWN_REQUIRED` options marked required."""
    from rich.markup import escape
    from typer import rich_utils

    saved = [(param, param.help, param.required) for param in params]
    saved_command = command.help if command is not None else None
    table, make_rich_text = rich_utils.Table, rich_utils._make_rich_text
    try:
        rich_utils.Table, rich_utils._make_rich_text = _folding_table(table), _folding_text(make_rich_text)
        for param, text, _ in saved:
            param.help = escape(text) if text else text
            param.required = shown_required(name, param)
        if command is not None and command.help:
            command.help = escape(command.help)
        yield
    finally:
        rich_utils.Table, rich_utils._make_rich_text = table, make_rich_text
        for param, text, required in saved:
            param.help, param.required = text, required
        if command is not None:
            command.help = saved_command


def _with_placeholders(params: list[click.Parameter]) -> list[click.Parameter]:
    for param in params:  # --help too, which click adds here
        param.display_type_rich = lambda ctx, param=param: _placeholder(param, ctx)  # type: ignore[attr-defined]
    return params


class Command(TyperCommand):
    """A Typer command whose help reads as written and which accepts its old spellings for a version."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return _with_placeholders(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        """The usage line, without the hidden arguments of old spellings."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if not getattr(param, "hidden", False):
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if self.name in RENAMED:
            takes_value = {r.old for r in RENAMED[self.name] if self._takes_value(r.new)}
            args = rewrite_renamed(self.name, args, takes_value)
        rest = super().parse_args(ctx, args)
        _check_text_is_utf8(self.params, ctx.params)
        return rest

    def _takes_value(self, flag: str) -> bool:
        return any(flag in param.opts and not getattr(param, "is_flag", False) for param in self.params)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with _plain_help(self, self.get_params(ctx), self.name):
            super().format_help(ctx, formatter)


def _check_text_is_utf8(params: list[click.Parameter], values: dict) -> None:
    """A text value (a sentence, a reference, a key; not a path) that came with a byte that is not UTF-8
    (Python keeps it as a lone surrogate) is refused naming it, before a tokenizer fails on it."""
    for param in params:  # a path option's value is a Path by now, and a file may have any name
        value = values.get(param.name)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, str) and any("\udc80" <= ch <= "\udcff" for ch in item):
                shown = max(param.opts, key=len) if param.opts[0].startswith("-") else param.metavar or param.name
                byte = next(ord(ch) - 0xDC00 for ch in item if "\udc80" <= ch <= "\udcff")
                raise typer.BadParameter(
                    f"not valid UTF-8 (byte 0x{byte:02x} in {ascii(item.encode('utf-8', 'surrogateescape'))[2:-1]})",
                    param_hint=shown,
                )


class Group(TyperGroup):
    """The root `aiayn` group: its flags without a type placeholder, the commands' one-line summaries
    shown as written too."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return _with_placeholders(super().get_params(ctx))

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        commands = [self.commands[name] for name in self.list_commands(ctx)]
        from rich.markup import escape

        saved = [(command, command.help) for command in commands]
        try:
            for command, text in saved:
                command.help = escape(text) if text else text
            with _plain_help(None, self.get_params(ctx)):
                super().format_help(ctx, formatter)
        finally:
            for command, text in saved:
                command.help = text


UsageError = click.exceptions.ClickException
NoArgsIsHelpError = click.exceptions.NoArgsIsHelpError


def one_line(err: UsageError) -> str:
    """A click usage error (unknown option, bad value, missing argument) as one line; a bad value as
    `--flag: what is wrong`."""
    message = " ".join(err.format_message().split())
    param = getattr(err, "param", None)
    bad_value = isinstance(err, click.exceptions.BadParameter) and not isinstance(
        err, click.exceptions.MissingParameter
    )
    if bad_value and param is not None and getattr(param, "opts", None):
        flag = max(param.opts, key=len)
        message = f"{flag}: " + " ".join(str(err.message).removeprefix("Value error, ").split())
    ctx = getattr(err, "ctx", None)
    hint = f" (see aiayn {ctx.info_name} --help)" if ctx is not None and ctx.parent is not None else ""
    return f"error: {message}{hint}"
