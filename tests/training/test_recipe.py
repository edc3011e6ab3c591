"""Recipes: every key checked (unknown, missing, mistyped), flags on top, a lossless round trip."""

import dataclasses
import re
from pathlib import Path

import pytest

from aiayn_cli.errors import AiaynError
from aiayn_cli.training.recipe import (
    TrainRecipe,
    load_recipe,
    parse_duration,
    recipe_differences,
    recipe_field_docs,
    save_recipe,
)

MINIMAL = """\
model:
  preset: tiny
  dropout: 0.2
data:
  data_dir: some/folder
  source_lang: en
  target_lang: de
tokenizer: tok
output_dir: out
max_steps: 10
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return path


def test_loads_with_paper_defaults(tmp_path):
    recipe = load_recipe(_write(tmp_path, MINIMAL))
    assert recipe.model.preset == "tiny" and recipe.model.dropout == 0.2
    assert recipe.adam_betas == [0.9, 0.98] and recipe.adam_eps == 1e-9
    assert recipe.warmup_steps == 4000 and recipe.lr_schedule == "noam" and recipe.label_smoothing == 0.1
    config = recipe.model.to_config(vocab_size=123)
    assert (config.d_model, config.num_heads, config.vocab_size, config.dropout) == (64, 4, 123, 0.2)


def test_unknown_key_is_named_with_its_line(tmp_path):
    path = _write(tmp_path, MINIMAL + "warmup: 4000\n")
    with pytest.raises(AiaynError, match=r"recipe.yaml:11: unknown key 'warmup'"):
        load_recipe(path)
    path = _write(tmp_path, MINIMAL.replace("  dropout: 0.2", "  dropuot: 0.2"))
    with pytest.raises(AiaynError, match=r"recipe.yaml:3: unknown key 'model.dropuot'"):
        load_recipe(path)


def test_missing_required_key(tmp_path):
    path = _write(tmp_path, MINIMAL.replace("tokenizer: tok\n", ""))
    with pytest.raises(AiaynError, match=r"recipe.yaml: missing required key 'tokenizer'"):
        load_recipe(path)


@pytest.mark.parametrize(
    "line, message",
    [
        ("max_tokens: lots", r"recipe.yaml:11: 'max_tokens' must be a valid integer, got 'lots'"),
        ("max_tokens: 4096.5", r"'max_tokens' must be a valid integer"),
        ("compile: 1", r"'compile' must be a valid boolean"),
        ("lr_schedule: cosine", r"'lr_schedule' must be 'noam', 'inverse_sqrt' or 'constant'"),
        ("adam_betas: 0.9", r"'adam_betas' must be a valid list"),
        ("adam_betas: [0.9, 0.98, 0.5]", r"'adam_betas': list should have at most 2 items"),
        ("adam_betas: [0.9, 1.5]", r"recipe.yaml:11: 'adam_betas' must be less than 1, got 1.5"),
        ("label_smoothing: 1.5", r"'label_smoothing' must be less than 1, got 1.5"),
        ("max_time: soon", r"'max_time' must be minutes or a duration"),
        ("update_freq: 0", r"'update_freq' must be greater than 0, got 0"),
        ("lr: -1", r"recipe.yaml:11: 'lr' must be greater than 0, got -1"),
        ("lr: .nan", r"recipe.yaml:11: 'lr' must be a finite number, got nan"),
        ("lr_scale: .inf", r"'lr_scale' must be a finite number, got inf"),
        ("clip_norm: .nan", r"recipe.yaml:11: 'clip_norm' must be a finite number"),
        ("adam_eps: -1.0e-9", r"'adam_eps' must be greater than 0"),
        ("weight_decay: -0.1", r"'weight_decay' must be greater than or equal to 0"),
        ("max_epochs: true", r"'max_epochs' must be a valid integer"),
        ("tokenizer: 3", r"recipe.yaml:8: 'tokenizer' must be a valid string, got 3"),
        ("lr_cooldown: 0", r"recipe.yaml:11: 'lr_cooldown' must be greater than 0, got 0"),
        ("lr_cooldown: 1.5", r"'lr_cooldown' must be less than or equal to 1, got 1.5"),
        ("length_penalty_grid: []", r"'length_penalty_grid': list should have at least 1 item"),
        (
            "length_penalty_grid: [0.6, -1]",
            r"recipe.yaml:11: 'length_penalty_grid' must be greater than or equal to 0, got -1",
        ),
        (
            "length_penalty_grid: [0.6]\nvalid_split: null",
            r"recipe.yaml:11: 'length_penalty_grid' needs a validation split to choose on",
        ),
        ("average_choose: 1", r"'average_choose' must be a valid boolean"),
        (
            "attention_kernels: [flash, fast]",
            r"recipe.yaml:11: 'attention_kernels' must be 'flash', 'efficient', 'cudnn'",
        ),
        ("attention_kernels: []", r"'attention_kernels': list should have at least 1 item"),
    ],
)
def test_wrong_types_and_values(tmp_path, line, message):
    key = line.split(":")[0]
    given = f"{key}:" in MINIMAL
    text = re.sub(rf"(?m)^{key}: .*$", line, MINIMAL) if given else MINIMAL + line + "\n"
    with pytest.raises(AiaynError, match=message):
        load_recipe(_write(tmp_path, text))


@pytest.mark.parametrize(
    "section, message",
    [
        ("model: small", r"recipe.yaml:1: 'model' must be a dictionary"),
        ("model: {preset: tiny, d_model: wide}", r"recipe.yaml:1: 'model.d_model' must be a valid integer"),
        ("model: {preset: huge}", r"'model.preset' must be 'base', 'big', 'small' or 'tiny'"),
        ("model: {preset: tiny, pre_norm: 1}", r"'model.pre_norm' must be a valid boolean"),
        ("model: {preset: tiny, width: 3}", r"unknown key 'model.width' \(known: preset, vocab_size, d_model"),
        ("data: {data_dir: x}", r"data: 'data.source_lang' and 'data.target_lang' are required"),
        (
            "data: {data_dir: x, dataset: wmt14, source_lang: en, target_lang: de}",
            r"data: give one data source, not 'data.dataset' and 'data.data_dir'",
        ),
        ("data: {data_dir: 3, source_lang: en, target_lang: de}", r"'data.data_dir' must be a valid string"),
    ],
)
def test_wrong_sections(tmp_path, section, message):
    key = section.split(":")[0]
    kept = [part for part in re.split(r"(?m)^(?=\w)", MINIMAL) if part and not part.startswith(key + ":")]
    with pytest.raises(AiaynError, match=message):
        load_recipe(_write(tmp_path, section + "\n" + "".join(kept)))


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path):
    with pytest.raises(AiaynError, match=r"recipe.yaml:11: key 'max_steps' given twice \(lines 10 and 11\)"):
        load_recipe(_write(tmp_path, MINIMAL + "max_steps: 20\n"))
    nested = MINIMAL.replace("  dropout: 0.2\n", "  dropout: 0.2\n  dropout: 0.3\n")
    with pytest.raises(AiaynError, match=r"recipe.yaml:4: key 'model.dropout' given twice \(lines 3 and 4\)"):
        load_recipe(_write(tmp_path, nested))


def test_the_model_section_takes_the_fields_of_the_config():
    from aiayn_cli.model import AiaynConfig
    from aiayn_cli.training.recipe import MODEL_FIELDS, ModelRecipe

    fields = {f.name for f in dataclasses.fields(ModelRecipe)}
    assert fields == {"preset", *MODEL_FIELDS}
    assert {"d_model", "d_ff", "num_heads", "pre_norm", "positional_encoding", "layer_norm_eps"} <= fields
    assert set(MODEL_FIELDS) <= set(AiaynConfig.__annotations__)
    assert "pad_token_id" not in fields  # from the tokenizer, not the recipe


def test_shipped_recipes_are_found_by_name_from_any_folder(tmp_path, monkeypatch):
    from aiayn_cli.training.recipe import find_recipe, shipped_recipes

    monkeypatch.chdir(tmp_path)
    names = shipped_recipes()
    assert {"multi30k_en_de", "quickstart", "tiny", "wmt14_en_de_base"} <= set(names)
    assert all(purpose for purpose in names.values())
    assert load_recipe(find_recipe("multi30k_en_de")).model.preset == "small"
    # the Multi30k recipe's average_choose does nothing once averaging is off (no second key to turn off)
    assert load_recipe(find_recipe("multi30k_en_de"), {"average_last": None}).average_choose
    assert find_recipe("recipes/tiny.yaml") == find_recipe("tiny")
    (tmp_path / "mine.yaml").write_text(MINIMAL)
    assert find_recipe("mine.yaml") == Path("mine.yaml")
    with pytest.raises(AiaynError, match=r"nope: no such recipe file or shipped recipe \(shipped: .*multi30k_en_de"):
        find_recipe("nope")


def test_model_values_checked_by_the_config(tmp_path):
    recipe = load_recipe(_write(tmp_path, MINIMAL.replace("  dropout: 0.2", "  d_model: 66")))
    with pytest.raises(AiaynError, match="d_model .66. must be divisible by num_heads"):
        recipe.model.to_config(vocab_size=100)


def test_overrides_win_and_are_checked(tmp_path):
    path = _write(tmp_path, MINIMAL)
    recipe = load_recipe(path, {"max_tokens": 100, "model.dropout": 0.3, "lr_scale": 2})
    assert recipe.max_tokens == 100 and recipe.model.dropout == 0.3
    assert recipe.lr_scale == 2.0 and isinstance(recipe.lr_scale, float)
    with pytest.raises(AiaynError, match=r"--set max_tokens: 'max_tokens' must be a valid integer"):
        load_recipe(path, {"max_tokens": "x"})
    with pytest.raises(AiaynError, match=r"unknown key 'model.width'"):
        load_recipe(path, {"model.width": 3})
    # all from flags, no file
    recipe = load_recipe(
        None,
        {
            "model.preset": "tiny",
            "data": {"data_dir": "d", "source_lang": "en", "target_lang": "de"},
            "tokenizer": "t",
            "output_dir": "o",
        },
    )
    assert recipe.model.preset == "tiny"


def test_recipes_read_yaml_1_2_words_and_numbers(tmp_path):
    """PyYAML's YAML 1.1 reads an unquoted `no` as false and `1e-3` as a string: a recipe and
    `--set KEY=VALUE` read YAML 1.2 (`mixed_precision: no` is fp32; `1e-3` a number)."""
    from aiayn_cli.cli.options import recipe_overrides

    assert load_recipe(_write(tmp_path, MINIMAL + "mixed_precision: no\n")).mixed_precision == "no"
    overrides = recipe_overrides(["mixed_precision=no", "label_smoothing=1e-1", "compile_loss=false"], {}, {})
    assert overrides == {"mixed_precision": "no", "label_smoothing": 0.1, "compile_loss": False}
    recipe = load_recipe(_write(tmp_path, MINIMAL), overrides)
    assert (recipe.mixed_precision, recipe.label_smoothing, recipe.compile_loss) == ("no", 0.1, False)
    assert load_recipe(_write(tmp_path, MINIMAL + "label_smoothing: 2e-1\n")).label_smoothing == 0.2
    with pytest.raises(AiaynError, match=r"'mixed_precision' must be"):
        load_recipe(_write(tmp_path, MINIMAL + "mixed_precision: yes\n"))


def test_tokenizer_training_keys_are_train_tokenizers_words(tmp_path, capsys):
    """`algorithm` and `sample_size`, as `train-tokenizer --algorithm/--sample-size`; the old `model` and
    `sample` are read for one version with a notice naming the file's line; both at once are refused."""
    section = "tokenizer_training:\n  vocab_size: 300\n"
    recipe = load_recipe(_write(tmp_path, MINIMAL + section + "  algorithm: unigram\n  sample_size: 50\n"))
    assert (recipe.tokenizer_training.algorithm, recipe.tokenizer_training.sample_size) == ("unigram", 50)
    assert capsys.readouterr().err == ""
    path = _write(tmp_path, MINIMAL + section + "  model: unigram\n  sample: 50\n")
    old = load_recipe(path)
    assert old.tokenizer_training == recipe.tokenizer_training
    notices = capsys.readouterr().err.splitlines()
    assert len(notices) == 2 and notices[0].startswith(f"warning: {path}:")
    assert "'tokenizer_training.model' is now 'tokenizer_training.algorithm'" in notices[0]
    with pytest.raises(AiaynError, match=r"'tokenizer_training.model' is the old name"):
        load_recipe(_write(tmp_path, MINIMAL + section + "  model: bpe\n  algorithm: bpe\n"))


