"""What `aiayn evaluate` scores: hypotheses and references from files, or from a data split, the
hypotheses possibly translated from that split by a model. A notebook calls these as the command does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AiaynError
from ..files import check_output_file, open_output
from .metrics import moses_languages

if TYPE_CHECKING:
    from .length_penalty import LengthPenaltyChoice


@dataclass
class ScoringInputs:
    """Hypotheses, their references (a list per hypothesis), where both came from, and the references'
    language where it is known (for the paper's tokenized BLEU)."""

    hypotheses: list[str]
    references: list[list[str]]
    description: dict[str, Any] = field(default_factory=dict)
    language: str | None = None
    cleaning_report: str | None = None
    length_penalty: LengthPenaltyChoice | None = None  # where alpha was chosen on the split


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file, by the project's one line reader (`aiayn_cli.data.lines`:
    LF or CRLF, a leading byte-order mark dropped, invalid UTF-8 an error naming the line), each with
    its trailing whitespace stripped, as the `sacrebleu` command reads them."""
    from ..data.lines import read_lines as read_text_lines

    return [line.rstrip() for line in read_text_lines(path)]


def read_parallel(hypotheses: str | Path, references: Sequence[str | Path]) -> tuple[list[str], list[list[str]]]:
    """Read a hypothesis file and one or more line-aligned reference files.

    Returns the hypotheses and, for each of them, the list of its references (one per file).
    """
    if not references:
        raise AiaynError("no reference file given", key="references")
    hyps = read_lines(hypotheses)
    if not hyps:
        raise AiaynError(f"{hypotheses}: is empty; nothing to score")
    streams = []
    for path in references:
        refs = read_lines(path)
        if len(refs) != len(hyps):
            raise AiaynError(
                f"{hypotheses} has {len(hyps)} lines but {path} has {len(refs)}; "
                "hypotheses and references must be line-aligned"
            )
        streams.append(refs)
    return hyps, [list(refs) for refs in zip(*streams)]


def language_from_path(path: str | Path) -> str | None:
    """The language code in a file name such as `test2016.de`, if the Moses tokenizer knows it."""
    suffix = Path(path).suffix.lstrip(".").lower()
    return suffix if suffix in moses_languages() else None


def inputs_from_files(hypotheses: str | Path, references: Sequence[str | Path]) -> ScoringInputs:
    """A hypothesis file and one or more line-aligned reference files."""
    hyps, refs = read_parallel(hypotheses, references)
    description = {"hypotheses": str(hypotheses), "references": [str(path) for path in references]}
    return ScoringInputs(hyps, refs, description, language_from_path(references[0]))


def inputs_from_split(
    spec,
    split: str,
    *,
    hypotheses: str | Path | None = None,
    model: str | None = None,
    output: str | Path | None = None,
    progress: bool = True,
    length_penalty_grid: Sequence[float] | None = None,
    engine: str = "torch",
    device: str | None = None,
    dtype: str | None = None,
    decoding: dict | None = None,
) -> ScoringInputs:
    """References from a data split (`DataSpec`); hypotheses from a file, or translated from the
    split's sources by `model` (the paper's beam search; `engine` decodes, `decoding` replaces the
    model's generation_config options it names), written to `output` if given.

    `length_penalty_grid`: with `model`, choose alpha on this split as the paper did on its
    development set (`choose_length_penalty`: one beam search re-ranked per alpha); the hypotheses are
    the chosen alpha's. `device`, `dtype`: where and in what `model` runs (`Translator.from_pretrained`);
    `decoding`: `translate` options (beam, length penalty, batching) over the model's generation_config."""
    from ..data.corpus import load_split

    if (hypotheses is None) == (model is None):
        raise AiaynError("with a data split give either {hypotheses} or {model}", mentions=("hypotheses", "model"))
    if length_penalty_grid is not None and model is None:
        raise AiaynError(
            "needs {model}: the alphas re-rank the model's beam search", key="length_penalty_grid", mentions=("model",)
        )
    if output is not None:
        check_output_file(output, key="output")
    data = load_split(spec, split)
    report = getattr(data, "cleaning_report", None)
    refs = [[ref] for ref in data["target"]]
    description = {
        "data": str(spec.dataset or spec.data_dir or spec.prefix or spec.data_file or spec.target_file),
        "split": split,
    }
    choice = None
    if model is not None:
        from ..decoding.translator import Translator

        translator = Translator.from_pretrained(model, device=device, dtype=dtype, engine=engine)
        batching = {k: v for k, v in (decoding or {}).items() if k in ("max_tokens", "batch_size")}
        translator.defaults = {k: v for k, v in (decoding or {}).items() if v is not None and k not in batching}
        if length_penalty_grid is not None:
            from .length_penalty import choose_length_penalty

            choice = choose_length_penalty(
                translator,
                list(data["source"]),
                list(data["target"]),
                list(length_penalty_grid),
                max_tokens=(decoding or {}).get("max_tokens", 4096),
                progress=progress,
                source=split,
            )
            hyps = choice.translations
            description["length_penalty"] = choice.alpha
            description["length_penalty_bleu"] = {f"{alpha:g}": bleu for alpha, bleu in choice.bleu.items()}
        else:
            hyps = translator.translate(list(data["source"]), progress=progress, source=split, **batching)
        description["model"] = model
        if engine != "torch":
            description["engine"] = engine
        if output is not None:
            with open_output(output) as out:
                out.writelines(line + "\n" for line in hyps)
            description["hypotheses"] = str(output)
    else:
        hyps = read_lines(hypotheses)
        if len(hyps) != len(refs):
            raise AiaynError(f"{hypotheses} has {len(hyps)} lines but the {split} split has {len(refs)} references")
        description["hypotheses"] = str(hypotheses)
    return ScoringInputs(hyps, refs, description, spec.target_lang, str(report) if report is not None else None, choice)


__all__ = [
    "ScoringInputs",
    "inputs_from_files",
    "inputs_from_split",
    "language_from_path",
    "read_lines",
    "read_parallel",
]
