"""`aiayn export`: the model in another runtime's format (CTranslate2)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

TARGETS = ("ctranslate2",)


def export(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="A model folder saved by aiayn train, or a Hub id.")],
    to: Annotated[str, typer.Option("--to", help="The runtime: ctranslate2.")] = "ctranslate2",
    output: Annotated[
        Path, typer.Option("--output", "-o", metavar="DIR", help="The folder to write (must not exist, or be empty).")
    ] = ...,
    quantization: Annotated[
        str,
        typer.Option(
            "--quantization",
            help="How the weights are saved: float32, int8, int8_float32, int16 or float16.",
        ),
    ] = "float32",
) -> None:
    """Export a model for a fast runtime: CTranslate2 (the package's ctranslate2 extra)."""
    from ...errors import AiaynError

    if to not in TARGETS:
        raise AiaynError(f"--to {to}: choose one of {', '.join(TARGETS)}")
    from ...serving.ctranslate2 import export_ctranslate2

    folder = export_ctranslate2(model, output, quantization=quantization)
    typer.echo(f"wrote {folder} (CTranslate2, {quantization}); its README.md shows the Python that runs it")
