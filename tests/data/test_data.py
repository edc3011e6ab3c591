"""aiayn_cli.data.corpus: one loader for Hub datasets, save_to_disk folders, text pairs, TSV and JSONL."""

from __future__ import annotations

import json
import re

import datasets
import pytest
from corpora import make_pairs, write_jsonl, write_lines, write_text_split, write_tsv
from helpers import run_cli

from aiayn_cli.data.corpus import load_split
from aiayn_cli.data.spec import DataSpec
from aiayn_cli.errors import AiaynError


def pairs_of(dataset: datasets.Dataset) -> list[tuple[str, str]]:
    assert dataset.column_names == ["source", "target"]
    return list(zip(dataset["source"], dataset["target"]))


# ---------------------------------------------------------------------------------------------
# Multi30k: split aliases, counted whitespace stripping
# ---------------------------------------------------------------------------------------------


def test_multi30k_splits_are_found_under_their_aliases(multi30k_dir):
    spec = DataSpec(data_dir=multi30k_dir, source_lang="en", target_lang="de")
    train, validation, test = (load_split(spec, split) for split in ("train", "validation", "test"))
    assert (len(train), len(validation), len(test)) == (29000, 1014, 1000)
    assert len(load_split(spec, "val")) == 1014
    # train.de has 40 lines with trailing whitespace: stripped, kept and counted.
    report = train.cleaning_report
    assert (report.read, report.kept, report.stripped, report.dropped) == (29000, 29000, 40, 0)
    assert all(t == t.strip() for t in train["target"])
    assert "29000 pairs read" in str(report) and "stripped whitespace in 40" in str(report)
    assert validation.cleaning_report.origin.endswith("val.de")


# ---------------------------------------------------------------------------------------------
# Every source gives the same dataset
# ---------------------------------------------------------------------------------------------


def test_every_local_format_gives_the_same_pairs(tmp_path):
    pairs = make_pairs(40, seed=1)
    write_text_split(tmp_path / "text", "train", pairs)
    write_text_split(tmp_path / "text", "dev", pairs[:5])
    write_jsonl(tmp_path / "corpus.jsonl", pairs)
    write_tsv(tmp_path / "corpus.tsv", pairs)
    write_lines(tmp_path / "flat.jsonl", [json.dumps({"de": t, "en": s, "id": i}) for i, (s, t) in enumerate(pairs)])
    (tmp_path / "jsonl_dir").mkdir()
    write_jsonl(tmp_path / "jsonl_dir" / "train.jsonl", pairs)
    translation = [{"en": s, "de": t} for s, t in pairs]
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"translation": translation})}).save_to_disk(
        str(tmp_path / "saved_dict")
    )
    datasets.Dataset.from_dict({"en": [s for s, _ in pairs], "de": [t for _, t in pairs]}).save_to_disk(
        str(tmp_path / "saved_one")
    )

    langs = dict(source_lang="en", target_lang="de")
    specs = {
        "data_dir": DataSpec(data_dir=tmp_path / "text", **langs),
        "prefix": DataSpec(prefix=str(tmp_path / "text" / "train"), **langs),
        "prefix {split}": DataSpec(prefix=str(tmp_path / "text" / "{split}"), **langs),
        "two files": DataSpec(source_file=tmp_path / "text/train.en", target_file=tmp_path / "text/train.de"),
        "tsv": DataSpec(data_file=tmp_path / "corpus.tsv"),
        "jsonl": DataSpec(data_file=tmp_path / "corpus.jsonl", **langs),
        "flat jsonl": DataSpec(data_file=tmp_path / "flat.jsonl", **langs),
        "jsonl in data_dir": DataSpec(data_dir=tmp_path / "jsonl_dir", **langs),
        "save_to_disk dict": DataSpec(dataset=str(tmp_path / "saved_dict"), **langs),
        "save_to_disk dataset": DataSpec(dataset=str(tmp_path / "saved_one"), **langs),
    }
    for name, spec in specs.items():
        assert pairs_of(load_split(spec, "train")) == pairs, name
    # `{split}` and the folder find "dev" for validation.
    for spec in (specs["data_dir"], specs["prefix {split}"]):
        assert pairs_of(load_split(spec, "validation")) == pairs[:5]
    # Reversed direction: the languages pick the columns.
    reverse = DataSpec(dataset=str(tmp_path / "saved_dict"), source_lang="de", target_lang="en")
    assert pairs_of(load_split(reverse, "train")) == [(t, s) for s, t in pairs]
    tsv_reverse = DataSpec(data_file=tmp_path / "corpus.tsv", source_column="1", target_column="0")
    assert pairs_of(load_split(tsv_reverse, "train")) == [(t, s) for s, t in pairs]


