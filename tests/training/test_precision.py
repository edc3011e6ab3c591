"""`mixed_precision: auto` and `--precision auto`: bf16 only where the hardware computes it natively.

The CPU's answers are passed in (or patched), so every case runs on any machine."""

from __future__ import annotations

import json
import platform

import pytest
import torch
from helpers import REPO_ROOT, cli_env, run_cli

from aiayn_cli import precision
from aiayn_cli.precision import choose_precision, inference_precision, native_bf16_cpu

AVX512_BF16 = {
    "capability": "AVX512",
    "onednn_bf16": True,
    "avx512_bf16": True,
    "amx": False,
    "x86": True,
    "onednn_max_isa": "",
}
AVX2 = {**AVX512_BF16, "capability": "AVX2", "onednn_bf16": False, "avx512_bf16": False}


@pytest.mark.parametrize(
    ("features", "native", "words"),
    [
        (AVX512_BF16, True, "AVX512-BF16"),
        ({**AVX512_BF16, "avx512_bf16": False, "amx": True}, True, "AMX"),
        (AVX2, False, "oneDNN has no bf16"),
        # AVX-512 without its bf16 instructions (Skylake, Zen 3): oneDNN supports bf16 but emulates it
        ({**AVX512_BF16, "avx512_bf16": False}, False, "without AVX512-BF16 or AMX"),
        ({**AVX512_BF16, "onednn_max_isa": "AVX2"}, False, "ONEDNN_MAX_CPU_ISA=AVX2"),
        ({**AVX512_BF16, "onednn_max_isa": "AVX512_CORE"}, False, "ONEDNN_MAX_CPU_ISA=AVX512_CORE"),
        ({**AVX512_BF16, "onednn_max_isa": "AVX512_CORE_AMX"}, True, "AVX512-BF16"),
        # an AMX CPU told to stop below AMX computes with AVX512-BF16: the reason says so, not "AMX"
        ({**AVX512_BF16, "amx": True, "onednn_max_isa": "AVX512_CORE_BF16"}, True, "with AVX512-BF16"),
        ({**AVX512_BF16, "amx": True, "onednn_max_isa": "AVX512_CORE_AMX"}, True, "with AMX"),
        ({**AVX2, "capability": "SVE256", "onednn_bf16": True, "x86": False}, True, "oneDNN computes bf16"),
    ],
)
def test_native_bf16_cpu_from_what_the_cpu_reports(features, native, words):
    got, reason = native_bf16_cpu(features)
    assert got is native
    assert words in reason and features["capability"] in reason


@pytest.mark.parametrize(
    ("features", "amx"),
    [
        (AVX512_BF16, False),
        ({**AVX512_BF16, "amx": True}, True),
        ({**AVX512_BF16, "amx": True, "onednn_max_isa": "AVX512_CORE_AMX"}, True),
        ({**AVX512_BF16, "amx": True, "onednn_max_isa": "AVX512_CORE_BF16"}, False),  # held below AMX
        ({**AVX512_BF16, "amx": True, "onednn_max_isa": "AVX2"}, False),
    ],
)
def test_onednn_uses_amx_where_the_cpu_has_it_and_the_isa_limit_allows_it(features, amx):
    assert precision.onednn_amx(features) is amx


@pytest.mark.parametrize(("native", "expected"), [(True, "bf16"), (False, "no")])
def test_auto_is_bf16_only_where_native(monkeypatch, native, expected):
    monkeypatch.setattr(precision, "cpu_features", lambda: AVX512_BF16 if native else AVX2)
    choice = choose_precision("auto", "cpu")
    assert choice.precision == expected and choice.warning is None
    assert choice.reason.startswith("auto: CPU")
    assert choice.describe().startswith(f"precision: {'bf16' if native else 'fp32'} (auto: CPU")
    assert inference_precision("auto", device="cpu").torch_dtype == (torch.bfloat16 if native else torch.float32)


def test_explicit_bf16_on_an_emulating_cpu_warns_with_the_slowdown(monkeypatch):
    monkeypatch.setattr(precision, "cpu_features", lambda: AVX2)
    monkeypatch.setattr(precision, "emulation_slowdown", lambda dtype: 26.0)
    choice = choose_precision("bf16", "cpu")
    assert choice.precision == "bf16"  # it trains, as asked
    assert "bf16 is emulated here" in choice.warning and "26.0x as long as in fp32" in choice.warning
    assert "auto" in choice.warning  # and says what to do


