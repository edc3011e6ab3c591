"""The one atomic writer: the umask's mode, fsync before the rename, links kept, nothing left on errors."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from aiayn_cli import files
from aiayn_cli.files import atomic_open, atomic_write, staging_dir


@pytest.fixture
def umask():
    def set_umask(mask: int) -> None:
        os.umask(mask)

    previous = os.umask(0o022)
    yield set_umask
    os.umask(previous)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_files_and_folders_get_the_umask_mode(tmp_path, umask, mask, mode):
    umask(mask)
    atomic_write(tmp_path / "out.txt", "text\n")
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == mode
    with staging_dir(tmp_path / "folder") as folder:
        (folder / "a").write_text("a")
        os.close(os.open(folder / "b", os.O_WRONLY | os.O_CREAT, 0o600))  # as mkstemp (save_pretrained) does
    assert (tmp_path / "folder").stat().st_mode & 0o777 == mode | 0o111 & ~mask
    assert [(tmp_path / "folder" / name).stat().st_mode & 0o777 for name in "ab"] == [mode, mode]


def test_data_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(files.os, "fsync", lambda fd: events.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(files.os, "replace", lambda a, b: events.append("replace") or real_replace(a, b))
    atomic_write(tmp_path / "out.txt", "text\n")
    assert events[:2] == ["fsync", "replace"] and events[2:] == ["fsync"]  # the file, the rename, the folder
    assert (tmp_path / "out.txt").read_text() == "text\n"


def test_an_error_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_open(target) as out:
        out.write("new, half")
        raise RuntimeError("the disk is full")
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with pytest.raises(RuntimeError), staging_dir(tmp_path / "folder") as folder:
        (folder / "a").write_text("a")
        raise RuntimeError("the disk is full")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_full_disk_at_fsync_leaves_nothing(tmp_path, monkeypatch):
    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", no_space)
    with pytest.raises(OSError, match="No space"):
        atomic_write(tmp_path / "out.txt", "text\n")
    assert list(tmp_path.iterdir()) == []


def test_a_link_stays_a_link(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    atomic_write(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"


def test_replace_dir_swaps_a_folder_whole(tmp_path):
    final = tmp_path / "model"
    final.mkdir()
    (final / "old").write_text("old")
    with staging_dir(final) as folder:
        (folder / "new").write_text("new")
    assert [p.name for p in final.iterdir()] == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_every_write_of_the_package_goes_through_files_py():
    """No ad-hoc temporary files or renames outside files.py."""
    package = Path(files.__file__).parent
    offenders = []
    for path in package.rglob("*.py"):
        if path.name == "files.py":
            continue
        text = path.read_text(encoding="utf-8")
        for needle in ("mkstemp", "mkdtemp", ".rename(", 'suffix=".tmp"', "os.replace("):
            if needle in text:
                offenders.append(f"{path.relative_to(package)}: {needle}")
    assert offenders == []


def test_replace_dir_keeps_a_folder_named_like_its_backup(tmp_path):
    """A user's `model.old` (a file or a folder) is not the backup replace_dir makes and removes."""
    final = tmp_path / "model"
    final.mkdir()
    (final / "old").write_text("old")
    (tmp_path / "model.old").mkdir()
    (tmp_path / "model.old" / "notes.txt").write_text("mine")
    with staging_dir(final) as folder:
        (folder / "new").write_text("new")
    assert [p.name for p in final.iterdir()] == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "model.old"]
    assert (tmp_path / "model.old" / "notes.txt").read_text() == "mine"


def test_a_full_disk_while_files_are_added_names_the_folder(tmp_path):
    """The issue's row 9: `attention -o`/`paper -o` on a full disk said "No space left on device" and no path."""
    import errno

    from aiayn_cli.files import staging_files

    folder = tmp_path / "figures"
    with pytest.raises(OSError) as raised, staging_files(folder) as tmp:
        (tmp / "explorer.html").write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")  # as a write() reports it: no file name
    assert raised.value.filename == str(folder.resolve()) and not folder.exists()
