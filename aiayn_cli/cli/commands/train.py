"""`aiayn train RECIPE [flags]`: the paper's training recipe (§5), on one CPU or under `accelerate launch`.

aiayn train multi30k_en_de                                        # a shipped recipe, by name
aiayn train multi30k_en_de --data-dir data/multi30k               # on a local folder of train.en, ...
aiayn train my_recipe.yaml                                        # or a file
accelerate launch -m aiayn_cli train multi30k_en_de               # several GPUs / machines
aiayn train multi30k_en_de                                        # again, after a kill: resumes

Ctrl-C or SIGTERM: the current step is finished and a checkpoint written (exit 130 / 143); a
second one stops at once. The output folder is locked while a run uses it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ...errors import AiaynError
from .. import options

PANEL_RUN = "Run"
# The recipe key each flag sets where its name is not the key's (the others: --max-steps sets max_steps).
FLAGS = {"model.preset": "--preset", "mixed_precision": "--precision"}


@options.with_data_options(need="recipe")
def train(
    recipe: Annotated[
        str | None,
        typer.Argument(
            metavar="RECIPE",
            show_default=False,
            help="A recipe: a YAML file, or the name of a shipped one (`aiayn recipes` lists them). "
            "Flags override its keys.",
        ),
    ] = None,
    output_dir: Annotated[
        Path | None, options.output_dir_option("Where checkpoints, metrics and the resolved recipe go.", PANEL_RUN)
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            metavar="FOLDER",
            rich_help_panel=PANEL_RUN,
            help="The folder written by `aiayn train-tokenizer`.",
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            metavar="FOLDER",
            rich_help_panel=PANEL_RUN,
            help="Continue from this checkpoint. Default: the newest checkpoint in --output-dir if it holds this run.",
        ),
    ] = None,
    accept_new_data: Annotated[
        bool,
        typer.Option(
            "--accept-new-data",
            rich_help_panel=PANEL_RUN,
            help="Resume even though the training data changed since the checkpoint (it is refused otherwise).",
        ),
    ] = False,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset", metavar="NAME", rich_help_panel=PANEL_RUN, help="Model size: base, big (Table 3), small, tiny."
        ),
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option(
            "--max-steps", metavar="N", rich_help_panel=PANEL_RUN, help="Stop after this many optimizer steps."
        ),
    ] = None,
    max_epochs: Annotated[
        int | None,
        typer.Option("--max-epochs", metavar="N", rich_help_panel=PANEL_RUN, help="Stop after this many epochs."),
    ] = None,
    max_time: Annotated[
        str | None,
        typer.Option(
            "--max-time",
            metavar="TIME",
            rich_help_panel=PANEL_RUN,
            help="Stop after this much training: minutes, or 90m, 1.5h, 3600s.",
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            metavar="N",
            rich_help_panel=PANEL_RUN,
            help="Tokens per batch and process, padding included.",
        ),
    ] = None,
    update_freq: Annotated[
        int | None,
        typer.Option(
            "--update-freq", metavar="N", rich_help_panel=PANEL_RUN, help="Batches accumulated per optimizer step."
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", metavar="N", rich_help_panel=PANEL_RUN, help="The run's seed.")
    ] = None,
    precision: Annotated[
        options.Precision | None,
        options.precision_option(
            help="What training computes in: auto (bf16 where the device computes it natively: AVX512-BF16, AMX, "
            "Ampere+; else fp32), fp32, bf16 or fp16 (default: the recipe's mixed_precision, auto; "
            "--set mixed_precision=null leaves it to accelerate launch / accelerate config).",
            panel=PANEL_RUN,
            show_default=False,
        ),
    ] = None,
    compile: Annotated[
        bool | None,
        typer.Option("--compile/--no-compile", rich_help_panel=PANEL_RUN, help="Run the model through torch.compile."),
    ] = None,
    set_values: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            rich_help_panel=PANEL_RUN,
            metavar="KEY=VALUE",
            help="Override any recipe key (YAML value), e.g. --set lr_scale=2 --set model.dropout=0.3.",
        ),
    ] = None,
    progress: Annotated[bool | None, options.progress_option(PANEL_RUN)] = None,
    data: dict | None = None,
) -> None:
    """Train a Transformer with the paper's recipe (§5): Adam, warmup + inverse square root, label smoothing."""
    from ...training.shipped import find_recipe

    recipe_file = find_recipe(recipe) if recipe is not None else None  # before the libraries load
    from ...training.recipe import load_recipe
    from ...training.trainer import quiet_libraries
    from ...training.trainer import train as run_training

    flags = {
        "output_dir": output_dir,
        "tokenizer": tokenizer,
        "model.preset": preset,
        "max_steps": max_steps,
        "max_epochs": max_epochs,
        "max_time": max_time,
        "max_tokens": max_tokens,
        "update_freq": update_freq,
        "seed": seed,
        "mixed_precision": {"fp32": "no"}.get(precision, precision),  # accelerate's name for fp32
        "compile": compile,
    }
    overrides = options.recipe_overrides(set_values, data, flags)
    if recipe is None and not overrides:
        raise AiaynError("give a recipe (a YAML file, or a name that `aiayn recipes` lists) or the keys as flags")
    given = {**flags, **{f"data.{name}": value for name, value in data.items()}}
    named = {key: FLAGS.get(key, "--" + key.removeprefix("data.").replace("_", "-"))
             for key, value in given.items() if value is not None}  # fmt: skip
    resolved = load_recipe(recipe_file, overrides, flags=named)
    quiet_libraries()
    result = run_training(
        resolved, resume=resume, show_progress=options.show_progress(progress), accept_new_data=accept_new_data
    )
    _report(result)


def _report(result) -> None:
    if not result.is_main_process:
        return
    minutes = result.train_seconds / 60
    typer.echo(
        f"trained {result.step} steps ({result.epoch} epochs) in {minutes:.1f} min, "
        f"{result.tokens_per_second:,.0f} tokens/s; stopped by {result.stopped_by}"
    )
    if result.last_valid:
        typer.echo("last validation: " + ", ".join(f"{k} {v:.3f}" for k, v in result.last_valid.items()))
    if result.best_checkpoint is not None:
        typer.echo(f"best checkpoint: {result.best_checkpoint} ({result.best_metric:.3f})")
    if result.last_checkpoint is not None:
        typer.echo(f"last checkpoint: {result.last_checkpoint}")
    if result.averaged is not None:
        shown = ", ".join(f"{k.split('/', 1)[1]} {v:.3f}" for k, v in result.averaged_valid.items())
        typer.echo(f"averaged: {result.averaged}" + (f" ({shown})" if shown else ""))
    if result.length_penalty is not None:
        typer.echo(result.length_penalty)
