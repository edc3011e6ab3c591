"""The synthetic corpus's lexicon and German declension tables (`aiayn_cli.quickstart.synthetic` builds sentences from them).

Nouns with their gender, plural and weak-masculine forms; adjectives; present-tense verbs with the
case of their object; pronouns; prepositions with the case they govern; and the determiners, with
the endings of der-words, ein-words and weak, mixed and strong adjectives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CASES = ("nom", "acc", "dat")

# ---------------------------------------------------------------------------------------------
# Lexicon
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Noun:
    en: str
    en_plural: str | None  # None: a mass noun (water), singular only
    de: str
    de_plural: str | None
    gender: str  # "m", "f" or "n"
    tags: frozenset[str]
    oblique: str | None = None  # weak masculine nouns: accusative/dative singular (den Jungen)

    @property
    def mass(self) -> bool:
        return self.en_plural is None

    def german(self, case: str, plural: bool) -> str:
        if plural:
            # Dative plural adds -n unless the plural already ends in -n or -s (Kindern, Autos).
            if case == "dat" and not self.de_plural.endswith(("n", "s")):
                return self.de_plural + "n"
            return self.de_plural
        return self.oblique if self.oblique and case != "nom" else self.de


# English singular, English plural, German singular, German plural, gender, tags[, oblique].
# A "-" plural marks a mass noun. Tags: person, animal, object (can be held), place (a location
# for hinter/unter/neben/vor/auf), food, drink, read, open, throw, build, cook, song.
_NOUNS = """
man men Mann Männer m person
woman women Frau Frauen f person
child children Kind Kinder n person
boy boys Junge Jungen m person Jungen
girl girls Mädchen Mädchen n person
father fathers Vater Väter m person
mother mothers Mutter Mütter f person
brother brothers Bruder Brüder m person
sister sisters Schwester Schwestern f person
king kings König Könige m person
queen queens Königin Königinnen f person
teacher teachers Lehrer Lehrer m person
student students Student Studenten m person Studenten
doctor doctors Arzt Ärzte m person
baby babies Baby Babys n person
neighbor neighbors Nachbar Nachbarn m person Nachbarn
dog dogs Hund Hunde m animal
cat cats Katze Katzen f animal
horse horses Pferd Pferde n animal
bird birds Vogel Vögel m animal
mouse mice Maus Mäuse f animal
cow cows Kuh Kühe f animal
pig pigs Schwein Schweine n animal
lion lions Löwe Löwen m animal Löwen
bear bears Bär Bären m animal Bären
monkey monkeys Affe Affen m animal Affen
rabbit rabbits Kaninchen Kaninchen n animal
duck ducks Ente Enten f animal
fox foxes Fuchs Füchse m animal
elephant elephants Elefant Elefanten m animal Elefanten
ball balls Ball Bälle m object,throw
book books Buch Bücher n object,read,open
letter letters Brief Briefe m object,read,open
newspaper newspapers Zeitung Zeitungen f object,read
map maps Karte Karten f object,read
box boxes Kiste Kisten f object,open,place
bag bags Tasche Taschen f object,open
hat hats Hut Hüte m object
cup cups Tasse Tassen f object
bottle bottles Flasche Flaschen f object,open,throw
key keys Schlüssel Schlüssel m object
picture pictures Bild Bilder n object
stone stones Stein Steine m object,throw
shoe shoes Schuh Schuhe m object
lamp lamps Lampe Lampen f object
clock clocks Uhr Uhren f object
phone phones Telefon Telefone n object
table tables Tisch Tische m place,build
chair chairs Stuhl Stühle m place,build
house houses Haus Häuser n place,build
car cars Auto Autos n place
door doors Tür Türen f place,open
window windows Fenster Fenster n place,open
tree trees Baum Bäume m place
bed beds Bett Betten n place,build
boat boats Boot Boote n place,build
bridge bridges Brücke Brücken f place,build
song songs Lied Lieder n song
apple apples Apfel Äpfel m food,throw
banana bananas Banane Bananen f food
cake cakes Kuchen Kuchen m food
egg eggs Ei Eier n food,cook
pear pears Birne Birnen f food
sausage sausages Wurst Würste f food,cook
potato potatoes Kartoffel Kartoffeln f food,cook
water - Wasser - n drink
milk - Milch - f drink
tea - Tee - m drink,cook
coffee - Kaffee - m drink,cook
juice - Saft - m drink
soup - Suppe - f food,cook
bread - Brot - n food
rice - Reis - m food,cook
"""


def _parse_nouns(table: str) -> dict[str, Noun]:
    nouns = {}
    for line in table.strip().splitlines():
        en, en_pl, de, de_pl, gender, tags, *oblique = line.split()
        nouns[en] = Noun(
            en,
            None if en_pl == "-" else en_pl,
            de,
            None if de_pl == "-" else de_pl,
            gender,
            frozenset(tags.split(",")),
            oblique[0] if oblique else None,
        )
    return nouns


NOUNS = _parse_nouns(_NOUNS)

# English, German predicative form, the noun tags it describes. Attributive forms add an ending
# to the predicative form (a final -e is dropped first: müde -> müden).
_ADJECTIVES = """
small klein person,animal,object,place,food
big groß person,animal,object,place,food
old alt person,animal,object,place,song
young jung person,animal
new neu object,place,song
red rot object,place,food
blue blau object,place
green grün object,place,food
yellow gelb object,place,food
black schwarz animal,object,place
white weiß animal,object,place
brown braun animal,object,place,food
beautiful schön person,animal,object,place,song
happy glücklich person,animal
tired müde person,animal
hungry hungrig person,animal
fresh frisch food,drink
cold kalt food,drink
warm warm food,drink
sweet süß food,drink
heavy schwer object
"""
ADJECTIVES = {
    en: (de, frozenset(tags.split(","))) for en, de, tags in (line.split() for line in _ADJECTIVES.strip().splitlines())
}
COLORS = ("red", "blue", "green", "yellow", "black", "white", "brown")


@dataclass(frozen=True)
class Verb:
    en: str
    en_3sg: str
    de: tuple[str, str, str]  # ich, er/sie, wir/sie: sehe, sieht, sehen
    object_case: str | None  # "acc", "dat" or None (intransitive)
    subject_tags: frozenset[str]
    object_tags: frozenset[str] = field(default_factory=frozenset)


# English, English 3sg, German ich / er / wir forms, object case, subject tags, object tags.
_VERBS = """
see sees sehe sieht sehen acc person,animal person,animal,object,place,food,drink
have has habe hat haben acc person object,animal,food
buy buys kaufe kauft kaufen acc person object,food,drink
find finds finde findet finden acc person,animal object,animal,person
hear hears höre hört hören acc person,animal person,animal,song
need needs brauche braucht brauchen acc person object,food,drink
like likes mag mag mögen acc person,animal person,animal,object,food,drink,song
love loves liebe liebt lieben acc person,animal person,animal,food
carry carries trage trägt tragen acc person object,animal
hold holds halte hält halten acc person object,animal
wash washes wasche wäscht waschen acc person object,animal,place
catch catches fange fängt fangen acc person,animal animal,throw
paint paints male malt malen acc person person,animal,object,place
eat eats esse isst essen acc person,animal food
drink drinks trinke trinkt trinken acc person,animal drink
read reads lese liest lesen acc person read
take takes nehme nimmt nehmen acc person object,food
meet meets treffe trifft treffen acc person person
visit visits besuche besucht besuchen acc person person
open opens öffne öffnet öffnen acc person open
throw throws werfe wirft werfen acc person throw
bring brings bringe bringt bringen acc person object,food,drink
build builds baue baut bauen acc person build
cook cooks koche kocht kochen acc person cook
help helps helfe hilft helfen dat person,animal person,animal
follow follows folge folgt folgen dat person,animal person,animal
thank thanks danke dankt danken dat person person
sleep sleeps schlafe schläft schlafen - person,animal -
sit sits sitze sitzt sitzen - person,animal -
wait waits warte wartet warten - person,animal -
play plays spiele spielt spielen - person,animal -
stand stands stehe steht stehen - person,animal -
sing sings singe singt singen - person -
dance dances tanze tanzt tanzen - person -
work works arbeite arbeitet arbeiten - person -
laugh laughs lache lacht lachen - person -
"""


def _parse_verbs(table: str) -> dict[str, Verb]:
    verbs = {}
    for line in table.strip().splitlines():
        en, en_3sg, ich, er, wir, case, subject_tags, object_tags = line.split()
        verbs[en] = Verb(
            en,
            en_3sg,
            (ich, er, wir),
            None if case == "-" else case,
            frozenset(subject_tags.split(",")),
            frozenset() if object_tags == "-" else frozenset(object_tags.split(",")),
        )
    return verbs


VERBS = _parse_verbs(_VERBS)
BE = ("am", "is", "are"), ("bin", "ist", "sind")

# Personal pronouns: English nominative / oblique, German nominative / accusative / dative, person.
PRONOUNS = {
    "I": (("I", "me"), ("ich", "mich", "mir"), "1sg"),
    "he": (("he", "him"), ("er", "ihn", "ihm"), "3sg"),
    "she": (("she", "her"), ("sie", "sie", "ihr"), "3sg"),
    "we": (("we", "us"), ("wir", "uns", "uns"), "pl"),
    "they": (("they", "them"), ("sie", "sie", "ihnen"), "pl"),
}

# Prepositions: English, German, the case they govern, what their object may be, the clauses
# they go with. The two-way prepositions (hinter, unter, ...) only say where the subject of an
# intransitive verb is, hence dative: after a transitive verb (throws a ball behind the house)
# the accusative of direction would be as right.
PREPOSITIONS = {
    "with": ("mit", "dat", frozenset({"person", "animal", "object"}), ("transitive", "intransitive")),
    "for": ("für", "acc", frozenset({"person", "animal"}), ("transitive",)),
    "without": ("ohne", "acc", frozenset({"person", "animal", "object"}), ("transitive",)),
    "behind": ("hinter", "dat", frozenset({"place"}), ("intransitive",)),
    "under": ("unter", "dat", frozenset({"place"}), ("intransitive",)),
    "next to": ("neben", "dat", frozenset({"place"}), ("intransitive",)),
    "in front of": ("vor", "dat", frozenset({"place"}), ("intransitive",)),
    "on": ("auf", "dat", frozenset({"place"}), ("intransitive",)),
}

# ---------------------------------------------------------------------------------------------
# Determiners and adjective declension
# ---------------------------------------------------------------------------------------------

# Keys: case, then "m" / "f" / "n" for the singular genders or "pl".
DEFINITE_ARTICLE = {
    "nom": {"m": "der", "f": "die", "n": "das", "pl": "die"},
    "acc": {"m": "den", "f": "die", "n": "das", "pl": "die"},
    "dat": {"m": "dem", "f": "der", "n": "dem", "pl": "den"},
}
# dieser, and the strong adjective endings, share these endings.
DER_WORD_ENDINGS = {
    "nom": {"m": "er", "f": "e", "n": "es", "pl": "e"},
    "acc": {"m": "en", "f": "e", "n": "es", "pl": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"},
}
EIN_WORD_ENDINGS = {
    "nom": {"m": "", "f": "e", "n": "", "pl": "e"},
    "acc": {"m": "en", "f": "e", "n": "", "pl": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"},
}
ADJECTIVE_ENDINGS = {
    # after der, dieser
    "weak": {
        "nom": {"m": "e", "f": "e", "n": "e", "pl": "en"},
        "acc": {"m": "en", "f": "e", "n": "e", "pl": "en"},
        "dat": {"m": "en", "f": "en", "n": "en", "pl": "en"},
    },
    # after ein, kein, mein, ...
    "mixed": {
        "nom": {"m": "er", "f": "e", "n": "es", "pl": "en"},
        "acc": {"m": "en", "f": "e", "n": "es", "pl": "en"},
        "dat": {"m": "en", "f": "en", "n": "en", "pl": "en"},
    },
    # no article, or an (undeclined) numeral
    "strong": DER_WORD_ENDINGS,
}


@dataclass(frozen=True)
class Determiner:
    en: str | None  # before a singular noun; None: not used with singular (count) nouns
    en_plural: str | None  # before a plural noun; None: not used with plurals
    de: str  # the stem ("dies", "ein", "mein") or the numeral ("zwei"); "" for none
    declension: str  # "definite", "der", "ein" (endings added to `de`) or "none"
    adjectives: str  # "weak", "mixed" or "strong"

    def german(self, case: str, key: str) -> str:
        if self.declension == "definite":
            return DEFINITE_ARTICLE[case][key]
        if self.declension == "der":
            return self.de + DER_WORD_ENDINGS[case][key]
        if self.declension == "ein":
            return self.de + EIN_WORD_ENDINGS[case][key]
        return self.de


DETERMINERS = {
    "the": Determiner("the", "the", "", "definite", "weak"),
    "this": Determiner("this", "these", "dies", "der", "weak"),
    "a": Determiner("a", None, "ein", "ein", "mixed"),
    "no": Determiner("no", "no", "kein", "ein", "mixed"),
    "my": Determiner("my", "my", "mein", "ein", "mixed"),
    "his": Determiner("his", "his", "sein", "ein", "mixed"),
    "her": Determiner("her", "her", "ihr", "ein", "mixed"),
    "our": Determiner("our", "our", "unser", "ein", "mixed"),
    "their": Determiner("their", "their", "ihr", "ein", "mixed"),
    "bare": Determiner("", "", "", "none", "strong"),  # plurals (dogs) and mass nouns (water)
    "two": Determiner(None, "two", "zwei", "none", "strong"),
    "three": Determiner(None, "three", "drei", "none", "strong"),
    "four": Determiner(None, "four", "vier", "none", "strong"),
    "five": Determiner(None, "five", "fünf", "none", "strong"),
}
NUMERALS = ("two", "three", "four", "five")


def attributive(adjective: str, declension: str, case: str, key: str) -> str:
    """The German adjective with its ending: attributive("small", "weak", "acc", "m") == "kleinen"."""
    stem = ADJECTIVES[adjective][0]
    stem = stem[:-1] if stem.endswith("e") else stem
    return stem + ADJECTIVE_ENDINGS[declension][case][key]