def test_round_trip_and_differences(tmp_path):
    recipe = load_recipe(_write(tmp_path, MINIMAL))
    save_recipe(recipe, tmp_path / "out" / "recipe.yaml")
    again = load_recipe(tmp_path / "out" / "recipe.yaml")
    assert again == recipe
    assert recipe_differences(recipe, again) == []
    longer = load_recipe(_write(tmp_path, MINIMAL), {"max_steps": 100, "keep_last": 9})
    assert recipe_differences(recipe, longer) == []  # run length may change on resume
    other = load_recipe(_write(tmp_path, MINIMAL), {"seed": 7, "model.d_model": 128})
    assert recipe_differences(recipe, other) == ["model.d_model: None -> 128", "seed: 1 -> 7"]


def test_durations():
    assert parse_duration(60) == 3600 and parse_duration("90m") == 5400
    assert parse_duration("1.5h") == 5400 and parse_duration("1h30m") == 5400 and parse_duration("45s") == 45
    for bad in ("", "soon", "-5", "0"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_every_field_is_documented():
    import dataclasses

    from aiayn_cli.training.recipe import ModelRecipe, TokenizerTraining

    for cls in (TrainRecipe, ModelRecipe, TokenizerTraining):
        docs = recipe_field_docs(cls)
        assert set(docs) == {f.name for f in dataclasses.fields(cls)}


RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=[p.name for p in RECIPES])
def test_every_shipped_recipe_validates(path):
    recipe = load_recipe(path)
    recipe.model.to_config(vocab_size=recipe.model.vocab_size or 8000)
    opening = path.read_text().splitlines()[0:20]
    assert opening[0].startswith("#") and any("aiayn train " in line for line in opening if line.startswith("#"))


