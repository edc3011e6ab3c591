"""aiayn_cli.data.tokenization: one joint vocabulary, reversible, no <unk>, loads with AutoTokenizer."""

from __future__ import annotations

import json

import pytest
from corpora import make_pairs, write_text_split
from helpers import run_cli
from transformers import AutoTokenizer

from aiayn_cli.data.corpus import load_split
from aiayn_cli.data.spec import DataSpec
from aiayn_cli.data.tokenization import BYTE_TOKENS, SPECIAL_TOKENS, train_tokenizer
from aiayn_cli.errors import AiaynError

UNK_ID = 3
EXOTIC = ["Ein Café in Zürich 漢字 😀 ŋ ∑ ꙮ", "tab\there", "two  spaces and ünïcödé", "Moses , tokenized ' s text ."]


def round_trip_rate(tokenizer, sentences) -> float:
    ids = tokenizer(sentences)["input_ids"]
    decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
    return sum(d == s for d, s in zip(decoded, sentences)) / len(sentences)


def test_multi30k_joint_bpe_round_trips_and_never_emits_unk(bpe_multi30k, multi30k_dir):
    tokenizer = bpe_multi30k
    assert len(tokenizer) == 10000
    assert tokenizer.convert_ids_to_tokens(list(range(4))) == list(SPECIAL_TOKENS)
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (
        0,
        1,
        2,
        3,
    )
    validation = load_split(DataSpec(data_dir=multi30k_dir, source_lang="en", target_lang="de"), "validation")
    for side in ("source", "target"):
        sentences = list(validation[side])
        assert round_trip_rate(tokenizer, sentences) >= 0.999, side
        assert not any(UNK_ID in ids for ids in tokenizer(sentences)["input_ids"]), side
    # Characters never seen in training fall back to bytes, not <unk>.
    for text in EXOTIC:
        ids = tokenizer(text)["input_ids"]
        assert UNK_ID not in ids and ids[-1] == 2
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
    # One vocabulary for both languages: German and English words share it.
    vocab = tokenizer.get_vocab()
    assert "▁Hund" in vocab and "▁dog" in vocab


def test_saved_folder_loads_with_auto_tokenizer(bpe_multi30k, tmp_path):
    out = tmp_path / "tok"
    from aiayn_cli.data.tokenization import save_atomically

    save_atomically(bpe_multi30k, out)
    assert sorted(p.name for p in out.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    assert json.loads((out / "tokenizer_config.json").read_text())["model_max_length"] == 1024
    loaded = AutoTokenizer.from_pretrained(out)
    text = "Ein Hund rennt über die Wiese."
    assert loaded(text)["input_ids"] == bpe_multi30k(text)["input_ids"]
    assert loaded(text)["input_ids"][-1] == 2 and loaded(text_target=text)["input_ids"][-1] == 2
    assert loaded(text)["input_ids"].count(2) == 1 and 1 not in loaded(text)["input_ids"]
    assert loaded.model_max_length == 1024 and loaded.pad_token == "<pad>" and loaded.padding_side == "right"
    assert [p.name for p in tmp_path.iterdir()] == ["tok"]  # no staging folder left


def test_unigram_model_and_byte_fallback(tmp_path):
    pairs = make_pairs(300, seed=5)
    write_text_split(tmp_path, "train", pairs)
    spec = DataSpec(data_dir=tmp_path, source_lang="en", target_lang="de")
    tokenizer = train_tokenizer(spec, vocab_size=400, model="unigram", output_dir=tmp_path / "uni", show_progress=False)
    state = json.loads((tmp_path / "uni" / "tokenizer.json").read_text())
    assert state["model"]["type"] == "Unigram" and state["model"]["byte_fallback"] is True
    assert tokenizer.convert_ids_to_tokens(list(range(4 + 256))) == list(SPECIAL_TOKENS) + list(BYTE_TOKENS)
    for text in [s for s, _ in pairs[:50]] + [t for _, t in pairs[:50]] + EXOTIC:
        ids = tokenizer(text)["input_ids"]
        assert UNK_ID not in ids and ids[-1] == 2
        assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_max_sentences_is_a_seeded_uniform_sample():
    # Each sentence is one character seen nowhere else: the learned alphabet shows which were sampled.
    sentences = [chr(0x4E00 + i) * 3 for i in range(200)]

    def sampled(seed):
        tokenizer = train_tokenizer(sentences, vocab_size=400, max_sentences=20, seed=seed, show_progress=False)
        return {c for token in tokenizer.get_vocab() for c in token if 0x4E00 <= ord(c) < 0x4E00 + 200}

    first = sampled(0)
    assert len(first) == 20 and sampled(0) == first and sampled(1) != first


def test_a_data_spec_is_streamed_in_chunks_and_sampled_by_pairs(tmp_path, monkeypatch):
    from aiayn_cli.data import lines

    # Pair i is one character seen nowhere else (on both sides): the alphabet shows which were sampled.
    pairs = [(chr(0x4E00 + i) * 3, chr(0x4E00 + i) * 2) for i in range(300)]
    write_text_split(tmp_path, "train", pairs)
    spec = DataSpec(data_dir=tmp_path, source_lang="en", target_lang="de")
    monkeypatch.setattr(lines, "CHUNK_BYTES", 256)  # many chunks

    def alphabet(tokenizer):
        return {c for token in tokenizer.get_vocab() for c in token if 0x4E00 <= ord(c) < 0x4E00 + 300}

    streamed = train_tokenizer(spec, vocab_size=700, show_progress=False)
    loaded = train_tokenizer(load_split(spec, "train"), vocab_size=700, show_progress=False)
    assert streamed.get_vocab() == loaded.get_vocab()
    assert streamed.cleaning_report == load_split(spec, "train").cleaning_report

    first = train_tokenizer(spec, vocab_size=700, max_sentences=25, seed=0, show_progress=False)
    assert len(alphabet(first)) == 25 and first.cleaning_report.read == 300
    assert alphabet(train_tokenizer(spec, vocab_size=700, max_sentences=25, seed=0, show_progress=False)) == alphabet(
        first
    )
    assert alphabet(train_tokenizer(spec, vocab_size=700, max_sentences=25, seed=1, show_progress=False)) != alphabet(
        first
    )


def test_bad_options_and_existing_output(tmp_path):
    write_text_split(tmp_path / "data", "train", make_pairs(20))
    spec = DataSpec(data_dir=tmp_path / "data", source_lang="en", target_lang="de")
    with pytest.raises(AiaynError, match="vocab_size must be at least"):
        train_tokenizer(spec, vocab_size=100)
    with pytest.raises(AiaynError, match="model must be one of bpe, unigram"):
        train_tokenizer(spec, model="wordpiece")
    with pytest.raises(AiaynError, match="vocab_size must be at most 1,000,000"):
        train_tokenizer(spec, vocab_size=99999999999)  # the trainer would abort the process
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    for overwrite in (False, True):  # a folder holding anything but a tokenizer is never replaced
        with pytest.raises(AiaynError, match="holds files that are not part of a tokenizer"):
            train_tokenizer(spec, vocab_size=400, output_dir=tmp_path / "out", overwrite=overwrite, show_progress=False)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]
    (tmp_path / "out" / "keep.txt").unlink()
    train_tokenizer(spec, vocab_size=400, output_dir=tmp_path / "out", show_progress=False)  # empty: written
    with pytest.raises(AiaynError, match="exists and holds a tokenizer; pass overwrite"):
        train_tokenizer(spec, vocab_size=400, output_dir=tmp_path / "out", show_progress=False)
    train_tokenizer(spec, vocab_size=400, output_dir=tmp_path / "out", overwrite=True, show_progress=False)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "out"]
    for inside in (tmp_path / "data", tmp_path):  # the corpus' folder, or a folder holding it
        with pytest.raises(AiaynError, match="the input"):
            train_tokenizer(spec, vocab_size=400, output_dir=inside, overwrite=True, show_progress=False)
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["train.de", "train.en"]


