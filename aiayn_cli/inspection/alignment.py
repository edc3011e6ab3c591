"""Word alignments from encoder-decoder attention, and their alignment error rate.

An alignment is a set of (i, j) links, source word i to target word j, both from 0, words being
the space-separated words of each side; written "i-j i-j ..." (fairseq's `--print-alignment`,
Moses). `align` links each target word to the source word it attends to most, in the heads of
one layer averaged (Garg et al., 2019), words merged from subwords and `</s>` left out.

Which layer: measured, not assumed (`python -m aiayn_cli.inspection.alignment MODEL DATA_DIR` prints
the AER of every layer; docs/inspection.md gives the quickstart model's). `DEFAULT_LAYER` is the last
layer, which aligned best there (Garg et al., 2019 found the penultimate layer best in their 6-layer
model). `step="predict"` reads the decoder position that predicts the word (the default, which aligned
best); `"input"` the one that reads it, one later, when the model attends to the next word to translate.

AER (Och & Ney, 2003), with sure links S and possible links P (S is a subset of P):

    AER(A; S, P) = 1 - (|A & S| + |A & P|) / (|A| + |S|)
"""

from __future__ import annotations

import numpy as np

from ..errors import AiaynError
from .extract import Explanation
from .views import view

DEFAULT_LAYER = -1  # the last decoder layer: the best measured (module docstring)
DEFAULT_STEP = "predict"
STEPS = ("predict", "input")

Alignment = set[tuple[int, int]]


def resolve_layer(ex: Explanation, layer: int | None) -> int:
    """`layer` counted from 1 (negative: from the end, -1 the last), checked; None: `DEFAULT_LAYER`."""
    count = len(ex.cross_attentions)
    layer = DEFAULT_LAYER if layer is None else layer
    number = count + 1 + layer if layer < 0 else layer
    if not 1 <= number <= count:
        raise AiaynError(
            f"{layer}: the model's decoder has layers 1 to {count} (or -1 to -{count})", key="alignment_layer"
        )
    return number


def attention_matrix(ex: Explanation, layer: int | None = None, step: str = DEFAULT_STEP) -> np.ndarray:
    """Encoder-decoder attention of `layer`, heads averaged, in words, without `</s>`: (target words, source words)."""
    if step not in STEPS:
        raise AiaynError(f"alignment step {step!r}: choose one of {', '.join(STEPS)}")
    merged = view(ex, "cross", layer=resolve_layer(ex, layer), mean_heads=True, words=True, hide_eos=False)
    weights = merged.weights[0, 0]  # (target words + </s>, source words + </s>)
    if step == "input":  # the row of the position that reads target word j is the next one
        weights = np.concatenate([weights[1:], weights[-1:]], axis=0)
    rows = [i for i, t in enumerate(merged.rows) if t != "</s>"]
    columns = [j for j, t in enumerate(merged.columns) if t != "</s>"]
    return weights[rows][:, columns]


def align(ex: Explanation, layer: int | None = None, step: str = DEFAULT_STEP) -> Alignment:
    """Each target word linked to the source word it attends to most: {(source i, target j)}."""
    weights = attention_matrix(ex, layer, step)
    if weights.size == 0:
        return set()
    return {(int(i), j) for j, i in enumerate(weights.argmax(axis=1))}


def diagonal(source_words: int, target_words: int) -> Alignment:
    """The trivial alignment: target word j to source word round(j * (S - 1) / (T - 1))."""
    if not source_words or not target_words:
        return set()
    scale = (source_words - 1) / max(target_words - 1, 1)
    return {(int(round(j * scale)), j) for j in range(target_words)}


def parse(text: str, where: str = "alignment") -> Alignment:
    """ "0-0 1-2" -> {(0, 0), (1, 2)}."""
    links = set()
    for link in text.split():
        source, sep, target = link.partition("-")
        if not sep or not source.isdigit() or not target.isdigit():
            raise AiaynError(f"{where}: {link!r} is not an i-j link")
        links.add((int(source), int(target)))
    return links


