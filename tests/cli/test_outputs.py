"""The output rule (`aiayn_cli/files.py`), walked: every command with an output option, over every kind
of target a user can name. A refusal is one `error:` line and exit code 2 with nothing changed; a
write changes the target alone, keeps a device a device, a FIFO a FIFO, a link a link, and leaves no
temporary file behind."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import socket
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import run_cli, save_tiny_model

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False
TINY_RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "tiny.yaml"


class Reached(Exception):
    """Raised where a command would begin its long work: the output was accepted."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("outputs") / "model")


@pytest.fixture(autouse=True)
def _one_click_group(monkeypatch):
    """Typer builds the click commands from the signatures on every call (a third of a second, three
    times per failing call): build them once for the walk's hundreds of calls. The commands are the same."""
    import typer.main

    build, built = typer.main.get_command, {}
    monkeypatch.setattr(
        typer.main, "get_command", lambda app: built.get(id(app)) or built.setdefault(id(app), build(app))
    )


# ---------------------------------------------------------------------------------------------
# The commands: how each is called with TARGET as its output, and what its output is
# ---------------------------------------------------------------------------------------------


@dataclass
class Command:
    args: object  # (inputs, target) -> argv
    output: str  # "file": a file; "folder": a folder written whole; "files": files added to a folder; "run", "cache"
    input: object  # inputs -> the input file or folder of the "input" target
    own_name: str  # a name the command writes into its folder (for "same name")
    stub: tuple[str, str] | None = None  # (module, attribute) replaced by `Reached`: the long work not done
    error: dict[str, str] = field(default_factory=dict)  # target kind -> words of the error line


def _data(inputs):
    return ["--data-dir", inputs / "data", "-s", "en", "-t", "de"]


COMMANDS = {
    "translate -o": Command(
        lambda i, t: ["translate", "-m", i / "model", "-i", i / "src.txt", "-o", t, "--beam", "1", "--no-progress"],
        "file",
        lambda i: i / "src.txt",
        "-",
    ),
    "evaluate --json": Command(
        lambda i, t: ["evaluate", "-i", i / "src.txt", "-r", i / "ref.txt", "--metrics", "chrf", "--json", t],
        "file",
        lambda i: i / "ref.txt",
        "-",
    ),
    "evaluate -o": Command(
        lambda i, t: ["evaluate", "--model", i / "model", *_data(i), "--split", "test", "--metrics", "chrf", "-o", t],
        "file",
        lambda i: i / "data" / "test.de",  # the row 3: the references
        "-",
    ),
    "train-tokenizer -o": Command(
        lambda i, t: ["train-tokenizer", *_data(i), "--vocab-size", "300", "-o", t],
        "folder",
        lambda i: i / "data",
        "tokenizer.json",
    ),
    "average -o": Command(
        lambda i, t: ["average", i / "model", i / "model2", "-o", t], "folder", lambda i: i / "model", "config.json"
    ),
    "export -o": Command(
        lambda i, t: ["export", "-m", i / "model", "-o", t], "folder", lambda i: i / "model", "model.bin"
    ),
    "push --output-dir": Command(
        lambda i, t: ["push", "-m", i / "model", "--repo-id", "u/m", "--dry-run", "--output-dir", t],
        "folder",
        lambda i: i / "model",
        "README.md",
    ),
    "quickstart -o": Command(
        lambda i, t: ["quickstart", "-o", t],
        "folder",
        lambda i: i / "data",
        "data",
        stub=("aiayn_cli.quickstart.synthetic", "write_corpus"),
    ),
    "attention -o": Command(
        lambda i, t: ["attention", "-m", i / "model", "-i", i / "src.txt", "-o", t, "-f", "html", "-f", "json"],
        "files",
        lambda i: i / "src.txt",
        "explorer.html",
    ),
    "paper -o": Command(
        lambda i, t: ["paper", "masks", "-m", i / "model", "-o", t], "files", lambda i: i / "model", "masks.md"
    ),
    "heads -o": Command(
        lambda i, t: [
            "heads",
            "-m",
            i / "model",
            *_data(i),
            "--split",
            "test",
            "--sample-size",
            "2",
            "--beam",
            "1",
            "-o",
            t,
        ],
        "files",
        lambda i: i / "model",
        "heads.md",
    ),
    "layers -o": Command(
        lambda i, t: ["layers", "-m", i / "model", *_data(i), "--split", "test", "--sample-size", "2", "-o", t],
        "files",
        lambda i: i / "model",
        "layers.md",
    ),
    "train --output-dir": Command(
        lambda i, t: ["train", TINY_RECIPE, *_data(i), "--tokenizer", i / "model", "--output-dir", t],
        "run",
        lambda i: i / "data",
        "recipe.yaml",
        stub=("aiayn_cli.training.trainer", "load_data"),
    ),
    "prepare --cache-dir": Command(
        lambda i, t: ["prepare", TINY_RECIPE, *_data(i), "--tokenizer", i / "model", "--cache-dir", t],
        "cache",
        lambda i: i / "data",
        "aiayn",
    ),
}

