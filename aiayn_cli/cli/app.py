"""The `aiayn` command line: the root app registers commands; the work lives in library modules.

Each command is a thin typed function in `aiayn_cli/cli/commands/`. User mistakes are raised as
`AiaynError` and printed here once, as one line on stderr, with exit code 2 (a traceback only
with `--debug` or `AIAYN_DEBUG=1`); so are the file system's refusals (`OSError`: a full disk, a
folder that is not writable) and damaged safetensors files, as `error: <file>: <reason>`.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from .. import __version__
from ..errors import AiaynError, first_line
from .command import Command, Group, NoArgsIsHelpError, UsageError, one_line
from .commands import (
    attention,
    average,
    evaluate,
    export,
    heads,
    layers,
    paper,
    prepare,
    push,
    quickstart,
    recipes,
    serve,
    train,
    train_tokenizer,
    translate,
)

app = typer.Typer(
    name="aiayn",
    help="The Transformer of 'Attention Is All You Need' on Hugging Face tools. Build a model: "
    "train-tokenizer, prepare, train, average; use it: translate, evaluate, serve, export, push; "
    "see inside it: attention, heads, layers, paper; start with quickstart or recipes.",
    cls=Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"aiayn {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version and exit."),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
) -> None:
    """aiayn: train, run, measure and share the paper's Transformer."""
    if debug:
        os.environ["AIAYN_DEBUG"] = "1"
    # The libraries' own bars ("Loading weights", downloads) say nothing to a CLI user; read by
    # huggingface_hub and transformers when they are imported, which no command has done yet.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:  # imported already (a notebook, a test): tell it directly
        sys.modules["transformers"].utils.logging.disable_progress_bar()


# Commands are registered below, one line each, in the order of the pipeline.
app.command("train-tokenizer", cls=Command)(train_tokenizer.train_tokenizer)
app.command("prepare", cls=Command)(prepare.prepare)
app.command("train", cls=Command)(train.train)
app.command("average", cls=Command)(average.average)
app.command("translate", cls=Command)(translate.translate)
app.command("evaluate", cls=Command)(evaluate.evaluate)
app.command("push", cls=Command)(push.push)
app.command("serve", cls=Command)(serve.serve)
app.command("export", cls=Command)(export.export)
app.command("quickstart", cls=Command)(quickstart.quickstart)
app.command("attention", cls=Command)(attention.attention)
app.command("heads", cls=Command)(heads.heads)
app.command("layers", cls=Command)(layers.layers)
app.command("paper", cls=Command)(paper.paper)
app.command("recipes", cls=Command)(recipes.recipes)


def flag_names(command: str | None) -> dict[str, str]:
    """Library key -> the flag that sets it in `command` (its longest spelling, `--data-dir`)."""
    group = typer.main.get_command(app)
    found = group.commands.get(command) if command else None  # type: ignore[attr-defined]
    names = {}
    for param in getattr(found, "params", []):
        flags = [opt for opt in param.opts if opt.startswith("--")]
        names[param.name] = max(flags, key=len) if flags else param.name.upper()
    if "precision" in names:  # the library's dtype is what --precision chooses
        names.setdefault("dtype", names["precision"])
    if "algorithm" in names:  # train_tokenizer's model is what --algorithm chooses
        names.setdefault("model", names["algorithm"])
    return names


def _command_name(argv: list[str]) -> str | None:
    group = typer.main.get_command(app)
    return next((arg for arg in argv if arg in group.commands), None)  # type: ignore[attr-defined]


def script() -> None:
    """Entry point of the `aiayn` console script and of `python -m aiayn_cli`: a command that trains
    starts again once with jemalloc preloaded where it is installed (`aiayn_cli.allocator`)."""
    main(restart=True)


def main(restart: bool = False) -> None:
    """The command line in this process (`restart`: first start again with a faster allocator where
    `aiayn_cli.allocator` says so, as `script()` does)."""
    try:
        if restart:
            from ..allocator import restart_with_a_faster_allocator

            restart_with_a_faster_allocator()
        code = app(standalone_mode=False)  # a usage error comes back here, to be one line
        sys.exit(code if isinstance(code, int) else 0)
    except NoArgsIsHelpError as err:  # `aiayn`, `aiayn train-tokenizer`: the help
        typer.echo(err.format_message())
        sys.exit(0)
    except UsageError as err:  # a usage error: one line, not a box
        typer.echo(one_line(err), err=True)
        sys.exit(err.exit_code)
    except typer.Abort:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as err:
        message, code = error_line(err)
        if message is None or os.environ.get("AIAYN_DEBUG") == "1":
            raise
        # One line, whatever the input held: a carriage return or newline in a name is shown escaped.
        typer.echo(message.replace("\r", "\\r").replace("\n", "\\n"), err=True)
        sys.exit(code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)


def error_line(err: BaseException) -> tuple[str | None, int]:
    """The one line and exit code for an error the user can act on; (None, 1) for a bug."""
    if isinstance(err, AiaynError):
        names = flag_names(_command_name(sys.argv[1:])) if err.key or err.mentions else {}
        return f"{err.prefix}: {err.render(lambda key: names.get(key, key))}", err.exit_code
    if isinstance(err, OSError):
        reason = err.strerror or first_line(err)
        names = [str(name) for name in (err.filename, err.filename2) if name is not None]
        return "error: " + "".join(f"{name}: " for name in names[:1]) + reason, 2
    if isinstance(err, MemoryError) or "not enough memory" in str(err) or type(err).__name__ == "OutOfMemoryError":
        return f"error: out of memory ({first_line(err) or 'MemoryError'}): a smaller model, beam or batch", 1
    if type(err).__name__ == "SafetensorError":  # safetensors' Rust error: a damaged or truncated file
        return f"error: a safetensors file is damaged or truncated: {first_line(err)}", 2
    return None, 1