def format_alignment(links: Alignment) -> str:
    """{(0, 0), (1, 2)} -> "0-0 1-2" (sorted by target word, then source word, as fairseq prints)."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links, key=lambda link: (link[1], link[0])))


def aer(hypotheses: list[Alignment], sure: list[Alignment], possible: list[Alignment] | None = None) -> float:
    """The alignment error rate of `hypotheses` against `sure` (and `possible`, default: the sure
    links) links, over a corpus: the counts are summed over sentences first."""
    possible = sure if possible is None else possible
    if not len(hypotheses) == len(sure) == len(possible):
        raise ValueError("one alignment of each kind per sentence")
    a = s = a_s = a_p = 0
    for hyp, sure_links, possible_links in zip(hypotheses, sure, possible):
        possible_links = possible_links | sure_links
        a, s = a + len(hyp), s + len(sure_links)
        a_s, a_p = a_s + len(hyp & sure_links), a_p + len(hyp & possible_links)
    return 1.0 - (a_s + a_p) / (a + s) if a + s else 0.0


def translate_aligned(
    translator, sentences: list[str], layer: int | None = None, *, on_long: str = "truncate", source: str = "input",
    batch_size: int = 64, **decoding_options,
) -> list[tuple[str, str]]:  # fmt: skip
    """Each sentence's translation (the same as `Translator.translate`) and its word alignment "i-j ...";
    an empty (or skipped) line gives ("", "")."""
    from .extract import explain

    ids = translator.encode(list(sentences), on_long=on_long, source=source)
    results = [("", "")] * len(ids)
    todo = [i for i, tokens in enumerate(ids) if tokens is not None]
    for start in range(0, len(todo), batch_size):
        rows = todo[start : start + batch_size]
        explanations = explain(
            translator, None, [sentences[i] for i in rows], source_ids=[ids[i] for i in rows], with_scores=False,
            **decoding_options,
        )  # fmt: skip
        for i, ex in zip(rows, explanations):
            results[i] = (ex.target, format_alignment(align(ex, layer)))
    return results


def measure(
    model, tokenizer, sources: list[str], references: list[str], gold: list[str], batch_size: int = 50
) -> dict[str, float]:
    """AER of every layer and step, and of the diagonal, on reference pairs with gold alignments
    (teacher forcing on the references): {"layer 1 predict": 0.21, ..., "diagonal": 0.45}."""
    from ..decoding.translator import Translator

    translator = Translator(model, tokenizer, device="cpu")
    explanations = []
    for start in range(0, len(sources), batch_size):
        part = slice(start, start + batch_size)
        explanations += explain_references(translator, sources[part], references[part])
    sure = [parse(g, f"gold alignment {n}") for n, g in enumerate(gold, 1)]
    layers = len(explanations[0].cross_attentions)
    results = {}
    for layer in range(1, layers + 1):
        for step in STEPS:
            results[f"layer {layer} {step}"] = aer([align(ex, layer, step) for ex in explanations], sure)
    shapes = [attention_matrix(ex, 1).shape for ex in explanations]
    results["diagonal"] = aer([diagonal(s, t) for t, s in shapes], sure)
    return results


def explain_references(translator, sources: list[str], references: list[str]) -> list[Explanation]:
    from .extract import explain

    return explain(translator, None, sources, references, with_scores=False)


def main(argv: list[str] | None = None) -> int:
    """`python -m aiayn_cli.inspection.alignment MODEL DATA_DIR [--split test] [-n 500]`: AER of every
    layer on a quickstart corpus folder (`{split}.en`, `{split}.de`, `{split}.align`)."""
    import argparse
    from pathlib import Path

    from ..decoding.translator import Translator

    parser = argparse.ArgumentParser(prog="python -m aiayn_cli.inspection.alignment", description=main.__doc__)
    parser.add_argument("model")
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("-n", type=int, default=500)
    args = parser.parse_args(argv)
    read = lambda lang: (args.data_dir / f"{args.split}.{lang}").read_text(encoding="utf-8").splitlines()[: args.n]  # noqa: E731
    translator = Translator.from_pretrained(args.model, device="cpu")
    results = measure(translator.model, translator.tokenizer, read("en"), read("de"), read("align"))
    print(f"AER on {len(read('en'))} pairs of {args.data_dir / args.split} (lower is better):")
    for name, value in results.items():
        print(f"  {name:<18} {value:.4f}")
    return 0


__all__ = [
    "DEFAULT_LAYER",
    "aer",
    "align",
    "attention_matrix",
    "diagonal",
    "format_alignment",
    "measure",
    "parse",
    "translate_aligned",
]

if __name__ == "__main__":
    raise SystemExit(main())
