"""`aiayn train-tokenizer`: one joint subword vocabulary for both languages (§5.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ...data.spec import DataSpec
from .. import options


@options.with_data_options(tuple(options.DATA_OPTIONS))
def train_tokenizer(
    output: Annotated[
        Path, options.output_dir_option("The folder to write tokenizer.json and tokenizer_config.json to.")
    ],
    data: DataSpec | None = None,
    split: options.SplitOpt = "train",
    vocab_size: Annotated[
        int, typer.Option("--vocab-size", metavar="N", help="Size of the joint vocabulary (paper: ~37,000).")
    ] = 37000,
    algorithm: Annotated[
        Literal["bpe", "unigram"],
        typer.Option("--algorithm", help="The subword algorithm: BPE (the paper's) or unigram."),
    ] = "bpe",
    min_frequency: Annotated[
        int, typer.Option("--min-frequency", metavar="N", help="BPE: fewest occurrences of a pair to merge it.")
    ] = 2,
    max_sentences: Annotated[
        int | None,
        typer.Option(
            "--sample-size",
            metavar="N",
            help="Take the BPE statistics from a uniform random sample of this many sentence pairs "
            "(memory grows with the sample, not the corpus; SentencePiece's input_sentence_size).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="Seed of the --sample-size sample.")] = 0,
    model_max_length: Annotated[
        int,
        typer.Option(
            "--model-max-length", metavar="N", help="Longest input in tokens, recorded in tokenizer_config.json."
        ),
    ] = 1024,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace --output-dir if it exists.")] = False,
    progress: Annotated[bool | None, options.progress_option()] = None,
) -> None:
    """Train the shared BPE (or unigram) vocabulary of both languages; it loads with AutoTokenizer."""
    from ...data.tokenization import check_output_dir, corpus_inputs
    from ...data.tokenization import train_tokenizer as train_joint_tokenizer

    check_output_dir(output, overwrite, corpus_inputs(data, split))  # before reading a corpus that may be large
    tokenizer = train_joint_tokenizer(
        data,
        split=split,
        vocab_size=vocab_size,
        model=algorithm,
        min_frequency=min_frequency,
        max_sentences=max_sentences,
        seed=seed,
        output_dir=output,
        overwrite=overwrite,
        model_max_length=model_max_length,
        show_progress=options.show_progress(progress),
    )
    if tokenizer.cleaning_report is not None:
        typer.echo(tokenizer.cleaning_report, err=True)
    typer.echo(f"wrote a {algorithm} tokenizer of {len(tokenizer)} tokens to {output}")
