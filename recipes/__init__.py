"""The shipped recipes, installed as the package data `aiayn_cli.recipes` (see pyproject.toml)."""
