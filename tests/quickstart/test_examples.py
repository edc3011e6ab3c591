"""The sentences shown beside the quickstart's model are sentences of its grammar, with the grammar's
German where an output is shown: in the docs' code blocks, in `aiayn attention --help`, and in what
`aiayn quickstart` prints. (A sentence outside the grammar, "A dog runs.", gives word salad.) The slow
tier trains the quickstart's recipe and checks that the model translates each one as shown."""

from __future__ import annotations

import json
import re

from helpers import REPO_ROOT

from aiayn_cli.quickstart.lexicon import NOUNS, VERBS
from aiayn_cli.quickstart.synthetic import EXAMPLES, examples

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


def test_the_help_and_the_quickstart_show_examples(monkeypatch, capsys):
    from aiayn_cli.cli.commands import attention, quickstart

    english = {en for en, _ in examples()}
    in_help = QUOTED.findall(attention.attention.__doc__)
    assert in_help and set(in_help) <= english, in_help
    source = (REPO_ROOT / "aiayn_cli" / "cli" / "commands" / "quickstart.py").read_text(encoding="utf-8")
    assert "examples()" in source and not QUOTED.search(source.split("NEXT_STEPS", 2)[-1]), quickstart.__file__
