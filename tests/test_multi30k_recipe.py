"""Point 1: `recipes/multi30k_en_de.yaml` trains on a 2-core CPU to >= 35 sacreBLEU on test2016 en->de
within 60 minutes of training. About 65 minutes: `python -m pytest -m long tests/test_multi30k_recipe.py -s`."""

from __future__ import annotations

import json
import time

import pytest
from conftest import REPO_ROOT, cli_env, run_cli


def score_test2016(model_dir, multi30k_dir, beam_size: int = 4) -> float:
    """sacreBLEU of a saved model on Multi30k test2016 en->de (beam search, detokenized output)."""
    import sacrebleu
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from aiayn_cli.training.validation import translate_sample

    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    sources = (multi30k_dir / "test2016.en").read_text(encoding="utf-8").splitlines()
    references = (multi30k_dir / "test2016.de").read_text(encoding="utf-8").splitlines()
    hypotheses = translate_sample(model, tokenizer, sources, beam_size=beam_size, max_tokens=8192)
    return sacrebleu.corpus_bleu(hypotheses, [references]).score


@pytest.mark.long
@pytest.mark.multi30k
def test_multi30k_recipe_reaches_35_bleu_in_an_hour(multi30k_dir, tmp_path):
    env = cli_env(HF_DATASETS_CACHE=str(tmp_path / "cache"))
    tokenizer = run_cli(
        "train-tokenizer",
        "--data-dir",
        multi30k_dir,
        "-s",
        "en",
        "-t",
        "de",
        "--vocab-size",
        "8000",
        "--output",
        tmp_path / "bpe8k",
        env=env,
    )
    assert tokenizer.returncode == 0, tokenizer.stderr
    start = time.monotonic()
    result = run_cli(
        "train",
        REPO_ROOT / "recipes" / "multi30k_en_de.yaml",
        "--data-dir",
        multi30k_dir,
        "--tokenizer",
        tmp_path / "bpe8k",
        "--output-dir",
        tmp_path / "run",
        "--no-progress",
        env=env,
        timeout=90 * 60,
    )
    wall = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    state = json.loads(
        sorted(
            (tmp_path / "run").glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1])
        )[-1].read_text()
    )
    bleu = score_test2016(tmp_path / "run" / "averaged", multi30k_dir)
    tokens_per_s = (state["source_tokens"] + state["target_tokens"]) / state["train_seconds"]
    print(
        f"\nMulti30k test2016 en->de: sacreBLEU {bleu:.2f} (averaged, beam 4); training {state['train_seconds'] / 60:.1f} "
        f"min ({wall / 60:.1f} min with setup), {state['step']} steps, {tokens_per_s:,.0f} non-pad tokens/s"
    )
    print(result.stdout)
    assert state["train_seconds"] <= 61 * 60
    assert bleu >= 35.0
