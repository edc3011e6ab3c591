"""`aiayn evaluate`: score translations with sacreBLEU, chrF and TER (and the paper's BLEU)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ...errors import AiaynError
from ...evaluation.scoring import (
    METRICS,
    check_output_path,
    format_table,
    language_from_path,
    read_parallel,
    score,
    write_json,
)
from ...files import atomic_open
from .. import options


def evaluate(
    hypotheses: Annotated[
        Path | None,
        typer.Option(
            "--hypotheses",
            "-i",
            metavar="FILE",
            help="Translations to score, one per line (UTF-8).",
            show_default=False,
        ),
    ] = None,
    references: Annotated[
        list[Path] | None,
        typer.Option(
            "--references",
            "-r",
            metavar="FILE",
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
        str | None,
        typer.Option(
            "--lang",
            metavar="LANG",
            help="Language of the references for the Moses tokenizer of --paper-bleu "
            "(default: the reference file's suffix, e.g. test2016.de -> de).",
            show_default=False,
        ),
    ] = None,
    width: Annotated[int, typer.Option("--width", min=0, max=10, help="Decimals of the printed scores.")] = 2,
    json_path: Annotated[
        Path | None,
        typer.Option("--json", metavar="FILE", help="Also write the results as JSON to this file.", show_default=False),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            metavar="PATH_OR_HUB_ID",
            help="Translate the sources of the data split with this model (the paper's beam search) and "
            "score the translations.",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", metavar="FILE", help="With --model: also write the translations here.", show_default=False
        ),
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
    split: Annotated[str, typer.Option("--split", help="The data split to score on (with data options).")] = "test",
) -> None:
    """Score translations against references: files, a dataset split, or a model translating that split.

    \b
    aiayn evaluate -i hyp.de -r ref.de                                   # two files
    aiayn evaluate -i hyp.de --data-dir DATA -s en -t de --split test    # references from a split
    aiayn evaluate --model MODEL --data-dir DATA -s en -t de --split test  # translate, then score
    """
    if json_path is not None:
        check_output_path(json_path)
    data_given = any(v is not None for v in (dataset, data_dir, prefix, source_file, target_file, data_file))
    if data_given:
        if references:
            raise AiaynError("give --references or data options (--data-dir, --dataset, ...), not both")
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
        hyps, refs, inputs, file_lang = _split_inputs(spec, split, hypotheses, model, output)
    elif model is not None:
        raise AiaynError("--model needs data options (e.g. --data-dir DIR -s en -t de --split test) to translate")
    else:
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


def _split_inputs(spec, split: str, hypotheses: Path | None, model: str | None, output: Path | None):
    """References from a data split; hypotheses from a file, or translated from the split by a model."""
    from ...data.corpus import load_split

    if (hypotheses is None) == (model is None):
        raise AiaynError("with data options give either --hypotheses FILE or --model PATH_OR_HUB_ID")
    data = load_split(spec, split)
    report = getattr(data, "cleaning_report", None)
    if report is not None:
        typer.echo(str(report), err=True)
    refs = [[ref] for ref in data["target"]]
    inputs = {
        "data": str(spec.dataset or spec.data_dir or spec.prefix or spec.data_file or spec.target_file),
        "split": split,
    }
    if model is not None:
        from ...decoding.translator import Translator

        if output is not None:
            check_output_path(output)
        hyps = Translator.from_pretrained(model).translate(list(data["source"]), progress=True, source=split)
        inputs["model"] = model
        if output is not None:
            with atomic_open(output) as out:
                out.writelines(line + "\n" for line in hyps)
            inputs["hypotheses"] = str(output)
    else:
        hyps = _read_hypotheses(hypotheses, len(refs), split)
        inputs["hypotheses"] = str(hypotheses)
    return hyps, refs, inputs, spec.target_lang


def _read_hypotheses(path: Path, expected: int, split: str) -> list[str]:
    from ...evaluation.scoring import read_lines

    hyps = read_lines(path)
    if len(hyps) != expected:
        raise AiaynError(f"{path} has {len(hyps)} lines but the {split} split has {expected} references")
    return hyps


def _inputs(hypotheses: Path | None, references: list[Path] | None):
    """Hypotheses, references (per segment), a description of where they came from, and the
    references' language where their file name tells it."""
    if hypotheses is None:
        raise AiaynError("--hypotheses FILE is required (the translations to score, one per line)")
    if not references:
        raise AiaynError("--references FILE is required (the reference translations, one per line)")
    hyps, refs = read_parallel(hypotheses, references)
    inputs = {"hypotheses": str(hypotheses), "references": [str(path) for path in references]}
    return hyps, refs, inputs, language_from_path(references[0])
