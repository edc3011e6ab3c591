"""The synthetic English->German corpus: correct German, determinism, disjoint splits, small vocabulary."""

import random

import pytest

from aiayn_cli.errors import AiaynError
from aiayn_cli.quickstart.lexicon import NOUNS
from aiayn_cli.quickstart.synthetic import (
    Clause,
    corpus_statistics,
    generate_corpus,
    main,
    noun_phrase,
    render,
    render_aligned,
    sample_clause,
    write_corpus,
)
from aiayn_cli.quickstart.synthetic import (
    NounPhrase as NP,
)

# Hand-checked translations. The comment names the German pattern: case, gender/number, the
# adjective declension (weak after der/dieser, mixed after ein-words, strong without article).
HAND_CHECKED = [
    # nom m weak; acc m mixed
    (
        Clause((NP("dog", "the", ("small",)),), "see", NP("ball", "a", ("red",))),
        "The small dog sees a red ball.",
        "Der kleine Hund sieht einen roten Ball.",
    ),
    # nom pl numeral; acc pl definite
    (
        Clause((NP("dog", "two", plural=True),), "see", NP("cat", "the", plural=True)),
        "Two dogs see the cats.",
        "Zwei Hunde sehen die Katzen.",
    ),
    # dat f weak
    (
        Clause((NP("man"),), "play", preposition="with", prepositional_object=NP("woman", "the", ("old",))),
        "The man plays with the old woman.",
        "Der Mann spielt mit der alten Frau.",
    ),
    # nom f mixed; acc n mixed
    (
        Clause((NP("woman", "a", ("young",)),), "read", NP("book", "a", ("new",))),
        "A young woman reads a new book.",
        "Eine junge Frau liest ein neues Buch.",
    ),
    # nom n weak; dat m weak with a weak masculine noun (dem Jungen)
    (
        Clause((NP("child"),), "help", NP("boy", "the", ("tired",))),
        "The child helps the tired boy.",
        "Das Kind hilft dem müden Jungen.",
    ),
    # nom m possessive; dat n mixed
    (
        Clause(
            (NP("father", "my"),), "sleep", preposition="in front of", prepositional_object=NP("house", "a", ("big",))
        ),
        "My father sleeps in front of a big house.",
        "Mein Vater schläft vor einem großen Haus.",
    ),
    # dat f mixed
    (
        Clause((NP("cat"),), "sit", preposition="on", prepositional_object=NP("box", "her", ("old",))),
        "The cat sits on her old box.",
        "Die Katze sitzt auf ihrer alten Kiste.",
    ),
    # nom pl strong; acc pl strong
    (
        Clause((NP("dog", "bare", ("hungry",), plural=True),), "eat", NP("apple", "bare", ("sweet",), plural=True)),
        "Hungry dogs eat sweet apples.",
        "Hungrige Hunde essen süße Äpfel.",
    ),
    # dat pl strong after a numeral
    (
        Clause(
            (NP("girl"),), "play", preposition="with", prepositional_object=NP("dog", "three", ("small",), plural=True)
        ),
        "The girl plays with three small dogs.",
        "Das Mädchen spielt mit drei kleinen Hunden.",
    ),
    # acc n strong singular (mass noun)
    (
        Clause((NP("boy"),), "drink", NP("water", "bare", ("cold",))),
        "The boy drinks cold water.",
        "Der Junge trinkt kaltes Wasser.",
    ),
    # nom m strong singular
    (Clause((NP("tea", "bare", ("cold",)),), "be", predicate="sweet"), "Cold tea is sweet.", "Kalter Tee ist süß."),
    # dat f strong singular
    (
        Clause(
            (NP("man"),), "eat", NP("bread"), preposition="with", prepositional_object=NP("milk", "bare", ("warm",))
        ),
        "The man eats the bread with warm milk.",
        "Der Mann isst das Brot mit warmer Milch.",
    ),
    # dat m strong singular
    (
        Clause(
            (NP("woman"),),
            "eat",
            NP("cake", "a"),
            preposition="with",
            prepositional_object=NP("tea", "bare", ("cold",)),
        ),
        "The woman eats a cake with cold tea.",
        "Die Frau isst einen Kuchen mit kaltem Tee.",
    ),
    # acc m der-word; nom n der-word; dat pl der-word
    (
        Clause((NP(pronoun="we"),), "visit", NP("teacher", "this", ("old",))),
        "We visit this old teacher.",
        "Wir besuchen diesen alten Lehrer.",
    ),
    (
        Clause((NP("pig", "this", ("small",)),), "be", predicate="hungry"),
        "This small pig is hungry.",
        "Dieses kleine Schwein ist hungrig.",
    ),
    (
        Clause((NP("boy", plural=True),), "thank", NP("woman", "this", ("old",), plural=True)),
        "The boys thank these old women.",
        "Die Jungen danken diesen alten Frauen.",
    ),
    # negation: kein for an indefinite or bare object, nicht otherwise
    (
        Clause((NP("man"),), "see", NP("dog", "a"), negated=True),
        "The man does not see a dog.",
        "Der Mann sieht keinen Hund.",
    ),
    (
        Clause((NP("cat"),), "drink", NP("water", "bare"), negated=True),
        "The cat does not drink water.",
        "Die Katze trinkt kein Wasser.",
    ),
    (
        Clause((NP("boy"),), "eat", NP("apple", "bare", ("red",), plural=True), negated=True),
        "The boy does not eat red apples.",
        "Der Junge isst keine roten Äpfel.",
    ),
    (
        Clause((NP("woman"),), "see", NP("dog"), negated=True),
        "The woman does not see the dog.",
        "Die Frau sieht den Hund nicht.",
    ),
    (
        Clause((NP("dog", plural=True),), "sleep", preposition="under", prepositional_object=NP("table"), negated=True),
        "The dogs do not sleep under the table.",
        "Die Hunde schlafen nicht unter dem Tisch.",
    ),
    (Clause((NP(pronoun="I"),), "be", predicate="tired", negated=True), "I am not tired.", "Ich bin nicht müde."),
    (
        Clause((NP("bird"),), "follow", NP("mother", "a"), negated=True),
        "The bird does not follow a mother.",
        "Der Vogel folgt keiner Mutter.",
    ),
    # pronouns in each case
    (Clause((NP(pronoun="she"),), "help", NP(pronoun="he")), "She helps him.", "Sie hilft ihm."),
    (Clause((NP(pronoun="they"),), "see", NP(pronoun="we")), "They see us.", "Sie sehen uns."),
    (
        Clause((NP("dog"),), "play", preposition="with", prepositional_object=NP(pronoun="they")),
        "The dog plays with them.",
        "Der Hund spielt mit ihnen.",
    ),
    (
        Clause((NP(pronoun="I"),), "buy", NP("cake", "a"), preposition="for", prepositional_object=NP(pronoun="she")),
        "I buy a cake for her.",
        "Ich kaufe einen Kuchen für sie.",
    ),
    # coordinated subject takes a plural verb
    (Clause((NP("man"), NP("woman")), "sing"), "The man and the woman sing.", "Der Mann und die Frau singen."),
    # weak masculine accusative; a/an; two adjectives
    (Clause((NP("lion"),), "see", NP("bear")), "The lion sees the bear.", "Der Löwe sieht den Bären."),
    (
        Clause((NP("man", "a", ("old",)),), "eat", NP("apple", "a")),
        "An old man eats an apple.",
        "Ein alter Mann isst einen Apfel.",
    ),
    (
        Clause((NP("ball", "the", ("small", "red")),), "be", predicate="heavy"),
        "The small red ball is heavy.",
        "Der kleine rote Ball ist schwer.",
    ),
    (
        Clause((NP("dog", "a", ("big", "black")),), "sleep"),
        "A big black dog sleeps.",
        "Ein großer schwarzer Hund schläft.",
    ),
    # possessives: dat pl mixed; acc m mixed on `unser`; acc n mixed after ohne
    (
        Clause((NP("dog", "our", plural=True),), "follow", NP("cat", "my", plural=True)),
        "Our dogs follow my cats.",
        "Unsere Hunde folgen meinen Katzen.",
    ),
    (
        Clause((NP("girl"),), "find", NP("key", "our", ("old",))),
        "The girl finds our old key.",
        "Das Mädchen findet unseren alten Schlüssel.",
    ),
    (
        Clause((NP("woman"),), "buy", NP("hat", "a"), preposition="without", prepositional_object=NP("child", "her")),
        "The woman buys a hat without her child.",
        "Die Frau kauft einen Hut ohne ihr Kind.",
    ),
    # nom pl kein; nom n mixed
    (Clause((NP("child", "no", plural=True),), "laugh"), "No children laugh.", "Keine Kinder lachen."),
    (Clause((NP("horse", "a", ("small",)),), "sleep"), "A small horse sleeps.", "Ein kleines Pferd schläft."),
]


