"""`aiayn quickstart`: the whole pipeline runs end to end on the generated corpus (a short budget in
the default tier; the slow tier runs it as shipped and checks the BLEU the README reports).

The sentences shown beside the quickstart's model are sentences of its grammar, with the grammar's
German where an output is shown: in the docs' code blocks, in `aiayn attention --help`, and in what
`aiayn quickstart` prints. (A sentence outside the grammar, "A dog runs.", gives word salad.) The slow
tier trains the quickstart's recipe and checks that the model translates each one as shown."""

from __future__ import annotations

import json
import re

import pytest
import sacrebleu
from helpers import REPO_ROOT, run_cli

from aiayn_cli.quickstart.lexicon import NOUNS, VERBS
from aiayn_cli.quickstart.pipeline import run_quickstart
from aiayn_cli.quickstart.synthetic import EXAMPLES, examples


def _check_reported_score(result, output):
    """The reported BLEU is sacreBLEU's own on the written translations and the test references."""
    hypotheses = (output / "test.hyp.de").read_text(encoding="utf-8").splitlines()
    references = (output / "data" / "test.de").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == len(references)
    assert result.bleu == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score, abs=1e-9)
    return hypotheses


def in_steps(steps: int, every: int) -> dict:
    """The quickstart recipe with a budget in steps, not minutes, and in fp32: what a test checks then
    does not depend on the speed of the CPU or on the precision `auto` picks there."""
    return {
        "max_time": None,
        "max_steps": steps,
        "checkpoint_every_minutes": None,
        "checkpoint_every_steps": every,
        "valid_every_minutes": None,
        "valid_every_steps": steps,
        "mixed_precision": "no",
    }


def test_quickstart_runs_every_step(tmp_path):
    output = tmp_path / "qs"
    result = run_quickstart(
        output, train_pairs=2000, test_pairs=50, show_progress=False, recipe_overrides=in_steps(6, 2)
    )
    assert (result.model_dir / "model.safetensors").is_file()
    assert (result.model_dir / "tokenizer.json").is_file()
    assert (output / "run" / "recipe.yaml").is_file()
    assert (output / "run" / "learning_curve.png").is_file()
    hypotheses = _check_reported_score(result, output)
    assert len(hypotheses) == 50
    assert result.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert set(result.seconds) == {"corpus", "tokenizer", "train", "translate", "evaluate"}
    assert [example[1] for example in result.examples] == hypotheses[:5]
    assert (result.steps, result.max_steps, result.stopped_by) == (6, 6, "max_steps")
    assert result.budget() == "training: 6 steps, the budget (--steps)"


def test_quickstart_says_when_its_time_cap_stopped_training(tmp_path):
    """The budget is in steps; a machine too slow for them within --minutes stops at the cap, and the
    quickstart says at which step of how many."""
    output = tmp_path / "qs"
    fast = {"mixed_precision": "no", "valid_bleu_samples": 0, "best_metric": "loss", "history_steps": None}
    result = run_quickstart(
        output, steps=100_000, minutes=0.001, train_pairs=2000, test_pairs=5, show_progress=False, recipe_overrides=fast
    )
    assert result.stopped_by == "max_time" and 1 <= result.steps < 100_000 and result.max_steps == 100_000
    assert result.budget().startswith(
        f"training: the time cap (--minutes) was reached at step {result.steps:,} of 100,000"
    )


@pytest.fixture(scope="module")
def trained_quickstart(tmp_path_factory):
    """The quickstart's recipe and corpus as shipped (its budget in steps: 1,000, checkpoints and
    validation every 200), without its time cap and in fp32: what it learns does not depend on the
    CPU's speed or its precision. The BLEU the command reaches on a given CPU is a benchmark's."""
    output = tmp_path_factory.mktemp("quickstart") / "qs"
    result = run_quickstart(output, show_progress=False, recipe_overrides={"max_time": None, "mixed_precision": "no"})
    return result, output


@pytest.mark.slow
def test_quickstart_recipe_learns_the_generated_language(trained_quickstart):
    result, output = trained_quickstart
    _check_reported_score(result, output)
    assert (result.steps, result.stopped_by) == (1000, "max_steps")
    assert result.bleu >= 90.0, result.bleu


@pytest.mark.slow
def test_the_documented_examples_translate_as_shown(trained_quickstart):
    """Every sentence the docs show beside the quickstart's model (`shown_sentences` below finds them) is
    translated by the trained model into the grammar's German, with the default options, in fp32."""
    from aiayn_cli.decoding.translator import Translator
    from aiayn_cli.quickstart.synthetic import examples

    german = dict(examples())
    shown = [sentence for sentence in shown_sentences() if sentence in german]
    assert len(shown) >= 4
    translator = Translator.from_pretrained(str(trained_quickstart[0].model_dir), dtype="fp32")
    got = dict(zip(shown, translator.translate(shown)))
    assert got == {sentence: german[sentence] for sentence in shown}