def test_explicit_choices_are_kept(monkeypatch):
    monkeypatch.setattr(precision, "cpu_features", lambda: AVX512_BF16)
    assert choose_precision("bf16", "cpu").warning is None
    assert choose_precision("no", "cpu") == precision.PrecisionChoice("no", "asked for")
    assert choose_precision("fp16", "cpu").warning.startswith("warning: fp16 is emulated here")


def test_no_fp16_and_no_bf16_by_default_off_cuda_and_cpu():
    assert choose_precision("auto", "mps").precision == "no"
    assert choose_precision(None, "meta").precision == "no"


def test_emulation_slowdown_is_a_positive_ratio():
    assert precision.emulation_slowdown(torch.bfloat16, repeats=1) > 0


def test_recipes_and_train_default_to_auto():
    from aiayn_cli.training.recipe import TrainRecipe, load_recipe

    assert TrainRecipe.__dataclass_fields__["mixed_precision"].default == "auto"
    for path in sorted((REPO_ROOT / "recipes").glob("*.yaml")):
        assert load_recipe(path, {}).mixed_precision == "auto", path.name


def test_the_accelerator_gets_the_choice(monkeypatch, tmp_path):
    from aiayn_cli.training.accelerator import make_accelerator, run_precision
    from aiayn_cli.training.recipe import load_recipe

    monkeypatch.setattr(precision, "cpu_features", lambda: AVX2)
    recipe = load_recipe(REPO_ROOT / "recipes" / "tiny.yaml", {"output_dir": str(tmp_path), "trackers": []})
    choice = run_precision(recipe)
    assert choice.precision == "no" and "AVX2" in choice.reason
    assert make_accelerator(recipe, choice).mixed_precision == "no"


@pytest.mark.slow
def test_train_prints_and_records_its_precision(tmp_path):
    from training_task import train_args, write_dictionary_task

    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.data.tokenization import train_tokenizer

    data = write_dictionary_task(tmp_path / "data", n_train=200, n_valid=8)
    spec = DataSpec(data_dir=str(data), source_lang="en", target_lang="de")
    train_tokenizer(spec, vocab_size=400, output_dir=tmp_path / "tok", show_progress=False)
    task = {"data": data, "tokenizer": tmp_path / "tok"}
    env = cli_env(HF_DATASETS_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    fixed = (
        "--max-steps",
        "2",
        "--set",
        "valid_split=null",
        "--set",
        "average_last=null",
        "--set",
        "trackers=[]",
        "--set",
        "best_metric=loss",
    )
    result = run_cli(*train_args(task, tmp_path / "auto", *fixed, "--precision", "auto"), env=env)
    assert result.returncode == 0, result.stderr
    native, why = precision.native_bf16("cpu")
    line = f"precision: {'bf16' if native else 'fp32'} (auto: {why})"
    assert line in result.stderr.splitlines()
    first = json.loads((tmp_path / "auto" / "metrics.jsonl").read_text().splitlines()[0])
    assert first == {"step": 0, "precision": "bf16" if native else "no", "precision_reason": f"auto: {why}"}
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return
    # bf16 asked for where oneDNN may not use the bf16 instructions: it trains, and warns.
    emulated = {**env, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    result = run_cli(*train_args(task, tmp_path / "bf16", *fixed, "--precision", "bf16"), env=emulated)
    assert result.returncode == 0, result.stderr
    assert "warning: bf16 is emulated here" in result.stderr
    assert "precision: bf16 (asked for)" in result.stderr


def test_a_run_in_fp32_takes_the_recipes_when_fp32_keys(tmp_path, monkeypatch, capsys):
    """`when_fp32` where `auto` chooses fp32 (the CPU's answers patched: AVX2), not where it chooses bf16;
    the run says what it replaced, saves the resolved recipe and resumes with it."""
    import sys

    import yaml
    from training_task import write_dictionary_task

    from aiayn_cli.cli import main
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.data.tokenization import train_tokenizer

    data = write_dictionary_task(tmp_path / "data", n_train=120, n_valid=8)
    spec = DataSpec(data_dir=str(data), source_lang="en", target_lang="de")
    train_tokenizer(spec, vocab_size=300, output_dir=tmp_path / "tok", show_progress=False)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        (REPO_ROOT / "recipes" / "tiny.yaml").read_text()
        + "when_fp32:\n  model:\n    dropout: 0.05\n  warmup_steps: 7\n"
    )

    def train(output, cpu, *extra):
        monkeypatch.setattr(precision, "cpu_features", lambda: cpu)
        args = ["aiayn", "train", str(recipe), "--data-dir", str(data), "--tokenizer", str(tmp_path / "tok")]
        args += ["--output-dir", str(output), "--no-progress", "--precision", "auto", "--max-steps", "1"]
        args += ["--set", "valid_split=null", "--set", "average_last=null", "--set", "trackers=[]"]
        args += ["--set", "best_metric=loss", "--set", "length_penalty_grid=null", *extra]
        monkeypatch.setattr(sys, "argv", args)
        with pytest.raises(SystemExit) as exit_info:
            main()
        err = capsys.readouterr().err
        assert exit_info.value.code == 0, err
        return err, yaml.safe_load((output / "recipe.yaml").read_text())

    err, saved = train(tmp_path / "fp32", AVX2)
    assert "when_fp32: model.dropout None -> 0.05, warmup_steps 100 -> 7" in err.splitlines()
    assert saved["model"]["dropout"] == 0.05 and saved["warmup_steps"] == 7
    config = json.loads(next((tmp_path / "fp32").glob("checkpoint-*/config.json")).read_text())
    assert config["dropout"] == 0.05
    # resumed (two steps now) with the same recipe: the same run, no "different run" refusal
    err, _ = train(tmp_path / "fp32", AVX2, "--max-steps", "2")
    assert "resuming from" in err
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return  # bf16 cannot be chosen on this machine, whatever the patched answers say
    err, saved = train(tmp_path / "bf16", AVX512_BF16)
    assert "when_fp32" not in err and saved["model"]["dropout"] is None and saved["warmup_steps"] == 100


def test_a_recipe_that_leaves_precision_to_accelerate_resolves_when_fp32_as_accelerate_will(monkeypatch):
    """`mixed_precision: null`: `accelerate launch --mixed_precision X` puts X in the environment, and
    `when_fp32` applies where that is "no" (or where nothing says)."""
    from aiayn_cli.training.accelerator import accelerate_precision, run_precision
    from aiayn_cli.training.recipe import load_recipe

    recipe = load_recipe(
        REPO_ROOT / "recipes" / "tiny.yaml",
        {"mixed_precision": None, "trackers": [], "when_fp32": {"model": {"dropout": 0.05}}},
    )
    assert run_precision(recipe) is None
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    assert accelerate_precision() == "no"
    assert recipe.in_precision(accelerate_precision()).model.dropout == 0.05
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "BF16")
    assert accelerate_precision() == "bf16"
    assert recipe.in_precision(accelerate_precision()).model.dropout is None