# ---------------------------------------------------------------------------------------------
# The targets, and what the rule says of each kind of output
# ---------------------------------------------------------------------------------------------

TARGETS = (
    "new",  # a name that does not exist, in a folder that does
    "no parent",  # a name in a folder that does not exist
    "file",  # the user's regular file
    "read-only file",  # mode 0444
    "empty folder",
    "foreign folder",  # a folder holding the user's notes.txt
    "same name",  # a folder holding the user's file of a name the command writes
    "/dev/null",
    "/dev/full",
    "FIFO",
    "socket",
    "link to file",
    "link to folder",
    "dangling link",
    "input",  # the command's own input file or folder
    "holds input",  # a folder holding it
)
OK, REFUSED = "written", "refused"
_FOLDER_LIKE = {"new", "no parent", "empty folder", "link to folder", "dangling link"}
RULE = {
    "file": {kind: OK for kind in ("new", "file", "/dev/null", "FIFO", "link to file", "dangling link")},
    "folder": {kind: OK for kind in _FOLDER_LIKE},
    "files": {kind: OK for kind in _FOLDER_LIKE - {"no parent"} | {"foreign folder", "holds input"}},
    "run": {kind: OK for kind in _FOLDER_LIKE},
    "cache": {kind: OK for kind in _FOLDER_LIKE | {"foreign folder", "input", "holds input"}},
}
# Figures beside the model's files: other names stay.
OVERRIDES = {(name, "input"): OK for name in ("paper -o", "heads -o", "layers -o")}


def expected(command: str, kind: str) -> str:
    return OVERRIDES.get((command, kind)) or RULE[COMMANDS[command].output].get(kind, REFUSED)


def _inputs(root: Path, tiny: Path) -> Path:
    inputs = root / "in"
    inputs.mkdir()
    shutil.copytree(tiny, inputs / "model")
    shutil.copytree(tiny, inputs / "model2")
    lines = "".join(f"w{4 + i % 50} w{5 + i % 7} w{6 + i % 11}\n" for i in range(12))
    (inputs / "src.txt").write_text(lines[:36])
    (inputs / "ref.txt").write_text(lines[:36])
    (inputs / "data").mkdir()
    for split in ("train", "val", "test"):
        for lang in ("en", "de"):
            (inputs / "data" / f"{split}.{lang}").write_text(lines if split == "train" else lines[:36])
    return inputs


def _target(root: Path, kind: str, command: Command, inputs: Path) -> Path:
    out = root / "out"
    out.mkdir()
    target = out / "target"
    if kind == "no parent":
        return out / "missing" / "target"
    if kind in ("file", "read-only file"):
        target.write_text("mine\n")
        if kind == "read-only file":
            target.chmod(0o444)
    elif kind == "empty folder":
        target.mkdir()
    elif kind == "foreign folder":
        target.mkdir()
        (target / "notes.txt").write_text("mine\n")
    elif kind == "same name":
        target.mkdir()
        (target / command.own_name).write_text("mine\n")
    elif kind in ("/dev/null", "/dev/full"):
        return Path(kind)
    elif kind == "FIFO":
        os.mkfifo(target)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(target))
        server.close()
    elif kind == "link to file":
        (out / "real.txt").write_text("mine\n")
        target.symlink_to(out / "real.txt")
    elif kind == "link to folder":
        (out / "real").mkdir()
        target.symlink_to(out / "real")
    elif kind == "dangling link":
        target.symlink_to(out / "not-yet")
    elif kind == "input":
        return command.input(inputs)
    elif kind == "holds input":
        return command.input(inputs).parent
    return target


