"""§6.1's alpha, chosen on the development set: one beam search re-ranked per alpha scores what a
search with that alpha returns; the choice is saved in the model's generation_config.json."""

from __future__ import annotations

import json
import random

import pytest
import torch
from conftest import save_tiny_model

from aiayn_cli import AiaynForConditionalGeneration
from aiayn_cli.decoding.translator import Translator
from aiayn_cli.errors import AiaynError
from aiayn_cli.evaluation.length_penalty import choose_length_penalty, save_length_penalty
from aiayn_cli.evaluation.scoring import score


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(68)}" for _ in range(rng.randint(2, 10))) for _ in range(n)]


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    from transformers import AutoTokenizer

    folder = save_tiny_model(tmp_path_factory.mktemp("model"))
    model = AiaynForConditionalGeneration.from_pretrained(folder)
    # A random model rarely ends a sentence before its maximum length: a bias towards </s> in the
    # decoder's output makes its finished hypotheses differ in length, so that alpha matters.
    with torch.no_grad():
        eos = model.get_output_embeddings().weight[model.config.eos_token_id]
        model.model.decoder.layers[-1].feed_forward_sublayer.norm.bias.copy_(2.0 * eos / eos.dot(eos))
    return Translator(model, AutoTokenizer.from_pretrained(folder), device="cpu", dtype="fp32")


def bleu(hypotheses: list[str], references: list[str]) -> float:
    return score(hypotheses, references, metrics=("sacrebleu",))["scores"]["sacrebleu"]["score"]


def test_each_alpha_scores_its_own_search_and_the_best_is_chosen(translator):
    sources = sentences(24, seed=0)
    # A random model's finished hypotheses differ in length, so alpha changes which one wins; the
    # references are the search's output at alpha 2, which therefore scores 100.
    by_alpha = {alpha: translator.translate(sources, length_penalty=alpha) for alpha in (0.0, 0.6, 2.0)}
    assert by_alpha[0.0] != by_alpha[2.0]  # otherwise this test could not tell the alphas apart
    references = by_alpha[2.0]
    choice = choose_length_penalty(translator, sources, references, [0.0, 0.6, 2.0])
    assert choice.bleu[2.0] == pytest.approx(100.0) and choice.bleu[0.0] < 99.0
    assert choice.alpha == (0.6 if by_alpha[0.6] == by_alpha[2.0] else 2.0)  # the first of the best
    for alpha, hypotheses in by_alpha.items():
        assert choice.bleu[alpha] == pytest.approx(bleu(hypotheses, references), abs=1e-9)
    assert (choice.num_beams, choice.style, choice.sentences) == (4, "gnmt", 24)
    assert f"alpha {choice.alpha:g}," in choice.describe() and "0.6: " in choice.describe()
    # ties go to the alpha listed first
    same = choose_length_penalty(translator, sources, references, [2.0, 2.0])
    assert same.alpha == 2.0 and list(same.bleu) == [2.0]


def test_bad_grids_and_misaligned_references_are_refused(translator):
    with pytest.raises(AiaynError, match="no alpha to try"):
        choose_length_penalty(translator, ["w1"], ["w2"], [])
    with pytest.raises(AiaynError, match="2 sources but 1 references"):
        choose_length_penalty(translator, ["w1", "w2"], ["w3"], [0.6])


def test_the_choice_is_saved_with_the_other_settings(tmp_path):
    folder = save_tiny_model(tmp_path / "model")
    before = json.loads((folder / "generation_config.json").read_text())
    save_length_penalty(folder, 1.5)
    after = json.loads((folder / "generation_config.json").read_text())
    assert after.pop("length_penalty") == 1.5 and before.pop("length_penalty") == 0.6
    assert after == before
    assert Translator.from_pretrained(str(folder)).decoding_options().length_penalty == 1.5
    assert not list(folder.glob("*.tmp*"))
