"""`aiayn evaluate`: score translations with sacreBLEU, chrF and TER (and the paper's BLEU)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ...decoding.defaults import BATCH_SIZE, MAX_TOKENS
from ...errors import AiaynError
from ...evaluation.scoring import METRICS
from ...precision import inference_precision
from .. import options

TRANSLATING = "Translating (with --model)"


@options.with_decoding_options(
    exclude=("nbest",), panel="Decoding (with --model; default: the model's generation_config)"
)
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
    width: Annotated[
        int, typer.Option("--width", min=0, max=10, metavar="N", help="Decimals of the printed scores.")
    ] = 2,
    json_path: Annotated[
        Path | None,
        typer.Option("--json", metavar="FILE", help="Also write the results as JSON to this file.", show_default=False),
    ] = None,
    model: Annotated[
        str | None,
        options.model_option(
            "Translate the sources of the data split with this model (a folder or Hub id; its generation_config's "
            "search, the paper's beam search) and score the translations."
        ),
    ] = None,
    output: Annotated[Path | None, options.output_option("With --model: also write the translations here.")] = None,
    length_penalty_grid: Annotated[
        str | None,
        typer.Option(
            "--length-penalty-grid",
            metavar="ALPHAS",
            help="With --model: choose the length penalty alpha on the split, as the paper did on its development "
            "set: one beam search re-ranked under each of these comma-separated alphas (e.g. 0.6,1,1.5,2); the "
            "best alpha's translations are scored. Choose on validation, not on the test split.",
            show_default=False,
        ),
    ] = None,
    save_length_penalty: Annotated[
        bool,
        typer.Option(
            "--save-length-penalty",
            help="With --length-penalty-grid: write the chosen alpha into the model folder's generation_config.json.",
        ),
    ] = False,
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
        str, typer.Option("--split", metavar="SPLIT", help="The data split to score on (with data options).")
    ] = "test",
    engine: Annotated[str, options.engine_option(TRANSLATING)] = "torch",
    device: Annotated[str, options.device_option(TRANSLATING)] = "auto",
    precision: Annotated[options.Precision, options.precision_option(panel=TRANSLATING)] = options.PRECISION,
    quantization: Annotated[options.Quantization, options.quantization_option(TRANSLATING)] = "none",
    max_tokens: Annotated[int, options.max_tokens_option(TRANSLATING)] = MAX_TOKENS,
    batch_size: Annotated[int, options.batch_size_option(TRANSLATING)] = BATCH_SIZE,
    progress: Annotated[bool | None, options.progress_option(TRANSLATING)] = None,
    decoding: dict | None = None,
) -> None:
    """Score translations against references: files, a dataset split, or a model translating that split.

    \b
    aiayn evaluate -i hyp.de -r ref.de                                   # two files
    aiayn evaluate -i hyp.de --data-dir DATA -s en -t de --split test    # references from a split
    aiayn evaluate --model MODEL --data-dir DATA -s en -t de --split test  # translate, then score
    aiayn evaluate --model MODEL --data-dir DATA -s en -t de --split validation \\
        --length-penalty-grid 0.6,1,1.5,2 --save-length-penalty   # choose alpha (§6.1)
    """
    from ...evaluation.inputs import inputs_from_files, inputs_from_split
    from ...evaluation.scoring import format_table, score, write_json

    _check_outputs(
        {"json_path": json_path, "output": output},
        [*([hypotheses] if hypotheses else []), *(references or []), source_file, target_file, data_file, prefix],
    )
    _check_not_the_hypotheses(hypotheses, references)
    if output is not None and model is None:
        raise AiaynError("writes the translations of {model}; without it there is nothing to write",
                         key="output", mentions=("model",))  # fmt: skip
    grid = _alphas(length_penalty_grid) if length_penalty_grid is not None else None
    if save_length_penalty:
        if grid is None:
            raise AiaynError("needs {length_penalty_grid}, the alphas to choose from",
                             key="save_length_penalty", mentions=("length_penalty_grid",))  # fmt: skip
        if model is not None and not Path(model).is_dir():
            raise AiaynError(f"writes into a local model folder; {model} is not one", key="save_length_penalty")
    options.check_engine(engine)
    given = [key for key, value in (decoding or {}).items() if value is not None]
    if model is None and (engine != "torch" or given):
        raise AiaynError("decodes with {model}; without it nothing is decoded",
                         key="engine" if engine != "torch" else given[0], mentions=("model",))  # fmt: skip
    data_given = any(v is not None for v in (dataset, data_dir, prefix, source_file, target_file, data_file))
    if data_given:
        if references:
            raise AiaynError("give {references} or data options ({data_dir}, {dataset}, ...), not both",
                             mentions=("references", "data_dir", "dataset"))  # fmt: skip
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
        from ...data.corpus import split_files

        _check_outputs({"json_path": json_path, "output": output}, split_files(spec, split))
        if grid is not None and "test" in split.lower():
            typer.echo(f"warning: choosing alpha on the {split} split makes its score optimistic; "
                       "choose on the validation split, then score the test split", err=True)  # fmt: skip
        translating = {k: v for k, v in (decoding or {}).items() if v is not None}
        if grid is not None and "length_penalty" in translating:
            raise AiaynError("chooses alpha; leave out {length_penalty}",
                             key="length_penalty_grid", mentions=("length_penalty",))  # fmt: skip
        inputs = inputs_from_split(
            spec,
            split,
            hypotheses=hypotheses,
            model=model,
            output=output,
            length_penalty_grid=grid,
            engine=engine,
            progress=options.show_progress(progress),
            device=device,
            dtype=inference_precision(precision, quantization),
            decoding={**translating, "max_tokens": max_tokens, "batch_size": batch_size},
        )
        if inputs.cleaning_report:
            typer.echo(inputs.cleaning_report, err=True)
        if inputs.length_penalty is not None:
            typer.echo(f"{model}: {inputs.length_penalty.describe()}", err=True)
            if save_length_penalty:
                from ...evaluation.length_penalty import save_length_penalty as save

                save(model, inputs.length_penalty.alpha)
                typer.echo(f"wrote length_penalty {inputs.length_penalty.alpha:g} into "
                           f"{Path(model) / 'generation_config.json'}", err=True)  # fmt: skip
    elif grid is not None:
        raise AiaynError("needs {model} and data options (e.g. --model MODEL --data-dir DIR -s en -t de "
                         "--split validation)", key="length_penalty_grid", mentions=("model",))  # fmt: skip
    elif model is not None:
        raise AiaynError("needs data options (e.g. --data-dir DIR -s en -t de --split test) to translate", key="model")
    else:
        if hypotheses is None:
            raise AiaynError("is required (the translations to score, one per line)", key="hypotheses")
        if not references:
            raise AiaynError("is required (the reference translations, one per line)", key="references")
        inputs = inputs_from_files(hypotheses, references)
    if paper_bleu and lang is None:
        lang = inputs.language
        if lang is None:
            raise AiaynError(
                "--paper-bleu needs --lang (the references' language, e.g. de): "
                f"it cannot be read from the file name {inputs.description['references'][0]}"
            )
    chosen = [name.strip() for name in metrics.split(",") if name.strip()]
    scores = score(inputs.hypotheses, inputs.references, metrics=chosen, paper_bleu=paper_bleu, lang=lang, width=width)
    results = {"inputs": inputs.description, **scores}
    typer.echo(format_table(results))
    if json_path is not None:
        write_json(results, json_path)
        typer.echo(f"wrote {json_path}", err=True)


def _alphas(text: str) -> list[float]:
    """`--length-penalty-grid`'s comma-separated alphas, each a number >= 0."""
    alphas = []
    for item in text.split(","):
        try:
            alpha = float(item)
        except ValueError:
            raise AiaynError(f"{item.strip()!r} is not a number (give alphas such as 0.6,1,1.5)",
                             key="length_penalty_grid") from None  # fmt: skip
        if not alpha >= 0 or alpha == float("inf"):
            raise AiaynError(f"{item.strip()} is not a finite number >= 0", key="length_penalty_grid")
        alphas.append(alpha)
    return alphas


def _check_not_the_hypotheses(hypotheses: Path | None, references: list[Path] | None) -> None:
    """A reference file that is the hypotheses file itself would score 100 for nothing."""
    for reference in references or []:
        if hypotheses is not None and _same_file(hypotheses, reference):
            raise AiaynError(f"{reference} is the {{hypotheses}} file itself; score against other references",
                             key="references", mentions=("hypotheses",))  # fmt: skip


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:  # one is missing (or a link loop): the reader names it
        return os.path.realpath(a) == os.path.realpath(b)


def _check_outputs(outputs: dict[str, Path | None], inputs: list) -> None:
    """Before any work: each output can be written as a file and is none of the input files (which it
    would replace), and no two outputs are the same file."""
    from ...files import check_output_file

    given = {key: check_output_file(path, inputs, key=key) for key, path in outputs.items() if path is not None}
    if len(given) == 2 and len({os.path.realpath(p) for p in given.values()}) == 1:
        raise AiaynError("{output} and {json_path} name the same file; give two", mentions=("output", "json_path"))