@pytest.mark.parametrize("clause, english, german", HAND_CHECKED, ids=[e for _, e, _ in HAND_CHECKED])
def test_hand_checked_translations(clause, english, german):
    assert render(clause) == (english, german)


@pytest.mark.parametrize(
    "noun, case, plural, german",
    [
        ("child", "dat", True, "den Kindern"),  # dative plural adds -n
        ("car", "dat", True, "den Autos"),  # ... but not after -s
        ("key", "dat", True, "den Schlüsseln"),
        ("woman", "dat", True, "den Frauen"),  # ... nor after -n
        ("student", "acc", False, "den Studenten"),  # weak masculine
        ("neighbor", "dat", False, "dem Nachbarn"),
        ("elephant", "nom", False, "der Elefant"),
    ],
)
def test_noun_forms(noun, case, plural, german):
    assert noun_phrase(NP(noun, plural=plural), case)[1] == german


@pytest.mark.parametrize(
    "np", [NP("dog", "a", plural=True), NP("water", "a"), NP("water", plural=True), NP("dog", "bare"), NP("dog", "two")]
)
def test_ungrammatical_noun_phrases_are_refused(np):
    with pytest.raises(ValueError):
        noun_phrase(np, "nom")


@pytest.mark.parametrize(
    "clause",
    [
        # `wirft einen Ball hinter das Haus` (direction, accusative) would be as right as the dative
        Clause((NP("boy"),), "throw", NP("ball"), preposition="behind", prepositional_object=NP("house")),
        Clause((NP("dog"),), "sleep", NP("ball")),  # an intransitive verb with an object
        Clause((NP("dog"),), "see"),  # a transitive verb without one
        Clause((NP("man"),), "see", NP("dog", "two", plural=True), negated=True),  # `nicht zwei Hunde`
    ],
)
def test_clauses_outside_the_grammar_are_refused(clause):
    with pytest.raises(ValueError):
        render(clause)


