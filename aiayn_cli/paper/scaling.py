"""§3.2.1 Scaled Dot-Product Attention: why divide by sqrt(d_k).

Footnote 4 of the paper: "assume that the components of q and k are independent random variables
with mean 0 and variance 1. Then their dot product, q . k = sum_i q_i k_i, has mean 0 and variance
d_k." Large logits push the softmax "into regions where it has extremely small gradients". The
attention here is the model's `scaled_dot_product_attention`; without the scale it is the same
function given queries multiplied by sqrt(d_k).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from ..model.modeling_aiayn import scaled_dot_product_attention
from .common import SENTENCE_PAIRS, TopicResult, markdown_table, pyplot, save_figure, write_markdown

D_K = (16, 32, 64, 128, 256, 512)
VARIANCE_SAMPLES = 20_000  # relative standard error of the variance: sqrt((2 + 6/d_k) / n) <= 1.1%
QUERIES, KEYS = 512, 64  # softmax statistics: 512 queries over 64 keys each


def dot_product_variance(d_k: int, samples: int = VARIANCE_SAMPLES, seed: int = 0) -> float:
    """The sample variance of q . k for q, k with independent N(0, 1) components."""
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, samples, d_k, generator=generator, dtype=torch.float64)
    return (q * k).sum(-1).var().item()


def softmax_statistics(d_k: int, scaled: bool, seed: int = 0) -> dict[str, float]:
    """Attention of `QUERIES` random queries over `KEYS` random keys, with or without 1/sqrt(d_k): the
    mean largest weight and mean entropy (nats) of the model's attention weights, and the mean norm of
    the gradient that the softmax passes back to its logits (autograd, for a random linear loss on the
    weights): the "extremely small gradients" of footnote 4."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, QUERIES, d_k, generator=generator)  # (B, h, T_q, d_k)
    k, v = torch.randn(2, 1, 1, KEYS, d_k, generator=generator)
    query = q if scaled else q * math.sqrt(d_k)  # sqrt(d_k) q . k / sqrt(d_k) = q . k: no scale
    _, weights = scaled_dot_product_attention(query, k, v, need_weights=True)  # (1, 1, T_q, T_k)
    logits = weights.log().requires_grad_()  # softmax(log softmax(z)) = softmax(z): the same weights
    upstream = torch.randn(weights.shape, generator=generator)
    (logits.softmax(-1) * upstream).sum().backward()
    entropy = -(weights * weights.clamp_min(1e-30).log()).sum(-1)
    return {
        "largest_weight": weights.max(-1).values.mean().item(),
        "entropy": entropy.mean().item(),
        "gradient_norm": logits.grad.norm(dim=-1).mean().item(),
    }


def run(output_dir: Path, model: str | None = None, source: str | None = None, target: str | None = None, **_):
    result = TopicResult("scaling", output_dir)
    variances = {d: dot_product_variance(d) for d in D_K}
    stats = {(d, scaled): softmax_statistics(d, scaled) for d in D_K for scaled in (True, False)}
    result.numbers.update(variances=variances, softmax=stats)
    plt = pyplot()
    result.figures.append(_plot_variance(plt, variances, output_dir))
    result.figures.append(_plot_softmax(plt, stats, output_dir))
    rows = [
        [
            d,
            f"{variances[d]:.1f}",
            f"{variances[d] / d:.3f}",
            *(f"{stats[d, s]['largest_weight']:.3f}" for s in (True, False)),
            *(f"{stats[d, s]['entropy']:.2f}" for s in (True, False)),
            *(f"{stats[d, s]['gradient_norm']:.2e}" for s in (True, False)),
        ]
        for d in D_K
    ]
    header = ["d_k", "Var(q.k)", "Var / d_k", "max weight (scaled)", "max weight (unscaled)"]
    header += ["entropy (scaled)", "entropy (unscaled)", "grad norm (scaled)", "grad norm (unscaled)"]
    sections = [markdown_table(header, rows)]
    first, last = D_K[0], D_K[-1]
    result.notes += [
        f"Var(q . k) grows as d_k: measured/d_k from {min(v / d for d, v in variances.items()):.3f} to "
        f"{max(v / d for d, v in variances.items()):.3f} ({VARIANCE_SAMPLES:,} samples per d_k)",
        f"with 1/sqrt(d_k) the softmax entropy stays {stats[first, True]['entropy']:.2f} -> "
        f"{stats[last, True]['entropy']:.2f} nats (uniform over {KEYS} keys: {math.log(KEYS):.2f}); without it "
        f"it collapses {stats[first, False]['entropy']:.2f} -> {stats[last, False]['entropy']:.2f}",
        f"without the scale the largest weight tends to 1 ({stats[last, False]['largest_weight']:.2f} at d_k = {last}) "
        f"and the gradient through the softmax shrinks to {stats[last, False]['gradient_norm']:.1e} "
        f"(scaled: {stats[last, True]['gradient_norm']:.1e})",
    ]
    if model is not None:
        pairs = list(SENTENCE_PAIRS) if source is None else [*SENTENCE_PAIRS, (source, target)]
        figure, table = _trained_logit_scales(plt, model, pairs, output_dir, result)
        result.figures.append(figure)
        sections.append(table)
    write_markdown(result, "Why divide by sqrt(d_k) (§3.2.1)", sections)
    return result


