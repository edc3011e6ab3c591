"""`aiayn attention`: see the three kinds of attention of a trained model (§3.2.3)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ...errors import AiaynError
from ...lookup import check_hub_model
from .. import options

NARROW = "Narrowing and merging"
TRAINING = "Over training"


@options.with_decoding_options(exclude=("nbest",))
def attention(
    sentences: Annotated[
        list[str] | None, typer.Argument(metavar="SENTENCE...", help="Source sentences to explain.", show_default=False)
    ] = None,
    model: options.ModelOpt = None,
    input: Annotated[
        Path | None,
        typer.Option("--input", "-i", metavar="FILE", help="Source sentences, one per line.", show_default=False),
    ] = None,
    reference: Annotated[
        list[str] | None,
        typer.Option(
            "--reference",
            metavar="TEXT",
            help="A reference translation per sentence (repeat the option): explain it by teacher forcing "
            "instead of the model's own translation.",
            show_default=False,
        ),
    ] = None,
    reference_file: Annotated[
        Path | None,
        typer.Option(
            "--references",
            metavar="FILE",
            help="Reference translations, one per line, as many as sentences (instead of --reference).",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        options.output_dir_option(
            "Write the files here (created if missing, in a folder that exists; other files there stay, files of the "
            "same names are replaced only where aiayn attention wrote them); text and align go to standard output "
            "without it."
        ),
    ] = None,
    formats: Annotated[
        list[str] | None,
        typer.Option(
            "--format",
            "-f",
            metavar="FORMAT",
            help="png (heatmap grids), html (the offline explorer), text (OpenNMT's -attn_debug table), json "
            "(every tensor, for notebooks and bertviz), align (i-j word alignments); repeat for several "
            "[default: png and html with -o, text without].",
            show_default=False,
        ),
    ] = None,
    kinds: Annotated[
        list[str] | None,
        typer.Option(
            "--kind",
            metavar="KIND",
            rich_help_panel=NARROW,
            help="encoder, decoder or cross (encoder-decoder); repeat for several [default: all three].",
            show_default=False,
        ),
    ] = None,
    layer: Annotated[
        int | None,
        typer.Option(
            "--layer", metavar="N", rich_help_panel=NARROW, help="Only this layer (from 1).", show_default=False
        ),
    ] = None,
    head: Annotated[
        int | None,
        typer.Option(
            "--head", metavar="N", rich_help_panel=NARROW, help="Only this head (from 1).", show_default=False
        ),
    ] = None,
    mean_heads: Annotated[
        bool, typer.Option("--mean-heads", rich_help_panel=NARROW, help="Average the heads of each layer.")
    ] = False,
    words: Annotated[
        bool,
        typer.Option(
            "--words",
            rich_help_panel=NARROW,
            help="Merge subwords into words: attention to a word is the sum over its pieces, from a word the mean.",
        ),
    ] = False,
    hide_eos: Annotated[
        bool, typer.Option("--hide-eos", rich_help_panel=NARROW, help="Leave out </s> (it soaks up attention).")
    ] = False,
    alignment_layer: Annotated[
        int | None,
        typer.Option(
            "--alignment-layer",
            metavar="N",
            rich_help_panel=NARROW,
            help="The decoder layer whose averaged heads give --format align (from 1; -1 the last) "
            "[default: the last, the best measured].",
            show_default=False,
        ),
    ] = None,
    device: Annotated[str, options.device_option()] = "auto",
    precision: Annotated[
        options.Precision,
        options.precision_option(),
    ] = options.PRECISION,
    checkpoints: Annotated[
        Path | None,
        typer.Option(
            "--checkpoints",
            metavar="RUN",
            rich_help_panel=TRAINING,
            help="A run folder of aiayn train instead of --model: every checkpoint (history/ included), the "
            "pattern of --kind/--layer/--head (default: the last layer's encoder-decoder attention, heads "
            "averaged) and the AER of each layer against the step.",
            show_default=False,
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            metavar="FOLDER",
            rich_help_panel=TRAINING,
            help="With --checkpoints: a folder with {split}.align (true alignments) [default: the run's data].",
            show_default=False,
        ),
    ] = None,
    source_lang: Annotated[
        str | None,
        typer.Option("--source-lang", "-s", metavar="LANG", rich_help_panel=TRAINING, help="With --data-dir."),
    ] = None,
    target_lang: Annotated[
        str | None,
        typer.Option("--target-lang", "-t", metavar="LANG", rich_help_panel=TRAINING, help="With --data-dir."),
    ] = None,
    split: Annotated[
        str,
        typer.Option(
            "--split", metavar="SPLIT", rich_help_panel=TRAINING, help="With --checkpoints: the held-out pairs for AER."
        ),
    ] = "test",
    sample: Annotated[
        int,
        typer.Option(
            "--sample-size", min=1, metavar="N", rich_help_panel=TRAINING, help="With --checkpoints: pairs for AER."
        ),
    ] = 200,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Replace files in --output-dir that aiayn attention did not write (or that were edited).",
        ),
    ] = False,
    decoding: dict | None = None,
) -> None:
    """Show the model's attention for sentences: its own translation, or a reference (--reference).

    \b
    aiayn attention -m MODEL "A dog sleeps." -o attention                  # png and the explorer
    aiayn attention --checkpoints aiayn-quickstart/run -o over-training   # AER and a pattern per step
    """
    if checkpoints is not None:
        _over_training(checkpoints, sentences, reference, output, kinds, layer, head, data_dir,
                       (source_lang, target_lang), split, sample, overwrite)  # fmt: skip
        return
    if model is None:
        raise AiaynError("is required (or --checkpoints RUN)", key="model")
    check_hub_model(model)  # before the libraries load: a missing folder or file is one line at once
    for flag, path in (("--input", input), ("--references", reference_file)):
        if path is not None and str(path) != "-" and not Path(path).exists():
            raise AiaynError(f"{flag} {path}: no such file")
    from ...inspection.report import AttentionRequest, attention_report

    if not formats:
        formats = ["png", "html"] if output is not None else ["text"]
    request = AttentionRequest(
        model=model,
        sentences=sentences,
        input=input,
        references=reference,
        reference_file=reference_file,
        output=output,
        formats=tuple(formats),
        kinds=tuple(kinds) if kinds else ("encoder", "decoder", "cross"),
        layer=layer,
        head=head,
        mean_heads=mean_heads,
        words=words,
        hide_eos=hide_eos,
        alignment_layer=alignment_layer,
        device=device,
        precision=precision,
        decoding={k: v for k, v in (decoding or {}).items() if v is not None},
        overwrite=overwrite,
    )
    written, text = attention_report(request)
    if text:
        typer.echo(text, nl=False)
    for path in written:
        typer.echo(f"wrote {path}", err=True)
    if any(p.suffix == ".html" for p in written):
        typer.echo(
            "open explorer.html in a browser (it works offline): choose a sentence, kind, layer and head, "
            "then click a token to see where it attends and eq. (1) with the model's numbers",
            err=True,
        )


def _over_training(
    run, sentences, references, output, kinds, layer, head, data_dir, langs, split, sample, overwrite
) -> None:
    from ...files import check_output_files
    from ...inspection.history import history_report

    if kinds and len(kinds) > 1:
        raise AiaynError("with --checkpoints: give one --kind", key="kinds")
    if output is not None:
        check_output_files(output, ["over_training.json", "over_training.md"], overwrite=overwrite, key="output")
    written, text = history_report(
        run, output, sentences=sentences, references=references, kind=kinds[0] if kinds else "cross",
        layer=layer, head=head, data_dir=data_dir, langs=langs, split=split, size=sample,
        progress=lambda line: typer.echo(line, err=True), overwrite=overwrite,
    )  # fmt: skip
    typer.echo(text, nl=False)
    for path in written:
        typer.echo(f"wrote {path}", err=True)
