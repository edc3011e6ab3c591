"""What a command may write, and how: the one output rule, and the atomic writers every write goes through.

The output rule (`docs/reliability.md`), decided here for every command's outputs before any work:

- a file output (`translate -o`, `evaluate --json`): a regular file is written under a temporary name
  and renamed over the old one (`open_output`); a character device or a FIFO (`/dev/null`,
  `/dev/stdout`, a named pipe) and `-` (standard output) are written into directly, never renamed
  over; refused: a folder, a read-only file, any other kind of node (a socket, a block device), one of
  the command's input files or a file of one of its input folders (a model's weights; links followed), a path whose folder is missing or not writable
  (`check_output_file`);
- a folder a command writes whole (`train-tokenizer -o`, `average -o`, `export -o`, `push
  --output-dir`, `quickstart -o`): absent or empty; or, with `--overwrite`, a folder that holds only
  what that command writes (its own, by the names in it); never a file, an input or a folder that holds
  one (`check_output_folder`);
- files a command adds to a folder (`attention -o`, `paper -o`): files of other names stay; a file of
  the same name is replaced only where this command wrote it and it is unchanged since (recorded in
  the folder's `.aiayn-written.json`), or with `--overwrite` (`check_output_files`, `staging_files`).

The writers:

- `atomic_open` / `atomic_write`: a file, created with the mode the umask gives (as `open` would),
  flushed and fsynced before the rename, the folder fsynced after it; on any error (a full disk
  included) the temporary file is removed and the old file, if any, is untouched. A link given
  as the path is followed: the file it points to is replaced, the link stays.
- `staging_dir`: a folder (a checkpoint, an averaged model, a tokenizer) built under a temporary
  name beside its final one, its files fsynced, then put in place by `replace_dir`; removed on any
  error.

A library's report of a full disk (safetensors' and tokenizers' Rust errors: "No space left on device
(os error 28)") becomes the `OSError` it is, naming the output, not its temporary name.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
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
        converted = as_os_error(err, path)
        if converted is not None:
            raise converted from err
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
        converted = as_os_error(err, final)
        if converted is not None:
            raise converted from err
        raise


@contextlib.contextmanager
def staging_files(folder: str | os.PathLike, *, overwrite: bool = False, key: str | None = None) -> Iterator[Path]:
    """A new folder to fill with files that go into `folder` (created if missing; the files already
    in it stay): on success the files are checked by the output rule (`check_output_files`: a file of
    the same name is replaced only where this command wrote it, or with `overwrite`), then each is
    renamed into place, complete or absent, and recorded in `WRITTEN`; on any error nothing is moved,
    the staging folder is removed, and so is `folder` where this made it."""
    folder = Path(os.path.realpath(folder))  # a link to a folder (even one not made yet): the folder
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = _temporary_name(folder / "files")
    os.mkdir(tmp)
    try:
        yield tmp
        names = sorted(path.name for path in tmp.iterdir())
        check_output_files(folder, names, overwrite=overwrite, key=key)
        record = {name: _digest(tmp / name) for name in names}
        fsync_tree(tmp)
        for name in names:
            os.replace(tmp / name, folder / name)
        fsync_dir(folder)
        kept = {name: digest for name, digest in _written(folder).items() if (folder / name).is_file()}
        atomic_write(folder / WRITTEN, json.dumps({**kept, **record}, indent=1, sort_keys=True) + "\n")
    except BaseException as err:
        _name_the_target(err, tmp, folder)  # a full disk while the files were written: the folder, not the staging one
        converted = as_os_error(err, folder)
        if converted is not None:
            raise converted from err
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only where it is still empty: nothing was written


def remove_dir(path: str | os.PathLike) -> None:
    """Delete a folder, renaming it first: a crash never leaves a half-deleted folder under its name."""
    path = Path(path)
    old = _backup_name(path)
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
    old = _backup_name(final)
    os.replace(final, old)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    _remove(old)


def _backup_name(path: Path) -> Path:
    """A name beside `path` that nothing has (`NAME.<random>.old`): the old folder moves there to be removed,
    so a user's own `NAME.old` is never touched. A killed run's leftover is found by its `.old` suffix."""
    while True:
        old = path.with_name(f"{path.name}.{secrets.token_hex(4)}.old")
        if not os.path.lexists(old):
            return old


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


# ---------------------------------------------------------------------------------------------
# The output rule
# ---------------------------------------------------------------------------------------------

STDOUT = "-"
WRITTEN = ".aiayn-written.json"  # the files a command added to a folder (`staging_files`), with their hashes


def check_output_file(path: str | os.PathLike, inputs=(), key: str | None = None) -> Path:
    """Before any work: `path` may be written as a file output (the module's rule); `AiaynError` if not.
    `inputs`: the command's input files (`-` and None are skipped), which it must not replace; `key`: the
    option that named `path`, for the error line. Returns `path`."""
    path = Path(path)
    if str(path) == STDOUT:
        return path
    kind = node_kind(path)
    if kind == "folder":
        raise AiaynError(f"{path}: is a folder; give a file name", key=key)
    if kind in ("character device", "FIFO"):  # written into directly: nothing is replaced
        return path
    if kind not in ("missing", "file"):
        raise AiaynError(f"{path}: is a {kind}, not a file; give a file name", key=key)
    target = Path(os.path.realpath(path))  # a link is followed: the file it names is written
    if kind == "file" and _read_only(target):
        raise AiaynError(f"{path}: is read-only; it is not replaced (make it writable, or write elsewhere)", key=key)
    if not target.parent.is_dir():
        raise AiaynError(f"{path}: the folder {target.parent} does not exist", key=key)
    if not os.access(target.parent, os.W_OK):  # a read-only folder or file system: say so before the work
        raise AiaynError(f"{path}: the folder {target.parent} is not writable", key=key)
    if kind == "file":
        written = os.stat(target)
        for source in inputs:
            if source is None or str(source) == STDOUT:
                continue
            for held in input_files(source):
                if os.path.samestat(os.stat(held), written):
                    what = "the input file" if held == Path(source) else f"{held}, a file of the input"
                    raise AiaynError(f"{path}: is {what} {source}; write elsewhere", key=key)
    return path


def input_files(source: str | os.PathLike) -> Iterator[Path]:
    """Every file of an input: the file itself, or each file under a folder (a model, a tokenizer, a data
    folder), links followed (each linked folder once); nothing for a path that does not exist (a Hub name)."""
    source = Path(source)
    if not source.is_dir():
        if source.exists():
            yield source
        return
    seen = set()
    for folder, folders, names in os.walk(source, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:  # a link back to a folder already walked (a loop too): not again
            folders.clear()
            continue
        seen.add(real)
        for name in names:
            if (Path(folder) / name).exists():
                yield Path(folder) / name


@contextlib.contextmanager
def open_output(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a file output that `check_output_file` accepted: `-` is standard output, a character device
    or a FIFO is opened and written into, anything else is written by `atomic_open` (complete or absent)."""
    if str(path) == STDOUT:
        import sys

        out = sys.stdout.buffer if "b" in mode else sys.stdout
        yield out
        out.flush()
        return
    if node_kind(Path(path)) not in ("character device", "FIFO"):
        with atomic_open(path, mode) as out:
            yield out
        return
    try:
        with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as out:
            yield out
    except OSError as err:  # /dev/full: "No space left on device", naming the device
        if err.filename is None:
            err.filename = str(path)
        raise


def check_output_folder(
    path: str | os.PathLike,
    *,
    own: Callable[[Path], bool],
    what: str,
    overwrite: bool | None = False,
    inputs=(),
    key: str | None = None,
) -> Path:
    """Before any work: `path` may be written whole (replaced) as a folder output (the module's rule).

    Args:
        own: whether an entry of an existing folder is one this command writes (its name, mostly).
        what: what the command writes, for the error line ("a tokenizer", "a model folder").
        overwrite: a folder that holds only the command's own entries may be replaced (None: the
            command has no such option, and such a folder is refused as any non-empty one).
        inputs: the command's input files and folders: the output may not be one, nor hold one.
    Returns the folder to write (a link to a folder is followed).
    """
    path = Path(path)
    check_utf8_name(path, key)
    kind = node_kind(path)
    if kind not in ("missing", "folder"):
        raise AiaynError(f"{path}: is a {kind}, not a folder; give a folder name", key=key)
    target = check_not_an_input(path, inputs, key)
    if kind == "missing":
        _check_writable_ancestor(path, key)
        return target
    entries = sorted(target.iterdir())
    foreign = [entry.name for entry in entries if not own(entry)]
    if foreign:
        raise AiaynError(
            f"{path}: holds files that are not part of {what} (e.g. {foreign[0]}); it is never replaced: choose a new "
            "or empty folder",
            key=key,
        )
    if entries and overwrite is None:  # the command has no --overwrite
        raise AiaynError(f"{path}: exists and is not empty; choose a new folder or remove it", key=key)
    if entries and not overwrite:
        raise AiaynError(
            f"{path}: exists and holds {what}; pass {{overwrite}} to replace it", key=key, mentions=("overwrite",)
        )
    _check_writable_ancestor(target.parent, key, path)
    return target


def check_utf8_name(path: str | os.PathLike, key: str | None = None) -> None:
    """A folder output's name that holds a byte that is not UTF-8 (a shell passes any bytes; Python keeps
    them as lone surrogates) is refused before any work: the tokenizers and safetensors libraries write
    to UTF-8 paths only, and would fail after the work is done."""
    name = os.fspath(path)
    if any("\udc80" <= ch <= "\udcff" for ch in name):
        shown = ascii(name.encode("utf-8", "surrogateescape"))[2:-1]
        raise AiaynError(
            f"{shown}: the name holds a byte that is not UTF-8; models and tokenizers are written to UTF-8 names "
            "only: choose another",
            key=key,
        )


def check_not_an_input(path: str | os.PathLike, inputs, key: str | None = None) -> Path:
    """A folder output `path` is none of `inputs` (files or folders, links followed) and holds none of them;
    returns it resolved."""
    target = Path(os.path.realpath(path))
    for source in inputs:
        if source is None or str(source) == STDOUT or not Path(source).exists():
            continue
        held = Path(os.path.realpath(source))
        if held == target or target in held.parents:
            relation = "is" if held == target else "holds"
            raise AiaynError(f"{path}: {relation} the input {source}; choose a new folder", key=key)
    return target


def check_output_files(folder: str | os.PathLike, names, *, overwrite: bool = False, key: str | None = None) -> Path:
    """Before any work: the files `names` may be added to `folder` (the module's rule): it is absent or a
    folder; each name there is absent, or a file this command wrote and left unchanged, or `overwrite`."""
    named, folder = Path(folder), Path(os.path.realpath(folder))  # a link to a folder: the folder
    kind = node_kind(folder)
    if kind not in ("missing", "folder"):
        raise AiaynError(f"{named}: is a {kind}, not a folder; give a folder name", key=key)
    if kind == "missing":
        if not folder.parent.is_dir():
            raise AiaynError(f"{named}: the folder {folder.parent} does not exist", key=key)
        _check_writable_ancestor(folder, key)
        return folder
    if not os.access(folder, os.W_OK | os.X_OK):
        raise AiaynError(f"{named}: is not writable", key=key)
    written = _written(folder)
    for name in names:
        path, shown = folder / name, named / name
        kind = node_kind(path)
        if kind == "missing":
            continue
        if kind != "file" or _read_only(path):
            raise AiaynError(
                f"{shown}: is a {'read-only file' if kind == 'file' else kind}; it is not replaced", key=key
            )
        if not overwrite and written.get(name) != _digest(path):
            raise AiaynError(
                f"{shown}: exists and was not written by this command (or was changed since); pass {{overwrite}} "
                "to replace it, or choose another folder",
                key=key,
                mentions=("overwrite",),
            )
    return folder


def node_kind(path: Path) -> str:
    """What is at `path` (links followed): missing, file, folder, character device, FIFO, socket, block device,
    link loop."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing"  # a file's child: its folder is not a folder, said by the folder check
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "link loop"
        raise
    for test, name in (
        (stat.S_ISREG, "file"),
        (stat.S_ISDIR, "folder"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


def _read_only(path: Path) -> bool:
    """A file nobody may write (no write bit: even root, who may, is not to replace it) or this user may not."""
    return os.stat(path).st_mode & 0o222 == 0 or not os.access(path, os.W_OK)


def _check_writable_ancestor(path: Path, key: str | None, named: Path | None = None) -> None:
    """The nearest existing folder above `path` (where it will be made) is writable."""
    ancestor = Path(os.path.abspath(path))
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise AiaynError(f"{named or path}: {ancestor} is a file, not a folder", key=key)
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise AiaynError(f"{named or path}: the folder {ancestor} is not writable", key=key)


def _digest(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _written(folder: Path) -> dict[str, str]:
    """The files a command added to `folder` and their hashes then (`WRITTEN`); {} where it cannot be read."""
    try:
        record = json.loads((folder / WRITTEN).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in record.items() if isinstance(v, str)} if isinstance(record, dict) else {}


def as_os_error(err: BaseException, target: str | os.PathLike) -> OSError | None:
    """A library's report of a file system error ("No space left on device (os error 28)", from Rust) as
    the `OSError` it is, naming `target`; None for other errors."""
    import re

    if isinstance(err, OSError):
        return None
    match = re.search(r"\(os error (\d+)\)", str(err))
    if match is None:
        return None
    number = int(match.group(1))
    return OSError(number, os.strerror(number), str(target))


__all__ = [
    "STDOUT",
    "atomic_open",
    "as_os_error",
    "atomic_write",
    "check_output_file",
    "check_output_files",
    "check_output_folder",
    "check_utf8_name",
    "fsync_dir",
    "fsync_tree",
    "input_files",
    "node_kind",
    "open_output",
    "replace_dir",
    "staging_dir",
    "staging_files",
]