def test_english_determines_german():
    """One translation per English sentence, over many sampled clauses (before de-duplication)."""
    rng = random.Random(0)
    translations = {}
    for _ in range(20000):
        en, de = render(sample_clause(rng))
        assert translations.setdefault(en, de) == de, en


def test_generation_is_deterministic():
    a = generate_corpus(2000, seed=7)
    assert a == generate_corpus(2000, seed=7)
    assert a != generate_corpus(2000, seed=8)


def test_no_sentence_occurs_twice():
    # Some German sentences have two English sources (sees no dog / does not see a dog); at this
    # size such collisions occur unless they are left out.
    pairs = generate_corpus(20000, seed=0)
    assert len(pairs) == len({en for en, _ in pairs}) == len({de for _, de in pairs}) == 20000


def test_capitalization_and_punctuation():
    noun_forms = {
        form
        for n in NOUNS.values()
        for case in ("nom", "acc", "dat")
        for plural in (False, True)
        if not (plural and n.mass)
        for form in [n.german(case, plural)]
    }
    for en, de in generate_corpus(3000, seed=1):
        assert en.endswith(".") and de.endswith(".") and ". " not in en + de
        assert en[0].isupper() and de[0].isupper()
        first, *rest = de.rstrip(".").split()
        for word in rest:  # German capitalizes exactly its nouns
            assert word[0].isupper() == (word in noun_forms), (word, de)
        assert all(w == "I" or w.islower() for w in en.rstrip(".").split()[1:]), en