def test_quickstart_refuses_a_non_empty_folder(tmp_path, capsys):
    (tmp_path / "qs").mkdir()
    (tmp_path / "qs" / "keep.txt").write_text("mine")
    for overwrite in ([], ["--overwrite"]):  # a folder holding anything but a quickstart's is never used
        code, _, err = run_cli("quickstart", "-o", tmp_path / "qs", *overwrite, capsys=capsys)
        assert code == 2 and "holds files that are not part of a quickstart (e.g. keep.txt)" in err, err
    assert (tmp_path / "qs" / "keep.txt").read_text() == "mine"
    (tmp_path / "qs" / "keep.txt").unlink()
    (tmp_path / "qs" / "test.hyp.de").write_text("an earlier quickstart's\n")
    code, _, err = run_cli("quickstart", "-o", tmp_path / "qs", capsys=capsys)
    assert code == 2 and "exists and holds a quickstart; pass --overwrite to replace it" in err, err


@pytest.mark.parametrize("minutes", ["0", "-1", "nan", "inf"])
def test_quickstart_refuses_an_impossible_budget_before_writing(tmp_path, capsys, minutes):
    code, _, err = run_cli("quickstart", "-o", tmp_path / "qs", "--minutes", minutes, capsys=capsys)
    assert code == 2 and err.startswith("error: --minutes must be a positive number") and err.count("\n") == 1, err
    assert not (tmp_path / "qs").exists()


# The sentences shown beside the quickstart's model

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)[^\n]*\n(?P<code>.*?)^```\s*$", re.M | re.S)
QUOTED = re.compile(r"""(?<![\w])["']([A-Z][^"'\n]*?[.!?])["']""")
# Shown on purpose outside the grammar (two prepositional phrases): how the model fails on it.
OUTSIDE_ON_PURPOSE = {"Two old women play with the tired horses behind the house."}


def quickstart_blocks(page) -> list[tuple[str, str]]:
    """The (language, code) blocks of a page that use the quickstart's model (`aiayn-quickstart`, or
    $MODEL where the page sets MODEL to it)."""
    text = page.read_text(encoding="utf-8")
    sets_model = re.search(r"^MODEL=aiayn-quickstart", text, re.M) is not None
    found = []
    for block in FENCE.finditer(text):
        code = block["code"]
        uses = "aiayn-quickstart" in code or (sets_model and "$MODEL" in code)
        if uses:
            found.append((block["lang"], code))
    return found


def shown_sentences() -> dict[str, str]:
    """Each sentence quoted in a shell or Python block beside the quickstart's model -> where."""
    shown = {}
    for page in PAGES:
        for lang, code in quickstart_blocks(page):
            if lang in ("bash", "sh", "python", "console"):
                for sentence in QUOTED.findall(code.replace("\\n", "\n")):
                    shown.setdefault(sentence, str(page.relative_to(REPO_ROOT)))
    return shown


def test_each_example_is_a_sentence_of_the_grammar():
    for clause in EXAMPLES:
        verb = VERBS[clause.verb]
        for subject in clause.subject:
            assert NOUNS[subject.noun].tags & verb.subject_tags, clause
        if clause.object is not None:
            assert verb.object_case and NOUNS[clause.object.noun].tags & verb.object_tags, clause
    english = [en for en, _ in examples()]
    assert len(set(english)) == len(english) >= 5


def test_the_docs_show_only_examples_beside_the_quickstart_model():
    known = {sentence for pair in examples() for sentence in pair}
    shown = shown_sentences()
    assert len(shown) >= 4, shown  # the pages do show sentences beside it
    unknown = {s: page for s, page in shown.items() if s not in known and s not in OUTSIDE_ON_PURPOSE}
    assert not unknown, f"sentences the quickstart's grammar does not make (use one of EXAMPLES): {unknown}"


def test_documented_outputs_are_the_grammars_german():
    """serve-export.md shows the server's answer for two examples: its best translations are theirs."""
    german = dict(examples())
    text = (REPO_ROOT / "docs" / "serve-export.md").read_text(encoding="utf-8")
    request = re.search(r"-d '(\{.*?\})'", text)
    answer = next(json.loads(b["code"]) for b in FENCE.finditer(text) if b["lang"] == "json")
    sentences = json.loads(request[1])["text"]
    assert [t["text"] for t in answer["translations"]] == [german[s] for s in sentences]


def test_the_help_and_the_quickstart_show_examples(capsys):
    from aiayn_cli.cli.commands import attention, quickstart

    english = {en for en, _ in examples()}
    in_help = QUOTED.findall(attention.attention.__doc__)
    assert in_help and set(in_help) <= english, in_help
    source = (REPO_ROOT / "aiayn_cli" / "cli" / "commands" / "quickstart.py").read_text(encoding="utf-8")
    assert "examples()" in source and not QUOTED.search(source.split("NEXT_STEPS", 2)[-1]), quickstart.__file__
