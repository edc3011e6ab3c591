"""The Multi30k recipe reads the Hub dataset `bentrevett/multi30k` by default; `aiayn train` builds a
missing tokenizer from the recipe's data first. Never over the network: the Hub path is tested on a
local folder laid out like the Hub dataset (`load_dataset` on a path reads it the same way), and
offline (the tests run with HF_DATASETS_OFFLINE=1) the recipe's default fails in one line."""

from __future__ import annotations

import pytest
from corpora import make_pairs, write_hub_layout
from helpers import REPO_ROOT, run_cli

from aiayn_cli.data.corpus import describe_source, load_split
from aiayn_cli.data.spec import DataSpec
from aiayn_cli.training.recipe import load_recipe

MULTI30K_RECIPE = REPO_ROOT / "recipes" / "multi30k_en_de.yaml"


def test_the_multi30k_recipe_reads_the_hub_dataset_and_builds_its_tokenizer():
    recipe = load_recipe(MULTI30K_RECIPE)
    assert recipe.data.dataset == "bentrevett/multi30k" and recipe.data.data_dir is None
    assert (recipe.data.source_lang, recipe.data.target_lang, recipe.valid_split) == ("en", "de", "validation")
    assert recipe.tokenizer_training is not None and recipe.tokenizer_training.vocab_size == 8000
    assert describe_source(recipe.data) == "the Hub dataset bentrevett/multi30k"


def test_a_folder_laid_out_like_the_hub_dataset_gives_its_three_splits(tmp_path):
    folder = write_hub_layout(tmp_path / "multi30k")
    spec = DataSpec(dataset=str(folder), source_lang="en", target_lang="de")
    sizes = {split: len(load_split(spec, split)) for split in ("train", "validation", "test")}
    assert sizes == {"train": 300, "validation": 20, "test": 10}
    first = load_split(spec, "validation")[0]
    assert (first["source"], first["target"]) == make_pairs(1, seed=1)[0]


def test_a_missing_tokenizer_is_built_from_the_recipes_data_and_said(tmp_path, capsys):
    from aiayn_cli.data.tokenization import load_tokenizer
    from aiayn_cli.training.trainer import build_missing_tokenizer, tokenizer_missing

    folder = write_hub_layout(tmp_path / "multi30k")
    overrides = {"data.dataset": str(folder), "tokenizer": str(tmp_path / "bpe"), "tokenizer_training.vocab_size": 300}
    recipe = load_recipe(MULTI30K_RECIPE, overrides)
    assert tokenizer_missing(recipe)
    assert build_missing_tokenizer(recipe) is True
    err = capsys.readouterr().err
    assert f"tokenizer: {tmp_path / 'bpe'} does not exist: building it from the training data first (bpe" in err
    assert len(load_tokenizer(recipe.tokenizer)) <= 300
    assert not tokenizer_missing(recipe) and build_missing_tokenizer(recipe) is False  # once


@pytest.mark.slow  # a whole (two-step) run in process
def test_train_builds_the_missing_tokenizer_from_the_recipes_data_then_trains(capsys, tmp_path):
    folder = write_hub_layout(tmp_path / "multi30k")
    tokenizer = tmp_path / "bpe"
    code, out, err = run_cli(
        *("train", MULTI30K_RECIPE, "--dataset", folder, "--tokenizer", tokenizer, "-o", tmp_path / "run"),
        *("--preset", "tiny", "--max-steps", "2", "--max-tokens", "256", "--no-progress"),
        *("--set", "tokenizer_training.vocab_size=300", "--set", "compile_loss=false", "--set", "trackers=[]"),
        *("--set", "length_penalty_grid=null", "--set", "valid_bleu_samples=4", "--precision", "fp32"),
        capsys=capsys,
    )
    assert code == 0, err
    lines = err.strip().splitlines()
    assert lines[0] == f"data: the dataset folder {folder}, en -> de"
    assert lines[1].startswith(f"tokenizer: {tokenizer} does not exist: building it from the training data first")
    assert "tokenizer: wrote " in err and (tokenizer / "tokenizer.json").is_file()
    assert "trained 2 steps" in out


def test_offline_the_recipes_default_fails_in_one_line_naming_the_dataset_and_data_dir(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)  # an empty folder, as a new user has
    code, out, err = run_cli("train", "multi30k_en_de", "--no-progress", capsys=capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert lines[0] == "data: the Hub dataset bentrevett/multi30k, en -> de (a local folder instead: --data-dir DIR)"
    assert lines[-1].startswith("error: could not reach the Hub dataset bentrevett/multi30k (")
    assert lines[-1].endswith(
        "to use a local copy, pass a folder of train.en, train.de, val.en, ... files with --data-dir"
    )
    assert not (tmp_path / "runs").exists()  # nothing half-built, no folder left behind


@pytest.mark.parametrize("name", ["multi30k_en_de", "tiny"])
def test_no_shipped_recipe_names_a_folder_only_this_repository_has(name):
    text = (REPO_ROOT / "recipes" / f"{name}.yaml").read_text(encoding="utf-8")
    assert "shared/" not in text
