"""§6.1's alpha, chosen on the development set: one beam search re-ranked per alpha scores what a
search with that alpha returns; the choice is saved in the model's generation_config.json."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from helpers import run_cli, save_tiny_model

from aiayn_cli import AiaynForConditionalGeneration
from aiayn_cli.decoding.translator import Translator
from aiayn_cli.errors import AiaynError
from aiayn_cli.evaluation.length_penalty import MAX_ALPHA, choose_length_penalty, save_length_penalty, search_alphas
from aiayn_cli.evaluation.scoring import score


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(68)}" for _ in range(rng.randint(2, 10))) for _ in range(n)]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A random `tiny` model whose finished hypotheses differ in length, so that alpha matters: a random
    model rarely ends a sentence before its maximum length, so its decoder's output leans towards </s>."""
    folder = save_tiny_model(tmp_path_factory.mktemp("model"))
    model = AiaynForConditionalGeneration.from_pretrained(folder)
    with torch.no_grad():
        eos = model.get_output_embeddings().weight[model.config.eos_token_id]
        model.model.decoder.layers[-1].feed_forward_sublayer.norm.bias.copy_(2.0 * eos / eos.dot(eos))
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def translator(model_folder):
    return Translator.from_pretrained(str(model_folder), device="cpu", dtype="fp32")


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


def test_the_grid_goes_on_past_an_edge_until_the_best_alpha_is_inside():
    """A score whose optimum (4.2) lies past the grid's top: alphas 2.5, 3.0, ... are tried until the best
    has a worse neighbour above; one past the bottom (0.05): down to 0, the hard limit below."""
    calls: list[float] = []

    def peak_at(optimum: float):
        def bleu_of(alpha: float) -> float:
            calls.append(alpha)
            return 50.0 - (alpha - optimum) ** 2

        return bleu_of

    bleu = search_alphas([0.6, 1.0, 1.5, 2.0], peak_at(4.2))
    assert list(bleu) == [0.6, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5] == calls  # each scored once
    assert max(bleu, key=bleu.get) == 4.0
    calls.clear()
    bleu = search_alphas([1.0, 0.6, 2.0], peak_at(0.05))  # spacing below: 0.4
    assert list(bleu) == [1.0, 0.6, 2.0, 0.2, 0.0] and max(bleu, key=bleu.get) == 0.0
    # rising for ever: stops at the limit above; inside already, or a flat top: nothing added
    rising = search_alphas([1.0, 2.0, 3.0], lambda alpha: alpha)
    assert max(rising) == MAX_ALPHA and sorted(rising) == [float(a) for a in range(1, 11)]
    assert list(search_alphas([0.6, 1.0, 2.0], peak_at(1.1))) == [0.6, 1.0, 2.0]
    # a flat score: 0.6, the first of equals, is at the bottom: one step below, and 0.6 stays (ties: the first)
    assert list(search_alphas([0.6, 1.0], lambda alpha: 30.0)) == [0.6, 1.0, 0.2]
    assert list(search_alphas([1.0, 2.0], lambda alpha: min(alpha, 3.0))) == [1.0, 2.0, 3.0, 4.0]
    assert list(search_alphas([2.0], lambda alpha: alpha)) == [2.0]  # one alpha: a fixed alpha


def test_a_choice_at_the_grids_edge_is_extended_on_the_model(translator):
    """The references are the search's output at alpha 0 and the grid [1.5, 2.0] lies above it: the grid
    goes on down (1.0, 0.5, ...) until the best is inside it or at 0, and the chosen alpha's
    translations are the references."""
    sources = sentences(24, seed=0)
    references = translator.translate(sources, length_penalty=0.0)
    assert references != translator.translate(sources, length_penalty=2.0)  # else alpha would not matter here
    choice = choose_length_penalty(translator, sources, references, [1.5, 2.0])
    assert choice.extended[:1] == [1.0] and choice.alpha < 1.5
    assert choice.bleu[choice.alpha] == pytest.approx(100.0) and choice.bleu[choice.alpha] > choice.bleu[1.5]
    assert choice.alpha == 0.0 or min(choice.bleu) < choice.alpha  # inside, or at the limit 0
    assert choice.translations == references
    assert "the grid extended past its edge to 1" in choice.describe()


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


