"""`aiayn push`: the staged folder, its model card, the upload call and its errors, with no network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml
from helpers import run_cli, save_tiny_model

from aiayn_cli.evaluation.scoring import score

SECRET = "hf_abcdefSECRETtoken1234567890"


@pytest.fixture
def run_dir(tmp_path):
    """A training run as `aiayn train` leaves it: checkpoints below, recipe and curve beside them."""
    run = tmp_path / "run"
    save_tiny_model(run / "averaged")
    (run / "recipe.yaml").write_text(
        "model:\n  preset: tiny\ndata:\n  data_dir: data/multi30k\n  source_lang: en\n  target_lang: de\n"
        "tokenizer: tok\noutput_dir: run\n"
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.plot([3, 2, 1])
    plt.savefig(run / "learning_curve.png")
    plt.close()
    results = score(["w5 w6 w7", "w8 w9"], ["w5 w6 w7", "w8 w10"])
    (run / "eval.json").write_text(json.dumps(results))
    return run


def front_matter(readme: str) -> dict:
    assert readme.startswith("---\n")
    return yaml.safe_load(readme.split("---\n")[1])


def test_dry_run_writes_the_exact_folder(run_dir, tmp_path, capsys):
    out = tmp_path / "staged"
    code, stdout, stderr = run_cli(
        "push",
        "-m",
        run_dir / "averaged",
        "--repo-id",
        "someone/aiayn-tiny",
        "--dry-run",
        "--output-dir",
        out,
        "--eval-json",
        run_dir / "eval.json",
        "--eval-split",
        "test2016",
        "--dataset",
        "bentrevett/multi30k",
        capsys=capsys,
    )
    assert code == 0, stderr
    names = {p.name for p in out.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "modeling_aiayn.py",
        "configuration_aiayn.py",
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
        "recipe.yaml",
        "learning_curve.png",
        "eval_results.json",
    } <= names
    for name in names:
        assert name in stdout
    config = json.loads((out / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_aiayn.AiaynForConditionalGeneration"
    assert json.loads((out / "generation_config.json").read_text())["length_penalty_style"] == "gnmt"
    assert not [p for p in tmp_path.rglob(".staged.*")]  # no temporary folder left behind


def test_model_card_metadata_parses(run_dir, tmp_path, capsys):
    out = tmp_path / "staged"
    code, _, err = run_cli(
        "push", "-m", run_dir / "averaged", "--repo-id", "someone/aiayn-tiny", "--dry-run",
        "--output-dir", out, "--eval-json", run_dir / "eval.json", "--dataset", "multi30k",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    readme = (out / "README.md").read_text()
    meta = front_matter(readme)
    assert meta["language"] == ["en", "de"]
    assert meta["library_name"] == "transformers" and meta["license"] == "apache-2.0"
    assert "translation" in meta["tags"] and meta["datasets"] == ["multi30k"]
    results = {m["type"]: m for m in meta["model-index"][0]["results"][0]["metrics"]}
    expected = score(["w5 w6 w7", "w8 w9"], ["w5 w6 w7", "w8 w10"])["scores"]["sacrebleu"]
    assert results["sacrebleu"]["value"] == round(expected["score"], 2)
    assert results["sacrebleu"]["config"] == expected["signature"]
    for section in (
        "## Usage",
        "## Training recipe",
        "## Learning curve",
        "## Citation",
        "aiayn translate",
        "trust_remote_code=True",
        "Vaswani",
    ):
        assert section in readme


@pytest.mark.slow  # a new Python process; the default tier loads a saved folder without the package in
# tests/model/test_modeling.py::test_loads_and_generates_without_the_package
def test_dry_run_folder_loads_and_translates_without_the_package(run_dir, tmp_path):
    out = tmp_path / "staged"
    assert (
        run_cli(
            "push", "-m", run_dir / "averaged", "--repo-id", "someone/x", "--dry-run", "--output-dir", out
        ).returncode
        == 0
    )
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(run_dir / "averaged").eval()
    tokenizer = AutoTokenizer.from_pretrained(run_dir / "averaged")
    inputs = tokenizer(["w4 w5 w6 w7"], return_tensors="pt")
    expected = tokenizer.batch_decode(model.generate(**inputs, num_beams=4, max_new_tokens=8), skip_special_tokens=True)
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["aiayn_cli"] = None
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
        folder = {str(out)!r}
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        inputs = tokenizer(["w4 w5 w6 w7"], return_tensors="pt")
        print(tokenizer.batch_decode(model.generate(**inputs, num_beams=4, max_new_tokens=8), skip_special_tokens=True))
        translator = pipeline("translation", model=folder, trust_remote_code=True)
        print(translator("w4 w5 w6 w7", num_beams=4, max_new_tokens=8)[0]["translation_text"])
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HOME"] = str(tmp_path / "hf_home")
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Do you wish" not in result.stdout
    lines = result.stdout.strip().splitlines()
    assert lines[-2] == str(expected) and lines[-1] == expected[0]


def test_upload_goes_through_huggingface_hub_and_never_shows_the_token(run_dir, monkeypatch, capsys):
    calls = {}

    class FakeApi:
        def __init__(self, token=None):
            calls["token"] = token

        def create_repo(self, repo_id, private, exist_ok, repo_type):
            calls["create"] = (repo_id, private)

        def create_branch(self, repo_id, branch, exist_ok):
            calls["branch"] = branch

        def upload_folder(self, folder_path, repo_id, revision, commit_message):
            calls["files"] = sorted(p.name for p in folder_path.iterdir())
            calls["upload"] = (repo_id, revision, commit_message)
            return "https://huggingface.co/someone/x/commit/abc"

    monkeypatch.setattr("huggingface_hub.HfApi", FakeApi)
    code, out, err = run_cli(
        "push", "-m", run_dir / "averaged", "--repo-id", "someone/x", "--private",
        "--revision", "v1", "--commit-message", "first", "--token", SECRET,
        capsys=capsys,
    )  # fmt: skip
    output = out + err
    assert code == 0, output
    assert calls["token"] == SECRET and calls["create"] == ("someone/x", True)
    assert calls["branch"] == "v1" and calls["upload"] == ("someone/x", "v1", "first")
    assert "model.safetensors" in calls["files"] and "README.md" in calls["files"]
    assert SECRET not in output and "pushed" in output


def test_offline_push_is_one_line_and_hides_the_token(run_dir):
    result = run_cli("push", "-m", run_dir / "averaged", "--repo-id", "someone/x", "--token", SECRET)
    assert result.returncode == 2
    assert SECRET not in result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the Hugging Face Hub"), result.stderr


@pytest.mark.parametrize("status, phrase", [(401, "invalid or expired"), (403, "may not write")])
def test_permission_errors_are_one_line(run_dir, monkeypatch, capsys, status, phrase):
    from types import SimpleNamespace

    from huggingface_hub.errors import HfHubHTTPError

    class RefusingApi:
        def __init__(self, token=None):
            pass

        def create_repo(self, *args, **kwargs):
            url = "https://huggingface.co/api/repos/create"
            response = SimpleNamespace(status_code=status, headers={}, url=url, request=SimpleNamespace(url=url))
            raise HfHubHTTPError(f"{status} error for {SECRET}", response=response)

    monkeypatch.setattr("huggingface_hub.HfApi", RefusingApi)
    code, out, err = run_cli(
        "push", "-m", run_dir / "averaged", "--repo-id", "someone/x", "--token", SECRET, capsys=capsys
    )
    output = out + err
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and phrase in lines[0] and SECRET not in output


def test_bad_inputs(run_dir, tmp_path, capsys):
    cases = [
        (["push", "-m", tmp_path / "nope", "--repo-id", "a/b", "--dry-run"], "no such model folder"),
        (["push", "-m", run_dir / "averaged", "--repo-id", "no-slash", "--dry-run"], "--repo-id"),
        (
            [
                "push",
                "-m",
                run_dir / "averaged",
                "--repo-id",
                "a/b",
                "--dry-run",
                "--eval-json",
                tmp_path / "missing.json",
            ],
            "--eval-json",
        ),
    ]
    for i, text in enumerate(["[1, 2]", '{"scores": [1]}', '{"scores": {"sacrebleu": {"score": "high"}}}']):
        (tmp_path / f"eval{i}.json").write_text(text)
        cases.append(
            (
                [
                    "push",
                    "-m",
                    run_dir / "averaged",
                    "--repo-id",
                    "a/b",
                    "--dry-run",
                    "--eval-json",
                    tmp_path / f"eval{i}.json",
                ],
                f"--eval-json {tmp_path / f'eval{i}.json'}: ",
            )
        )
    (tmp_path / "not_empty").mkdir()
    (tmp_path / "not_empty" / "x").write_text("x")
    cases.append(
        (
            [
                "push",
                "-m",
                run_dir / "averaged",
                "--repo-id",
                "a/b",
                "--dry-run",
                "--output-dir",
                tmp_path / "not_empty",
            ],
            "holds files that are not part of a folder for the Hub",
        )
    )
    no_tokenizer = tmp_path / "bare"
    save_tiny_model(no_tokenizer)
    (no_tokenizer / "tokenizer.json").unlink()
    (no_tokenizer / "tokenizer_config.json").unlink()
    cases.append((["push", "-m", no_tokenizer, "--repo-id", "a/b", "--dry-run"], "no tokenizer"))
    capsys.readouterr()  # what saving the model printed (progress bars, where no CLI call has turned them off yet)
    for args, phrase in cases:
        code, _, err = run_cli(*args, capsys=capsys)
        assert code == 2, (args, err)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and phrase in lines[0], (args, err)


def test_tokenizer_that_does_not_match_the_model(tmp_path, capsys):
    folder = save_tiny_model(tmp_path / "m", vocab_size=72)
    from helpers import word_level_tokenizer

    word_level_tokenizer(60).save_pretrained(folder)
    code, _, err = run_cli("push", "-m", folder, "--repo-id", "a/b", "--dry-run", capsys=capsys)
    assert code == 2 and "vocab_size" in err
