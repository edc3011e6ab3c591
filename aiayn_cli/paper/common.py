"""What every `aiayn paper` topic shares: the output folder, figures, the markdown table, the model,
a small padded batch of real sentences and the tokenizer that reads them."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Sentence pairs of three lengths (Multi30k style): enough padding to see in a batch.
SENTENCE_PAIRS = (
    ("A dog runs.", "Ein Hund rennt."),
    ("Two children play in the park.", "Zwei Kinder spielen im Park."),
    (
        "A man in a blue shirt rides a bike down the street.",
        "Ein Mann in einem blauen Hemd fährt mit dem Fahrrad die Straße entlang.",
    ),
)
DPI = 110


@dataclass
class TopicResult:
    """What a topic wrote and measured: `notes` are the lines printed under "what to notice",
    `numbers` the measurements (for notebooks and tests)."""

    topic: str
    output_dir: Path
    figures: list[Path] = field(default_factory=list)
    table: Path | None = None
    notes: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend, with sizes legible in a browser."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "figure.titlesize": 12})
    return plt


def save_figure(fig, path: Path, dpi: int = DPI) -> Path:
    """Write `fig` as a PNG under the output folder and close it."""
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    pyplot().close(fig)
    return path


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def write_markdown(result: TopicResult, title: str, sections: list[str]) -> Path:
    """`TOPIC.md` in the output folder: a title, the tables, the figures and what to notice."""
    figures = [f"![{p.stem}]({p.name})" for p in result.figures]
    notice = ["What to notice:", "", *[f"- {note}" for note in result.notes]]
    text = "\n\n".join([f"# {title}", *sections, "\n".join(figures), "\n".join(notice)]) + "\n"
    path = result.output_dir / f"{result.topic.replace('-', '_')}.md"
    path.write_text(text, encoding="utf-8")
    result.table = path
    return path


@functools.lru_cache(maxsize=1)
def load_model(model: str):
    """A saved aiayn model and its tokenizer, in evaluation mode on the CPU: (model, tokenizer); loaded
    once per path (`run_topic` checks it before writing anything, the topic then uses it)."""
    from ..decoding.translator import Translator

    translator = Translator.from_pretrained(model, device="cpu")
    return translator.model, translator.tokenizer


def small_tokenizer():
    """The project's BPE (`aiayn train-tokenizer`'s code) trained on `SENTENCE_PAIRS` alone: a real
    tokenizer, with the model's special ids, for topics run without `--model`."""
    from ..data.tokenization import train_tokenizer

    sentences = [side for pair in SENTENCE_PAIRS for side in pair]
    return train_tokenizer(sentences, vocab_size=400, min_frequency=1, show_progress=False)


def padded_batch(tokenizer, pairs=SENTENCE_PAIRS) -> dict:
    """Sources and targets of `pairs`, tokenized and padded on the right, as the model takes them."""
    sources = tokenizer([s for s, _ in pairs], padding=True, return_tensors="pt")
    targets = tokenizer(text_target=[t for _, t in pairs], padding=True, return_tensors="pt")
    return {
        "input_ids": sources["input_ids"],
        "attention_mask": sources["attention_mask"],
        "labels": targets["input_ids"],
        "decoder_attention_mask": targets["attention_mask"],
    }


def token_strings(tokenizer, ids) -> list[str]:
    """Readable tick labels: subword tokens with the word-start mark `▁` shown as `_`."""
    return [t.replace("\u2581", "_") for t in tokenizer.convert_ids_to_tokens([int(i) for i in ids])]