def test_recipes_can_express_the_papers_wmt14_runs(tmp_path):
    """Base: 100k steps; big: 300k steps, P_drop 0.3; ~25k tokens per side and step; checkpoints every
    10 minutes; average the last 5 (base) or 20 (big) checkpoints (§5.1-5.4, §6.1)."""
    common = """\
data: {dataset: wmt14, dataset_config: de-en, source_lang: en, target_lang: de}
tokenizer: runs/wmt14-bpe37k
valid_split: validation
max_tokens: 3125            # x 8 GPUs = 25,000 tokens per side and step
warmup_steps: 4000
checkpoint_every_minutes: 10
"""
    base = load_recipe(
        _write(
            tmp_path,
            common + "model: {preset: base}\noutput_dir: runs/base\nmax_steps: 100000\nkeep_last: 5\naverage_last: 5\n",
        )
    )
    big = load_recipe(
        _write(
            tmp_path,
            common + "model: {preset: big}\noutput_dir: runs/big\nmax_steps: 300000\nkeep_last: 20\naverage_last: 20\n",
        )
    )
    assert base.data.dataset == "wmt14" and base.data.dataset_config == "de-en"
    assert (base.adam_betas, base.adam_eps, base.label_smoothing) == ([0.9, 0.98], 1e-9, 0.1)
    assert base.model.to_config(37000).d_model == 512 and big.model.to_config(37000).dropout == 0.3
    assert (big.max_steps, big.average_last, big.checkpoint_every_minutes) == (300000, 20, 10.0)


