"""Files and folders a user relies on are written under a temporary name and renamed: complete or absent.

Every write of the package goes through here:

- `atomic_open` / `atomic_write`: a file, created with the mode the umask gives (as `open` would),
  flushed and fsynced before the rename, the folder fsynced after it; on any error (a full disk
  included) the temporary file is removed and the old file, if any, is untouched. A link given
  as the path is followed: the file it points to is replaced, the link stays.
- `staging_dir`: a folder (a checkpoint, an averaged model, a tokenizer) built under a temporary
  name beside its final one, its files fsynced, then put in place by `replace_dir`; removed on any
  error.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .errors import AiaynError


def _temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside `path` for writing; rename it to `path` only if the block succeeds."""
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    temporary = _temporary_name(path)
    try:
        # os.open applies the umask to 0o666, as open() does (mkstemp would give 0o600).
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as err:
        _name_the_target(err, temporary, path)
        raise
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        _name_the_target(err, temporary, path)
        raise
    fsync_dir(path.parent)


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
    """Write `data` (text as UTF-8) to `path` atomically."""
    with atomic_open(path, "wb" if isinstance(data, bytes) else "w") as out:
        out.write(data)


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename inside `folder` durable (where the file system supports it)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_tree(folder: str | os.PathLike) -> None:
    """fsync every file under `folder`, then the folders themselves. Files that a library wrote with
    mkstemp's 0o600 (transformers' `save_pretrained` does) get the umask's mode, as `open` would give."""
    mode = 0o666 & ~current_umask()
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if os.stat(path).st_mode & 0o777 != mode:
                os.chmod(path, mode)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(root)


def current_umask() -> int:
    """The process's umask (read from /proc where it can be, without changing it)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def staging_dir(final: str | os.PathLike, name: str | None = None, *, keep_existing: bool = False) -> Iterator[Path]:
    """A new folder beside `final` to fill; on success it replaces `final` (`replace_dir`), on any
    error it is removed. `name`: the temporary folder's name (default `.<final>.<random>.tmp`); a
    folder of that name that exists is used as it is (the caller started filling it).
    `keep_existing`: where `final` appeared meanwhile (another process finished the same work
    first), keep it and drop this one."""
    final = Path(final)
    tmp = final.with_name(name) if name else _temporary_name(final)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        if not tmp.is_dir():
            os.mkdir(tmp)  # the umask's mode (mkdtemp would give 0o700)
    except OSError as err:
        _name_the_target(err, tmp, final)
        raise
    try:
        yield tmp
        fsync_tree(tmp)
        if keep_existing and final.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            replace_dir(tmp, final)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        _name_the_target(err, tmp, final)
        raise


@contextlib.contextmanager
def staging_files(folder: str | os.PathLike) -> Iterator[Path]:
    """A new folder to fill with files that go into `folder` (created if missing; the files already
    in it stay): on success each file is renamed into place, each complete or absent; on any error
    nothing is moved and the staging folder is removed."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = _temporary_name(folder / "files")
    os.mkdir(tmp)
    try:
        yield tmp
        fsync_tree(tmp)
        for path in sorted(tmp.iterdir()):
            os.replace(path, folder / path.name)
        fsync_dir(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_dir(path: str | os.PathLike) -> None:
    """Delete a folder, renaming it first: a crash never leaves a half-deleted folder under its name."""
    path = Path(path)
    old = path.with_name(path.name + ".old")
    _remove(old)
    os.replace(path, old)
    _remove(old)


def replace_dir(tmp: str | os.PathLike, final: str | os.PathLike) -> None:
    """Move the finished folder `tmp` to `final`, replacing what is there: before the rename `final`
    is the old folder, after it the new one, never a mix."""
    tmp, final = Path(tmp), Path(final)
    if not final.exists():
        os.replace(tmp, final)
        fsync_dir(final.parent)
        return
    old = final.with_name(final.name + ".old")
    _remove(old)
    os.replace(final, old)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    _remove(old)


def _name_the_target(err: BaseException, temporary: Path, target: Path) -> None:
    """An error about the temporary file (or a file in the temporary folder) names the target instead."""
    if not isinstance(err, OSError) or err.errno is None:  # not the file system's own error
        return
    names = [err.filename, err.filename2]
    if err.filename is None or any(str(name).startswith(str(temporary)) for name in names if name is not None):
        err.filename, err.filename2 = str(target), None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def check_output_file(path: str | os.PathLike, inputs=(), key: str | None = None) -> Path:
    """Before any work: `path` can be written as a file (not a folder; its folder exists and is writable)
    and is none of `inputs` (links followed), which writing it would replace. `key`: the option that
    named it, for the error line."""
    path = Path(path)
    if path.is_dir():
        raise AiaynError(f"{path}: is a folder; give a file name", key=key)
    if not path.parent.is_dir():
        raise AiaynError(f"{path}: the folder {path.parent} does not exist", key=key)
    if not os.access(path.parent, os.W_OK):  # a read-only folder or file system: say so before the work
        raise AiaynError(f"{path}: the folder {path.parent} is not writable", key=key)
    for source in inputs:
        if source is not None and str(source) != "-" and path.exists() and Path(source).exists():
            if os.path.samefile(source, path):
                raise AiaynError(f"{path}: is the input file {source}; write elsewhere", key=key)
    return path


def check_output_dir(path: str | os.PathLike, key: str | None = None) -> Path:
    """Before any work: `path` is a folder that files can be written into, or can be made (its nearest
    existing parent is a writable folder). `key`: the option that named it, for the error line."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise AiaynError(f"{path}: is a file, not a folder; give a folder", key=key)
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise AiaynError(f"{path}: {existing} is a file, not a folder", key=key)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise AiaynError(f"{path}: the folder {existing} is not writable", key=key)
    return path


__all__ = [
    "atomic_open",
    "atomic_write",
    "check_output_dir",
    "check_output_file",
    "fsync_dir",
    "fsync_tree",
    "replace_dir",
    "staging_dir",
]
