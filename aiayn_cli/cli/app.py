"""The `aiayn` command line: the root app registers commands; the work lives in library modules.

Each command is a thin typed function in `aiayn_cli/cli/commands/`. User mistakes are raised as
`AiaynError` and printed here once, as one line on stderr, with exit code 2 (a traceback only
with `--debug` or `AIAYN_DEBUG=1`).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from .. import __version__
from ..errors import AiaynError
from .commands import average, evaluate, prepare, push, quickstart, train, train_tokenizer, translate

app = typer.Typer(
    name="aiayn",
    help="The Transformer of 'Attention Is All You Need' on Hugging Face tools: "
    "train-tokenizer, train, translate, evaluate, push.",
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


# Commands are registered below, one line each, in the order of the pipeline.
app.command("train-tokenizer")(train_tokenizer.train_tokenizer)
app.command("prepare")(prepare.prepare)
app.command("train")(train.train)
app.command("average")(average.average)
app.command("translate")(translate.translate)
app.command("evaluate")(evaluate.evaluate)
app.command("push")(push.push)
app.command("quickstart")(quickstart.quickstart)


def main() -> None:
    """Entry point of the `aiayn` console script and of `python -m aiayn_cli`."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # "Loading weights" bars say nothing to a CLI user
    try:
        app()
    except AiaynError as err:
        if os.environ.get("AIAYN_DEBUG") == "1":
            raise
        typer.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
