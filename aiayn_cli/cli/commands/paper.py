"""`aiayn paper TOPIC`: the paper's claims, computed by the project's own code, as figures and tables.

aiayn paper positions -o paper                 # §3.5: sinusoids, wavelengths, PE(pos+k) = M_k PE(pos)
aiayn paper scaling                            # §3.2.1: why divide by sqrt(d_k)
aiayn paper masks                              # §3.2.3: the masks of a padded batch
aiayn paper complexity                         # §4, Table 1: measured on this machine
aiayn paper teacher-forcing --model runs/x/averaged --source "A dog runs." --target "Ein Hund rennt."
aiayn paper normalization                      # LayerNorm against BatchNorm
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import options

TOPICS_HELP = "positions, scaling, masks, complexity, teacher-forcing or normalization"


def paper(
    topic: Annotated[str, typer.Argument(metavar="TOPIC", help=f"What to show: {TOPICS_HELP}.", show_default=False)],
    output_dir: Annotated[
        Path,
        options.output_dir_option(
            "Where the PNG figures and the markdown table go (other files there stay; files of the same names are "
            "replaced only where aiayn paper wrote them).",
            show_default=True,
        ),
    ] = Path("paper"),
    model: Annotated[
        str | None,
        options.model_option(
            "A model folder or Hub id: needed by teacher-forcing; adds the trained model's view to positions "
            "(learned positions), scaling (its logit scales), masks and normalization (its tokenizer)."
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option("--source", metavar="TEXT", help="A source sentence (with --target).", show_default=False),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option("--target", metavar="TEXT", help="Its reference translation (with --source).", show_default=False),
    ] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite", help="Replace files in --output-dir that aiayn paper did not write (or that were edited)."
        ),
    ] = False,
) -> None:
    """Show one of the paper's claims with figures and numbers computed by aiayn's own code."""
    from ...paper import run_topic

    result = run_topic(topic, output_dir, model=model, source=source, target=target, overwrite=overwrite)
    typer.echo(f"aiayn paper {topic}: what to notice")
    for note in result.notes:
        typer.echo(f"  - {note}")
    for path in [*result.figures, result.table]:
        typer.echo(f"wrote {path}")
