"""Bad input to `aiayn train` and `aiayn average`: one line on stderr naming the problem, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REPO_ROOT, one_error_line, run_cli

TINY = REPO_ROOT / "recipes" / "tiny.yaml"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from aiayn_cli.data.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("tok")
    sentences = [f"w{i} w{(i * 7) % 13} v{i % 5}x" for i in range(300)]
    train_tokenizer(sentences, vocab_size=320, output_dir=root / "tok", show_progress=False)
    return root / "tok"


def _recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_unknown_key_in_a_subprocess(tmp_path):
    path = _recipe(tmp_path, TINY.read_text() + "warmup: 4000\n")
    result = run_cli("train", path)
    line = one_error_line(result.returncode, result.stderr)
    assert f"{path}:" in line and "unknown key 'warmup'" in line


def test_missing_key(capsys, tmp_path):
    text = "\n".join(line for line in TINY.read_text().splitlines() if not line.startswith("tokenizer:"))
    line = one_error_line(*run_cli("train", _recipe(tmp_path, text), capsys=capsys)[::2])
    assert "missing required key 'tokenizer'" in line


def test_wrong_type(capsys, tmp_path):
    path = _recipe(tmp_path, TINY.read_text().replace("max_tokens: 512", "max_tokens: many"))
    line = one_error_line(*run_cli("train", path, capsys=capsys)[::2])
    assert "'max_tokens' must be a valid integer, got 'many'" in line
    line = one_error_line(*run_cli("train", TINY, "--set", "model.dropout=high", capsys=capsys)[::2])
    assert "--set model.dropout: 'model.dropout' must be a valid number" in line


def test_output_folder_with_a_different_run(capsys, tmp_path, tokenizer):
    from aiayn_cli.training.recipe import load_recipe, save_recipe

    out = tmp_path / "run"
    save_recipe(load_recipe(TINY, {"output_dir": str(out), "tokenizer": str(tokenizer)}), out / "recipe.yaml")
    line = one_error_line(
        *run_cli("train", TINY, "-o", out, "--tokenizer", tokenizer, "--seed", "7", capsys=capsys)[::2]
    )
    assert f"output folder {out} holds a different run (seed: 1 -> 7)" in line
    # a folder of other files
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    line = one_error_line(*run_cli("train", TINY, "-o", other, "--tokenizer", tokenizer, capsys=capsys)[::2])
    assert "is not empty and holds no aiayn run" in line
    line = one_error_line(
        *run_cli("train", TINY, "-o", tmp_path / "new", "--tokenizer", tokenizer, "--resume", other, capsys=capsys)[::2]
    )
    assert "not a complete checkpoint" in line


def test_tokenizer_that_does_not_match_the_model(capsys, tmp_path, tokenizer):
    from transformers import AutoTokenizer

    size = len(AutoTokenizer.from_pretrained(tokenizer))
    line = one_error_line(
        *run_cli(
            "train",
            TINY,
            "-o",
            tmp_path / "a",
            "--tokenizer",
            tokenizer,
            "--set",
            "model.vocab_size=1000",
            capsys=capsys,
        )[::2]
    )
    assert f"the tokenizer {tokenizer} has {size} tokens but model.vocab_size is 1000" in line
    # special ids that are not the model's
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3, "a": 4}
    other = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
    )
    other.save_pretrained(tmp_path / "other-tok")
    line = one_error_line(
        *run_cli("train", TINY, "-o", tmp_path / "b", "--tokenizer", tmp_path / "other-tok", capsys=capsys)[::2]
    )
    assert "has pad id 3, but the model expects 0" in line
    line = one_error_line(
        *run_cli(
            "train",
            TINY,
            *("-o", tmp_path / "c", "--tokenizer", tmp_path / "missing", "--set", "tokenizer_training=null"),
            capsys=capsys,
        )[::2]
    )
    assert line == f"error: {tmp_path / 'missing'}: no such tokenizer folder"  # not "Repo id must be ..."


def test_average_errors(capsys, tmp_path):
    line = one_error_line(*run_cli("average", tmp_path, "--last", "5", "-o", tmp_path / "x", capsys=capsys)[::2])
    assert "holds no checkpoints" in line
    line = one_error_line(
        *run_cli("average", tmp_path, tmp_path, "--last", "5", "-o", tmp_path / "x", capsys=capsys)[::2]
    )
    assert "--last takes one run folder" in line
    line = one_error_line(*run_cli("average", tmp_path, "-o", tmp_path / "x", capsys=capsys)[::2])
    assert "no model.safetensors" in line
