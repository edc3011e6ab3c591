"""Translation metrics as `evaluate` modules that ship inside the package and load by path.

`evaluate.load("sacrebleu")` fetches its script from the Hub; the modules in this folder compute
the same numbers through the `sacrebleu` package and load from a local path, so scoring works with
no network::

    import evaluate
    from aiayn_cli.evaluation.metrics import metric_path

    bleu = evaluate.load(metric_path("sacrebleu"), keep_in_memory=True)
    bleu.compute(predictions=["The cat sat."], references=[["The cat sat.", "A cat sat."]])

Each module lives in ``metrics/aiayn_<name>/aiayn_<name>.py``. This file holds the pieces they
share: the reference layout and the tokenization behind the paper's BLEU.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path

METRICS_DIR = Path(__file__).resolve().parent

# Name used on the command line and in results -> folder of its `evaluate` module.
METRIC_MODULES = {
    "sacrebleu": "aiayn_sacrebleu",
    "chrf": "aiayn_chrf",
    "ter": "aiayn_ter",
    "paper_bleu": "aiayn_paper_bleu",
}


def metric_path(name: str) -> str:
    """The folder of the shipped `evaluate` module for `name` (a key of `METRIC_MODULES`)."""
    return str(METRICS_DIR / METRIC_MODULES[name])


def reference_streams(references: Sequence[str] | Sequence[Sequence[str]]) -> list[list[str]]:
    """Per-prediction references (the `evaluate` layout: a string, or a list of strings, for each
    prediction) -> sacrebleu's layout: one stream per reference, each as long as the predictions."""
    if len(references) == 0 or isinstance(references[0], str):
        return [list(references)]
    counts = {len(refs) for refs in references}
    if len(counts) != 1 or 0 in counts:
        raise ValueError(f"every prediction needs the same number of references (>= 1), got {sorted(counts)}")
    return [list(stream) for stream in zip(*references)]


# Tokenized BLEU with compound splitting: the convention of the paper's 27.3 / 28.4 (the
# `get_ende_bleu.sh` script of tensor2tensor): Moses `replace-unicode-punctuation.perl`, then
# `tokenizer.perl -l LANG`, then `s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g`, then `multi-bleu.perl`.

# Perl reads the text as bytes there, so `\S` is "not ASCII whitespace"; re.ASCII gives the same.
_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)", re.ASCII)


def split_compounds(text: str) -> str:
    """`rich-text format` -> `rich ##AT##-##AT## text format` (non-overlapping, left to right,
    exactly as Perl's `s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g`)."""
    return _COMPOUND_HYPHEN.sub(r"\1 ##AT##-##AT## \2", text)


def moses_languages() -> list[str]:
    """Language codes that the Moses tokenizer has nonbreaking-prefix lists for."""
    from sacremoses.corpus import NonbreakingPrefixes

    return sorted(set(NonbreakingPrefixes().available_langs.values()))


@functools.cache
def _moses(lang: str):
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    if lang not in moses_languages():
        raise ValueError(f"the Moses tokenizer has no language {lang!r}; known: {', '.join(moses_languages())}")
    return MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)


def moses_tokenize(text: str, lang: str) -> str:
    """Tokenize one line as `tokenizer.perl -l LANG` does, after Moses unicode-punctuation replacement
    (with the tokenizer's default escaping)."""
    normalizer, tokenizer = _moses(lang)
    return tokenizer.tokenize(normalizer.replace_unicode_punct(text), escape=True, return_str=True)


def paper_bleu_tokenize(text: str, lang: str) -> str:
    """Tokenize one line as the paper's BLEU does: `moses_tokenize`, then compound splitting."""
    return split_compounds(moses_tokenize(text, lang))


SACREBLEU_URL = "https://github.com/mjpost/sacrebleu"


def metric_info(
    description: str,
    citation: str,
    inputs_description: str,
    reference_url: str,
    codebase_urls: tuple[str, ...] = (SACREBLEU_URL,),
    homepage: str = SACREBLEU_URL,
):
    """The `evaluate.MetricInfo` of a shipped metric module: its texts, the paper that defines the
    metric (`reference_url`), the code that computes it."""
    import evaluate

    return evaluate.MetricInfo(
        description=description,
        citation=citation,
        inputs_description=inputs_description,
        homepage=homepage,
        features=text_features(),
        codebase_urls=list(codebase_urls),
        reference_urls=[reference_url],
    )


def metric_result(result, signature: str, width: int, *fields: str) -> dict:
    """A sacrebleu score as a metric result: its name and score, the `fields` named, the signature and
    sacreBLEU's own one-line report."""
    return {
        "name": result.name,
        "score": result.score,
        **{name: getattr(result, name) for name in fields},
        "signature": signature,
        "formatted": result.format(width=width, signature=signature),
    }


def text_features():
    """The inputs every aiayn metric takes: one prediction and one reference (or a list of them)."""
    import datasets

    return [
        datasets.Features(
            {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))}
        ),
        datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
    ]


def bleu_result(result, signature: str, width: int) -> dict:
    """A sacrebleu `BLEUScore` as a metric result: the numbers, the signature, sacreBLEU's own line."""
    fields = ("counts", "totals", "precisions", "bp", "sys_len", "ref_len")
    return {**metric_result(result, signature, width, *fields), "verbose": result._verbose}
