"""`aiayn prepare RECIPE`: read, clean and tokenize a recipe's training data once, ahead of training.

aiayn prepare wmt14_en_de_base            # then: aiayn train wmt14_en_de_base
aiayn prepare multi30k_en_de --data-dir data/multi30k --cache-dir /scratch/aiayn

What fairseq's `preprocess` and OpenNMT's `build_vocab` do: `aiayn train` (every process, every
resume) then opens the prepared Arrow files instead of reading the text again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import options


@options.with_data_options(need="recipe")
def prepare(
    recipe: Annotated[
        str,
        typer.Argument(
            metavar="RECIPE", help="A recipe: a YAML file, or the name of a shipped one. Flags override its keys."
        ),
    ],
    tokenizer: Annotated[
        str | None, typer.Option("--tokenizer", metavar="FOLDER", help="The folder written by `aiayn train-tokenizer`.")
    ] = None,
    num_proc: Annotated[
        int | None,
        typer.Option("--num-proc", metavar="N", help="Tokenizing processes (default: this machine's cores)."),
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            metavar="FOLDER",
            help="Where prepared data goes (default: the datasets cache; data.cache_dir).",
        ),
    ] = None,
    set_values: Annotated[
        list[str] | None,
        typer.Option(
            "--set", metavar="KEY=VALUE", help="Override any recipe key (YAML value), e.g. --set max_length=128."
        ),
    ] = None,
    progress: Annotated[bool | None, options.progress_option()] = None,
    data: dict | None = None,
) -> None:
    """Prepare a recipe's training split (clean, tokenize, cache) and print where the cache is."""
    from ...training.shipped import find_recipe

    recipe_file = find_recipe(recipe)  # before the libraries load
    from ...training.recipe import load_recipe
    from ...training.trainer import prepare_training_data

    data = {**data, "cache_dir": cache_dir}
    flags = {"tokenizer": tokenizer, "num_proc": num_proc}
    overrides = options.recipe_overrides(set_values, data, flags)
    given = {**flags, **{f"data.{name}": value for name, value in data.items()}}
    named = {
        key: "--" + key.removeprefix("data.").replace("_", "-") for key, value in given.items() if value is not None
    }
    prepared = prepare_training_data(
        load_recipe(recipe_file, overrides, flags=named), show_progress=options.show_progress(progress)
    )
    typer.echo(prepared.report, err=True)
    state = "opened from the cache" if prepared.from_cache else "prepared"
    typer.echo(f"{len(prepared.dataset)} pairs {state}: {prepared.path}")
