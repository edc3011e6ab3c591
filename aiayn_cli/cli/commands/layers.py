"""`aiayn layers`: what the decoder would predict after each of its layers, and how each layer aligns."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ...errors import AiaynError
from .. import options


def layers(
    model: options.ModelOpt = ...,
    output: Annotated[
        Path,
        options.output_dir_option(
            "Where layers.md, layers.json and the figures go (created if missing; other files there stay).",
            show_default=True,
        ),
    ] = Path("layers"),
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
    dataset: options.DatasetOpt = None,
    dataset_config: options.DatasetConfigOpt = None,
    data_dir: options.DataDirOpt = None,
    prefix: options.PrefixOpt = None,
    source_file: options.SourceFileOpt = None,
    target_file: options.TargetFileOpt = None,
    data_file: options.DataFileOpt = None,
    source_lang: options.SourceLangOpt = None,
    target_lang: options.TargetLangOpt = None,
    split: Annotated[
        str,
        typer.Option(
            "--split", metavar="SPLIT", rich_help_panel=options.PANEL, help="The held-out split to measure on."
        ),
    ] = "validation",
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
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite", help="Replace files in --output-dir that aiayn layers did not write (or that were edited)."
        ),
    ] = False,
) -> None:
    """Show each decoder layer's prediction (through the output projection) and alignment, in fp32 (every command's default).

    \b
    aiayn layers -m runs/multi30k_en_de/averaged --data-dir DATA -s en -t de -o layers
    aiayn layers -m aiayn-quickstart/run/averaged --data-dir aiayn-quickstart/data -s en -t de --split test
    (AER per layer where the split has true alignments, {split}.align, as the quickstart's data has)
    """
    from ...decoding.translator import Translator
    from ...files import check_output_files
    from ...inspection.heads import load_sample
    from ...inspection.layer_figures import summary, table, write_layer_report
    from ...inspection.layers import alignment_by_layer, alignment_file, layer_predictions, measure_layers

    if (sentence is None) != (reference is None):
        raise AiaynError("{sentence} and {reference} go together: give both", mentions=("sentence", "reference"))
    check_output_files(output, ["layers.json", "layers.md"], overwrite=overwrite, key="output")  # before the work
    spec = options.data_spec(
        dataset=dataset,
        dataset_config=dataset_config,
        data_dir=data_dir,
        prefix=prefix,
        source_file=source_file,
        target_file=target_file,
        data_file=data_file,
        source_lang=source_lang,
        target_lang=target_lang,
    )
    translator = Translator.from_pretrained(model, device=device, dtype=options.PRECISION)
    pairs = load_sample(translator, spec, split, sample)
    report = measure_layers(translator.model, pairs)
    align_path = alignment_file(spec, split)
    if align_path is not None:
        report.aer = alignment_by_layer(
            translator.model, translator.tokenizer, align_path, spec.source_lang, spec.target_lang, sample
        )
    source, target = (sentence, reference) if sentence is not None else (pairs.sources[0], pairs.references[0])
    grid = layer_predictions(translator.model, translator.tokenizer, source, target)
    report.settings = {"model": model, "split": split, "pairs": len(pairs.sources), "alignments": str(align_path)}
    written = write_layer_report(report, grid, output, overwrite=overwrite)
    typer.echo(table(report))
    typer.echo("What to notice:")
    for line in summary(report, grid):
        typer.echo(f"  - {line}")
    for path in written:
        typer.echo(f"wrote {path}", err=True)