@pytest.mark.parametrize(
    "name, d_model, dropout, steps, average, pair",
    [
        ("wmt14_en_de_base.yaml", 512, 0.1, 100000, 5, ("en", "de")),
        ("wmt14_en_de_big.yaml", 1024, 0.3, 300000, 20, ("en", "de")),
        ("wmt14_en_fr_big.yaml", 1024, 0.1, 300000, 20, ("en", "fr")),
    ],
)
def test_shipped_paper_recipes_hold_table_3(name, d_model, dropout, steps, average, pair):
    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / name)
    config = recipe.model.to_config(37000)
    assert (config.d_model, config.dropout, config.num_encoder_layers) == (d_model, dropout, 6)
    assert (recipe.max_steps, recipe.average_last, recipe.checkpoint_every_minutes) == (steps, average, 10.0)
    assert recipe.keep_last >= recipe.average_last
    assert (recipe.data.dataset, recipe.data.source_lang, recipe.data.target_lang) == ("wmt14", *pair)
    assert (recipe.warmup_steps, recipe.label_smoothing, recipe.lr_schedule) == (4000, 0.1, "noam")
    assert recipe.max_tokens * 8 * recipe.update_freq == 25000  # ~25k tokens per side and step on 8 GPUs


WHEN_FP32 = MINIMAL + "when_fp32:\n  model:\n    dropout: 0.1\n  warmup_steps: 100\n"


