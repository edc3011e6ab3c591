"""Files a user relies on are written under a temporary name and renamed: complete or absent."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside `path` for writing; rename it to `path` only if the block succeeds."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as out:
            yield out
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def replace_dir(tmp: str | Path, final: str | Path) -> None:
    """Move the finished folder `tmp` to `final`, replacing what is there: before the rename `final`
    is the old folder, after it the new one, never a mix."""
    tmp, final = Path(tmp), Path(final)
    if not final.exists():
        os.replace(tmp, final)
        return
    old = final.with_name(final.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