def snapshot(root: Path) -> dict[str, tuple]:
    """Every node under `root`, links not followed: its kind, mode and content (files), or its target (links)."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            found[str(path.relative_to(root))] = ("link", os.readlink(path))
        elif stat.S_ISREG(info.st_mode):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[str(path.relative_to(root))] = ("file", stat.S_IMODE(info.st_mode), digest)
        else:
            found[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode))
    return found


class FifoReader(threading.Thread):
    """Reads a FIFO to its end (a command that writes into it must find a reader)."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path, self.data = path, b""

    def run(self) -> None:
        with open(self.path, "rb") as fifo:
            self.data = fifo.read()

    def finish(self) -> None:
        # The command never opened it: a writer's open lets the reader's open return. Opening fails
        # with ENXIO while no reader has it open: before the thread reaches its open, or after its
        # read when the thread has not yet ended; try again until the thread ends.
        deadline = time.monotonic() + 30
        while self.is_alive() and time.monotonic() < deadline:
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as error:
                if error.errno != errno.ENXIO:
                    raise
            self.join(timeout=0.05)
        self.join(timeout=30)


def _device(path: str) -> tuple[bool, int]:
    info = os.stat(path)
    return stat.S_ISCHR(info.st_mode), info.st_rdev


def run_case(monkeypatch, capsys, tmp_path: Path, tiny: Path, name: str, kind: str) -> tuple[str, str, Path]:
    """Run one command onto one kind of target; check the rule's invariants; return (outcome, stderr, target)."""
    command = COMMANDS[name]
    if kind in ("/dev/null", "/dev/full") and not Path(kind).exists():
        pytest.skip(f"{kind} is not on this system")
    inputs = _inputs(tmp_path, tiny)
    target = _target(tmp_path, kind, command, inputs)
    monkeypatch.chdir(tmp_path)  # quickstart's and paper's defaults, were they used
    if command.stub is not None:
        module, attribute = command.stub

        def reached(*args, **kwargs):
            raise Reached

        monkeypatch.setattr(f"{module}.{attribute}", reached)
    devices = {path: _device(path) for path in ("/dev/null", "/dev/full") if Path(path).exists()}
    before = snapshot(tmp_path)
    reader = FifoReader(target) if kind == "FIFO" else None
    if reader is not None:
        reader.start()
    try:
        code, _, err = run_cli(*command.args(inputs, target), capsys=capsys)
    except Reached:
        code, err = 0, capsys.readouterr().err
    finally:
        if reader is not None:
            reader.finish()
    after = snapshot(tmp_path)
    assert {path: _device(path) for path in devices} == devices, "a device node was replaced"
    assert "Traceback" not in err, err
    assert not [p for p in after if ".tmp" in Path(p).name or p.endswith(".old")], sorted(after)
    if code != 0:
        lines = [line for line in err.strip().splitlines() if not line.startswith("warning:")]
        assert code == 2 and len(lines) >= 1 and lines[-1].startswith("error: "), err
        assert [line for line in lines if line.startswith("error")] == lines[-1:], err
        assert after == before, f"a refused command changed files: {set(after.items()) ^ set(before.items())}"
        return REFUSED, lines[-1], target
    # Written: nothing changed outside the target, a link is still a link, a FIFO still a FIFO.
    inside = str(target.relative_to(tmp_path)) if target.is_relative_to(tmp_path) else None
    outside = {p: v for p, v in before.items() if inside is None or not (p == inside or p.startswith(inside + "/"))}
    kept = {p: after.get(p) for p in outside}
    if kind in ("link to file", "link to folder", "dangling link"):
        real = {"link to file": "out/real.txt", "link to folder": "out/real", "dangling link": "out/not-yet"}[kind]
        kept.pop(real, None), outside.pop(real, None)
        kept = {p: v for p, v in kept.items() if not p.startswith(real + "/")}
        outside = {p: v for p, v in outside.items() if not p.startswith(real + "/")}
    assert kept == outside, "a write changed files besides its output"
    if inside is not None and kind in ("FIFO", "link to file", "link to folder", "dangling link"):
        assert after[inside] == before[inside], f"the {kind} {target} was replaced"
    if kind in ("foreign folder", "holds input") and command.output in ("files", "cache"):
        assert {p: v for p, v in after.items() if p in before} == before  # files of other names stay
    return OK, err, target


