"""Scoring translations: sacreBLEU, chrF and TER, and on request the paper's tokenized BLEU.

Every number is computed through `evaluate` with the metric modules that ship in
`aiayn_cli/evaluation/metrics/` (loaded by path, so no network is needed), and each of them through the
`sacrebleu` package, so a score here equals `sacrebleu` called directly::

    from aiayn_cli.evaluation.scoring import score, format_table
    results = score(["Ein Hund läuft."], ["Ein Hund rennt."], paper_bleu=True, lang="de")
    print(format_table(results))
    results["scores"]["sacrebleu"]["score"], results["scores"]["sacrebleu"]["signature"]
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import AiaynError
from ..files import check_output_file, open_output
from .metrics import METRIC_MODULES, metric_path, moses_languages

METRICS = ("sacrebleu", "chrf", "ter")
PAPER_BLEU = "paper_bleu"
LOWERCASE_BLEU = "bleu_lc"
LOWERCASE_BLEU_FOOTNOTE = (
    "+ BLEU on lowercased, Moses-tokenized text (tokenizer -l {lang}, multi-bleu -lc), as papers on Multi30k "
    "report it (Revisit-MMT's 41.02): compare with those, NOT with sacreBLEU."
)
PAPER_BLEU_FOOTNOTE = (
    "* tokenized BLEU with compound splitting (Moses tokenizer -l {lang}, ##AT##-##AT##, multi-bleu), "
    "the convention behind the paper's 27.3 / 28.4: NOT comparable with sacreBLEU."
)


# Scoring


@functools.cache
def load_metric(name: str):
    """The shipped `evaluate` module for `name`, loaded from its folder (no network), in memory."""
    import evaluate

    return evaluate.load(metric_path(name), keep_in_memory=True)


def _per_segment(references: Sequence[str] | Sequence[Sequence[str]], n: int) -> list[list[str]]:
    if len(references) != n:
        raise AiaynError(f"{n} hypotheses but {len(references)} references; they must be aligned one to one")
    per_segment = [[refs] if isinstance(refs, str) else list(refs) for refs in references]
    counts = sorted({len(refs) for refs in per_segment})
    if len(counts) != 1 or counts[0] == 0:
        raise AiaynError(f"every hypothesis needs the same number of references (at least one); got {counts}")
    return per_segment


def score(
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    metrics: Sequence[str] = METRICS,
    paper_bleu: bool = False,
    lang: str | None = None,
    width: int = 2,
    lowercase_bleu: bool = False,
) -> dict[str, Any]:
    """Score hypotheses against references.

    Args:
        hypotheses: one detokenized translation per segment.
        references: for each hypothesis, its reference (a string) or its references (a list of
            strings, the same number for every hypothesis).
        metrics: any of "sacrebleu", "chrf", "ter" (a name or a sequence of names).
        paper_bleu: add the paper's tokenized BLEU with compound splitting (needs `lang`).
        lang: language of the hypotheses and references, for the Moses tokenizer of `paper_bleu` and
            `lowercase_bleu`.
        lowercase_bleu: add BLEU on lowercased, Moses-tokenized text (multi-bleu -lc), as papers on
            Multi30k report it (needs `lang`), under the key `bleu_lc`.
        width: decimals of the formatted scores.

    Returns:
        ``{"num_segments", "num_references", "width", "scores": {name: {"name", "score",
        "signature", "formatted", ...}}}``; `formatted` is sacreBLEU's own one-line report.
    """
    hypotheses = list(hypotheses)
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    if not hypotheses:
        raise AiaynError("no hypotheses; nothing to score")
    per_segment = _per_segment(references, len(hypotheses))
    unknown = [name for name in metrics if name not in METRICS]
    if unknown:
        raise AiaynError(f"unknown metric {unknown[0]!r}; choose from {', '.join(METRICS)}")
    if not metrics and not paper_bleu:
        raise AiaynError("no metric chosen; name at least one of " + ", ".join(METRICS))
    lang = lang.lower() if lang else lang
    if (paper_bleu or lowercase_bleu) and lang not in moses_languages():
        raise AiaynError(
            f"tokenized BLEU needs the language of the references for the Moses tokenizer (got {lang!r}); "
            f"give one of {', '.join(moses_languages())}"
        )

    results: dict[str, Any] = {"num_segments": len(hypotheses), "num_references": len(per_segment[0]), "width": width}
    scores = {}
    for name in dict.fromkeys(metrics):  # keep order, drop repeats
        scores[name] = load_metric(name).compute(predictions=hypotheses, references=per_segment, width=width)
    if paper_bleu:
        scores[PAPER_BLEU] = load_metric(PAPER_BLEU).compute(
            predictions=hypotheses, references=per_segment, lang=lang, width=width
        )
        scores[PAPER_BLEU]["lang"] = lang
    if lowercase_bleu:
        scores[LOWERCASE_BLEU] = load_metric(PAPER_BLEU).compute(
            predictions=hypotheses, references=per_segment, lang=lang, width=width, lowercase=True, compounds=False
        )
        scores[LOWERCASE_BLEU]["lang"] = lang
    results["scores"] = scores
    return results


# Reporting


def format_table(results: dict[str, Any]) -> str:
    """A plain-text table: metric, score (at the results' width), sacreBLEU signature; then the
    BLEU details and, with a tokenized BLEU, the note that it is not comparable with sacreBLEU."""
    width = results.get("width", 2)
    lines = []
    inputs = results.get("inputs", {})
    for key, value in inputs.items():
        lines.append(f"{key:<11} {', '.join(value) if isinstance(value, list) else value}")
    nrefs = results["num_references"]
    lines.append(f"{'segments':<11} {results['num_segments']} ({nrefs} reference{'s' if nrefs > 1 else ''} each)")
    lines.append("")

    rows = []
    for key, result in results["scores"].items():
        label = result["name"] + {PAPER_BLEU: " *", LOWERCASE_BLEU: " +"}.get(key, "")
        rows.append((label, f"{result['score']:.{width}f}", result["signature"], result.get("verbose")))
    label_w = max(len("metric"), *(len(row[0]) for row in rows))
    score_w = max(len("score"), *(len(row[1]) for row in rows))
    lines.append(f"{'metric':<{label_w}}  {'score':>{score_w}}  signature")
    for label, value, signature, _ in rows:
        lines.append(f"{label:<{label_w}}  {value:>{score_w}}  {signature}")
    details = [(label, verbose) for label, _, _, verbose in rows if verbose]
    if details:
        lines.append("")
        lines.extend(f"{label:<{label_w}}  {verbose}" for label, verbose in details)
    if LOWERCASE_BLEU in results["scores"]:
        lines.append(LOWERCASE_BLEU_FOOTNOTE.format(lang=results["scores"][LOWERCASE_BLEU]["lang"]))
    if PAPER_BLEU in results["scores"]:
        lines.append(PAPER_BLEU_FOOTNOTE.format(lang=results["scores"][PAPER_BLEU]["lang"]))
    return "\n".join(lines)


def write_json(results: dict[str, Any], path: str | Path) -> None:
    """Write `results` as JSON to `path` by the output rule (`files.open_output`): a file under a temporary
    name first and then renamed, so that a failure never leaves a half-written file; a device or FIFO
    written into."""
    path = check_output_file(path)
    try:
        with open_output(path) as f:
            json.dump(results, f, indent=2, ensure_ascii=False)
            f.write("\n")
    except PermissionError:
        raise AiaynError(f"{path}: permission denied") from None


__all__ = [
    "METRICS",
    "LOWERCASE_BLEU",
    "METRIC_MODULES",
    "PAPER_BLEU",
    "format_table",
    "load_metric",
    "score",
    "write_json",
]