def test_vocabulary_and_lengths_stay_small():
    stats = corpus_statistics(generate_corpus(5000, seed=0))
    for lang, (low, high) in {"en": (200, 450), "de": (250, 600)}.items():
        assert low <= stats[lang]["types"] <= high, stats
        assert 2 <= stats[lang]["min_length"] and stats[lang]["max_length"] <= 14, stats
        assert 5 <= stats[lang]["mean_length"] <= 8, stats


def _read(folder, split, lang):
    return (folder / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()


def test_write_corpus_splits_are_disjoint(tmp_path):
    out = tmp_path / "corpus"
    assert write_corpus(out, train=1500, validation=200, test=300, seed=3) == {
        "train": 1500,
        "validation": 200,
        "test": 300,
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]  # no temporary folder left
    sets = {}
    for split, size in (("train", 1500), ("validation", 200), ("test", 300)):
        en, de = _read(out, split, "en"), _read(out, split, "de")
        assert len(en) == len(de) == size
        sets[split] = (set(en), set(de))
    for lang in (0, 1):
        assert not sets["train"][lang] & sets["test"][lang]
        assert not sets["train"][lang] & sets["validation"][lang]
        assert not sets["validation"][lang] & sets["test"][lang]
    # The same seed gives the same files.
    write_corpus(tmp_path / "again", train=1500, validation=200, test=300, seed=3)
    assert _read(tmp_path / "again", "test", "de") == _read(out, "test", "de")


def test_write_corpus_refuses_an_existing_folder_unless_told(tmp_path):
    out = tmp_path / "corpus"
    write_corpus(out, train=10, validation=2, test=2, seed=0)
    with pytest.raises(AiaynError, match="already exists"):
        write_corpus(out, train=10, validation=2, test=2, seed=1)
    write_corpus(out, train=20, validation=2, test=2, seed=1, overwrite=True)
    assert len(_read(out, "train", "en")) == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]
    with pytest.raises(AiaynError, match="--test"):
        write_corpus(tmp_path / "other", train=10, test=-1)


def test_main_writes_a_folder(tmp_path, capsys):
    assert main([str(tmp_path / "c"), "--train", "30", "--validation", "5", "--test", "5", "--seed", "2"]) == 0
    assert len(_read(tmp_path / "c", "validation", "de")) == 5
    assert main([str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


# Hand-worked word alignments ("i-j": English word i, German word j, from 0).
HAND_ALIGNED = [
    # The boy does not help the tired lion. / Der Junge hilft dem müden Löwen nicht.
    (
        Clause((NP("boy"),), "help", NP("lion", "the", ("tired",)), negated=True),
        "0-0 1-1 2-2 3-6 4-2 5-3 6-4 7-5",
    ),
    # The man sees no dogs ... : "does not see dogs" / "sieht keine Hunde": keine is both not and the article
    (
        Clause((NP("man"),), "see", NP("dog", "bare", plural=True), negated=True),
        "0-0 1-1 2-2 3-3 4-2 5-4",
    ),
    # A cat sleeps in front of the house. / Eine Katze schläft vor dem Haus.
    (
        Clause((NP("cat", "a"),), "sleep", preposition="in front of", prepositional_object=NP("house")),
        "0-0 1-1 2-2 3-3 4-3 5-3 6-4 7-5",
    ),
]


@pytest.mark.parametrize("clause, alignment", HAND_ALIGNED, ids=[a for _, a in HAND_ALIGNED])
def test_hand_worked_alignments(clause, alignment):
    english, german, got = render_aligned(clause)
    assert (english, german) == render(clause)
    assert got == alignment, (english, german)


def test_every_written_pair_has_an_alignment_within_its_words(tmp_path):
    write_corpus(tmp_path / "c", train=300, validation=20, test=20, seed=4)
    for split in ("train", "validation", "test"):
        en, de, align = (_read(tmp_path / "c", split, lang) for lang in ("en", "de", "align"))
        assert len(en) == len(de) == len(align)
        for e, d, a in zip(en, de, align):
            links = [tuple(map(int, link.split("-"))) for link in a.split()]
            assert {i for i, _ in links} == set(range(len(e.split())))  # every English word is aligned
            assert all(j < len(d.split()) for _, j in links)
