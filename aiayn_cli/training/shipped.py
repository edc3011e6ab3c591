"""The recipes that ship with aiayn, and finding one by name or path: no torch and no transformers here,
so that a command says "no such recipe" before the libraries load."""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

from ..errors import AiaynError


def shipped_recipes() -> dict[str, str]:
    """Name -> one-line purpose (the recipe's first comment line) of every recipe in the package."""
    folder = importlib.resources.files("aiayn_cli.recipes")
    recipes = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            first = entry.read_text(encoding="utf-8").splitlines()[:1]
            purpose = first[0].lstrip("#").strip() if first and first[0].startswith("#") else ""
            recipes[entry.name.removesuffix(".yaml")] = purpose.rstrip(":,")
    return recipes


def find_recipe(name_or_path: str | os.PathLike) -> Path:
    """The recipe file: `name_or_path` itself if it exists, else the shipped recipe of that name."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    name = path.name.removesuffix(".yaml")
    if path.parent == Path("recipes") or str(path) == name or str(path) == f"{name}.yaml":
        shipped = importlib.resources.files("aiayn_cli.recipes") / f"{name}.yaml"
        if shipped.is_file():
            return Path(str(shipped))
    raise AiaynError(f"{name_or_path}: no such recipe file or shipped recipe (shipped: {', '.join(shipped_recipes())})")
