"""`aiayn quickstart`: the whole pipeline runs end to end on the generated corpus (a short budget here;
the BLEU >= 90 run takes a few minutes and is measured by hand, see the README)."""

from __future__ import annotations

from conftest import run_cli

from aiayn_cli.quickstart.pipeline import run_quickstart


def test_quickstart_runs_every_step(tmp_path):
    result = run_quickstart(tmp_path / "qs", minutes=0.3, train_pairs=2000, test_pairs=50, show_progress=False)
    assert (result.model_dir / "model.safetensors").is_file()
    assert (result.model_dir / "tokenizer.json").is_file()
    assert (tmp_path / "qs" / "run" / "recipe.yaml").is_file()
    assert (tmp_path / "qs" / "run" / "learning_curve.png").is_file()
    hypotheses = (tmp_path / "qs" / "test.hyp.de").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == 50
    assert 0.0 <= result.bleu <= 100.0 and result.signature.startswith("nrefs:1")
    assert set(result.seconds) == {"corpus", "tokenizer", "train", "translate", "evaluate"}
    assert len(result.examples) == 5


def test_quickstart_refuses_a_non_empty_folder(tmp_path):
    (tmp_path / "qs").mkdir()
    (tmp_path / "qs" / "keep.txt").write_text("mine")
    result = run_cli("quickstart", "-o", tmp_path / "qs")
    assert result.returncode == 2 and "--overwrite" in result.stderr
    assert (tmp_path / "qs" / "keep.txt").read_text() == "mine"
