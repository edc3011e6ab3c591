"""YAML as recipes are read: YAML 1.2's booleans and numbers, not YAML 1.1's.

PyYAML implements YAML 1.1, where an unquoted `no`, `yes`, `on`, `off`, `y` or `n` is a boolean:
`mixed_precision: no` (a value of accelerate's) would arrive as `False`, and a language code `no`
(Norwegian) too; and `1e-3`, a number in YAML 1.2, is the string "1e-3" (PyYAML's floats need a
dot). Every recipe, `--set KEY=VALUE` and saved recipe.yaml is read through this loader,
so a word stays a word.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

BOOL = "tag:yaml.org,2002:bool"


class Loader(yaml.SafeLoader):
    """`yaml.SafeLoader` with YAML 1.2's booleans only, and its exponent floats without a dot."""


Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Loader.add_implicit_resolver(BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
# After the integers (a resolver added last is tried last): 1e-3, -2E+5; 1.5e-3 is PyYAML's already.
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def loads(text: str) -> Any:
    """The value of a YAML text (`yaml.safe_load` with YAML 1.2's booleans)."""
    return yaml.load(text, Loader=Loader)  # noqa: S506  (a SafeLoader)


def compose(text: str) -> yaml.Node | None:
    """The node tree of a YAML text (for the lines of its keys)."""
    return yaml.compose(text, Loader=Loader)
