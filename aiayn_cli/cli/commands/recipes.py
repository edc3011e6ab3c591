"""`aiayn recipes`: the recipes that ship with aiayn, by name, with their purpose."""

from __future__ import annotations

from typing import Annotated

import typer

from ...errors import AiaynError


def recipes(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME", help="Print this recipe (to copy and edit) instead of the list.", show_default=False
        ),
    ] = None,
) -> None:
    """List the shipped recipes (`aiayn train NAME` runs one from any folder), or print one."""
    from ...training.shipped import find_recipe, shipped_recipes

    if name is not None:
        path = find_recipe(name)
        try:
            typer.echo(path.read_text(encoding="utf-8"), nl=False)
        except UnicodeDecodeError as err:
            raise AiaynError(f"{path}: not a UTF-8 text file (byte {err.start + 1}); a recipe is YAML text") from None
        return
    shipped = shipped_recipes()
    width = max(map(len, shipped))
    for recipe, purpose in shipped.items():
        typer.echo(f"{recipe:<{width}}  {purpose}")
    typer.echo("\nRun one with `aiayn train NAME`; `aiayn recipes NAME > mine.yaml` to start your own.")
