"""`aiayn prepare RECIPE.yaml`: read, clean and tokenize a recipe's training data once, ahead of training.

aiayn prepare recipes/wmt14_en_de_base.yaml            # then: aiayn train recipes/wmt14_en_de_base.yaml
aiayn prepare recipes/multi30k_en_de.yaml --data-dir ../shared/data/multi30k --cache-dir /scratch/aiayn

What fairseq's `preprocess` and OpenNMT's `build_vocab` do: `aiayn train` (every process, every
resume) then opens the prepared Arrow files instead of reading the text again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import options
from .train import _set_overrides


def prepare(
    recipe: Annotated[Path, typer.Argument(help="A recipe (YAML): recipes/*.yaml. Flags override its keys.")],
    tokenizer: Annotated[
        str | None, typer.Option("--tokenizer", help="The folder written by `aiayn train-tokenizer`.")
    ] = None,
    num_proc: Annotated[
        int | None, typer.Option("--num-proc", help="Tokenizing processes (default: this machine's cores).")
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", help="Where prepared data goes (default: the datasets cache; data.cache_dir)."),
    ] = None,
    set_values: Annotated[
        list[str] | None,
        typer.Option(
            "--set", metavar="KEY=VALUE", help="Override any recipe key (YAML value), e.g. --set max_length=128."
        ),
    ] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress bars on stderr.")] = True,
    dataset: options.DatasetOpt = None,
    dataset_config: options.DatasetConfigOpt = None,
    data_dir: options.DataDirOpt = None,
    prefix: options.PrefixOpt = None,
    source_file: options.SourceFileOpt = None,
    target_file: options.TargetFileOpt = None,
    data_file: options.DataFileOpt = None,
    source_lang: options.SourceLangOpt = None,
    target_lang: options.TargetLangOpt = None,
) -> None:
    """Prepare a recipe's training split (clean, tokenize, cache) and print where the cache is."""
    from ...training.recipe import load_recipe
    from ...training.trainer import prepare_training_data

    overrides = _set_overrides(set_values or [])
    sources = {
        "dataset": dataset,
        "data_dir": data_dir,
        "prefix": prefix,
        "source_file": source_file,
        "target_file": target_file,
        "data_file": data_file,
    }
    if any(v is not None for v in sources.values()):  # a data source on the command line replaces the recipe's
        overrides.update({f"data.{k}": str(v) if v is not None else None for k, v in sources.items()})
    flags = {
        "tokenizer": tokenizer,
        "num_proc": num_proc,
        "data.cache_dir": str(cache_dir) if cache_dir is not None else None,
        "data.dataset_config": dataset_config,
        "data.source_lang": source_lang,
        "data.target_lang": target_lang,
    }
    overrides.update({k: v for k, v in flags.items() if v is not None})
    prepared = prepare_training_data(load_recipe(recipe, overrides), show_progress=progress)
    typer.echo(prepared.report, err=True)
    state = "opened from the cache" if prepared.from_cache else "prepared"
    typer.echo(f"{len(prepared.dataset)} pairs {state}: {prepared.path}")
