"""§3.1 "followed by layer normalization": LayerNorm against BatchNorm on a padded batch.

The hidden states are the input of the model's first LayerNorm (the encoder's first sub-layer
connection) for a batch that the tokenizer padded. LayerNorm (Ba et al., 2016) normalizes each
token over its d_model features; BatchNorm normalizes each feature over all the tokens of the batch,
so a sentence's output depends on the other sentences and on how much padding the batch holds.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from .common import TopicResult, markdown_table, padded_batch, pyplot, save_figure, write_markdown


def first_norm_inputs(model, batch: dict) -> tuple[torch.Tensor, nn.LayerNorm]:
    """The input `(B, S, d_model)` of the encoder's first LayerNorm for `batch`, and that LayerNorm."""
    norm = model.model.encoder.layers[0].self_attn_sublayer.norm
    captured = {}
    handle = norm.register_forward_pre_hook(lambda module, args: captured.setdefault("x", args[0].detach()))
    try:
        with torch.no_grad():
            model.model.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    finally:
        handle.remove()
    return captured["x"], norm


def batch_norm(hidden: torch.Tensor) -> torch.Tensor:
    """BatchNorm1d (training mode: the batch's own statistics, no affine) over every position of `hidden`."""
    flat = hidden.reshape(-1, hidden.size(-1))
    return nn.BatchNorm1d(hidden.size(-1), affine=False)(flat).view(hidden.shape)


def variants(hidden: torch.Tensor, lengths: list[int]) -> dict[str, torch.Tensor]:
    """Batches holding sentence 0's hidden states, bit for bit, beside different companions or padding."""
    batches = {
        "the whole batch (padded)": hidden,
        "sentence 0 + sentence 1 only": hidden[:2],
        "sentence 0 alone, padded": hidden[:1],
        "sentence 0 alone, no padding": hidden[:1, : lengths[0]],
    }
    return batches


def compare(hidden: torch.Tensor, lengths: list[int], layer_norm: nn.LayerNorm) -> dict[str, dict[str, float]]:
    """How much sentence 0's normalized tokens move, against the whole batch, under each norm."""
    real = slice(0, lengths[0])
    with torch.no_grad():
        reference = {"LayerNorm": layer_norm(hidden)[0, real], "BatchNorm": batch_norm(hidden)[0, real]}
        changes = {}
        for name, batch in variants(hidden, lengths).items():
            outputs = {"LayerNorm": layer_norm(batch)[0, real], "BatchNorm": batch_norm(batch)[0, real]}
            changes[name] = {norm: (outputs[norm] - reference[norm]).abs().max().item() for norm in outputs}
    return changes


def _padding_effect(hidden: torch.Tensor, lengths: list[int]) -> float:
    with torch.no_grad():
        padded = batch_norm(hidden[:1])[0, : lengths[0]]
        unpadded = batch_norm(hidden[:1, : lengths[0]])[0]
    return (padded - unpadded).abs().max().item()


def run(output_dir: Path, model: str | None = None, source: str | None = None, target: str | None = None, **_):
    from .common import SENTENCE_PAIRS, load_model, small_tokenizer

    result = TopicResult("normalization", output_dir)
    if model is not None:
        loaded, tokenizer = load_model(model)
    else:
        from ..model import AiaynConfig, AiaynForConditionalGeneration

        tokenizer = small_tokenizer()
        torch.manual_seed(0)
        loaded = AiaynForConditionalGeneration(AiaynConfig.from_preset("tiny", vocab_size=len(tokenizer))).eval()
    pairs = list(SENTENCE_PAIRS) if source is None else [(source, target), *SENTENCE_PAIRS[1:]]
    batch = padded_batch(tokenizer, pairs)
    hidden, layer_norm = first_norm_inputs(loaded, batch)
    lengths = batch["attention_mask"].sum(-1).tolist()
    changes = compare(hidden, lengths, layer_norm)
    result.numbers.update(changes=changes, lengths=lengths, padding_effect=_padding_effect(hidden, lengths))
    result.figures.append(_plot(pyplot(), hidden, batch["attention_mask"], changes, output_dir))
    rows = [[name, f"{c['LayerNorm']:.2e}", f"{c['BatchNorm']:.2e}"] for name, c in changes.items()]
    header = ["sentence 0 normalized in", "LayerNorm: max change", "BatchNorm: max change"]
    padding = hidden.numel() // hidden.size(-1) - sum(lengths)
    result.notes += [
        f"LayerNorm computes one mean and variance per token (over d_model = {hidden.size(-1)} features): "
        f"{hidden.numel() // hidden.size(-1)} pairs here; BatchNorm one per feature over all "
        f"{hidden.numel() // hidden.size(-1)} positions of the batch, {padding} of them padding",
        "sentence 0's LayerNorm outputs do not move when its companions or its padding change (max change "
        f"{max(c['LayerNorm'] for c in changes.values()):.1e}); its BatchNorm outputs move by up to "
        f"{max(c['BatchNorm'] for c in changes.values()):.2f}",
        "padding alone moves BatchNorm: sentence 0 alone, padded or not, differs by "
        f"{_padding_effect(hidden, lengths):.2f}; BatchNorm would need masked statistics, LayerNorm needs nothing",
        "at test time BatchNorm switches to running averages, a different computation from training's; "
        "LayerNorm computes the same thing at training and at test time",
    ]
    write_markdown(result, "LayerNorm or BatchNorm (§3.1)", [markdown_table(header, rows)])
    return result


def _plot(plt, hidden: torch.Tensor, attention_mask: torch.Tensor, changes: dict, output_dir: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.3), gridspec_kw={"width_ratios": [1.2, 1.2, 1]})
    token_std = hidden.std(-1, unbiased=False).masked_fill(attention_mask == 0, float("nan"))
    image = axes[0].imshow(token_std.numpy(), aspect="auto", cmap="viridis", interpolation="nearest")
    axes[0].set(xlabel="position in the padded batch (blank: padding)", ylabel="sentence")
    axes[0].set_yticks(range(hidden.size(0)))
    axes[0].set_title("LayerNorm: one std per token (real tokens)", fontsize=10)
    fig.colorbar(image, ax=axes[0], label="std over d_model features")
    lengths = attention_mask.sum(-1).tolist()
    features = min(48, hidden.size(-1))
    for name, batch in variants(hidden, lengths).items():
        mean = batch.reshape(-1, batch.size(-1)).mean(0)[:features]
        axes[1].plot(range(features), mean.numpy(), marker=".", label=name)
    axes[1].set(xlabel=f"feature (first {features})", ylabel="BatchNorm mean of the feature")
    axes[1].set_title("BatchNorm: one mean per feature, set by the batch", fontsize=10)
    axes[1].legend(fontsize=7)
    names = list(changes)[1:]
    positions = torch.arange(len(names))
    for offset, norm in ((-0.2, "LayerNorm"), (0.2, "BatchNorm")):
        values = [changes[name][norm] for name in names]
        bars = axes[2].bar((positions + offset).numpy(), values, width=0.4, label=norm)
        axes[2].bar_label(bars, fmt="%.2g", fontsize=8)
    axes[2].set_xticks(positions.numpy(), [n.replace(", ", ",\n").replace(" + ", " +\n") for n in names], fontsize=8)
    axes[2].set(ylabel="max |change| of sentence 0's outputs")
    axes[2].set_title("Sentence 0 normalized in other batches", fontsize=10)
    axes[2].legend()
    fig.suptitle("LayerNorm against BatchNorm on the hidden states of a padded batch (input of the first LayerNorm)")
    fig.tight_layout()
    return save_figure(fig, output_dir / "normalization.png")
