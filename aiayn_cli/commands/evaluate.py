"""`aiayn evaluate`: score translations with sacreBLEU, chrF and TER (and the paper's BLEU)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import AiaynError
from ..evaluation import METRICS, check_output_path, format_table, language_from_path, read_parallel, score, write_json


def evaluate(
    hypotheses: Annotated[
        Optional[Path],
        typer.Option("--hypotheses", "-i", metavar="FILE", help="Translations to score, one per line (UTF-8).", show_default=False),
    ] = None,
    references: Annotated[
        Optional[list[Path]],
        typer.Option(
            "--references", "-r", metavar="FILE",
            help="Reference translations, line-aligned with the hypotheses; repeat for several references.",
            show_default=False,
        ),
    ] = None,
    metrics: Annotated[
        str, typer.Option("--metrics", metavar="NAMES", help=f"Comma-separated metrics, any of: {', '.join(METRICS)}.")
    ] = ",".join(METRICS),
    paper_bleu: Annotated[
        bool,
        typer.Option(
            "--paper-bleu",
            help="Also report tokenized BLEU with compound splitting (Moses tokenizer, ##AT##-##AT##, "
            "multi-bleu), the convention of the paper's 27.3 / 28.4. NOT comparable with sacreBLEU.",
        ),
    ] = False,
    lang: Annotated[
        Optional[str],
        typer.Option(
            "--lang", metavar="LANG",
            help="Language of the references for the Moses tokenizer of --paper-bleu "
            "(default: the reference file's suffix, e.g. test2016.de -> de).",
            show_default=False,
        ),
    ] = None,
    width: Annotated[int, typer.Option("--width", min=0, max=10, help="Decimals of the printed scores.")] = 2,
    json_path: Annotated[
        Optional[Path], typer.Option("--json", metavar="FILE", help="Also write the results as JSON to this file.", show_default=False)
    ] = None,
) -> None:
    """Score hypotheses against references; prints a table with sacreBLEU signatures."""
    if json_path is not None:
        check_output_path(json_path)
    hyps, refs, inputs, file_lang = _inputs(hypotheses, references)
    if paper_bleu and lang is None:
        lang = file_lang
        if lang is None:
            raise AiaynError(
                "--paper-bleu needs --lang (the references' language, e.g. de): "
                f"it cannot be read from the file name {inputs['references'][0]}"
            )
    chosen = [name.strip() for name in metrics.split(",") if name.strip()]
    results = {"inputs": inputs, **score(hyps, refs, metrics=chosen, paper_bleu=paper_bleu, lang=lang, width=width)}
    typer.echo(format_table(results))
    if json_path is not None:
        write_json(results, json_path)
        typer.echo(f"wrote {json_path}", err=True)


def _inputs(hypotheses: Optional[Path], references: Optional[list[Path]]):
    """Hypotheses, references (per segment), a description of where they came from, and the
    references' language where their file name tells it."""
    if hypotheses is None:
        raise AiaynError("--hypotheses FILE is required (the translations to score, one per line)")
    if not references:
        raise AiaynError("--references FILE is required (the reference translations, one per line)")
    hyps, refs = read_parallel(hypotheses, references)
    inputs = {"hypotheses": str(hypotheses), "references": [str(path) for path in references]}
    return hyps, refs, inputs, language_from_path(references[0])