def test_hub_loader_reads_a_local_dataset_folder(tmp_path):
    """`--dataset FOLDER` goes through `datasets.load_dataset`, as a Hub name does (offline here)."""
    pairs = make_pairs(30, seed=2)
    write_jsonl(tmp_path / "hub_like" / "train.jsonl", pairs)
    write_jsonl(tmp_path / "hub_like" / "validation.jsonl", pairs[:6])
    spec = DataSpec(
        dataset=str(tmp_path / "hub_like"), source_lang="en", target_lang="de", cache_dir=tmp_path / "cache"
    )
    assert pairs_of(load_split(spec, "train")) == pairs
    assert pairs_of(load_split(spec, "dev")) == pairs[:6]  # "dev" finds "validation"
    with pytest.raises(AiaynError, match=r"has no split 'test'.*train"):
        load_split(spec, "test")
    # Objects whose translation keys differ: `datasets` types the column as Json.
    rows = [{"translation": {"en": s, "de": t, **({"fr": "x"} if i == 0 else {})}} for i, (s, t) in enumerate(pairs)]
    write_lines(tmp_path / "mixed" / "train.jsonl", [json.dumps(row) for row in rows])
    mixed = DataSpec(dataset=str(tmp_path / "mixed"), source_lang="en", target_lang="de", cache_dir=tmp_path / "cache")
    assert pairs_of(load_split(mixed, "train")) == pairs


def test_byte_order_mark_and_crlf_line_ends(tmp_path):
    (tmp_path / "train.en").write_bytes(b"\xef\xbb\xbfA dog.\r\nA cat.\r\n")
    (tmp_path / "train.de").write_bytes(b"Ein Hund.\r\nEine Katze.")  # no newline at the end
    dataset = load_split(DataSpec(data_dir=tmp_path, source_lang="en", target_lang="de"), "train")
    assert pairs_of(dataset) == [("A dog.", "Ein Hund."), ("A cat.", "Eine Katze.")]
    assert dataset.cleaning_report.stripped == 0  # "\r\n" is a line end (aiayn_cli.data.lines), not whitespace


def test_fingerprint_follows_content_and_cleaning(tmp_path):
    write_text_split(tmp_path / "a", "train", make_pairs(20, seed=3))
    write_text_split(tmp_path / "b", "train", make_pairs(20, seed=3))
    write_text_split(tmp_path / "c", "train", make_pairs(20, seed=4))

    def fingerprint(folder, **kw):
        return load_split(
            DataSpec(data_dir=tmp_path / folder, source_lang="en", target_lang="de", **kw), "train"
        )._fingerprint

    assert fingerprint("a") == fingerprint("b")  # same bytes, another folder
    assert fingerprint("a") != fingerprint("c")
    assert fingerprint("a") != fingerprint("a", dedup=True)


# ---------------------------------------------------------------------------------------------
# Cleaning: counted and reported
# ---------------------------------------------------------------------------------------------


def test_cleaning_counts_each_kind_of_dropped_pair(tmp_path):
    pairs = [
        ("  Hello there ", "Hallo da\t"),  # kept, stripped
        ("", "Leer"),  # empty
        ("Empty", "   "),  # empty after stripping
        (" ".join(["word"] * 11), "elf Wörter"),  # too long (11 > 10)
        ("one", "eins zwei drei vier"),  # ratio 4 > 3
        ("Hello there", "Hallo da"),  # a duplicate of the first, once stripped
        ("A dog runs.", "Ein Hund rennt."),  # kept
        ("A dog runs.", "Ein Hund läuft."),  # kept: another target
    ]
    write_text_split(tmp_path, "train", pairs)
    spec = DataSpec(data_dir=tmp_path, source_lang="en", target_lang="de", max_length=10, max_ratio=3, dedup=True)
    dataset = load_split(spec, "train")
    report = dataset.cleaning_report
    assert pairs_of(dataset) == [
        ("Hello there", "Hallo da"),
        ("A dog runs.", "Ein Hund rennt."),
        ("A dog runs.", "Ein Hund läuft."),
    ]
    assert (
        report.read,
        report.empty,
        report.too_long,
        report.bad_ratio,
        report.duplicates,
        report.kept,
        report.stripped,
    ) == (8, 2, 1, 1, 1, 3, 1)
    text = str(report)
    for phrase in (
        "8 pairs read",
        "3 kept",
        "2 empty",
        "1 longer than 10 tokens",
        "1 past length ratio 3",
        "1 duplicates",
        "stripped whitespace in 1",
    ):
        assert phrase in text

    # Without limits only the empty pairs go.
    plain = load_split(DataSpec(data_dir=tmp_path, source_lang="en", target_lang="de"), "train")
    assert len(plain) == 6 and plain.cleaning_report.dropped == 2


