"""`aiayn heads`' files: the table (markdown, JSON), the importance heatmaps, the roles and the pruning curve."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..files import staging_files
from ..paper.common import markdown_table, pyplot, save_figure
from .extract import KIND_NAMES, KINDS
from .heads import HeadReport

COLUMNS = [
    "kind",
    "layer",
    "head",
    "confidence",
    "distance",
    "previous",
    "same",
    "next",
    "loss (masked)",
    "Δ loss",
    "BLEU (masked)",
    "Δ BLEU",
    "gradient score",
    "pruned as",
]


def _cell(value, digits: int) -> str:
    if value is None:
        return "–"
    return f"{value:+.{digits}f}" if digits < 0 else f"{value:.{digits}f}"


def table(report: HeadReport) -> str:
    """The markdown table: one row per head, then the pruning summary."""
    rows = []
    for r in report.heads:
        rows.append(
            [
                r["kind"],
                r["layer"],
                r["head"],
                f"{r['confidence']:.2f}",
                f"{r['distance']:.2f}",
                _cell(r["previous"], 2),
                _cell(r["same"], 2),
                _cell(r["next"], 2),
                f"{r['loss']:.3f}",
                f"{r['delta_loss']:+.3f}",
                f"{r['bleu']:.2f}",
                f"{r['delta_bleu']:+.2f}",
                f"{r['gradient']:.3f}",
                r.get("pruned", "–"),
            ]
        )
    return markdown_table(COLUMNS, rows) + "\n"


def summary(report: HeadReport) -> list[str]:
    """What to notice, in lines."""
    s = report.settings
    by_loss = sorted(report.heads, key=lambda r: r["delta_loss"], reverse=True)
    top = ", ".join(f"{r['kind']} {r['layer']}.{r['head']} ({r['delta_loss']:+.3f})" for r in by_loss[:3])
    harmless = sum(1 for r in report.heads if abs(r["delta_bleu"]) <= 0.5)
    drop = s.get("max_bleu_drop", 1.0)
    lines = [
        f"base: validation loss {report.base_loss:.3f}, sacreBLEU {report.base_bleu:.2f} on {s.get('sample')} pairs "
        f"of the {s.get('origin', 'sample')}",
        f"the heads that matter most (loss increase when masked alone): {top}",
        f"{harmless} of {report.total} heads change BLEU by at most 0.5 when masked alone",
        f"pruning by {s.get('importance')}: {report.removable} of {report.total} heads "
        f"({100 * report.removable_fraction:.0f}%) removed together with at most {drop:g} sacreBLEU lost "
        f"({report.pruning[report.removable]['bleu']:.2f} against {report.base_bleu:.2f})",
    ]
    per_kind = []
    for kind in KINDS:
        rows = [r for r in report.heads if r["kind"] == kind]
        per_kind.append(f"{kind} {np.mean([r['delta_loss'] for r in rows]):+.3f}")
    lines.append("mean loss increase by kind: " + ", ".join(per_kind))
    return lines


def _grid(report: HeadReport, kind: str, key: str) -> np.ndarray:
    rows = [r for r in report.heads if r["kind"] == kind]
    layers, heads = max(r["layer"] for r in rows), max(r["head"] for r in rows)
    grid = np.full((layers, heads), np.nan)
    for r in rows:
        value = r[key]
        grid[r["layer"] - 1, r["head"] - 1] = np.nan if value is None else value
    return grid


def importance_figure(report: HeadReport, path: Path) -> Path:
    """Three heatmaps (one per kind), layers by heads: the loss increase when the head alone is masked,
    each cell also giving the BLEU change."""
    plt = pyplot()
    grids = {kind: _grid(report, kind, "delta_loss") for kind in KINDS}
    bleus = {kind: _grid(report, kind, "delta_bleu") for kind in KINDS}
    top = max(float(np.nanmax(g)) for g in grids.values())
    bottom = min(0.0, min(float(np.nanmin(g)) for g in grids.values()))
    heads, layers = max(g.shape[1] for g in grids.values()), max(g.shape[0] for g in grids.values())
    fig, axes = plt.subplots(
        1, 3, figsize=(3 * (0.75 * heads + 1.2) + 1.5, 1.9 + 0.7 * layers), layout="constrained", squeeze=False
    )
    for ax, kind in zip(axes[0], KINDS):
        g = grids[kind]
        image = ax.imshow(g, cmap="Reds", vmin=bottom, vmax=top if top > bottom else bottom + 1e-9, aspect="auto")
        for (i, j), value in np.ndenumerate(g):
            dark = (value - bottom) / max(top - bottom, 1e-9) > 0.6
            ax.text(j, i, f"{value:+.3f}\n{bleus[kind][i, j]:+.1f}", ha="center", va="center", fontsize=8,
                    color="white" if dark else "black")  # fmt: skip
        ax.set_title(KIND_NAMES[kind])
        _ticks(ax, g)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.9, label="validation loss increase (nats per token)")
    fig.suptitle(
        f"Which heads matter: each head masked alone (cell: loss change, then BLEU change; base loss "
        f"{report.base_loss:.3f}, sacreBLEU {report.base_bleu:.2f})"
    )
    return save_figure(fig, path)


def _ticks(ax, grid: np.ndarray) -> None:
    ax.set_xticks(range(grid.shape[1]), [str(h + 1) for h in range(grid.shape[1])])
    ax.set_yticks(range(grid.shape[0]), [str(i + 1) for i in range(grid.shape[0])])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")


def roles_figure(report: HeadReport, path: Path) -> Path:
    """What each head does (Voita et al., 2019): its confidence and mean distance, and for self-attention
    the largest of its shares on the previous, the same and the next token (a positional head)."""
    plt = pyplot()
    layers = max(r["layer"] for r in report.heads)
    fig, axes = plt.subplots(2, 3, figsize=(13, 2.6 + 1.5 * layers))
    for col, kind in enumerate(KINDS):
        confidence, distance = _grid(report, kind, "confidence"), _grid(report, kind, "distance")
        ax = axes[0, col]
        ax.imshow(confidence, cmap="Blues", vmin=0, vmax=1, aspect="auto")
        for (i, j), value in np.ndenumerate(confidence):
            ax.text(j, i, f"{value:.2f}\nd={distance[i, j]:.1f}", ha="center", va="center", fontsize=8,
                    color="white" if value > 0.6 else "black")  # fmt: skip
        ax.set_title(f"{KIND_NAMES[kind]}\nconfidence (d: mean distance in tokens)")
        _ticks(ax, confidence)
        ax = axes[1, col]
        if kind == "cross":
            ax.axis("off")
            ax.text(0.5, 0.5, "previous / same / next token:\nnot defined across two sentences",
                    ha="center", va="center", transform=ax.transAxes)  # fmt: skip
            continue
        shares = np.stack([_grid(report, kind, name) for name in ("previous", "same", "next")])  # (3, N, h)
        best = shares.max(axis=0)
        ax.imshow(best, cmap="Greens", vmin=0, vmax=1, aspect="auto")
        for (i, j), value in np.ndenumerate(best):
            which = ("prev", "same", "next")[int(shares[:, i, j].argmax())]
            ax.text(j, i, f"{which}\n{value:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if value > 0.6 else "black")  # fmt: skip
        ax.set_title(f"{KIND_NAMES[kind]}\nlargest share on the previous / same / next token")
        _ticks(ax, best)
    fig.suptitle("What the heads do: how peaked each head is, and which heads look at a fixed neighbour")
    fig.tight_layout()
    return save_figure(fig, path)


def pruning_figure(report: HeadReport, path: Path) -> Path:
    """sacreBLEU against the number of heads removed, least important first, with the base - 1 line."""
    plt = pyplot()
    points = report.pruning
    x = [p["removed"] for p in points]
    y = [p["bleu"] for p in points]
    drop = report.settings.get("max_bleu_drop", 1.0)
    fig, ax = plt.subplots(figsize=(max(7, 0.32 * len(points) + 3), 4.6))
    ax.plot(x, y, marker="o", color="#1f6feb", label="sacreBLEU with the first k heads removed")
    ax.axhline(report.base_bleu - drop, color="#b3261e", linestyle="--", label=f"base - {drop:g}")
    ax.axvline(report.removable, color="#5b6b7c", linestyle=":", label=f"{report.removable} heads removable")
    ax.set_xticks(x, ["none"] + [p["head"] for p in points[1:]], rotation=60, ha="right", fontsize=8)
    ax.set_xlabel(f"heads removed in order of {report.settings.get('importance')} importance (the last one named)")
    ax.set_ylabel("sacreBLEU")
    top = ax.secondary_xaxis("top", functions=(lambda k: 100 * k / report.total, lambda p: p * report.total / 100))
    top.set_xlabel(f"% of the {report.total} heads removed")
    ax.legend(loc="lower left", fontsize=9)
    ax.grid(alpha=0.3)
    ax.set_title(
        f"Pruning heads: {report.removable} of {report.total} ({100 * report.removable_fraction:.0f}%) go with at "
        f"most {drop:g} sacreBLEU lost"
    )
    return save_figure(fig, path)


def write_head_report(report: HeadReport, output: str | Path, overwrite: bool = False) -> list[Path]:
    """heads.json, heads.md and three figures, written together (a failure leaves the folder as it was);
    a same-named file there that `aiayn heads` did not write is replaced only with `overwrite`."""
    with staging_files(output, overwrite=overwrite, key="output") as tmp:
        data = json.dumps(report.to_dict(), indent=2, allow_nan=False, default=_plain)
        (tmp / "heads.json").write_text(data + "\n", encoding="utf-8")
        notes = "\n".join(f"- {line}" for line in summary(report))
        figures = ["heads_importance.png", "heads_roles.png", "heads_pruning.png"]
        text = "# Which heads matter\n\n" + table(report) + "\n" + notes + "\n\n"
        text += "\n".join(f"![{name}]({name})" for name in figures) + "\n"
        (tmp / "heads.md").write_text(text, encoding="utf-8")
        importance_figure(report, tmp / figures[0])
        roles_figure(report, tmp / figures[1])
        pruning_figure(report, tmp / figures[2])
        names = sorted(p.name for p in tmp.iterdir())
    return [Path(output) / name for name in names]


def _plain(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"{type(value).__name__} is not JSON")


__all__ = ["COLUMNS", "importance_figure", "pruning_figure", "roles_figure", "summary", "table", "write_head_report"]