def test_inference_precision_is_one_value_from_the_cli_and_the_api(monkeypatch):
    """`--precision`/`--quantization` and the API's `dtype=` make one `InferencePrecision`: fp32 by
    default (every command's and `Translator`'s), int8 weights computing in fp32, auto resolved on the
    device and the engine's compute dtypes; a wrong value is an error keyed by its option."""
    from aiayn_cli.errors import AiaynError
    from aiayn_cli.precision import DEFAULT_INFERENCE_PRECISION, InferencePrecision

    assert DEFAULT_INFERENCE_PRECISION == "fp32"
    assert inference_precision() == inference_precision(None, device="cpu") == InferencePrecision("fp32", False)
    int8 = InferencePrecision("fp32", True)
    assert inference_precision("int8") == inference_precision("fp32", "int8") == inference_precision("auto", "int8")
    assert inference_precision("int8") == int8 and (int8.name, int8.compute_type) == ("int8", "int8")
    assert inference_precision(torch.bfloat16) == InferencePrecision("bf16")
    assert inference_precision(InferencePrecision("bf16")).torch_dtype == torch.bfloat16
    monkeypatch.setattr(precision, "cpu_features", lambda: AVX512_BF16)
    request = inference_precision("auto")  # no device yet: checked, auto kept for the engine's device
    assert request.compute == "auto"
    assert inference_precision(request, device="cpu") == InferencePrecision("bf16")
    assert inference_precision("auto", device="cpu", computes=("fp32", "fp16")) == InferencePrecision("fp32")
    monkeypatch.setattr(precision, "cpu_features", lambda: AVX2)
    assert inference_precision(request, device="cpu") == InferencePrecision("fp32")
    for args, key, words in [
        (("fp8",), "dtype", "fp8: choose one of auto, fp32, bf16, fp16, int8"),
        (("fp32", "int4"), "quantization", "int4: choose one of none, int8"),
        (
            ("bf16", "int8"),
            "quantization",
            "int8 computes in fp32 with int8 weights; give {dtype} auto or fp32, not bf16",
        ),
    ]:
        with pytest.raises(AiaynError) as caught:
            inference_precision(*args)
        assert (caught.value.key, caught.value.message) == (key, words)
