"""Attention over training: a run folder's checkpoints, step by step (`aiayn attention --checkpoints RUN`).

    from aiayn_cli.inspection.history import over_training

    report = over_training("aiayn-quickstart/run", kind="cross")   # the quickstart keeps 18 steps
    report.steps, report.aer["layer 2 predict"], report.patterns

For every checkpoint of the run (`history/checkpoint-<step>/`, written at the recipe's `history_steps`,
and the `checkpoint-<step>/` folders the run kept), in the order of the step:

* the alignment error rate of each decoder layer's encoder-decoder attention (heads averaged; the
  measurement of `alignment.measure`) on held-out pairs with true alignments, when the data has them
  (the quickstart's `{split}.align`): when does attention become alignment?
* one head's pattern (or the mean of a layer's heads) on one sentence pair, teacher-forced on its
  reference so that every step shows the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import AiaynError
from ..precision import DEFAULT_INFERENCE_PRECISION
from .views import check_layer_head, view


def run_checkpoints(run: str | Path) -> list[tuple[int, Path]]:
    """(step, folder) of every checkpoint of a run folder, `history/` included, by step (one per step)."""
    from ..training.checkpoint import checkpoint_step, list_checkpoints
    from ..training.run_folder import HISTORY_DIR

    run = Path(run)
    if not run.is_dir():
        raise AiaynError(f"{run}: no such run folder", key="checkpoints")
    found = {checkpoint_step(p): p for p in list_checkpoints(run / HISTORY_DIR)}
    found.update({checkpoint_step(p): p for p in list_checkpoints(run)})  # the run's own where both exist
    if not found:
        raise AiaynError(
            f"{run}: no checkpoint-<step> folders (in it or in {HISTORY_DIR}/): give a run folder of aiayn train",
            key="checkpoints",
        )
    return sorted(found.items())


@dataclass
class TrainingReport:
    """Per checkpoint (`steps`): AER per layer (`aer[name][i]`), the pattern `(rows, columns)` of one head."""

    steps: list[int]
    aer: dict[str, list[float]]
    patterns: list[np.ndarray]
    rows: list[list[str]]
    columns: list[list[str]]
    title: str
    source: str
    reference: str
    pairs: int = 0
    validation: dict[str, list] = field(default_factory=dict)  # the run's own validation BLEU by step

    def to_dict(self) -> dict:
        return {
            "steps": self.steps,
            "aer": self.aer,
            "aer_pairs": self.pairs,
            "pattern": {
                "title": self.title,
                "source": self.source,
                "reference": self.reference,
                "rows": self.rows,
                "columns": self.columns,
                "weights": [np.round(p, 5).tolist() for p in self.patterns],
            },
            "validation": self.validation,
        }


def over_training(
    run: str | Path,
    *,
    kind: str = "cross",
    layer: int | None = None,
    head: int | None = None,
    source: str | None = None,
    reference: str | None = None,
    align_path: Path | None = None,
    langs: tuple[str, str] | None = None,
    size: int | None = 200,
    progress=None,
) -> TrainingReport:
    """AER per layer and one head's pattern at every checkpoint of `run` (module docstring). `layer`
    and `head` count from 1 (layer None: the last; head None: the mean of the layer's heads). Without
    `source`, the first pair beside `align_path` is shown."""
    from ..decoding.translator import Translator
    from .alignment import measure
    from .extract import explain

    checkpoints = run_checkpoints(run)
    say = progress or (lambda line: None)
    gold = _read_aligned(align_path, langs, size) if align_path is not None else None
    if source is None:
        if gold is None:
            raise AiaynError("give a sentence and its reference (--reference), or data with alignments")
        source, reference = gold[0][0], gold[1][0]
    if reference is None:
        raise AiaynError("the pattern over training is shown on a reference: give one with {reference}",
                         mentions=("reference",))  # fmt: skip
    steps, patterns, rows, columns, aer = [], [], [], [], {}
    title = ""
    for step, folder in checkpoints:
        translator = Translator.from_pretrained(str(folder), device="cpu", dtype=DEFAULT_INFERENCE_PRECISION)
        (ex,) = explain(translator, None, [source], [reference], with_scores=False)
        chosen = layer if layer is not None else len(ex.attentions(kind))
        check_layer_head(ex, kind, chosen, head)
        say(f"step {step}: {folder}")
        v = view(ex, kind, layer=chosen, head=head, mean_heads=head is None)
        title = f"{v.title}, layer {chosen}, {'mean of heads' if head is None else f'head {head}'}"
        steps.append(step)
        patterns.append(v.weights[0, 0])
        rows.append(v.rows)
        columns.append(v.columns)
        if gold is not None:
            for name, value in measure(translator.model, translator.tokenizer, *gold).items():
                if not name.endswith(" input"):
                    aer.setdefault(name, []).append(value)
    return TrainingReport(
        steps, aer, patterns, rows, columns, title, source, reference, len(gold[0]) if gold else 0, _validation(run)
    )


def _read_aligned(align_path: Path, langs: tuple[str, str] | None, size: int | None):
    if langs is None:
        raise AiaynError("the languages of the alignment data are needed (source and target)")
    if not Path(align_path).is_file():
        raise AiaynError(f"{align_path}: no such alignment file")

    def read(suffix: str) -> list[str]:
        path = Path(align_path).with_suffix(f".{suffix}")
        if not path.is_file():
            raise AiaynError(f"{path}: no such file (beside {align_path})")
        lines = path.read_text(encoding="utf-8").splitlines()
        return lines[:size] if size is not None else lines

    sources, references, gold = read(langs[0]), read(langs[1]), read("align")
    if not sources or not len(sources) == len(references) == len(gold):
        raise AiaynError(f"{align_path}: not as many lines as its sentence files")
    return sources, references, gold


def _validation(run: str | Path) -> dict[str, list]:
    """The run's own validation BLEU by step (metrics.jsonl), to draw beside the AER."""
    from ..training.curves import read_metrics
    from ..training.run_folder import METRICS_FILE

    steps, bleu = [], []
    for record in read_metrics(Path(run) / METRICS_FILE):
        if "valid/bleu" in record:
            steps.append(record["step"])
            bleu.append(record["valid/bleu"])
    return {"steps": steps, "bleu": bleu}


def run_alignment_data(run: str | Path, split: str) -> tuple[Path | None, tuple[str, str] | None]:
    """The `{split}.align` file of the data folder named by the run's recipe.yaml (`data.data_dir`,
    relative to the working directory as in training), and the recipe's languages."""
    import yaml

    from .. import yaml_text
    from ..data.spec import DataSpec
    from ..training.run_folder import RECIPE_FILE
    from .layers import alignment_file

    try:
        data = yaml_text.loads((Path(run) / RECIPE_FILE).read_text(encoding="utf-8"))["data"]
        spec = DataSpec(data_dir=data["data_dir"], source_lang=data["source_lang"], target_lang=data["target_lang"])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None, None
    if not spec.data_dir:
        return None, (spec.source_lang, spec.target_lang)
    return alignment_file(spec, split), (spec.source_lang, spec.target_lang)


# ---------------------------------------------------------------------------------------------
# The figure, the table and the files
# ---------------------------------------------------------------------------------------------


def _shown(count: int, most: int = 6) -> list[int]:
    """Up to `most` checkpoint indices spread over the run, the first and the last among them."""
    if count <= most:
        return list(range(count))
    return sorted({round(i * (count - 1) / (most - 1)) for i in range(most)})


def training_figure(report: TrainingReport, path: Path) -> Path:
    """Top: the pattern at up to six steps; bottom: AER per layer against the step (and the run's BLEU)."""
    from ..paper.common import pyplot, save_figure

    plt = pyplot()
    shown = _shown(len(report.steps))
    rows, cols = len(report.rows[-1]), len(report.columns[-1])
    width = max(12, len(shown) * (0.22 * cols + 1.2))
    fig = plt.figure(figsize=(width, 0.22 * rows + 7.2), layout="constrained")
    grid = fig.add_gridspec(2, len(shown), height_ratios=[0.22 * rows + 1.4, 3.6])
    for n, index in enumerate(shown):
        ax = fig.add_subplot(grid[0, n])
        ax.imshow(report.patterns[index], cmap="Blues", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        ax.set_title(f"step {report.steps[index]}")
        ax.set_xticks(range(cols), report.columns[index], rotation=90, fontsize=7)
        ax.set_yticks(range(rows), report.rows[index] if n == 0 else [], fontsize=7)
        ax.tick_params(length=0)
    ax = fig.add_subplot(grid[1, :])
    if report.aer:
        layers = sorted(name for name in report.aer if name.startswith("layer"))
        for name in layers:
            ax.plot(
                report.steps, report.aer[name], marker="o", label=f"{name.removesuffix(' predict')}, heads averaged"
            )
        ax.plot(report.steps, report.aer["diagonal"], color="#5b6b7c", linestyle="--", label="diagonal (no model)")
        ax.set_ylabel(f"AER on {report.pairs} held-out pairs (lower is better)")
        ax.set_ylim(0, 1)
    if report.validation.get("steps"):
        twin = ax.twinx()
        twin.plot(report.validation["steps"], report.validation["bleu"], color="#b3261e", alpha=0.5, marker=".",
                  label="validation BLEU (the run's)")  # fmt: skip
        twin.set_ylabel("validation BLEU", color="#b3261e")
        twin.legend(loc="upper center", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("training step (log scale)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title("When attention becomes alignment: AER of each decoder layer's encoder-decoder attention")
    fig.suptitle(f"{report.title} over training, on '{report.source}' (teacher-forced on its reference)")
    return save_figure(fig, path)


def training_table(report: TrainingReport) -> str:
    from ..paper.common import markdown_table

    names = sorted(name for name in report.aer if name.startswith("layer")) + (["diagonal"] if report.aer else [])
    header = ["step", *[f"AER {name.removesuffix(' predict')}" for name in names]]
    rows = [[step, *[f"{report.aer[name][i]:.3f}" for name in names]] for i, step in enumerate(report.steps)]
    return markdown_table(header, rows) + "\n"


def training_notes(report: TrainingReport) -> list[str]:
    notes = [f"{len(report.steps)} checkpoints, steps {report.steps[0]} to {report.steps[-1]}"]
    if report.aer:
        last = sorted(name for name in report.aer if name.startswith("layer"))[-1]
        values = report.aer[last]
        diagonal = report.aer["diagonal"][0]
        below = next((s for s, v in zip(report.steps, values) if v < diagonal), None)
        notes.append(
            f"{last.removesuffix(' predict')}: AER {values[0]:.3f} at step {report.steps[0]}, {min(values):.3f} at best "
            f"(step {report.steps[values.index(min(values))]}), {values[-1]:.3f} at the last step; the diagonal "
            f"{diagonal:.3f}" + (f"; first below the diagonal at step {below}" if below is not None else "")
        )
    return notes


def write_training_report(report: TrainingReport, output: str | Path, overwrite: bool = False) -> list[Path]:
    import json

    from ..files import staging_files

    with staging_files(output, overwrite=overwrite, key="output") as tmp:
        (tmp / "over_training.json").write_text(json.dumps(report.to_dict(), allow_nan=False) + "\n", encoding="utf-8")
        text = "# Attention over training\n\n" + training_table(report) + "\n"
        text += "\n".join(f"- {note}" for note in training_notes(report)) + "\n\n![over_training](over_training.png)\n"
        (tmp / "over_training.md").write_text(text, encoding="utf-8")
        training_figure(report, tmp / "over_training.png")
        names = sorted(p.name for p in tmp.iterdir())
    return [Path(output) / name for name in names]


def history_report(
    run: str | Path,
    output: Path | None,
    *,
    sentences: list[str] | None = None,
    references: list[str] | None = None,
    kind: str = "cross",
    layer: int | None = None,
    head: int | None = None,
    data_dir: Path | None = None,
    langs: tuple[str | None, str | None] = (None, None),
    split: str = "test",
    size: int | None = 200,
    progress=None,
    overwrite: bool = False,
) -> tuple[list[Path], str]:
    """`aiayn attention --checkpoints RUN`: the files written into `output` (none without it) and the
    text for standard output (the AER table and what to notice)."""
    from ..data.spec import DataSpec
    from .layers import alignment_file

    if len(sentences or []) > 1 or len(references or []) > 1:
        raise AiaynError("--checkpoints shows one sentence pair: give one sentence and one {reference}",
                         mentions=("reference",))  # fmt: skip
    if sentences and not references:
        raise AiaynError("--checkpoints shows the sentence teacher-forced on its reference: give {reference}",
                         mentions=("reference",))  # fmt: skip
    from .extract import KINDS

    if kind not in KINDS:
        raise AiaynError(f"{kind}: choose among {', '.join(KINDS)}", key="kinds")
    run_checkpoints(run)  # a wrong folder is named before any data is read
    align_path, run_langs = run_alignment_data(run, split)
    if data_dir is not None:
        source_lang, target_lang = (given or found for given, found in zip(langs, run_langs or (None, None)))
        if not (source_lang and target_lang):
            raise AiaynError("{source_lang} and {target_lang} are required with {data_dir}",
                             mentions=("source_lang", "target_lang", "data_dir"))  # fmt: skip
        spec = DataSpec(data_dir=str(data_dir), source_lang=source_lang, target_lang=target_lang)
        align_path, run_langs = alignment_file(spec, split), (source_lang, target_lang)
        if align_path is None:
            raise AiaynError(f"{data_dir}: no {split}.align (true alignments) beside the {split} files", key="data_dir")
    report = over_training(
        run,
        kind=kind,
        layer=layer,
        head=head,
        source=sentences[0] if sentences else None,
        reference=references[0] if references else None,
        align_path=align_path,
        langs=run_langs,
        size=size,
        progress=progress,
    )
    text = training_table(report) + "".join(f"- {note}\n" for note in training_notes(report))
    return (write_training_report(report, output, overwrite) if output is not None else []), text


__all__ = [
    "TrainingReport",
    "history_report",
    "over_training",
    "run_alignment_data",
    "run_checkpoints",
    "training_figure",
    "training_notes",
    "training_table",
    "write_training_report",
]
