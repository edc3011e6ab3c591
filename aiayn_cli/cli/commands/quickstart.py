"""`aiayn quickstart`: the whole pipeline on a generated corpus, then the commands for real data."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import options

NEXT_STEPS = """\
The same steps on real data, from any folder (Multi30k from the Hub: bentrevett/multi30k):
  aiayn train multi30k_en_de                                 # its tokenizer first, then 60 minutes of training
  aiayn evaluate --model runs/multi30k_en_de/averaged --dataset bentrevett/multi30k -s en -t de --split test
  aiayn train multi30k_en_de --data-dir DATA                 # or a local folder of train.en, train.de, ...
  accelerate launch -m aiayn_cli train wmt14_en_de_base      # the paper's base model
  aiayn recipes                                              # every shipped recipe"""


def quickstart(
    output_dir: Annotated[
        Path, options.output_dir_option("Where the corpus, tokenizer and run go.", show_default=True)
    ] = Path("aiayn-quickstart"),
    steps: Annotated[
        int | None,
        typer.Option(
            "--steps",
            min=1,
            metavar="N",
            help="Training steps (default: the quickstart recipe's 1,000): the same model on a busy machine as on an idle one.",
            show_default=False,
        ),
    ] = None,
    minutes: Annotated[
        float | None,
        typer.Option(
            "--minutes",
            metavar="X",
            help="Time cap on training in minutes (default: the recipe's 15): reached before --steps, training stops and the command says so.",
            show_default=False,
        ),
    ] = None,
    train_pairs: Annotated[
        int, typer.Option("--train-pairs", min=1000, metavar="N", help="Generated training pairs.")
    ] = 20000,
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="Seeds the corpus, the model and the batches.")] = 0,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Reuse the --output-dir of an earlier quickstart (a folder holding anything else never is).",
        ),
    ] = False,
    progress: Annotated[bool | None, options.progress_option()] = None,
) -> None:
    """Run train-tokenizer, train, average, translate and evaluate on a generated English->German corpus."""
    from ...quickstart.pipeline import run_quickstart
    from ...quickstart.synthetic import examples

    result = run_quickstart(
        output_dir,
        steps=steps,
        minutes=minutes,
        train_pairs=train_pairs,
        seed=seed,
        overwrite=overwrite,
        show_progress=options.show_progress(progress),
    )
    typer.echo("\nTranslations of held-out sentences:")
    for source, hypothesis, reference in result.examples:
        typer.echo(f"  EN   {source}\n  AIAYN {hypothesis}\n  REF  {reference}\n")
    typer.echo(f"sacreBLEU on {result.output_dir / 'data' / 'test.de'}: {result.bleu:.2f}  ({result.signature})")
    typer.echo(f"model: {result.model_dir}")
    typer.echo(result.budget())
    timing = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in result.seconds.items())
    typer.echo(f"time: {sum(result.seconds.values()):.0f} s ({timing})")
    sentence = examples()[0][0]  # a sentence of the grammar the model learnt
    typer.echo(f"translate more:  echo '{sentence}' | aiayn translate --model {result.model_dir}")
    typer.echo("\n" + NEXT_STEPS)
