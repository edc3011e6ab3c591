"""`aiayn layers`' files: the table (markdown, JSON), accuracy / loss / AER per layer, one sentence's grid."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..files import staging_files
from ..paper.common import markdown_table, pyplot, save_figure
from .layers import LayerPredictions, LayerReport


def table(report: LayerReport) -> str:
    aer = report.aer
    header = ["decoder layer", "next-token accuracy", "loss (nats/token)", "top choice = the token read"]
    if aer:
        header.append(f"AER, encoder-decoder attention ({aer.get('pairs')} pairs)")
    rows = []
    for i, (accuracy, loss, echo) in enumerate(zip(report.accuracy, report.loss, report.echo), 1):
        row = [i, f"{100 * accuracy:.2f}%", f"{loss:.3f}", f"{100 * echo:.2f}%"]
        if aer:
            row.append(f"{aer[f'layer {i} predict']:.3f}")
        rows.append(row)
    text = markdown_table(header, rows)
    if aer:
        text += f"\n\nThe diagonal alignment (no model): AER {aer['diagonal']:.3f}."
    return text + "\n"


def summary(report: LayerReport, sentence: LayerPredictions | None) -> list[str]:
    n = len(report.accuracy)
    lines = [
        f"next-token accuracy on {report.tokens} reference tokens rises from {100 * report.accuracy[0]:.1f}% after "
        f"layer 1 to {100 * report.accuracy[-1]:.1f}% after layer {n} (the model's own prediction); loss "
        f"{report.loss[0]:.3f} -> {report.loss[-1]:.3f}",
    ]
    gains = [100 * (b - a) for a, b in zip(report.accuracy, report.accuracy[1:])]
    if gains:
        lines.append("accuracy gained by each layer above the first: " + ", ".join(f"{g:+.1f}" for g in gains))
    lines.append(
        "the top choice is the token the position reads (its input, not the next token) at "
        + ", ".join(f"{100 * e:.1f}%" for e in report.echo)
        + f" of the positions, layer 1 to {n}"
    )
    if report.aer:
        best = min(range(1, n + 1), key=lambda i: report.aer[f"layer {i} predict"])
        lines.append(
            f"alignment: layer {best}'s encoder-decoder attention aligns best (AER "
            f"{report.aer[f'layer {best} predict']:.3f}; the diagonal {report.aer['diagonal']:.3f})"
        )
    if sentence is not None:
        right = [sum(c == t for c, t in zip(row, sentence.targets)) for row in sentence.choices]
        lines.append(
            f"the sentence: the top choice equals the reference at {right[0]} of {len(sentence.targets)} positions "
            f"after layer 1, {right[-1]} after layer {n}"
        )
    return lines


def accuracy_figure(report: LayerReport, path: Path) -> Path:
    plt = pyplot()
    n = len(report.accuracy)
    layers = list(range(1, n + 1))
    panels = 3 if report.aer else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.8))
    axes[0].plot(layers, [100 * a for a in report.accuracy], marker="o", color="#1f6feb")
    axes[0].set_ylabel("next-token accuracy (%)")
    axes[0].set_title("Accuracy of each layer's prediction")
    axes[1].plot(layers, report.loss, marker="o", color="#b3261e")
    axes[1].set_ylabel("cross-entropy (nats per token)")
    axes[1].set_title("Loss of each layer's prediction")
    if report.aer:
        axes[2].plot(layers, [report.aer[f"layer {i} predict"] for i in layers], marker="o", color="#2e7d32",
                     label="heads averaged")  # fmt: skip
        axes[2].axhline(report.aer["diagonal"], color="#5b6b7c", linestyle="--", label="diagonal (no model)")
        axes[2].set_ylabel("AER (lower is better)")
        axes[2].set_title(f"Alignment error, {report.aer['pairs']} pairs")
        axes[2].legend(fontsize=8)
        axes[2].set_ylim(bottom=0)
    for ax in axes:
        ax.set_xticks(layers)
        ax.set_xlabel("decoder layer")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Layer by layer: each decoder layer's output through the output projection ({report.tokens} tokens)")
    fig.tight_layout()
    return save_figure(fig, path)


def sentence_figure(sentence: LayerPredictions, path: Path) -> Path:
    """Rows: decoder layers; columns: positions; each cell the layer's top token, shaded by its
    probability, framed in green where it is the reference token."""
    plt = pyplot()
    from matplotlib.patches import Rectangle

    n, t = len(sentence.choices), len(sentence.targets)
    probabilities = np.array(sentence.probabilities)
    fig, ax = plt.subplots(figsize=(max(6, 1.05 * t + 2), 1.2 + 0.75 * n))
    ax.imshow(probabilities, cmap="Blues", vmin=0, vmax=1, aspect="auto")
    for i in range(n):
        for j in range(t):
            token, right = sentence.choices[i][j], sentence.choices[i][j] == sentence.targets[j]
            ax.text(j, i, f"{token}\n{probabilities[i, j]:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if probabilities[i, j] > 0.6 else "black", fontweight="bold" if right else "normal")  # fmt: skip
            if right:
                ax.add_patch(
                    Rectangle((j - 0.46, i - 0.44), 0.92, 0.88, fill=False, edgecolor="#2e7d32", linewidth=2.5)
                )
    ax.set_yticks(range(n), [f"layer {i + 1}" for i in range(n)])
    ax.set_xticks(range(t), [f"{a}\n→ {b}" for a, b in zip(sentence.inputs, sentence.targets)], fontsize=8)
    ax.set_xlabel("position: the token it reads → the reference token it should predict")
    ax.set_title(
        f"Each layer's top choice for '{_short(sentence.source)}' (shade: its probability; framed: the reference token)"
    )
    return save_figure(fig, path)


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def write_layer_report(
    report: LayerReport, sentence: LayerPredictions | None, output: str | Path, overwrite: bool = False
) -> list[Path]:
    """layers.json, layers.md and the figures, written together (a same-named file there that `aiayn layers`
    did not write is replaced only with `overwrite`)."""
    with staging_files(output, overwrite=overwrite, key="output") as tmp:
        data = report.to_dict()
        if sentence is not None:
            data["sentence"] = vars(sentence)
        (tmp / "layers.json").write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        figures = ["layers_accuracy.png"] + (["layers_sentence.png"] if sentence is not None else [])
        notes = "\n".join(f"- {line}" for line in summary(report, sentence))
        text = "# Layer by layer\n\n" + table(report) + "\n" + notes + "\n\n"
        (tmp / "layers.md").write_text(text + "\n".join(f"![{f}]({f})" for f in figures) + "\n", encoding="utf-8")
        accuracy_figure(report, tmp / figures[0])
        if sentence is not None:
            sentence_figure(sentence, tmp / figures[1])
        names = sorted(p.name for p in tmp.iterdir())
    return [Path(output) / name for name in names]


__all__ = ["accuracy_figure", "sentence_figure", "summary", "table", "write_layer_report"]
