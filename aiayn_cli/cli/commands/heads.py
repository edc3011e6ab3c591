"""`aiayn heads`: which heads of the three kinds of attention matter, measured on held-out pairs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ...data.spec import DataSpec
from ...errors import AiaynError
from ...lookup import check_hub_model
from .. import options

MEASURE = "Measurement"


@options.with_data_options()
def heads(
    model: options.ModelOpt = ...,
    output: Annotated[Path, options.report_dir_option("heads")] = Path("heads"),
    data: DataSpec | None = None,
    split: options.HeldOutSplitOpt = "validation",
    sample: Annotated[
        int,
        typer.Option(
            "--sample-size",
            min=1,
            metavar="N",
            rich_help_panel=MEASURE,
            help="The first N pairs of the split (fewer: faster).",
        ),
    ] = 500,
    importance: Annotated[
        str,
        typer.Option(
            "--importance",
            metavar="loss|gradient",
            rich_help_panel=MEASURE,
            help="The pruning order: loss (the validation loss increase when the head alone is masked) or "
            "gradient (Michel et al., 2019: E|dL/dm_h|).",
        ),
    ] = "loss",
    max_bleu_drop: Annotated[
        float,
        typer.Option(
            "--max-bleu-drop",
            min=0.0,
            metavar="X",
            rich_help_panel=MEASURE,
            help="Prune until sacreBLEU has fallen by more than this many points.",
        ),
    ] = 1.0,
    num_beams: Annotated[
        int | None,
        typer.Option(
            "--beam",
            "-b",
            min=1,
            metavar="N",
            rich_help_panel=MEASURE,
            help="Beam size of the translations scored by BLEU [default: the model's generation_config].",
            show_default=False,
        ),
    ] = None,
    device: Annotated[str, options.device_option()] = "auto",
    precision: Annotated[
        options.Precision,
        options.precision_option(),
    ] = options.PRECISION,
    overwrite: Annotated[bool, options.overwrite_option("heads")] = False,
) -> None:
    """Measure every head: what it attends to, the loss and BLEU without it, and how many can go.

    \b
    aiayn heads -m runs/multi30k_en_de/averaged --data-dir DATA -s en -t de -o heads
    aiayn heads -m aiayn-quickstart/run/averaged --data-dir aiayn-quickstart/data -s en -t de --beam 1
    """
    check_hub_model(model)  # before the libraries load: a missing folder is one line at once
    from ...decoding.translator import Translator
    from ...files import check_output_files
    from ...inspection.head_figures import summary, table, write_head_report
    from ...inspection.heads import IMPORTANCE, load_sample, measure_heads

    if importance not in IMPORTANCE:
        raise AiaynError(f"{importance}: choose one of {', '.join(IMPORTANCE)}", key="importance")
    check_output_files(output, ["heads.json", "heads.md"], overwrite=overwrite, key="output")  # before the work
    translator = Translator.from_pretrained(model, device=device, dtype=precision)
    pairs = load_sample(translator, data, split, sample)
    report = measure_heads(
        translator,
        pairs,
        importance=importance,
        max_bleu_drop=max_bleu_drop,
        progress=lambda line: typer.echo(line, err=True),
        num_beams=num_beams,
    )
    report.settings.update(model=model, dtype=str(translator.model.dtype).removeprefix("torch."))
    written = write_head_report(report, output, overwrite=overwrite)
    typer.echo(table(report))
    typer.echo("What to notice:")
    for line in summary(report):
        typer.echo(f"  - {line}")
    for path in written:
        typer.echo(f"wrote {path}", err=True)