# ---------------------------------------------------------------------------------------------
# Bad input: one clear line, AiaynError
# ---------------------------------------------------------------------------------------------


def _bad_inputs(tmp_path):
    """(name, DataSpec, split, a regex the message must match) for every kind of bad input."""
    langs = dict(source_lang="en", target_lang="de")
    good = make_pairs(5)
    write_text_split(tmp_path / "ok", "train", good)
    write_lines(tmp_path / "short" / "train.en", [s for s, _ in good])
    write_lines(tmp_path / "short" / "train.de", [t for _, t in good[:4]])
    (tmp_path / "utf8").mkdir()
    (tmp_path / "utf8" / "train.en").write_bytes(b"one\ntwo\nthr\xffee\nfour\n")
    write_lines(tmp_path / "utf8" / "train.de", ["eins", "zwei", "drei", "vier"])
    write_jsonl(tmp_path / "pairs.jsonl", good)
    write_lines(tmp_path / "broken.jsonl", [json.dumps({"translation": {"en": "a", "de": "b"}}), '{"translation": {'])
    write_lines(tmp_path / "one_column.tsv", ["a\tb", "only one column"])
    write_text_split(tmp_path / "blank", "train", [("  ", "x"), ("y", "")])
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"translation": [{"en": "a", "de": "b"}]})}).save_to_disk(
        str(tmp_path / "saved")
    )
    return [
        (
            "missing file",
            DataSpec(source_file=tmp_path / "nope.en", target_file=tmp_path / "ok/train.de"),
            "train",
            r".*nope\.en: no such file",
        ),
        (
            "missing split",
            DataSpec(data_dir=tmp_path / "ok", **langs),
            "test",
            r"no test data for en-de .*looked for test\.en\+test\.de, test2016\.en\+test2016\.de",
        ),
        (
            "line counts",
            DataSpec(data_dir=tmp_path / "short", **langs),
            "train",
            r"line counts differ: .*short/train\.en has 5 lines, .*short/train\.de has 4",
        ),
        ("invalid utf-8", DataSpec(data_dir=tmp_path / "utf8", **langs), "train", r"utf8/train\.en:3: invalid UTF-8"),
        (
            "unknown language key",
            DataSpec(data_file=tmp_path / "pairs.jsonl", source_lang="en", target_lang="fr"),
            "train",
            r"pairs\.jsonl.*language 'fr' \(--target-lang\).*keys: en, de",
        ),
        (
            "unknown column",
            DataSpec(dataset=str(tmp_path / "saved"), **langs, source_column="text"),
            "train",
            r"no column 'text' for --source-column \(columns: translation\.en, translation\.de\)",
        ),
        (
            "invalid json",
            DataSpec(data_file=tmp_path / "broken.jsonl", **langs),
            "train",
            r"broken\.jsonl:2: invalid JSON",
        ),
        (
            "tsv columns",
            DataSpec(data_file=tmp_path / "one_column.tsv"),
            "train",
            r"one_column\.tsv:2: expected at least 2",
        ),
        (
            "empty after cleaning",
            DataSpec(data_dir=tmp_path / "blank", **langs),
            "train",
            r"no sentence pairs left in train after cleaning \(.*2 empty",
        ),
        (
            "no split in saved dataset",
            DataSpec(dataset=str(tmp_path / "saved"), **langs),
            "test",
            r"has no split 'test' \(splits: train\)",
        ),
        (
            "unreachable hub dataset",
            DataSpec(dataset="no-such-user/no-such-dataset", dataset_config="de-en", **langs),
            "train",
            r"could not reach the Hub dataset no-such-user/no-such-dataset \(de-en\) \(.*\); to use a local copy, pass a folder of train.en, train.de, val.en, ... files with data_dir",
        ),
    ]