def test_a_failure_while_saving_leaves_nothing(tmp_path, monkeypatch):
    from transformers import PreTrainedTokenizerFast

    def broken(self, folder, **kwargs):
        (folder / "tokenizer.json").write_text("{half")
        raise OSError("disk full")

    monkeypatch.setattr(PreTrainedTokenizerFast, "save_pretrained", broken)
    with pytest.raises(OSError, match="disk full"):
        train_tokenizer(["a b c", "d e f"], vocab_size=300, output_dir=tmp_path / "tok", show_progress=False)
    assert list(tmp_path.iterdir()) == []


def test_cli_train_tokenizer(tmp_path, capsys):
    write_text_split(tmp_path / "data", "train", make_pairs(200, seed=7))
    code, out, err = run_cli(
        "train-tokenizer",
        "--data-dir",
        tmp_path / "data",
        "-s",
        "en",
        "-t",
        "de",
        "--vocab-size",
        "400",
        "--sample-size",
        "150",
        "-o",
        tmp_path / "tok",
        capsys=capsys,
    )
    assert code == 0, err
    assert "200 pairs read, 200 kept" in err
    assert out.startswith("wrote a bpe tokenizer of") and str(tmp_path / "tok") in out
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert loaded("A dog runs.")["input_ids"][-1] == 2


def test_a_unigram_vocabulary_too_small_for_the_texts_characters_is_one_line(tmp_path, capsys):
    """The issue's row 7: the unigram trainer's "vocabulary is not large enough to contain all chars" was a
    traceback. 62 letters and digits do not fit in the 40 tokens left of 300 by the byte and special tokens."""
    chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    lines = [" ".join(chars[(i * 7 + j) % len(chars)] * 3 for j in range(8)) for i in range(20)]
    write_text_split(tmp_path / "data", "train", list(zip(lines, lines, strict=True)))
    data = ("--data-dir", tmp_path / "data", "-s", "en", "-t", "de", "--algorithm", "unigram")
    code, _, err = run_cli("train-tokenizer", *data, "--vocab-size", "300", "-o", tmp_path / "tok", capsys=capsys)
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: --vocab-size 300 is too small for a unigram vocabulary")
    assert err.strip().splitlines()[-1].endswith("or --algorithm bpe")
    assert not (tmp_path / "tok").exists()
    code, _, err = run_cli("train-tokenizer", *data, "--vocab-size", "400", "-o", tmp_path / "tok", capsys=capsys)
    assert code == 0, err
