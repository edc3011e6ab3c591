"""`aiayn evaluate`: score translations with sacreBLEU (and BLEU on lowercased, tokenized text), chrF and
TER (and the paper's BLEU)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ...data.spec import DataSpec
from ...decoding.defaults import BATCH_SIZE, MAX_TOKENS
from ...errors import AiaynError
from ...evaluation.scoring import METRICS
from .. import options

TRANSLATING = "Translating (with --model)"


@options.with_data_options(need="optional")
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
            help="Language of the references for the Moses tokenizer of --paper-bleu and of the BLEU on lowercased, "
            "tokenized text (default: the reference file's suffix, e.g. test2016.de -> de, or the split's --target-lang).",
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
    data: DataSpec | None = None,
    split: Annotated[
        str, typer.Option("--split", metavar="SPLIT", help="The data split to score on (with data options).")
    ] = "test",
    engine: Annotated[str, options.engine_option(TRANSLATING)] = "torch",
    device: Annotated[str, options.device_option(TRANSLATING)] = "auto",
    precision: Annotated[options.Precision, options.precision_option(panel=TRANSLATING)] = "auto",
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
    from ...evaluation.run import evaluate_translations
    from ...evaluation.scoring import format_table

    grid = _alphas(length_penalty_grid) if length_penalty_grid is not None else None
    options.check_engine(engine)
    results = evaluate_translations(
        hypotheses=hypotheses,
        references=references,
        data=data,
        split=split,
        model=model,
        output=output,
        json_path=json_path,
        length_penalty_grid=grid,
        save_length_penalty=save_length_penalty,
        engine=engine,
        device=device,
        dtype=options.inference_dtype(precision, quantization),
        decoding=decoding,
        max_tokens=max_tokens,
        batch_size=batch_size,
        metrics=[name.strip() for name in metrics.split(",") if name.strip()],
        paper_bleu=paper_bleu,
        lang=lang,
        width=width,
        progress=options.show_progress(progress),
        log=lambda line: typer.echo(line, err=True),
    )
    typer.echo(format_table(results))


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
