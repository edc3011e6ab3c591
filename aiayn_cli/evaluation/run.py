"""One evaluation, as `aiayn evaluate` runs it: what to score (files, a data split, or a model
translating that split), checked whole before any work, scored, and written as JSON on request.
A notebook calls it as the command does:

    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.evaluation.run import evaluate_translations
    from aiayn_cli.evaluation.scoring import format_table

    data = DataSpec(data_dir="data/multi30k", source_lang="en", target_lang="de")
    results = evaluate_translations(model="runs/multi30k_en_de/averaged", data=data, split="test")
    print(format_table(results))
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AiaynError
from .inputs import ScoringInputs, inputs_from_files, inputs_from_split
from .metrics import moses_languages
from .scoring import METRICS

if TYPE_CHECKING:
    from ..data.spec import DataSpec


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def evaluate_translations(
    *,
    hypotheses: str | Path | None = None,
    references: Sequence[str | Path] | None = None,
    data: DataSpec | None = None,
    split: str = "test",
    model: str | None = None,
    output: str | Path | None = None,
    json_path: str | Path | None = None,
    length_penalty_grid: Sequence[float] | None = None,
    save_length_penalty: bool = False,
    engine: str = "torch",
    device: str | None = "auto",
    dtype: str | None = "auto",
    decoding: dict | None = None,
    max_tokens: int | None = None,
    batch_size: int | None = None,
    metrics: Sequence[str] = METRICS,
    paper_bleu: bool = False,
    lang: str | None = None,
    width: int = 2,
    lowercase_bleu: bool = True,
    progress: bool = False,
    log: Callable[[str], None] = _stderr,
) -> dict[str, Any]:
    """Score translations against references, in one of three modes:

    - `hypotheses` and `references` (files): the two files;
    - `hypotheses` and `data` (a checked `DataSpec`) with `split`: the references of that split;
    - `model` and `data`: the model translates the split's sources (`engine`, `device`, `dtype`;
      `decoding`: the `DecodingOptions` that replace its generation_config's; `max_tokens`,
      `batch_size`: batching), written to `output` if given; with `length_penalty_grid`, alpha is
      chosen on the split (`choose_length_penalty`), and with `save_length_penalty` written into the
      model folder's generation_config.json.

    Beside sacreBLEU, `lowercase_bleu` adds BLEU on lowercased, Moses-tokenized text (`bleu_lc`, as
    papers on Multi30k report it) where the references' language is known (`lang`, the reference
    file's suffix, the split's target language).

    Every mistake is an `AiaynError` before any work; outputs never replace an input. `log` receives
    the lines for the user (cleaning report, the alpha chosen). Returns `scoring.score`'s results with
    `inputs` (where each side came from), also written to `json_path` if given."""
    from .scoring import score, write_json

    grid = list(length_penalty_grid) if length_penalty_grid is not None else None
    decoding = {key: value for key, value in (decoding or {}).items() if value is not None}
    outputs = {"json_path": json_path, "output": output}
    files = [data.source_file, data.target_file, data.data_file, data.prefix] if data is not None else []
    # every file of the model folder is an input too (files.input_files); the data folder's, below
    _check_outputs(outputs, [*([hypotheses] if hypotheses else []), *(references or []), *files, model])
    _check_request(hypotheses, references, data, model, output, grid, save_length_penalty, engine, decoding)
    if data is not None:
        from ..data.corpus import split_files

        _check_outputs(outputs, [*split_files(data, split), model, data.data_dir])
        if grid is not None and "test" in split.lower():
            log(f"warning: choosing alpha on the {split} split makes its score optimistic; "
                "choose on the validation split, then score the test split")  # fmt: skip
        inputs = _inputs_from_split(data, split, hypotheses, model, output, grid, engine, device, dtype,
                                    decoding, max_tokens, batch_size, progress, log)  # fmt: skip
        if inputs.length_penalty is not None and save_length_penalty:
            from .length_penalty import save_length_penalty as save

            save(model, inputs.length_penalty.alpha)
            log(f"wrote length_penalty {inputs.length_penalty.alpha:g} into {Path(model) / 'generation_config.json'}")
    else:
        inputs = inputs_from_files(hypotheses, references)
    lang = lang or inputs.language
    if paper_bleu and lang is None:
        raise AiaynError(
            "--paper-bleu needs --lang (the references' language, e.g. de): "
            f"it cannot be read from the file name {inputs.description['references'][0]}"
        )
    lowercase = lowercase_bleu and "sacrebleu" in metrics
    if lowercase and (lang or "").lower() not in moses_languages():
        if not paper_bleu:  # which says it for both
            log(
                "note: no BLEU on lowercased, tokenized text: the references' language is unknown (give --lang, e.g. de)"
            )
        lowercase = False
    scores = score(inputs.hypotheses, inputs.references, metrics=metrics, paper_bleu=paper_bleu, lang=lang,
                   width=width, lowercase_bleu=lowercase)  # fmt: skip
    results = {"inputs": inputs.description, **scores}
    if json_path is not None:
        write_json(results, json_path)
        log(f"wrote {json_path}")
    return results


def _check_request(hypotheses, references, data, model, output, grid, save_length_penalty, engine, decoding) -> None:
    """The files that are missing and the combinations that make no sense, each one line naming the
    options, before any work."""
    for key, paths in (("hypotheses", [hypotheses] if hypotheses else []), ("references", references or [])):
        missing = next((path for path in paths if not os.path.lexists(path)), None)
        if missing is not None:  # the words of every command (translate: "--input FILE: no such file")
            raise AiaynError(f"{missing}: no such file", key=key)
    for reference in references or []:
        if hypotheses is not None and _same_file(hypotheses, reference):  # would score 100 for nothing
            raise AiaynError(f"{reference} is the {{hypotheses}} file itself; score against other references",
                             key="references", mentions=("hypotheses",))  # fmt: skip
    if output is not None and model is None:
        raise AiaynError("writes the translations of {model}; without it there is nothing to write",
                         key="output", mentions=("model",))  # fmt: skip
    if save_length_penalty:
        if grid is None:
            raise AiaynError("needs {length_penalty_grid}, the alphas to choose from",
                             key="save_length_penalty", mentions=("length_penalty_grid",))  # fmt: skip
        if model is not None and not Path(model).is_dir():
            raise AiaynError(f"writes into a local model folder; {model} is not one", key="save_length_penalty")
    if model is None and (engine != "torch" or decoding):
        raise AiaynError("decodes with {model}; without it nothing is decoded",
                         key="engine" if engine != "torch" else next(iter(decoding)), mentions=("model",))  # fmt: skip
    if data is not None:
        if references:
            raise AiaynError("give {references} or data options ({data_dir}, {dataset}, ...), not both",
                             mentions=("references", "data_dir", "dataset"))  # fmt: skip
        if grid is not None and "length_penalty" in decoding:
            raise AiaynError("chooses alpha; leave out {length_penalty}",
                             key="length_penalty_grid", mentions=("length_penalty",))  # fmt: skip
    elif grid is not None:
        raise AiaynError("needs {model} and data options (e.g. --model MODEL --data-dir DIR -s en -t de "
                         "--split validation)", key="length_penalty_grid", mentions=("model",))  # fmt: skip
    elif model is not None:
        raise AiaynError("needs data options (e.g. --data-dir DIR -s en -t de --split test) to translate", key="model")
    else:
        if hypotheses is None:
            raise AiaynError("is required (the translations to score, one per line)", key="hypotheses")
        if not references:
            raise AiaynError("is required (the reference translations, one per line)", key="references")


def _inputs_from_split(data, split, hypotheses, model, output, grid, engine, device, dtype, decoding, max_tokens,
                       batch_size, progress, log) -> ScoringInputs:  # fmt: skip
    batching = {key: value for key, value in (("max_tokens", max_tokens), ("batch_size", batch_size)) if value}
    inputs = inputs_from_split(
        data,
        split,
        hypotheses=hypotheses,
        model=model,
        output=output,
        length_penalty_grid=grid,
        engine=engine,
        progress=progress,
        device=device,
        dtype=dtype,
        decoding={**decoding, **batching},
    )
    if inputs.cleaning_report:
        log(inputs.cleaning_report)
    if inputs.length_penalty is not None:
        log(f"{model}: {inputs.length_penalty.describe()}")
    return inputs


def _same_file(a: str | Path, b: str | Path) -> bool:
    try:
        return Path(a).samefile(b)
    except OSError:  # one is missing (or a link loop): the reader names it
        return os.path.realpath(a) == os.path.realpath(b)


def _check_outputs(outputs: dict[str, str | Path | None], inputs: list) -> None:
    """Each output can be written as a file and is none of the input files (which it would replace),
    and no two outputs are the same file."""
    from ..files import check_output_file

    given = {key: check_output_file(path, inputs, key=key) for key, path in outputs.items() if path is not None}
    if len(given) == 2 and len({os.path.realpath(p) for p in given.values()}) == 1:
        raise AiaynError("{output} and {json_path} name the same file; give two", mentions=("output", "json_path"))


__all__ = ["evaluate_translations"]
