"""The learning curve of a run: train and validation loss, validation BLEU, against the step."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..files import atomic_open


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a `metrics.jsonl` file (a torn last line, from a kill, is skipped): the one reader of
    that file (the learning curve, a resumed run's log, `aiayn history`)."""
    records = []
    path = Path(path)
    if not path.is_file():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[key]) for r in records if key in r and r[key] is not None]
    return [s for s, _ in points], [v for _, v in points]


def plot_learning_curve(records: list[dict[str, Any]], output: str | os.PathLike, title: str = "") -> Path:
    """Write a PNG: loss (train, validation) on the left, validation BLEU on the right."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_bleu) = plt.subplots(1, 2, figsize=(11, 4))
    for key, label, style in (("train/loss", "train (label-smoothed)", "-"), ("valid/loss", "validation", "o-")):
        steps, values = _series(records, key)
        if steps:
            ax_loss.plot(steps, values, style, label=label, markersize=3)
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("loss per target token")
    if ax_loss.lines:
        ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    steps, values = _series(records, "valid/bleu")
    ax_bleu.plot(steps, values, "o-", color="tab:green", markersize=3)
    ax_bleu.set_xlabel("step")
    ax_bleu.set_ylabel("validation BLEU")
    ax_bleu.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    output = Path(output)
    try:
        with atomic_open(output, "wb") as out:
            fig.savefig(out, format="png", dpi=100)
    finally:
        plt.close(fig)
    return output


__all__ = ["plot_learning_curve", "read_metrics"]
