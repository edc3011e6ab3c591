"""Names a package hands on, imported on first use (PEP 562), so that importing a package loads
nothing heavy until one of its names is read."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` (PEP 562) that imports `exports[name]` (a module, relative to
    `package` where it starts with a dot) the first time `name` is read from the package."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
