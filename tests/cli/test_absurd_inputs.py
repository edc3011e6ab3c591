"""Absurd sizes, wrong types and hostile strings (issue rows 6 to 9): each is one `error:` line naming the
option or file, a non-zero exit, no traceback, and nothing written. In process (`run_cli` with `capsys`),
a tiny model."""

from __future__ import annotations

import os

import pytest
from helpers import run_cli, save_tiny_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("absurd") / "model")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("absurd-data")
    for split in ("train", "validation", "test"):
        for lang in ("en", "de"):
            (folder / f"{split}.{lang}").write_text("w5 w6\nw7 w8\n")
    return folder


def one_error_line(code: int, err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if not line.startswith("warning:")]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    return lines[0]


@pytest.mark.parametrize(
    "args, said",
    [
        (["--threads", "1000000"], f"--threads: at most {4 * (os.cpu_count() or 1)} (4 per core"),
        (["--beam", "1000000"], "--beam must be <= 1024, got 1000000"),
        (["--beam", str(10**20)], f"--beam must be <= 1024, got {10**20}"),
        (["--nbest", "5000"], "--nbest must be <= 1024"),
    ],
)
def test_absurd_decoding_sizes_are_refused_with_the_limit(capsys, model, args, said):
    """The issue's row 6: --threads 1000000 crashed the process (and starved the machine of threads),
    --beam 1000000 asked for 29 GB, --beam 10^20 overflowed."""
    code, out, err = run_cli("translate", "-m", model, *args, "w5 w6", capsys=capsys)
    assert said in one_error_line(code, err) and out == ""


def test_a_model_too_large_for_memory_is_refused_before_anything_is_built(capsys, tmp_path, data):
    """The issue's row 6: --set model.d_ff=1000000000 asked for 256 GB; the estimate names the numbers."""
    out = tmp_path / "run"
    args = ["train", "tiny", "--data-dir", data, "-s", "en", "-t", "de", "--output-dir", out]
    code, _, err = run_cli(*args, "--set", "model.d_ff=1000000000", capsys=capsys)
    line = one_error_line(code, err)
    assert line.startswith("error: --set model.d_ff: a model of ") and "GiB to train" in line, line
    assert not out.exists()


@pytest.mark.parametrize(
    "command, args",
    [
        ("translate", ["SENT"]),
        ("attention", ["SENT", "-o", "OUT"]),
        ("layers", ["--sentence", "SENT", "--reference", "w5", "-o", "OUT"]),
    ],
)
def test_a_sentence_argument_with_a_byte_that_is_not_utf8(capsys, tmp_path, model, command, args):
    """The issue's row 7: `aiayn translate $'w5 \\xff'` ended in the tokenizer's TypeError."""
    sentence = b"w5 \xff w6".decode("utf-8", "surrogateescape")  # as Python hands over such an argument
    args = [sentence if a == "SENT" else tmp_path / "out" if a == "OUT" else a for a in args]
    code, out, err = run_cli(command, "-m", model, *args, capsys=capsys)
    assert "not valid UTF-8 (byte 0xff in w5 \\xff w6)" in one_error_line(code, err) and out == ""
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "file, change, said",
    [
        ("config.json", {"layer_norm_eps": "x"}, 'config.json: layer_norm_eps must be a finite number, got "x"'),
        (
            "config.json",
            {"layer_norm_eps": float("nan")},
            "config.json: layer_norm_eps must be a finite number, got NaN",
        ),
        ("config.json", {"model_type": "bart"}, "config.json: model_type is 'bart', not 'aiayn'"),
        (
            "generation_config.json",
            {"num_beams": "four"},
            "generation_config.json: num_beams must be a number, got 'four'",
        ),
    ],
)
def test_a_model_folder_of_wrong_values_is_named(capsys, tmp_path, model, file, change, said):
    """The issue's row 7: each of these ended in a traceback from the first layer norm, the weights'
    initialisation or a comparison."""
    import json
    import shutil

    damaged = shutil.copytree(model, tmp_path / "model")
    values = json.loads((damaged / file).read_text())
    (damaged / file).write_text(json.dumps({**values, **change}))
    code, out, err = run_cli("translate", "-m", damaged, "w5 w6", capsys=capsys)
    assert said in one_error_line(code, err) and out == ""


@pytest.mark.parametrize(
    "recipe_text, sets, said",
    [
        ("max_steps: 5\nmodel: " + "[" * 5000 + "]" * 5000 + "\n", [], "nested too deeply to be a recipe"),
        (None, ["--set", "a=" + "[" * 5000 + "]" * 5000], "--set a: the value is nested too deeply"),
        (None, ["--set", ".=1"], "--set .=1: KEY is a recipe key"),
    ],
)
def test_recipes_and_sets_that_cannot_be_keys(capsys, tmp_path, data, recipe_text, sets, said):
    """The issue's rows 7 and 9: a recipe nested 5,000 levels was a RecursionError; `--set .=1` was
    blamed on the recipe file."""
    recipe = "tiny"
    if recipe_text is not None:
        recipe = tmp_path / "deep.yaml"
        recipe.write_text(recipe_text)
    out = tmp_path / "run"
    args = ["train", recipe, "--data-dir", data, "-s", "en", "-t", "de", "--output-dir", out, *sets]
    code, _, err = run_cli(*args, capsys=capsys)
    assert said in one_error_line(code, err)
    assert not out.exists()