def test_when_fp32_replaces_keys_only_in_fp32_and_flags_win(tmp_path):
    recipe = load_recipe(_write(tmp_path, WHEN_FP32))
    assert recipe.model.dropout == 0.2 and recipe.warmup_steps == 4000  # as loaded: the recipe's own keys
    for precision in ("bf16", "fp16", None):
        assert recipe.in_precision(precision) == recipe and recipe.precision_changes(precision) == []
    fp32 = recipe.in_precision("no")
    assert fp32.model.dropout == 0.1 and fp32.warmup_steps == 100 and fp32.max_steps == 10
    assert recipe.precision_changes("no") == ["model.dropout 0.2 -> 0.1", "warmup_steps 4000 -> 100"]
    assert fp32.in_precision("no") == fp32 and fp32.precision_changes("no") == []  # applied once is applied
    # the resolved recipe is what the run saves; it loads back as it was
    save_recipe(fp32, tmp_path / "out" / "recipe.yaml")
    assert load_recipe(tmp_path / "out" / "recipe.yaml").in_precision("no") == fp32
    # a flag wins over when_fp32
    flagged = load_recipe(_write(tmp_path, WHEN_FP32), {"model.dropout": 0.3}).in_precision("no")
    assert flagged.model.dropout == 0.3 and flagged.warmup_steps == 100
    assert load_recipe(_write(tmp_path, WHEN_FP32), {"when_fp32": None}).in_precision("no").model.dropout == 0.2


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("when_fp32:\n  model:\n    widht: 3\n", r"recipe.yaml:13: unknown key 'model.widht'"),
        ("when_fp32:\n  warmup_steps: -5\n", r"recipe.yaml:12: 'warmup_steps' must be greater than 0, got -5"),
        ("when_fp32:\n  keep_last: 1\n  average_last: 3\n", r"recipe.yaml:13: 'average_last' \(3\) must not exceed"),
        ("when_fp32:\n  mixed_precision: bf16\n", r"recipe.yaml:12: 'when_fp32.mixed_precision' cannot depend on the"),
        ("when_fp32: 3\n", r"recipe.yaml:11: 'when_fp32' must be a valid dictionary"),
    ],
)
def test_when_fp32_is_checked_as_the_recipe_it_makes(tmp_path, section, message):
    with pytest.raises(AiaynError, match=message):
        load_recipe(_write(tmp_path, MINIMAL + section))


def test_the_gpu_recipe_averages_several_checkpoints_of_its_cooldown():
    """`multi30k_en_de_gpu`: the checkpoints that may be averaged at the end are several, kept, and all
    in the last lr_cooldown of the 5 minutes (where the rate falls to 0), not minutes apart."""

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "multi30k_en_de_gpu.yaml")
    spacing, budget = recipe.checkpoint_every_minutes * 60, parse_duration(recipe.max_time)
    assert recipe.average_last >= 4 and recipe.keep_last >= recipe.average_last
    assert recipe.average_last * spacing <= recipe.lr_cooldown * budget
    assert budget / spacing >= 3 * recipe.average_last  # a checkpoint's writing is a small share of the run
