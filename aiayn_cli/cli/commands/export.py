"""`aiayn export`: the model in another runtime's format (CTranslate2)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ...errors import AiaynError
from ...lookup import check_hub_model
from .. import options

TARGETS = ("ctranslate2",)
# CTranslate2's name for each (--precision, --quantization); auto keeps the weights as trained (fp32).
CT2_TYPES = {
    ("fp32", "none"): "float32",
    ("fp16", "none"): "float16",
    ("bf16", "none"): "bfloat16",
    ("fp32", "int8"): "int8_float32",
    ("fp16", "int8"): "int8_float16",
    ("bf16", "int8"): "int8_bfloat16",
    ("fp32", "int16"): "int16",
}


def export(
    model: options.ModelOpt = None,
    to: Annotated[str, typer.Option("--to", metavar="RUNTIME", help="The runtime: ctranslate2.")] = "ctranslate2",
    output: Annotated[
        Path | None,
        options.output_dir_option("The folder to write (absent or empty; an earlier export with --overwrite)."),
    ] = None,
    precision: Annotated[
        options.Precision,
        options.precision_option(help="The type of the saved weights: auto (as trained: fp32), fp32, bf16 or fp16."),
    ] = "auto",
    quantization: Annotated[
        Literal["none", "int8", "int16"],
        typer.Option("--quantization", help="int8 or int16 weights for the linear maps (int16 with fp32 only)."),
    ] = "none",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace --output-dir if it holds an export.")] = False,
    legacy_model: Annotated[str | None, typer.Argument(hidden=True, show_default=False)] = None,
) -> None:
    """Export a model for a fast runtime: CTranslate2 (the package's ctranslate2 extra)."""
    model = options.model_from_argument(model, legacy_model, "export")
    if output is None:
        raise AiaynError("is required: the folder to write", key="output")
    if to not in TARGETS:
        raise AiaynError(f"{to}: choose one of {', '.join(TARGETS)}", key="to")
    kind = CT2_TYPES.get(("fp32" if precision == "auto" else precision, quantization))
    if kind is None:
        raise AiaynError(f"int16 weights keep fp32 for the rest; give --precision fp32, not {precision}",
                         key="quantization")  # fmt: skip
    check_hub_model(model)  # before the libraries load: a missing folder is one line at once
    from ...decoding.ctranslate2_convert import export_ctranslate2

    folder = export_ctranslate2(model, output, quantization=kind, overwrite=overwrite)
    typer.echo(f"wrote {folder} (CTranslate2, {kind}); its README.md shows the Python that runs it")