def test_prepare_names_its_own_flag(capsys, tmp_path, data, model):
    """The issue's row 9: `prepare --num-proc 0` was reported as `--set num_proc`."""
    args = ["prepare", "tiny", "--data-dir", data, "-s", "en", "-t", "de", "--tokenizer", model, "--num-proc", "0"]
    code, _, err = run_cli(*args, "--cache-dir", tmp_path / "cache", capsys=capsys)
    assert one_error_line(code, err) == "error: --num-proc must be greater than 0, got 0"


@pytest.mark.parametrize(
    "text, value",
    [("010", 10), ("0o10", 8), ("0x1F", 31), ("1_000", "1_000"), ("1:30", "1:30"), ("1e-3", 0.001), ("no", "no")],
)
def test_set_values_are_yaml_1_2(text, value):
    """The issue's row 9: YAML 1.1's octal `010`, `1_000` and base-60 `1:30` came through PyYAML."""
    from aiayn_cli.cli.options import recipe_overrides

    assert recipe_overrides([f"lr_scale={text}"], {}, {}) == {"lr_scale": value}


@pytest.mark.parametrize("command", ["export", "translate"])
def test_a_model_name_with_control_characters_is_one_line(capsys, tmp_path, command):
    """Found by the sweep: a tab and a carriage return in `--model` were the Hub library's traceback
    (online), or a line cut in two by the carriage return."""
    args = [command, "-m", "w5\tw6\rw7", "-o", tmp_path / "out"] + (["w5"] if command == "translate" else [])
    code, _, err = run_cli(*args, capsys=capsys)
    assert "w6\\rw7" in one_error_line(code, err)


def test_a_run_folder_named_with_a_byte_that_is_not_utf8(capsys, tmp_path, data):
    """Found by the sweep: `train --output-dir` so named trained, then ended in a traceback writing the name."""
    out = tmp_path / b"run\xff".decode("utf-8", "surrogateescape")
    args = ["train", "tiny", "--data-dir", data, "-s", "en", "-t", "de", "--output-dir", out]
    code, _, err = run_cli(*args, capsys=capsys)
    assert "--output-dir holds a byte that is not UTF-8" in one_error_line(code, err)
    assert not out.exists()


@pytest.mark.parametrize("command", ["export", "average", "train-tokenizer"])
def test_a_folder_output_named_with_a_byte_that_is_not_utf8(capsys, tmp_path, model, data, command):
    """Found by the sweep: `export --output-dir` so named converted the model, then ended in the tokenizers
    library's traceback writing the name. Every folder output is refused up front, naming the option."""
    out = tmp_path / b"out\xff".decode("utf-8", "surrogateescape")
    args = {
        "export": ["export", "-m", model, "-o", out],
        "average": ["average", model, model, "-o", out],
        "train-tokenizer": ["train-tokenizer", "--data-dir", data, "-s", "en", "-t", "de", "--vocab-size", "300", "-o", out],
    }[command]  # fmt: skip
    code, _, err = run_cli(*args, capsys=capsys)
    line = one_error_line(code, err)
    assert "out\\xff: the name holds a byte that is not UTF-8" in line and line.startswith("error: --output")
    assert not out.exists()


@pytest.mark.parametrize("node", ["/dev/full", "/dev/zero"])
def test_push_eval_json_that_never_ends_is_one_line(capsys, tmp_path, model, node):
    """Found by the sweep: `push --eval-json /dev/full` read the device until the kernel killed the process
    (exit 137, no line at all)."""
    args = ["push", "-m", model, "--repo-id", "u/m", "--dry-run", "--output-dir", tmp_path / "out", "--eval-json", node]
    code, _, err = run_cli(*args, capsys=capsys)
    assert one_error_line(code, err) == f"error: --eval-json {node}: is a character device, not a file"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["inf", "1e400", "101"])
def test_heads_max_bleu_drop_past_100_is_one_line(capsys, tmp_path, model, data, value):
    """Found by the sweep: `heads --max-bleu-drop inf` measured every head, then failed writing its JSON
    report (infinity is not JSON)."""
    args = ["heads", "-m", model, "--data-dir", data, "-s", "en", "-t", "de", "--split", "test"]
    code, _, err = run_cli(*args, "--sample-size", "2", "-o", tmp_path / "out", "--max-bleu-drop", value, capsys=capsys)
    assert "--max-bleu-drop must be a number of BLEU points from 0 to 100" in one_error_line(code, err)
    assert not (tmp_path / "out").exists()


def test_an_attention_picture_too_large_to_draw_is_one_line(capsys, tmp_path, model):
    """Found by the sweep: `attention --max-len-b 1000000` let the random model translate to its limit of
    1,024 tokens, then matplotlib drew 8 heatmaps of 1,023 x 1,023 tokens until the kernel killed it."""
    args = ["attention", "-m", model, "w5 w6 w7", "-o", tmp_path / "out", "--max-len-b", "1000000"]
    code, _, err = run_cli(*args, capsys=capsys)
    line = one_error_line(code, err)
    assert "too large to draw or look at: choose a --layer and a --head" in line and "--format json or html" in line
    assert not (tmp_path / "out").exists()
