"""aiayn_cli.data.prepare: the prepared-data cache (once, shared, never half-written), chunked reading
and cleaning at scale, and training that is the same with and without the cache."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
import torch
from corpora import make_pairs, write_text_split
from helpers import REPO_ROOT, cli_env, run_cli
from safetensors.torch import load_file

from aiayn_cli.data import corpus as corpus_module
from aiayn_cli.data import lines as lines_module
from aiayn_cli.data import prepare as prepare_module
from aiayn_cli.data.corpus import load_split
from aiayn_cli.data.prepare import prepare_split
from aiayn_cli.data.spec import DataSpec
from aiayn_cli.data.tokenization import tokenize_split, train_tokenizer
from aiayn_cli.errors import AiaynError


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("prepare")
    pairs = make_pairs(3000, seed=1)
    pairs[10] = ("  padded  ", "gepolstert ")
    pairs[20] = ("", "leer")
    pairs += pairs[:50]  # repeats, for dedup
    write_text_split(root / "data", "train", pairs)
    write_text_split(root / "data", "val", pairs[:40])
    spec = DataSpec(data_dir=str(root / "data"), source_lang="en", target_lang="de")
    tokenizer = train_tokenizer(spec, vocab_size=400, output_dir=root / "tok", show_progress=False)
    return {"root": root, "spec": spec, "tokenizer": tokenizer, "pairs": pairs}


def rows(dataset) -> dict:
    return dataset.with_format(None)[:]


@pytest.mark.parametrize("cleaning", [{}, {"dedup": True, "max_ratio": 2.0, "max_length": 10}])
def test_chunks_clean_and_count_as_one_read(task, monkeypatch, cleaning):
    spec = DataSpec(**{**task["spec"].__dict__, **cleaning})
    whole = load_split(spec, "train")
    monkeypatch.setattr(lines_module, "CHUNK_BYTES", 1000)  # about 30 lines a chunk
    chunked = load_split(spec, "train")
    assert rows(chunked) == rows(whole)
    assert chunked.cleaning_report == whole.cleaning_report
    assert chunked._fingerprint == whole._fingerprint
    assert whole.cleaning_report.empty == 2  # pair 20, twice
    assert whole.cleaning_report.stripped == (1 if spec.dedup else 2)  # pair 10 (and its repeat)


def test_line_counts_differ_names_both_counts_after_many_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(lines_module, "CHUNK_BYTES", 1 << 16)
    (tmp_path / "train.en").write_bytes(b"a b c\n" * 1_500_000)
    (tmp_path / "train.de").write_bytes(b"x y\n" * 1_499_999)
    with pytest.raises(AiaynError, match=r"train\.en has 1500000 lines, .*train\.de has 1499999$"):
        load_split(DataSpec(data_dir=tmp_path, source_lang="en", target_lang="de"), "train")


def test_prepared_data_equals_tokenizing_the_loaded_split(task, tmp_path, monkeypatch):
    monkeypatch.setattr(lines_module, "CHUNK_BYTES", 4096)
    prepared = prepare_split(task["spec"], "train", task["tokenizer"], max_length=12, cache_dir=tmp_path / "p")
    loaded = load_split(task["spec"], "train")
    plain = tokenize_split(loaded, task["tokenizer"], max_length=12, cache_dir=tmp_path / "t")
    assert not prepared.from_cache
    assert rows(prepared.dataset) == rows(plain)
    assert prepared.num_too_long == plain.num_too_long > 0
    assert prepared.report == loaded.cleaning_report


def test_a_second_run_opens_the_cache_without_reading_the_text(task, tmp_path, monkeypatch):
    first = prepare_split(task["spec"], "train", task["tokenizer"], cache_dir=tmp_path)

    def no_reading(*args, **kwargs):
        raise AssertionError("the text was read again")

    with monkeypatch.context() as patched:
        patched.setattr(corpus_module, "open_pairs", no_reading)
        patched.setattr(prepare_module, "open_pairs", no_reading)
        patched.setattr(corpus_module, "file_digest", _digest_without_hashing)
        again = prepare_split(task["spec"], "train", task["tokenizer"], cache_dir=tmp_path)
    assert again.from_cache and again.path == first.path
    assert rows(again.dataset) == rows(first.dataset)

    # Touched but unchanged: hashed again, the same cache. Changed: prepared anew.
    source = task["root"] / "data" / "train.en"
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    assert prepare_split(task["spec"], "train", task["tokenizer"], cache_dir=tmp_path).path == first.path
    other = DataSpec(**{**task["spec"].__dict__, "max_ratio": 1.5})
    assert prepare_split(other, "train", task["tokenizer"], cache_dir=tmp_path).path != first.path


def _digest_without_hashing(path, identity_file=None):
    from aiayn_cli.data.text_files import _read_identities

    known = _read_identities(identity_file)
    stat = path.stat()
    entry = known[str(path.resolve())]
    assert entry[0] == [stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_dev], "the file was hashed again"
    return bytes.fromhex(entry[1])


def test_a_full_disk_leaves_no_cache_that_a_later_run_trusts(task, tmp_path, monkeypatch):
    real_write = prepare_module._write
    calls = []

    def fill_the_disk(tables, path):
        calls.append(path)
        if len(calls) == 2:  # the cleaned file: half written, then the disk is full
            path.write_bytes(b"half")
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(tables, path)

    monkeypatch.setattr(prepare_module, "_write", fill_the_disk)
    with pytest.raises(AiaynError, match="no space left on the disk while preparing train; nothing was kept"):
        prepare_split(task["spec"], "train", task["tokenizer"], cache_dir=tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["identities.json"]  # no folder, no staging left
    monkeypatch.setattr(prepare_module, "_write", real_write)
    again = prepare_split(task["spec"], "train", task["tokenizer"], cache_dir=tmp_path)
    assert not again.from_cache and len(again.dataset) > 0


def test_a_damaged_cache_is_named(task, tmp_path):
    prepared = prepare_split(task["spec"], "train", task["tokenizer"], cache_dir=tmp_path)
    (prepared.path / "prepared.json").write_text("{")
    with pytest.raises(AiaynError, match="prepared data is damaged.*delete the folder"):
        prepare_split(task["spec"], "train", task["tokenizer"], cache_dir=tmp_path)


@pytest.mark.slow  # three short training runs
def test_training_is_the_same_with_and_without_the_cache(task, tmp_path, monkeypatch):
    """Three runs of 3 steps: on data tokenized in memory (no cache), on a cache written by the
    run, on a cache opened from disk. Same batches, same weights."""
    from aiayn_cli.training import trainer
    from aiayn_cli.training.recipe import load_recipe

    def run(name: str, cache: str | None):
        recipe = load_recipe(
            REPO_ROOT / "recipes" / "tiny.yaml",
            {
                "data.data_dir": str(task["root"] / "data"),
                "data.cache_dir": cache,
                "tokenizer": str(task["root"] / "tok"),
                "output_dir": str(tmp_path / name),
                "max_steps": 3,
                "max_tokens": 256,
                "mixed_precision": "no",  # fp32 on every CPU
                "valid_split": None,
                "best_metric": "loss",
                "average_last": None,
                "trackers": [],
                "checkpoint_every_steps": None,
            },
        )
        seen = []
        real_load_data = trainer.load_data

        def recording(*args, **kwargs):
            data = real_load_data(*args, **kwargs)
            seen.append([list(batch) for batch in data.train_sampler.epoch_batches(0)])
            return data

        monkeypatch.setattr(trainer, "load_data", recording)
        result = trainer.train(recipe, show_progress=False)
        return seen[0], load_file(result.last_checkpoint / "model.safetensors")

    def in_memory(spec, split, tokenizer, *, max_length=None, num_proc=None, show_progress=False, cache_dir=None):
        loaded = load_split(spec, split)
        dataset = tokenize_split(loaded, tokenizer, max_length=max_length, cache_dir=tmp_path / "plain")
        return prepare_module.PreparedSplit(dataset, loaded.cleaning_report, dataset.num_too_long, tmp_path, False)

    with monkeypatch.context() as patched:
        patched.setattr(trainer, "prepare_split", in_memory)
        batches_plain, weights_plain = run("plain", None)
    batches_written, weights_written = run("written", str(tmp_path / "cache"))
    batches_opened, weights_opened = run("opened", str(tmp_path / "cache"))
    assert batches_plain == batches_written == batches_opened
    assert weights_plain.keys() == weights_opened.keys()
    for name in weights_plain:
        assert torch.equal(weights_plain[name], weights_written[name]), name
        assert torch.equal(weights_plain[name], weights_opened[name]), name
    assert any((tmp_path / "cache").rglob("prepared.json"))


@pytest.mark.slow  # two CLI processes
def test_prepare_command_prints_where_the_cache_is(task, tmp_path):
    args = [
        "prepare",
        str(REPO_ROOT / "recipes" / "tiny.yaml"),
        "--data-dir",
        str(task["root"] / "data"),
        "--tokenizer",
        str(task["root"] / "tok"),
        "--cache-dir",
        str(tmp_path),
        "--no-progress",
    ]
    first = run_cli(*args, env=cli_env())
    second = run_cli(*args, env=cli_env())
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert " pairs prepared: " + str(tmp_path) in first.stdout
    assert " pairs opened from the cache: " + str(tmp_path) in second.stdout
    assert "pairs read" in first.stderr
    assert np.unique([first.stdout.split(": ")[-1], second.stdout.split(": ")[-1]]).size == 1
