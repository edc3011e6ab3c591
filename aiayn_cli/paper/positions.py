"""§3.5 Positional Encoding: why sines and cosines.

"We chose this function because we hypothesized it would allow the model to easily learn to attend
by relative positions, since for any fixed offset k, PE(pos+k) can be represented as a linear
function of PE(pos)." Every number here comes from the model's `sinusoidal_positional_encoding`:
the wavelengths are read off PE(1), and the linear map M_k is built from PE(k) alone.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from ..model.modeling_aiayn import sinusoidal_positional_encoding
from .common import TopicResult, markdown_table, pyplot, save_figure, write_markdown

D_MODEL = 512  # the base model's d_model
POSITIONS = 1000  # pos < 1,000 ...
MAX_OFFSET = 100  # ... and k <= 100 for the check of PE(pos+k) = M_k PE(pos)


def encoding(length: int, d_model: int = D_MODEL, offset: int = 0) -> torch.Tensor:
    """PE(offset .. offset + length - 1) in float64, `(length, d_model)`."""
    return sinusoidal_positional_encoding(torch.arange(offset, offset + length), d_model, dtype=torch.float64)


def rotation_blocks(pe_k: torch.Tensor) -> torch.Tensor:
    """The 2x2 blocks of M_k, `(d_model/2, 2, 2)`, from PE(k) alone.

    With (sin wp, cos wp) a pair of PE(pos), the angle-sum formulas give
    (sin w(p+k), cos w(p+k)) = [[cos wk, sin wk], [-sin wk, cos wk]] (sin wp, cos wp),
    and sin wk, cos wk are the same pair of PE(k): M_k depends on k, never on pos.
    """
    sin, cos = pe_k.view(-1, 2).unbind(-1)
    return torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)


def rotation_matrix(pe_k: torch.Tensor) -> torch.Tensor:
    """M_k as a `(d_model, d_model)` block-diagonal matrix."""
    return torch.block_diag(*rotation_blocks(pe_k))


def apply_rotation(blocks: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
    """M_k PE(pos) for every row of `pe` `(P, d_model)`: the block-diagonal product, block by block
    (each output pair is its 2x2 block times the input pair; the zeros of M_k are skipped)."""
    x = pe.view(pe.size(0), -1, 2)  # (P, d_model/2, 2)
    first = blocks[:, 0, 0] * x[..., 0] + blocks[:, 0, 1] * x[..., 1]
    second = blocks[:, 1, 0] * x[..., 0] + blocks[:, 1, 1] * x[..., 1]
    return torch.stack([first, second], -1).reshape(pe.shape)


def rotation_errors(positions: int = POSITIONS, max_offset: int = MAX_OFFSET, d_model: int = D_MODEL) -> torch.Tensor:
    """For k = 0 .. max_offset: the largest |M_k PE(pos) - PE(pos+k)| over pos < `positions` (float64)."""
    table = encoding(positions + max_offset + 1, d_model)
    errors = []
    for k in range(max_offset + 1):
        rotated = apply_rotation(rotation_blocks(table[k]), table[:positions])
        errors.append((rotated - table[k : k + positions]).abs().max())
    return torch.stack(errors)


def wavelengths(d_model: int = D_MODEL) -> torch.Tensor:
    """The wavelength 2 pi / w_i of each (sin, cos) pair, with w_i read off PE(1) = (sin w_i, cos w_i)."""
    sin, cos = encoding(2, d_model)[1].view(-1, 2).unbind(-1)
    return 2 * math.pi / torch.atan2(sin, cos)


def run(output_dir: Path, model: str | None = None, **_) -> TopicResult:
    result = TopicResult("positions", output_dir)
    table = encoding(POSITIONS + MAX_OFFSET + 1)
    errors = rotation_errors()
    waves = wavelengths()
    dots = {pos: (table[pos] @ table[pos : pos + 201].T) for pos in (0, 100, 500)}  # k = 0 .. 200
    spread = max((dots[p] - dots[0]).abs().max().item() for p in dots)
    result.numbers.update(
        max_rotation_error=errors.max().item(),
        wavelength_min=waves.min().item(),
        wavelength_max=waves.max().item(),
        dot_product_spread=spread,
    )
    plt = pyplot()
    result.figures.append(_plot_table(plt, table[:128], output_dir))
    result.figures.append(_plot_wavelengths(plt, waves, output_dir))
    result.figures.append(_plot_dot_products(plt, dots, output_dir))
    result.figures.append(_plot_rotation_and_naive(plt, errors, table, output_dir))
    if model is not None:
        result.figures.extend(_plot_learned(plt, model, output_dir, result))
    result.notes += [
        f"wavelengths grow geometrically from {waves.min():.4f} (2 pi) to {waves.max():.0f} (the last pair; "
        f"the limit is 10000 x 2 pi = {20000 * math.pi:.0f})",
        f"PE(pos) . PE(pos+k) depends on k only: over pos in {{0, 100, 500}} and k <= 200 it differs by {spread:.1e}",
        f"PE(pos+k) = M_k PE(pos), M_k block-diagonal rotations built from PE(k): largest error over pos < "
        f"{POSITIONS}, k <= {MAX_OFFSET} (float64) = {errors.max():.2e}",
        f"a naive encoding (pos itself) grows without bound: at pos 1000 its norm is {1000 * math.sqrt(D_MODEL):.0f}, "
        f"the sinusoids' stays {math.sqrt(D_MODEL / 2):.0f}, beside token embeddings of norm ~{math.sqrt(D_MODEL):.0f}",
    ]
    rows = [
        ["d_model", D_MODEL],
        ["wavelengths (shortest, longest)", f"{waves.min():.4f}, {waves.max():.1f}"],
        ["2 pi, 10000 x 2 pi", f"{2 * math.pi:.4f}, {20000 * math.pi:.1f}"],
        [f"max abs(M_k PE(pos) - PE(pos+k)), pos < {POSITIONS}, k <= {MAX_OFFSET}", f"{errors.max():.2e}"],
        ["spread of PE(pos).PE(pos+k) over pos", f"{spread:.1e}"],
        ["norm of PE(pos), any pos", f"{table[0].norm():.2f} = sqrt(d_model / 2)"],
    ]
    write_markdown(result, "Positional encoding (§3.5)", [markdown_table(["quantity", "value"], rows)])
    return result


def _plot_table(plt, table: torch.Tensor, output_dir: Path) -> Path:
    fig, ax = plt.subplots(figsize=(9, 4))
    image = ax.imshow(table.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ax.set(xlabel="dimension (even: sin, odd: cos)", ylabel="position pos")
    ax.set_title(f"The sinusoidal positional encoding PE(pos, dimension), d_model = {table.size(1)} (§3.5)")
    fig.colorbar(image, ax=ax, label="PE value")
    return save_figure(fig, output_dir / "positions_encoding.png")


def _plot_wavelengths(plt, waves: torch.Tensor, output_dir: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    dims = torch.arange(0, 2 * len(waves), 2)
    ax.semilogy(dims.numpy(), waves.numpy(), label="wavelength of pair (2i, 2i+1), read off PE(1)")
    for value, text in ((2 * math.pi, "2 pi"), (20000 * math.pi, "10000 x 2 pi")):
        ax.axhline(value, color="grey", linestyle="--", linewidth=0.8)
        ax.text(dims[-1].item(), value, text, ha="right", va="bottom")
    ax.set(xlabel="dimension 2i", ylabel="wavelength (positions, log scale)")
    ax.set_title("Each sin/cos pair has its own wavelength: a geometric progression")
    ax.legend(loc="center left")
    return save_figure(fig, output_dir / "positions_wavelengths.png")


def _plot_dot_products(plt, dots: dict, output_dir: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    for (pos, values), style in zip(dots.items(), ("-", "--", ":")):
        ax.plot(range(len(values)), values.numpy(), style, linewidth=2, label=f"pos = {pos}")
    ax.set(xlabel="offset k (positions)", ylabel="PE(pos) . PE(pos+k)")
    ax.set_title("The dot product of two positions depends only on their offset k")
    ax.legend()
    return save_figure(fig, output_dir / "positions_dot_product.png")


def _plot_rotation_and_naive(plt, errors: torch.Tensor, table: torch.Tensor, output_dir: Path) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.semilogy(range(1, len(errors)), errors[1:].numpy(), ".")  # k = 0: M_0 = I, no error at all
    left.set(xlabel="offset k (k = 0: M_0 = I, exact)", ylabel="max over pos of |M_k PE(pos) - PE(pos+k)|")
    left.set_title(f"PE(pos+k) = M_k PE(pos): error in float64, pos < {POSITIONS}", fontsize=10)
    positions = torch.arange(1, table.size(0))
    d_model = table.size(1)
    right.loglog(positions.numpy(), (positions * math.sqrt(d_model)).numpy(), label="naive: pos in every dimension")
    right.loglog(positions.numpy(), table[1:].norm(dim=1).numpy(), label="sinusoidal PE(pos)")
    right.axhline(math.sqrt(d_model), color="grey", linestyle="--", label="token embedding x sqrt(d_model) (typical)")
    right.set(xlabel="position pos", ylabel="norm of the position signal")
    right.set_title("A naive encoding grows without bound and drowns the words", fontsize=10)
    right.legend(fontsize=8)
    return save_figure(fig, output_dir / "positions_rotation_and_naive.png")


def _plot_learned(plt, model_path: str, output_dir: Path, result: TopicResult) -> list[Path]:
    from .common import load_model

    model, _ = load_model(model_path)
    learned = model.model.encoder.embed_positions.learned
    if learned is None:
        result.notes.append(f"{model_path} uses sinusoidal positions: no learned table to compare (Table 3 row E)")
        return []
    length = min(64, learned.num_embeddings)
    tables = {
        "learned (Table 3 row E)": learned.weight[:length].detach().double(),
        "sinusoidal (§3.5)": encoding(length, model.config.d_model),
    }
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for column, (name, values) in enumerate(tables.items()):
        image = axes[0, column].imshow(values.numpy(), aspect="auto", cmap="RdBu_r", interpolation="nearest")
        axes[0, column].set(xlabel="dimension", ylabel="position", title=f"{name}: the table")
        fig.colorbar(image, ax=axes[0, column])
        unit = torch.nn.functional.normalize(values, dim=1)
        image = axes[1, column].imshow((unit @ unit.T).numpy(), cmap="viridis", vmin=-1, vmax=1)
        axes[1, column].set(xlabel="position", ylabel="position", title=f"{name}: cosine similarity")
        fig.colorbar(image, ax=axes[1, column])
    name = "/".join(Path(model_path).parts[-2:])
    fig.suptitle(f"Learned positions of {name} beside the sinusoids (first {length} positions)")
    fig.tight_layout()
    result.notes.append(
        "learned positions are trained only as far as the training sentences reach (their similarity has "
        "structure there, noise beyond); the sinusoids are defined for every position"
    )
    return [save_figure(fig, output_dir / "positions_learned.png")]