def test_evaluate_chooses_alpha_on_a_split_and_saves_it(model_folder, tmp_path, capsys):
    """`aiayn evaluate --model M --split validation --length-penalty-grid ... --save-length-penalty`: the
    choice for a model trained without a grid (or averaged by hand), as `aiayn train` makes it."""
    import shutil

    folder = Path(shutil.copytree(model_folder, tmp_path / "model"))
    translator = Translator.from_pretrained(str(folder))  # the precision `aiayn evaluate` chooses too
    sources = sentences(24, seed=1)
    at_2 = translator.translate(sources, length_penalty=2.0)
    sources = [source for source, target in zip(sources, at_2) if target.strip()]  # an empty reference is dropped
    by_alpha = {alpha: translator.translate(sources, length_penalty=alpha) for alpha in (0.0, 2.0)}
    assert by_alpha[0.0] != by_alpha[2.0]
    data = tmp_path / "data"
    data.mkdir()
    (data / "val.en").write_text("\n".join(sources) + "\n")
    (data / "val.de").write_text("\n".join(by_alpha[2.0]) + "\n")  # alpha 2 scores 100
    before = json.loads((folder / "generation_config.json").read_text())
    args = [
        "--model",
        folder,
        "--precision",
        "fp32",
        "--data-dir",
        data,
        "-s",
        "en",
        "-t",
        "de",
        "--split",
        "validation",
    ]
    code, _, err = run_cli(
        "evaluate", *args, "--length-penalty-grid", "0,2", "--save-length-penalty",
        "-o", tmp_path / "hyp.de", "--json", tmp_path / "out.json",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    assert f"alpha 2, chosen on {len(sources)} validation sentences" in err
    assert "2: 100.00, 4: 100.00; the grid extended past its edge to 4)" in err  # 2 was the top: 4 tried, no better
    saved = json.loads((tmp_path / "out.json").read_text())
    assert saved["inputs"]["length_penalty"] == 2.0
    assert saved["inputs"]["length_penalty_bleu"]["2"] == pytest.approx(100.0)
    assert saved["inputs"]["length_penalty_bleu"]["0"] < 99.0
    assert saved["scores"]["sacrebleu"]["score"] == pytest.approx(100.0)
    assert (tmp_path / "hyp.de").read_text().splitlines() == by_alpha[2.0]
    after = json.loads((folder / "generation_config.json").read_text())
    assert after.pop("length_penalty") == 2.0 and before.pop("length_penalty") == 0.6
    assert after == before
    # without --save-length-penalty the folder is left alone
    (folder / "generation_config.json").write_text(json.dumps({**before, "length_penalty": 0.6}))
    code, _, err = run_cli("evaluate", *args, "--length-penalty-grid", "0,2", capsys=capsys)
    assert code == 0, err
    assert json.loads((folder / "generation_config.json").read_text())["length_penalty"] == 0.6


def test_evaluate_grid_bad_options_give_one_line(model_folder, tmp_path, capsys):

    data = tmp_path / "data"
    data.mkdir()
    (data / "val.en").write_text("w1 w2\n")
    (data / "val.de").write_text("w2 w1\n")
    (data / "test.en").write_text("w1 w2\n")
    (data / "test.de").write_text("w2 w1\n")
    split = ["--data-dir", data, "-s", "en", "-t", "de", "--split", "validation"]
    cases = [
        (["--model", model_folder, *split, "--length-penalty-grid", "0.6,x"], "--length-penalty-grid 'x' is not a number"),
        (["--model", model_folder, *split, "--length-penalty-grid", "0.6,-1"], "--length-penalty-grid -1 is not a finite"),
        (["--model", model_folder, *split, "--save-length-penalty"], "--save-length-penalty needs --length-penalty-grid"),
        (["--model", "someone/model", *split, "--length-penalty-grid", "1", "--save-length-penalty"],
         "--save-length-penalty writes into a local model folder; someone/model is not one"),
        (["-i", data / "val.de", *split, "--length-penalty-grid", "1"], "--length-penalty-grid needs --model"),
        (["--length-penalty-grid", "1"], "--length-penalty-grid needs --model and data options"),
    ]  # fmt: skip
    for args, phrase in cases:
        code, _, err = run_cli("evaluate", *args, capsys=capsys)
        assert code == 2, (args, err)
        assert err.startswith("error: ") and err.count("\n") == 1, err
        assert phrase in err, (args, err)
    assert json.loads((model_folder / "generation_config.json").read_text())["length_penalty"] == 0.6
    # choosing on the test split works, with a warning that its score is then optimistic
    args = ["--model", model_folder, *split[:-1], "test", "--length-penalty-grid", "0.6,1"]
    code, _, err = run_cli("evaluate", *args, capsys=capsys)
    assert code == 0, err
    assert "warning: choosing alpha on the test split makes its score optimistic" in err
