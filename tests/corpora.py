"""Small parallel corpora written to temporary folders, and the Multi30k tokenizer shared by tests.

Expensive objects (the 10,000-token BPE of Multi30k, its tokenized training split) are built once
per test process: memoized through `functools.cache` (the fixtures `bpe_multi30k` and
`tokenized_multi30k` in `conftest.py` call them).
"""

from __future__ import annotations

import atexit
import functools
import json
import random
import shutil
import tempfile
from pathlib import Path

WORDS_EN = "a dog cat man woman child runs walks sits on the in red blue big small street park ball".split()
WORDS_DE = "ein hund katze mann frau kind rennt geht sitzt auf der im rot blau groß klein straße park ball".split()


def make_pairs(n: int, seed: int = 0, max_words: int = 12) -> list[tuple[str, str]]:
    """`n` sentence pairs of random words; the target is the source's words, mapped and reversed."""
    rng = random.Random(seed)
    to_de = dict(zip(WORDS_EN, WORDS_DE))
    pairs = []
    for _ in range(n):
        words = [rng.choice(WORDS_EN) for _ in range(rng.randint(1, max_words))]
        pairs.append((" ".join(words).capitalize() + ".", " ".join(to_de[w] for w in reversed(words)) + "."))
    return pairs


def write_lines(path: Path, lines, newline_at_end: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + ("\n" if newline_at_end and lines else "")
    path.write_text(text, encoding="utf-8")
    return path


def write_text_split(folder: Path, split: str, pairs, source_lang: str = "en", target_lang: str = "de") -> None:
    write_lines(folder / f"{split}.{source_lang}", [s for s, _ in pairs])
    write_lines(folder / f"{split}.{target_lang}", [t for _, t in pairs])


def write_jsonl(path: Path, pairs, source_lang: str = "en", target_lang: str = "de") -> Path:
    rows = [json.dumps({"translation": {source_lang: s, target_lang: t}}, ensure_ascii=False) for s, t in pairs]
    return write_lines(path, rows)


HUB_README = """---
task_categories:
- translation
language:
- en
- de
size_categories:
- 10K<n<100K
---
# Multi30k
"""


def write_hub_layout(folder: Path, sizes=(("train", 300), ("val", 20), ("test", 10))) -> Path:
    """A folder as the Hub holds `bentrevett/multi30k`: a README.md and one JSON-lines file per split,
    each row `{"en": ..., "de": ...}` (`val.jsonl` is the validation split)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text(HUB_README, encoding="utf-8")
    for seed, (name, n) in enumerate(sizes):
        rows = [json.dumps({"en": en, "de": de}, ensure_ascii=False) for en, de in make_pairs(n, seed=seed)]
        write_lines(folder / f"{name}.jsonl", rows)
    return folder


def write_tsv(path: Path, pairs) -> Path:
    return write_lines(path, [f"{s}\t{t}" for s, t in pairs])


_scratch = Path(tempfile.mkdtemp(prefix="aiayn-tests-"))
atexit.register(shutil.rmtree, _scratch, True)


@functools.cache
def multi30k_bpe(multi30k_dir: Path):
    """The 10,000-token joint BPE of Multi30k train (en + de), trained once per test process."""
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.data.tokenization import train_tokenizer

    spec = DataSpec(data_dir=multi30k_dir, source_lang="en", target_lang="de")
    return train_tokenizer(spec, vocab_size=10000, show_progress=False)


@functools.cache
def multi30k_train_tokenized(multi30k_dir: Path):
    """Multi30k train (en-de), tokenized with `multi30k_bpe`, cached in a scratch folder."""
    from aiayn_cli.data.corpus import load_split
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.data.tokenization import tokenize_split

    train = load_split(DataSpec(data_dir=multi30k_dir, source_lang="en", target_lang="de"), "train")
    return tokenize_split(train, multi30k_bpe(multi30k_dir), cache_dir=_scratch / "tokenized")