# ---------------------------------------------------------------------------------------------
# The walk
# ---------------------------------------------------------------------------------------------

# What must run in the default tier: every refusal (they come before any work) and the writes into the
# nodes the rule writes into directly. The other writes do the commands' whole work: the slow tier.
FAST_WRITES = {"/dev/null", "FIFO", "link to file"}
STUBBED = {name for name, command in COMMANDS.items() if command.stub is not None}
# heads and layers measure a model for seconds before writing: their writes are walked over three kinds
# of folder (their files go through `staging_files` as attention's and paper's do, walked over all).
MEASURING = {"heads -o", "layers -o"}
# The default tier walks the kinds of the audit's rows (a device, a FIFO, a read-only file, a file of the
# same name, an input) and links; the slow tier the rest.
DEFAULT_KINDS = {
    "/dev/null",
    "/dev/full",
    "FIFO",
    "read-only file",
    "same name",
    "input",
    "holds input",
    "link to file",
}
CASES = [
    pytest.param(name, kind, id=f"{name}|{kind}")
    if kind in DEFAULT_KINDS and (expected(name, kind) == REFUSED or kind in FAST_WRITES or name in STUBBED)
    else pytest.param(name, kind, id=f"{name}|{kind}", marks=pytest.mark.slow)
    for name in COMMANDS
    for kind in TARGETS
    if not (
        name in MEASURING and expected(name, kind) == OK and kind not in ("new", "foreign folder", "link to folder")
    )
]


@pytest.mark.parametrize("name, kind", CASES)
def test_every_output_over_every_kind_of_target(monkeypatch, capsys, tmp_path, tiny, name, kind):
    outcome, said, target = run_case(monkeypatch, capsys, tmp_path, tiny, name, kind)
    assert outcome == expected(name, kind), said
    if kind == "/dev/full" and COMMANDS[name].output == "file":
        assert said == "error: /dev/full: No space left on device", said
    if kind == "FIFO" and outcome == OK:
        assert Path(target).exists() and stat.S_ISFIFO(os.lstat(target).st_mode)


