"""§3.2.3 Applications of Attention in our Model: the three masks of one real padded batch.

"We need to prevent leftward information flow in the decoder to preserve the auto-regressive
property. We implement this inside of scaled dot-product attention by masking out (setting to -inf)
all values in the input of the softmax which correspond to illegal connections." The masks drawn
here are the model's own: `padding_mask` (encoder self-attention and encoder-decoder attention) and
`causal_mask` (decoder self-attention), built from a batch that the tokenizer padded.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..model.modeling_aiayn import causal_mask, padding_mask, shift_tokens_right
from .common import TopicResult, markdown_table, padded_batch, pyplot, save_figure, token_strings, write_markdown


def batch_masks(batch: dict, pad_token_id: int, decoder_start_token_id: int) -> dict:
    """The model's masks for `batch` (`padded_batch`), broadcast to full `(B, T_q, T_k)` boolean
    tensors (True: may attend), with the decoder input (the labels shifted right, `<s>` first)."""
    source_mask, target_mask = batch["attention_mask"], batch["decoder_attention_mask"]
    batch_size, source_length = source_mask.shape
    target_length = target_mask.size(1)
    decoder_input_ids = shift_tokens_right(batch["labels"], pad_token_id, decoder_start_token_id)

    def full(mask, queries: int, keys: int) -> torch.Tensor:
        full_shape = (batch_size, 1, queries, keys)
        return (torch.ones(full_shape, dtype=torch.bool) if mask is None else mask.expand(full_shape))[:, 0]

    return {
        "decoder_input_ids": decoder_input_ids,
        "encoder self-attention": full(padding_mask(source_mask), source_length, source_length),
        "decoder self-attention": full(
            causal_mask(target_length, 0, target_mask, source_mask.device), target_length, target_length
        ),
        "encoder-decoder attention": full(padding_mask(source_mask), target_length, source_length),
    }


def run(output_dir: Path, model: str | None = None, source: str | None = None, target: str | None = None, **_):
    from .common import SENTENCE_PAIRS, load_model, small_tokenizer

    result = TopicResult("masks", output_dir)
    if model is not None:
        loaded, tokenizer = load_model(model)
        config = loaded.config
        pad_id, start_id = config.pad_token_id, config.decoder_start_token_id
    else:
        tokenizer, pad_id, start_id = small_tokenizer(), 0, 1  # AiaynConfig's ids
    pairs = list(SENTENCE_PAIRS) if source is None else [*SENTENCE_PAIRS[:2], (source, target)]
    batch = padded_batch(tokenizer, pairs)
    masks = batch_masks(batch, pad_id, start_id)
    rows = []
    for b in range(len(pairs)):
        source_tokens, target_tokens = (
            int(batch["attention_mask"][b].sum()),
            int(batch["decoder_attention_mask"][b].sum()),
        )
        rows.append(
            [
                b,
                pairs[b][0],
                f"{source_tokens} + {batch['input_ids'].size(1) - source_tokens} pad",
                f"{target_tokens} + {batch['labels'].size(1) - target_tokens} pad",
                *(int(masks[name][b].sum()) for name in list(masks)[1:]),
            ]
        )
    header = ["sentence", "source", "source tokens", "target tokens", "allowed: encoder self", "decoder self"]
    header.append("encoder-decoder")
    result.figures.append(_plot_masks(pyplot(), masks, batch, tokenizer, output_dir))
    result.numbers["masks"] = {name: value for name, value in masks.items() if name != "decoder_input_ids"}
    result.notes += [
        "encoder self-attention: every query sees every real source token; padding columns are masked (-inf)",
        "decoder self-attention: a lower triangle (position i sees <s> and the targets before i), "
        "cut by the target padding",
        "encoder-decoder attention: every target position sees every real source token, never the source padding",
        "rows of padding queries are computed too; their outputs are dropped by the loss (labels = pad)",
    ]
    write_markdown(result, "The masks of a padded batch (§3.2.3)", [markdown_table(header, rows)])
    return result


def _plot_masks(plt, masks: dict, batch: dict, tokenizer, output_dir: Path) -> Path:
    from matplotlib.colors import ListedColormap

    names = ["encoder self-attention", "decoder self-attention", "encoder-decoder attention"]
    sentences = batch["input_ids"].size(0)
    fig, axes = plt.subplots(sentences, 3, figsize=(17, 5.6 * sentences))
    colors = ListedColormap(["#f1f1f1", "#2b6cb0"])
    for b in range(sentences):
        source = token_strings(tokenizer, batch["input_ids"][b])
        decoder_input = token_strings(tokenizer, masks["decoder_input_ids"][b])
        for ax, name in zip(axes[b], names):
            queries = source if name.startswith("encoder self") else decoder_input
            keys = decoder_input if name.startswith("decoder self") else source
            ax.imshow(masks[name][b].int().numpy(), cmap=colors, vmin=0, vmax=1, interpolation="nearest")
            size = 8 if max(len(keys), len(queries)) <= 24 else 6
            ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=size)
            ax.set_yticks(range(len(queries)), queries, fontsize=size)
            ax.set_xlabel("key (attended to)")
            ax.set_ylabel("query")
            ax.set_title(f"sentence {b}: {name}", fontsize=10)
    fig.suptitle("The model's masks for one padded batch (blue: may attend; grey: set to -inf before the softmax)")
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    return save_figure(fig, output_dir / "masks.png", dpi=90)
