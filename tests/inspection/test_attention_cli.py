"""`aiayn attention`: formats, and every user mistake as one line, exit 2, nothing half-written."""

from __future__ import annotations

import json
import shutil

import pytest
from attention_models import REFERENCES, SENTENCES, subword_model_dir
from helpers import run_cli


@pytest.fixture(scope="module")
def model_dir():
    return subword_model_dir()


def test_files_in_every_format(model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    code, _, err = run_cli(
        "attention", "-m", model_dir, *SENTENCES[:2], "-o", out,
        "-f", "png", "-f", "html", "-f", "text", "-f", "json", "-f", "align", "--layer", "2", "--mean-heads",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        [".aiayn-written.json", "alignment.txt", "attention.json", "attention.txt", "explorer.html"]
        + [f"sentence{n}_{k}.png" for n in (1, 2) for k in ("cross", "decoder", "encoder")]
    )
    assert "layer 2, mean of heads" in (out / "attention.txt").read_text()
    assert len((out / "alignment.txt").read_text().splitlines()) == 2
    assert len(json.loads((out / "attention.json").read_text())["sentences"]) == 2


def test_text_to_stdout_with_a_reference_words_and_no_eos(model_dir, capsys):
    code, out, err = run_cli(
        "attention", "-m", model_dir, SENTENCES[0], "--reference", REFERENCES[0],
        "--kind", "cross", "--layer", "1", "--head", "2", "--words", "--hide-eos",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    assert "reference (teacher forcing): " + REFERENCES[0] in out
    assert "--words: subwords merged" in out and "--hide-eos: </s> left out" in out
    lines = out.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("encoder-decoder attention, layer 1, head 2"))
    assert lines[title + 1].split() == ["log", "p", *SENTENCES[0].split()]  # the columns are the source's words
    words = len(REFERENCES[0].split())
    assert [line.split()[0] for line in lines[title + 2 : title + 2 + words]] == REFERENCES[0].split()
    assert lines[title + 2 + words] == ""  # no </s> row


def test_explorer_of_10_sentences_of_a_small_model_stays_under_5_mb(tmp_path):
    import torch
    from transformers import AutoTokenizer

    from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration
    from aiayn_cli.inspection import explain
    from aiayn_cli.inspection.explorer import explorer_html
    from aiayn_cli.quickstart.synthetic import generate_corpus

    tokenizer = AutoTokenizer.from_pretrained(subword_model_dir())
    torch.manual_seed(0)
    model = AiaynForConditionalGeneration(AiaynConfig.from_preset("small", vocab_size=len(tokenizer)))
    pairs = generate_corpus(10, seed=7)
    explanations = explain(model, tokenizer, [en for en, _ in pairs], [de for _, de in pairs])
    size = len(explorer_html(explanations).encode("utf-8"))
    print(f"explorer for 10 sentences of a small model: {size / 1e6:.2f} MB")
    assert size < 5e6


def _broken_models(tmp_path, model_dir):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    (empty / "notes.txt").write_text("hello")
    no_tokenizer = tmp_path / "no-tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        shutil.copy(model_dir / name, no_tokenizer / name)
    return empty, no_tokenizer


@pytest.mark.parametrize(
    "case, message",
    [
        ("no model", "cannot load a model"),
        ("no tokenizer", "cannot load its tokenizer"),
        ("empty sentence", "sentence 2 is empty"),
        ("too long", "more than the model's limit of 64"),
        ("layer", "--layer 3: the model's decoder has layers 1 to 2"),
        ("encoder layer", "--layer 5: the model's encoder has layers 1 to 2"),
        ("head", "--head 9: the model has heads 1 to 4"),
        ("references", "--references"),
        ("unwritable", "is a file, not a folder"),
        ("no folder", "does not exist"),
        ("format", "--format gif"),
    ],
)
def test_mistakes_are_one_line_and_exit_2(case, message, model_dir, tmp_path, capsys):
    empty, no_tokenizer = _broken_models(tmp_path, model_dir)
    refs = tmp_path / "refs.de"
    refs.write_text("Ein Hund.\nZwei Hunde.\nDrei Hunde.\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = tmp_path / "out"
    model = ["-m", model_dir]
    args = {
        "no model": ["-m", empty, "A dog."],
        "no tokenizer": ["-m", no_tokenizer, "A dog."],
        "empty sentence": [*model, "A dog.", ""],
        "too long": [*model, "the dog " * 40],
        "layer": [*model, "A dog.", "--kind", "cross", "--layer", "3"],
        "encoder layer": [*model, "A dog.", "--kind", "encoder", "--layer", "5"],
        "head": [*model, "A dog.", "--head", "9"],
        "references": [*model, "A dog.", "Two dogs.", "--references", refs],
        "unwritable": [*model, "A dog.", "-f", "png"],
        "no folder": [*model, "A dog.", "-f", "png"],
        "format": [*model, "A dog.", "-f", "gif"],
    }[case]
    output = {"unwritable": blocker / "out", "no folder": tmp_path / "missing" / "out"}.get(case, out)
    if case == "unwritable":
        output = blocker  # -o names an existing file
    code, stdout, err = run_cli("attention", *args, "-o", output, capsys=capsys)
    assert code == 2
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert not out.exists()  # nothing half-written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "no-tokenizer", "not-a-model", "refs.de"]


def test_translate_alignment_appends_word_links(model_dir, capsys):
    code, plain, err = run_cli("translate", "-m", model_dir, *SENTENCES[:2], "", capsys=capsys)
    assert code == 0, err
    code, aligned, err = run_cli("translate", "-m", model_dir, *SENTENCES[:2], "", "--alignment", capsys=capsys)
    assert code == 0, err
    lines = aligned.splitlines()
    assert len(lines) == 3 and lines[2] == " ||| "
    for line, text, source in zip(lines, plain.splitlines(), SENTENCES):
        translation, links = line.split(" ||| ")
        assert translation == text  # the same translation as without --alignment
        pairs = [tuple(map(int, link.split("-"))) for link in links.split()]
        assert {j for _, j in pairs} == set(range(len(text.split())))  # every target word, once
        assert len(pairs) == len(text.split()) and all(i < len(source.split()) for i, _ in pairs)
    code, _, err = run_cli("translate", "-m", model_dir, "A dog.", "--alignment", "--nbest", "2", capsys=capsys)
    assert code == 2 and "--alignment" in err
    code, _, err = run_cli(
        "translate", "-m", model_dir, "A dog.", "--alignment-layer", "7", "--alignment", capsys=capsys
    )
    assert code == 2 and "--alignment-layer 7" in err