@pytest.mark.skipif(not ROOT, reason="only root could replace /dev/null; as another user it is refused anyway")
def test_translate_into_dev_null_leaves_it_a_character_device(capsys, tmp_path, tiny):
    """The issue's row 1, as root: before the rule, the atomic rename replaced /dev/null with a file."""
    before = _device("/dev/null")
    try:
        source, reference = tmp_path / "src.txt", tmp_path / "ref.txt"
        source.write_text("w5 w6\nw7\n")
        reference.write_text("w5 w6\nw8\n")
        for args in (
            ["translate", "-m", tiny, "-i", source, "--beam", "1"],
            ["evaluate", "-i", source, "-r", reference],
        ):
            flag = "-o" if args[0] == "translate" else "--json"
            code, _, err = run_cli(*args, flag, "/dev/null", capsys=capsys)
            assert code == 0, err
            assert _device("/dev/null") == before == (True, os.makedev(1, 3))
    finally:
        if _device("/dev/null") != before:  # repair the machine before failing
            os.unlink("/dev/null")
            os.mknod("/dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))


# ---------------------------------------------------------------------------------------------
# Inputs are never outputs: every file of every input, and a link to each
# ---------------------------------------------------------------------------------------------

# Each command's inputs (the files and folders it reads), by the arguments COMMANDS gives it.
INPUTS = {
    "translate -o": lambda i: [i / "model", i / "src.txt"],
    "evaluate --json": lambda i: [i / "src.txt", i / "ref.txt"],
    "evaluate --json (model)": lambda i: [i / "model", i / "data"],
    "evaluate -o": lambda i: [i / "model", i / "data"],
    "train-tokenizer -o": lambda i: [i / "data"],
    "average -o": lambda i: [i / "model", i / "model2"],
    "export -o": lambda i: [i / "model"],
    "push --output-dir": lambda i: [i / "model"],
    "attention -o": lambda i: [i / "model", i / "src.txt"],
    "paper -o": lambda i: [i / "model"],
    "heads -o": lambda i: [i / "model", i / "data"],
    "layers -o": lambda i: [i / "model", i / "data"],
    "train --output-dir": lambda i: [i / "model", i / "data"],
    "prepare --cache-dir": lambda i: [i / "model", i / "data"],
}


def _arguments(name: str, inputs: Path, target: Path) -> list:
    if name == "evaluate --json (model)":
        return ["evaluate", "--model", inputs / "model", *_data(inputs), "--split", "test", "--json", target]
    return COMMANDS[name].args(inputs, target)


def _every_input_file(inputs: Path, name: str, linked: Path) -> list[Path]:
    """Each file of the command's inputs as the output, as named and through a link to it; a folder
    input is also given through a link, and its files named through that link."""
    found = []
    for source in INPUTS[name](inputs):
        files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
        for number, path in enumerate(files):
            link = linked / f"{source.name}-{number}-{path.name}"
            link.symlink_to(path)
            found += [path, link]
        if source.is_dir():
            folder_link = linked / f"{source.name}-folder"
            if not folder_link.exists():
                folder_link.symlink_to(source)
            found += [folder_link / files[0].relative_to(source)]
    return found


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_no_file_of_an_input_is_ever_an_output(monkeypatch, capsys, tmp_path, tiny, name):
    """The issue's row 1: `translate -m M -o M/model.safetensors` wrote a 16-byte weights file. Every file
    of the model, tokenizer and data folders (and the input files, references) is refused as the output,
    named or through a link, in one line, with nothing changed."""
    inputs = _inputs(tmp_path, tiny)
    linked = tmp_path / "links"
    linked.mkdir()
    monkeypatch.chdir(tmp_path)
    targets = _every_input_file(inputs, name, linked)
    assert len(targets) >= 3
    before = snapshot(tmp_path)
    for target in targets:
        code, _, err = run_cli(*_arguments(name, inputs, target), capsys=capsys)
        lines = [line for line in err.strip().splitlines() if not line.startswith("warning:")]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (target, err)
        assert "Traceback" not in err
        assert snapshot(tmp_path) == before, f"{name} onto {target} changed files"


# ---------------------------------------------------------------------------------------------
# --overwrite never touches a user's OUT.old
# ---------------------------------------------------------------------------------------------

OVERWRITING = ("train-tokenizer -o", "average -o", "export -o")


@pytest.mark.parametrize("old_kind", ["file", "folder"])
@pytest.mark.parametrize("name", OVERWRITING)
def test_overwrite_keeps_the_users_old(capsys, tmp_path, tiny, name, old_kind):
    """The issue's row 2: replacing OUT moved it to OUT.old after deleting whatever the user kept there.
    The backup name is one nobody has, and only what the command made is removed."""
    inputs = _inputs(tmp_path, tiny)
    out = tmp_path / "out"
    out.mkdir()
    target = out / "target"
    code, _, err = run_cli(*COMMANDS[name].args(inputs, target), capsys=capsys)
    assert code == 0, err
    old = out / "target.old"
    if old_kind == "file":
        old.write_text("mine\n")
    else:
        old.mkdir()
        (old / "notes.txt").write_text("mine\n")
    kept = snapshot(out)
    kept = {p: v for p, v in kept.items() if p.startswith("target.old")}
    code, _, err = run_cli(*COMMANDS[name].args(inputs, target), "--overwrite", capsys=capsys)
    assert code == 0, err
    after = snapshot(out)
    assert {p: v for p, v in after.items() if p.startswith("target.old")} == kept
    assert sorted(p.name for p in out.iterdir()) == ["target", "target.old"]
