"""`aiayn layers`: what the decoder would predict after each of its layers, and how each layer aligns."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ...data.spec import DataSpec
from ...errors import AiaynError
from ...lookup import check_hub_model
from .. import options


@options.with_data_options(need="optional")
def layers(
    sentence_argument: Annotated[
        str | None,
        typer.Argument(
            metavar="SENTENCE",
            help="A source sentence to show layer by layer (as translate and attention take it), against --reference "
            "or else the model's own translation; without data options, the table is of this sentence alone.",
            show_default=False,
        ),
    ] = None,
    model: options.ModelOpt = ...,
    output: Annotated[Path, options.report_dir_option("layers")] = Path("layers"),
    sentence: Annotated[
        str | None,
        typer.Option(
            "--sentence",
            metavar="TEXT",
            help="A source sentence to show layer by layer (with --reference) [default: the split's first pair].",
            show_default=False,
        ),
    ] = None,
    reference: Annotated[
        str | None,
        typer.Option("--reference", metavar="TEXT", help="Its reference translation.", show_default=False),
    ] = None,
    data: DataSpec | None = None,
    split: options.HeldOutSplitOpt = "validation",
    sample: Annotated[
        int | None,
        typer.Option(
            "--sample-size",
            min=1,
            metavar="N",
            help="The first N pairs of the split [default: all].",
            show_default=False,
        ),
    ] = None,
    device: Annotated[str, options.device_option()] = "auto",
    overwrite: Annotated[bool, options.overwrite_option("layers")] = False,
) -> None:
    """Show each decoder layer's prediction (through the output projection) and alignment, in fp32 (every command's default).

    \b
    aiayn layers -m runs/multi30k_en_de/averaged "A dog runs through the grass."
    aiayn layers -m runs/multi30k_en_de/averaged --data-dir DATA -s en -t de -o layers
    aiayn layers -m aiayn-quickstart/run/averaged --data-dir aiayn-quickstart/data -s en -t de --split test
    (AER per layer where the split has true alignments, {split}.align, as the quickstart's data has)
    """
    check_hub_model(model)  # before the libraries load: a missing folder is one line at once
    from ...decoding.translator import Translator
    from ...files import check_output_files
    from ...inspection.layer_figures import summary, table, write_layer_report
    from ...inspection.layers import inspect_layers

    if sentence_argument is not None:
        if sentence is not None:
            raise AiaynError("and a SENTENCE: give the sentence once", key="sentence")
        sentence = sentence_argument
    elif (sentence is None) != (reference is None):
        raise AiaynError("{sentence} and {reference} go together: give both", mentions=("sentence", "reference"))
    if sentence is None and data is None:
        raise AiaynError('give a SENTENCE (aiayn layers -m MODEL "A dog runs.") or data options '
                         "(--data-dir DIR -s en -t de --split validation)")  # fmt: skip
    check_output_files(output, ["layers.json", "layers.md"], overwrite=overwrite, key="output")  # before the work
    translator = Translator.from_pretrained(model, device=device, dtype=options.PRECISION)
    report, grid = inspect_layers(translator, data, split, sample, sentence, reference)
    report.settings = {"model": model, **report.settings}
    written = write_layer_report(report, grid, output, overwrite=overwrite)
    typer.echo(table(report))
    typer.echo("What to notice:")
    for line in summary(report, grid):
        typer.echo(f"  - {line}")
    for path in written:
        typer.echo(f"wrote {path}", err=True)
