"""docs/notebooks/: stored without outputs, and executed (nbclient) on a quickstart model; bertviz's views
accept `bertviz_inputs` for a model of 3 + 3 layers (skipped without bertviz)."""

from __future__ import annotations

import os

import pytest
import torch
from helpers import REPO_ROOT, word_level_tokenizer

from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration
from aiayn_cli.inspection import bertviz_inputs, explain

NOTEBOOKS = sorted((REPO_ROOT / "docs" / "notebooks").glob("*.ipynb"))


def test_there_is_a_notebook_and_its_outputs_are_stripped():
    nbformat = pytest.importorskip("nbformat")
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: strip the outputs"


@pytest.mark.slow  # a Jupyter kernel runs every cell: about a minute
def test_the_notebook_runs_on_a_quickstart_model(tmp_path, monkeypatch):
    """On a folder laid out as `aiayn quickstart` writes it: its generated data, and as run/averaged a
    random `tiny` model with a subword tokenizer (the notebook's code paths; a trained model is the
    slow quickstart test's)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from attention_models import subword_model_dir
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from aiayn_cli.quickstart.synthetic import write_corpus

    quickstart = tmp_path / "qs"
    write_corpus(quickstart / "data", train=0, validation=40, test=10, seed=0)
    AutoModelForSeq2SeqLM.from_pretrained(subword_model_dir()).save_pretrained(quickstart / "run" / "averaged")
    AutoTokenizer.from_pretrained(subword_model_dir()).save_pretrained(quickstart / "run" / "averaged")
    monkeypatch.setenv("AIAYN_QUICKSTART", str(quickstart))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # small tensors: on a shared machine two threads only wait
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
        )
        client.execute()  # raises CellExecutionError, with the cell and the traceback, on any error
        text = "".join(
            output.get("text", "") + "".join(output.get("data", {}).get("text/markdown", ""))
            for cell in nb.cells
            if cell.cell_type == "code"
            for output in cell.outputs
        )
        assert "The small dog sees a red ball.  ->  " in text
        assert "| kind | layer | head | confidence |" in text
        assert "layer 2: next-token accuracy" in text and "without that head" in text


def test_bertviz_views_accept_the_inputs_for_3_plus_3_layers():
    bertviz = pytest.importorskip("bertviz", reason="bertviz is an optional extra (pip install aiayn-cli[bertviz])")
    torch.manual_seed(0)
    config = AiaynConfig.from_preset("tiny", vocab_size=72, num_encoder_layers=3, num_decoder_layers=3)
    model = AiaynForConditionalGeneration(config).eval()
    model.generation_config.max_len_b = 6
    [ex] = explain(model, word_level_tokenizer(), ["w5 w17 w3 w40"])
    inputs = bertviz_inputs(ex)
    assert len(inputs["encoder_attention"]) == len(inputs["cross_attention"]) == 3
    assert inputs["cross_attention"][0].shape == (1, 4, len(inputs["decoder_tokens"]), len(inputs["encoder_tokens"]))
    for view in (bertviz.model_view, bertviz.head_view):
        html = view(**inputs, html_action="return")
        page = html.data
        assert "w17" in page and "Encoder" in page and "Cross" in page
    assert inputs["encoder_tokens"] == ["w5", "w17", "w3", "w40", "</s>"] and inputs["decoder_tokens"][0] == "<s>"