def _plot_variance(plt, variances: dict, output_dir: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    dims = list(variances)
    ax.loglog(dims, dims, "--", color="grey", label="d_k (footnote 4)")
    ax.loglog(dims, list(variances.values()), "o", markersize=7, label="measured Var(q . k)")
    ax.loglog(dims, [v / d for d, v in variances.items()], "s", label="measured Var(q . k / sqrt(d_k))")
    ax.set(xlabel="d_k (dimensions per head)", ylabel="variance of the attention logit")
    ax.set_xticks(dims, [str(d) for d in dims])
    ax.minorticks_off()
    ax.set_title("q . k for unit-variance q, k: variance d_k; divided by sqrt(d_k): 1")
    ax.legend()
    return save_figure(fig, output_dir / "scaling_variance.png")


def _plot_softmax(plt, stats: dict, output_dir: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = (
        ("largest_weight", "largest attention weight", False),
        ("entropy", "entropy of the weights (nats)", False),
        ("gradient_norm", "norm of d loss / d logits", True),
    )
    for ax, (key, label, log) in zip(axes, panels):
        for scaled, style in ((True, "o-"), (False, "s--")):
            values = [stats[d, scaled][key] for d in D_K]
            name = "softmax(q.k / sqrt(d_k))" if scaled else "softmax(q.k)"
            ax.plot(D_K, values, style, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(D_K, [str(d) for d in D_K])
        if log:
            ax.set_yscale("log")
        ax.set(xlabel="d_k", ylabel=label)
    axes[0].legend(fontsize=8, loc="center right")
    axes[1].axhline(math.log(KEYS), color="grey", linestyle=":")
    axes[1].text(D_K[0], math.log(KEYS), f"uniform over {KEYS} keys", va="bottom", fontsize=8)
    fig.suptitle(f"Attention of random queries over {KEYS} random keys, with and without the 1/sqrt(d_k) scale")
    fig.tight_layout()
    return save_figure(fig, output_dir / "scaling_softmax.png")


def layer_logit_scales(model, tokenizer, pairs=SENTENCE_PAIRS) -> list[dict]:
    """For each attention of a trained model: the spread (standard deviation over the keys a query
    may see) of its scaled logits q.k/sqrt(d_k), and its entropy, averaged over queries and heads.

    The logits are read off the model's own attention weights: log softmax(z) = z - logsumexp(z),
    so the spread of the log-weights over the keys is the spread of the logits z."""
    from .common import padded_batch

    batch = padded_batch(tokenizer, pairs)
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    layers = []
    for name, attentions in (
        ("encoder self", out.encoder_attentions),
        ("decoder self", out.decoder_attentions),
        ("decoder cross", out.cross_attentions),
    ):
        query_mask = (batch["attention_mask"] if name == "encoder self" else batch["decoder_attention_mask"]).bool()
        for index, weights in enumerate(attentions):  # (B, h, T_q, T_k)
            allowed = weights > 0
            log_weights = weights.clamp_min(1e-30).log()
            count = allowed.sum(-1)
            mean = (log_weights * allowed).sum(-1) / count
            spread = (((log_weights - mean[..., None]) ** 2 * allowed).sum(-1) / count).sqrt()
            entropy = -(weights * log_weights).sum(-1)
            keep = query_mask[:, None, :] & (count >= 2)  # queries with at least two keys
            layers.append(
                {
                    "attention": f"{name} {index + 1}",
                    "logit_std": spread[keep].mean().item(),
                    "entropy": entropy[keep].mean().item(),
                }
            )
    return layers


def _trained_logit_scales(plt, model_path: str, pairs, output_dir: Path, result: TopicResult):
    from .common import load_model

    model, tokenizer = load_model(model_path)
    layers = layer_logit_scales(model, tokenizer, pairs)
    result.numbers["trained_layers"] = layers
    fig, ax = plt.subplots(figsize=(9, 4))
    names = [layer["attention"] for layer in layers]
    ax.bar(names, [layer["logit_std"] for layer in layers], color="tab:blue")
    ax.axhline(1.0, color="grey", linestyle="--", label="random unit-variance q, k (after the scale)")
    ax.set(ylabel="std of q.k / sqrt(d_k) over keys", xlabel="attention (stack, layer)")
    ax.tick_params(axis="x", rotation=30)
    name = "/".join(Path(model_path).parts[-2:])
    ax.set_title(f"Logit scale of each attention in {name} (mean over heads and queries)")
    ax.legend()
    figure = save_figure(fig, output_dir / "scaling_trained_layers.png")
    rows = [[layer["attention"], f"{layer['logit_std']:.2f}", f"{layer['entropy']:.2f}"] for layer in layers]
    table = markdown_table(["attention", "std of scaled logits", "entropy (nats)"], rows)
    top = max(layers, key=lambda layer: layer["logit_std"])
    result.notes.append(
        f"the trained model's scaled logits spread by {min(x['logit_std'] for x in layers):.1f} to "
        f"{top['logit_std']:.1f} ({top['attention']}): training sharpens attention where it needs to"
    )
    return figure, table
