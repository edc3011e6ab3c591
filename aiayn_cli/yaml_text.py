"""YAML as recipes are read: YAML 1.2's booleans and numbers, not YAML 1.1's.

PyYAML implements YAML 1.1, where an unquoted `no`, `yes`, `on`, `off`, `y` or `n` is a boolean:
`mixed_precision: no` (a value of accelerate's) would arrive as `False`, and a language code `no`
(Norwegian) too; `1e-3`, a number in YAML 1.2, is the string "1e-3" (PyYAML's floats need a dot);
`010` is eight, `1_000` a thousand and `1:30` ninety (base 60). Here numbers are YAML 1.2's core
schema's: `010` is ten, `0o10` eight, `0x10` sixteen, `1_000` and `1:30` are text. Every recipe,
`--set KEY=VALUE` and saved recipe.yaml is read through this loader, so a word stays a word.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

BOOL = "tag:yaml.org,2002:bool"


class Loader(yaml.SafeLoader):
    """`yaml.SafeLoader` with YAML 1.2's booleans only, and its exponent floats without a dot."""


INT, FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in (BOOL, INT, FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# YAML 1.2's core schema (10.3.2): `010` is ten (1.1: eight), `0o10` eight, `0x1F` 31; `1_000` and `1:30`
# are text (1.1: 1000 and 90).
Loader.add_implicit_resolver(BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
Loader.add_implicit_resolver(INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
Loader.add_implicit_resolver(
    FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


Loader.add_constructor(INT, _construct_int)


def loads(text: str) -> Any:
    """The value of a YAML text (`yaml.safe_load` with YAML 1.2's booleans)."""
    return yaml.load(text, Loader=Loader)  # noqa: S506  (a SafeLoader)


def compose(text: str) -> yaml.Node | None:
    """The node tree of a YAML text (for the lines of its keys)."""
    return yaml.compose(text, Loader=Loader)


def leaves(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted key -> value of every leaf of a nested mapping (lists are values), as `--set` names them:
    `{"model": {"dropout": 0.3}}` -> `{"model.dropout": 0.3}`."""
    found: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            found.update(leaves(value, f"{prefix}{key}."))
        else:
            found[f"{prefix}{key}"] = value
    return found