def test_bad_inputs_raise_one_clear_line(tmp_path):
    for name, spec, split, pattern in _bad_inputs(tmp_path):
        with pytest.raises(AiaynError) as error:
            load_split(spec, split)
        message = str(error.value)
        assert "\n" not in message, name
        assert re.search(pattern, message), f"{name}: {message}"


def test_specs_that_name_no_source_or_two_are_refused(tmp_path):
    with pytest.raises(AiaynError, match="no data given"):
        load_split(DataSpec(source_lang="en", target_lang="de"), "train")
    with pytest.raises(AiaynError, match="give one data source, not dataset and data_dir"):
        load_split(DataSpec(dataset="wmt14", data_dir=tmp_path, source_lang="en", target_lang="de"), "train")
    with pytest.raises(AiaynError, match="source_lang and target_lang are required"):
        load_split(DataSpec(data_dir=tmp_path), "train")
    with pytest.raises(AiaynError, match="go together"):
        load_split(DataSpec(source_file=tmp_path / "a"), "train")


@pytest.mark.parametrize(
    "case",
    ["missing file", "line counts", "invalid utf-8", "unknown language key", "unknown column", "empty after cleaning"],
)
def test_cli_reports_bad_input_and_leaves_no_output(tmp_path, capsys, case):
    name, spec, split, _ = next(item for item in _bad_inputs(tmp_path) if item[0] == case)
    args = ["train-tokenizer", "-o", tmp_path / "out" / "tok", "--vocab-size", "500", "--split", split]
    for option, value in (
        ("--dataset", spec.dataset),
        ("--data-dir", spec.data_dir),
        ("--data-file", spec.data_file),
        ("--source-file", spec.source_file),
        ("--target-file", spec.target_file),
        ("-s", spec.source_lang),
        ("-t", spec.target_lang),
        ("--source-column", spec.source_column),
    ):
        if value:
            args += [option, value]
    code, out, err = run_cli(*args, capsys=capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert not (tmp_path / "out").exists()


def test_cli_reads_a_saved_dataset_with_cleaning_options(tmp_path, capsys):
    pairs = make_pairs(120, seed=9)
    pairs = pairs + pairs[:20] + [("one two three four five six seven eight nine ten eleven twelve thirteen", "x y")]
    translation = [{"en": s, "de": t} for s, t in pairs]
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"translation": translation})}).save_to_disk(
        str(tmp_path / "saved")
    )
    code, out, err = run_cli(
        "train-tokenizer",
        "--dataset",
        tmp_path / "saved",
        "-s",
        "de",
        "-t",
        "en",
        "--max-length",
        "12",
        "--max-ratio",
        "4",
        "--dedup",
        "--vocab-size",
        "350",
        "-o",
        tmp_path / "tok",
        capsys=capsys,
    )
    assert code == 0, err
    report = next(line for line in err.splitlines() if "pairs read" in line)
    unique = len(set(pairs[:120]))  # random short sentences repeat now and then
    assert report == (
        f"train ({tmp_path / 'saved'}): 141 pairs read, {unique} kept; dropped 0 empty, "
        f"1 longer than 12 tokens, 0 past length ratio 4, {140 - unique} duplicates; "
        "stripped whitespace in 0"
    )
    assert (tmp_path / "tok" / "tokenizer.json").is_file()


def test_cli_subprocess_exit_code_and_message(tmp_path):
    write_lines(tmp_path / "train.en", ["a", "b", "c"])
    write_lines(tmp_path / "train.de", ["x", "y"])
    result = run_cli("train-tokenizer", "--data-dir", tmp_path, "-s", "en", "-t", "de", "-o", tmp_path / "tok")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: line counts differ: {tmp_path}/train.en has 3 lines, {tmp_path}/train.de has 2"
    ]
    assert "Traceback" not in result.stderr and not (tmp_path / "tok").exists()


def test_jsonl_values_of_two_types_name_the_line(tmp_path):
    from aiayn_cli.data.text_files import jsonl_chunks

    rows = [{"translation": {"en": f"a dog {i}", "de": f"ein Hund {i}"}} for i in range(5)]
    rows[3] = {"translation": {"en": 5, "de": None}}
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        "\n".join(json.dumps(row) for row in rows[:2]) + "\n\n" + "\n".join(json.dumps(r) for r in rows[2:])
    )
    with pytest.raises(AiaynError, match=r'pairs.jsonl:5: "translation.en" is a number here but a string on line 1'):
        list(jsonl_chunks(path))
