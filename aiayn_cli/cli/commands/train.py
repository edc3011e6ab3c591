"""`aiayn train RECIPE.yaml [flags]`: the paper's training recipe (§5), on one CPU or under `accelerate launch`.

aiayn train recipes/multi30k_en_de.yaml --data-dir ../shared/data/multi30k
accelerate launch -m aiayn_cli train recipes/multi30k_en_de.yaml          # several GPUs / machines
aiayn train recipes/multi30k_en_de.yaml                                   # again, after a kill: resumes
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from ...errors import AiaynError
from .. import options

PANEL_RUN = "Run"


def train(
    recipe: Annotated[
        Path | None, typer.Argument(help="A recipe (YAML): recipes/*.yaml. Flags override its keys.")
    ] = None,
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir",
            "-o",
            rich_help_panel=PANEL_RUN,
            help="Where checkpoints, metrics and the resolved recipe go.",
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option("--tokenizer", rich_help_panel=PANEL_RUN, help="The folder written by `aiayn train-tokenizer`."),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            rich_help_panel=PANEL_RUN,
            help="Continue from this checkpoint. Default: the newest checkpoint in --output-dir if it holds this run.",
        ),
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option("--preset", rich_help_panel=PANEL_RUN, help="Model size: base, big (Table 3), small, tiny."),
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", rich_help_panel=PANEL_RUN, help="Stop after this many optimizer steps.")
    ] = None,
    max_epochs: Annotated[
        int | None, typer.Option("--max-epochs", rich_help_panel=PANEL_RUN, help="Stop after this many epochs.")
    ] = None,
    max_time: Annotated[
        str | None,
        typer.Option(
            "--max-time", rich_help_panel=PANEL_RUN, help="Stop after this much training: minutes, or 90m, 1.5h, 3600s."
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-tokens", rich_help_panel=PANEL_RUN, help="Tokens per batch and process, padding included."),
    ] = None,
    update_freq: Annotated[
        int | None,
        typer.Option("--update-freq", rich_help_panel=PANEL_RUN, help="Batches accumulated per optimizer step."),
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", rich_help_panel=PANEL_RUN, help="The run's seed.")] = None,
    mixed_precision: Annotated[
        str | None,
        typer.Option(
            "--mixed-precision",
            rich_help_panel=PANEL_RUN,
            help="auto (bf16 where the device computes it natively: AVX512-BF16, AMX, Ampere+; else fp32), "
            "no (fp32), fp16, bf16, or null (what accelerate launch / accelerate config say). Default: the recipe's, auto.",
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
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", rich_help_panel=PANEL_RUN, help="Show a progress bar on stderr.")
    ] = True,
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
    """Train a Transformer with the paper's recipe (§5): Adam, warmup + inverse square root, label smoothing."""
    from ...training.recipe import load_recipe
    from ...training.trainer import quiet_libraries
    from ...training.trainer import train as run_training

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
        "output_dir": output_dir,
        "tokenizer": tokenizer,
        "model.preset": preset,
        "max_steps": max_steps,
        "max_epochs": max_epochs,
        "max_time": max_time,
        "max_tokens": max_tokens,
        "update_freq": update_freq,
        "seed": seed,
        "mixed_precision": mixed_precision,
        "compile": compile,
        "data.dataset_config": dataset_config,
        "data.source_lang": source_lang,
        "data.target_lang": target_lang,
    }
    overrides.update({k: str(v) if isinstance(v, Path) else v for k, v in flags.items() if v is not None})
    if mixed_precision == "null":  # accelerate config / accelerate launch decide
        overrides["mixed_precision"] = None
    if recipe is None and not overrides:
        raise AiaynError("give a recipe (recipes/*.yaml) or the keys as flags")
    resolved = load_recipe(recipe, overrides)
    quiet_libraries()
    result = run_training(resolved, resume=resume, show_progress=progress)
    _report(result)


def _set_overrides(values: list[str]) -> dict[str, Any]:
    overrides = {}
    for item in values:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise AiaynError(f"--set {item}: expected KEY=VALUE, e.g. --set lr_scale=2")
        try:
            overrides[key.strip()] = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            raise AiaynError(f"--set {item}: the value is not valid YAML") from None
    return overrides


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
