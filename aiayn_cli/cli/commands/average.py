"""`aiayn average`: one model from the element-wise mean of checkpoints (§6.1).

aiayn average runs/base --last 5 -o runs/base/averaged        # the paper's base models
aiayn average runs/big --last 20 -o runs/big/averaged         # the big models
aiayn average runs/x/checkpoint-100 runs/x/checkpoint-200 -o avg
aiayn average runs/x --last 5 --choose -o best                # as `aiayn train` ends: chosen on validation

As fairseq's `average_checkpoints.py` and OpenNMT's `average_models.py`, it averages what it is given;
with `--choose` it makes the choice a run's end makes (`training/selection.py`): the last checkpoint,
the best one, or the average of the last k <= N of the decayed tail, whichever is best on the run's
validation split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ...errors import AiaynError
from .. import options


def average(
    names: Annotated[
        list[str],
        typer.Argument(
            metavar="CHECKPOINT...",
            help="Checkpoint folders, or with --last one run folder (the output folder of `aiayn train`).",
            show_default=False,
        ),
    ],
    output: Annotated[Path, options.output_dir_option("The new model folder (Hub format).")],
    last: Annotated[
        int | None,
        typer.Option(
            "--last",
            min=1,
            metavar="N",
            help="Average the N newest checkpoints of the run folder (paper: base 5, big 20).",
        ),
    ] = None,
    choose: Annotated[
        bool,
        typer.Option(
            "--choose",
            help="With --last: write the best on the run's validation split of the last checkpoint, the best "
            "one and the averages of the last k <= N saved after the peak learning rate (as `aiayn train` ends).",
        ),
    ] = False,
    data_dir: Annotated[
        str | None,
        typer.Option(
            "--data-dir",
            metavar="FOLDER",
            help="With --choose: the folder of the run's validation files, where it is not the recipe's.",
            show_default=False,
        ),
    ] = None,
    choose_by: Annotated[
        Literal["sample", "beam"] | None,
        typer.Option(
            "--choose-by",
            help="With --choose: compare on the run's validation sample (sample) or with the model's beam on the "
            "whole split under each alpha of the recipe's length_penalty_grid (beam: alpha chosen too). "
            "Default: the recipe's average_choose_by.",
            show_default=False,
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace --output-dir if it holds a model (never other files).")
    ] = False,
) -> None:
    """Average checkpoints element-wise into a new Hub-format model folder."""
    if any(not name.strip() for name in names):  # Path("") would be the current folder
        raise AiaynError("an empty CHECKPOINT: give checkpoint folders, or with --last a run folder")
    paths = [Path(name) for name in names]
    if (choose or data_dir is not None) and last is None:
        raise AiaynError(
            "--choose and --data-dir take a run folder and --last N (the candidates are its last checkpoints)"
        )
    if data_dir is not None and not choose:
        raise AiaynError("--data-dir is for --choose (the validation split to choose on)")
    if choose_by is not None and not choose:
        raise AiaynError("--choose-by is for --choose (what the candidates are compared on)")
    for path in paths:  # before the libraries load
        if not path.is_dir():
            raise AiaynError(f"{path}: not a checkpoint folder" if last is None else f"{path}: no such run folder")
    from ...training.checkpoint import list_checkpoints, write_averaged_checkpoint

    if last is not None:
        if len(paths) != 1:
            raise AiaynError("--last takes one run folder, not checkpoint folders")
        checkpoints = list_checkpoints(paths[0])
        if not checkpoints:
            raise AiaynError(f"{paths[0]} holds no checkpoints (checkpoint-<step> folders)")
        if len(checkpoints) < last:
            typer.echo(f"warning: {paths[0]} holds {len(checkpoints)} checkpoints, fewer than --last {last}", err=True)
        checkpoints = checkpoints[-last:]
    else:
        checkpoints = paths
        for path in checkpoints:
            if not path.is_dir():
                raise AiaynError(f"{path}: not a checkpoint folder")
    if choose:
        from ...training.checkpoint import check_average_output
        from ...training.selection import select_in_run_folder

        check_average_output(list_checkpoints(paths[0]), output, overwrite)  # before minutes of validation
        selection = select_in_run_folder(paths[0], last, data_dir, choose_by)
        typer.echo(selection.describe(), err=True)
        chosen = list(selection.chosen.checkpoints)
        written = write_averaged_checkpoint(
            chosen, output, overwrite=overwrite, details={"selection": selection.record()}
        )
        typer.echo(f"wrote {selection.chosen.name} ({', '.join(p.name for p in chosen)}) into {written}")
        alpha = selection.scores[selection.chosen.name].get("length_penalty")  # average_choose_by: beam
        if alpha is not None:
            from ...evaluation.length_penalty import save_length_penalty

            save_length_penalty(written, alpha)
            typer.echo(
                f"wrote length_penalty {alpha:g}, chosen with it, into {Path(written) / 'generation_config.json'}"
            )
        return
    written = write_averaged_checkpoint(checkpoints, output, overwrite=overwrite)
    typer.echo(f"averaged {len(checkpoints)} checkpoints ({', '.join(p.name for p in checkpoints)}) into {written}")
    typer.echo("not chosen on validation: --choose compares it with the last and the best checkpoint", err=True)
