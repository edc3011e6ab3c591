"""The ctranslate2 engine's cache repairs itself: a converted folder that does not match its manifest
(a file truncated, emptied, overwritten, deleted or replaced by a folder; another model's conversion;
no manifest) is converted again in `aiayn translate` and in the Python API, and a file where the
cache folder goes is one line. Precision: fp32 (CTranslate2's float32)."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

pytest.importorskip("ctranslate2")

from helpers import run_cli, sentences  # noqa: E402
from helpers import save_varied_model as saved_model  # noqa: E402

from aiayn_cli.decoding.ctranslate2_cache import MANIFEST, manifest_problem  # noqa: E402
from aiayn_cli.decoding.translator import Translator  # noqa: E402
from aiayn_cli.errors import AiaynError  # noqa: E402

INPUTS = sentences(6, seed=2)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A model, its converted folder (a pristine copy), the folder's name in a cache, the torch
    engine's translations, and another model's converted folder."""
    root = tmp_path_factory.mktemp("cache")
    model_dir, other_dir = saved_model(root / "model"), saved_model(root / "other", seed=1)
    with pytest.MonkeyPatch.context() as env:  # converted as `aiayn translate` converts a model folder
        env.setenv("AIAYN_CACHE", str(root / "cache"))
        ct2, other = (
            Translator.from_pretrained(str(folder), device="cpu", dtype="fp32", engine="ctranslate2")
            for folder in (model_dir, other_dir)
        )
    want = Translator.from_pretrained(str(model_dir), device="cpu", dtype="fp32").translate(INPUTS)
    assert ct2.translate(INPUTS) == want
    return {"model": model_dir, "folder": ct2.engine.folder, "other": other.engine.folder, "want": want}


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _random(path):
    path.write_bytes(os.urandom(path.stat().st_size))


def _folder(path):
    path.unlink()
    path.mkdir()
    (path / "x").write_text("x")


DAMAGE = {
    "model.bin truncated": ("model.bin", _truncate),
    "model.bin emptied": ("model.bin", lambda p: p.write_bytes(b"")),
    "model.bin random": ("model.bin", _random),
    "model.bin deleted": ("model.bin", lambda p: p.unlink()),
    "model.bin a folder": ("model.bin", _folder),
    "vocabulary missing": ("shared_vocabulary.json", lambda p: p.unlink()),
    "vocabulary truncated": ("shared_vocabulary.json", _truncate),
    "config.json missing": ("config.json", lambda p: p.unlink()),
    "config.json truncated": ("config.json", _truncate),
    "no manifest": (MANIFEST, lambda p: p.unlink()),
}


def _cache(tmp_path, converted, how: str | None):
    """A cache holding the model's converted folder, damaged `how`; its folder."""
    folder = tmp_path / "cache" / "ctranslate2" / converted["folder"].name
    shutil.copytree(converted["folder"], folder)
    if how == "another model's":
        shutil.rmtree(folder)
        shutil.copytree(converted["other"], folder)
    elif how is not None:
        name, damage = DAMAGE[how]
        damage(folder / name)
    assert manifest_problem(folder, folder.name) is not None or how is None
    return folder


@pytest.mark.parametrize("how", [*DAMAGE, "another model's"])
@pytest.mark.parametrize("front", ["translate", "python"])
def test_a_damaged_cache_is_converted_again(converted, tmp_path, monkeypatch, capsys, how, front):
    folder = _cache(tmp_path, converted, how)
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
    if front == "translate":
        args = ("translate", "-m", converted["model"], "--precision", "fp32", *INPUTS, "--engine", "ctranslate2")
        code, out, err = run_cli(*args, capsys=capsys)
        assert code == 0, err
        assert out.splitlines() == converted["want"]
        assert f"warning: {folder}: " in err and "converting the model again" in err
    else:
        translator = Translator.from_pretrained(str(converted["model"]), dtype="fp32", engine="ctranslate2")
        assert translator.engine.converted and translator.translate(INPUTS) == converted["want"]
    assert manifest_problem(folder, folder.name) is None
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # no staging or old folder left


def test_a_sound_cache_is_read_as_it_is(converted, tmp_path, monkeypatch):
    folder = _cache(tmp_path, converted, None)
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["model"] == folder.name and {"model.bin", "config.json"} <= set(manifest["files"])
    monkeypatch.setenv("AIAYN_CACHE", str(tmp_path / "cache"))
    translator = Translator.from_pretrained(str(converted["model"]), dtype="fp32", engine="ctranslate2")
    assert not translator.engine.converted and translator.translate(INPUTS) == converted["want"]


@pytest.mark.parametrize("where", ["the model's folder", "the cache"])
@pytest.mark.parametrize("front", ["translate", "python"])
def test_a_file_where_a_cache_folder_goes_is_one_line(converted, tmp_path, monkeypatch, capsys, where, front):
    cache = tmp_path / "cache"
    place = cache / "ctranslate2" / converted["folder"].name if where == "the model's folder" else cache
    place.parent.mkdir(parents=True, exist_ok=True)
    place.write_text("mine\n")
    monkeypatch.setenv("AIAYN_CACHE", str(cache))
    line = f"{place}: is a file, where the converted models' cache folder goes; move it away or set AIAYN_CACHE"
    if front == "translate":
        args = ("translate", "-m", converted["model"], "--precision", "fp32", "w1 w2", "--engine", "ctranslate2")
        code, out, err = run_cli(*args, capsys=capsys)
        assert (code, out) == (2, "") and err.strip().startswith(f"error: {line}") and len(err.splitlines()) == 1
    else:
        with pytest.raises(AiaynError, match="^" + re.escape(line)):
            Translator.from_pretrained(str(converted["model"]), dtype="fp32", engine="ctranslate2")
    assert place.read_text() == "mine\n"
