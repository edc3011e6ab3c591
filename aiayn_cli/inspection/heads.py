"""Which heads matter: every head of the three kinds of attention (§3.2.3), measured on held-out pairs.

    from aiayn_cli.inspection.heads import load_sample, measure_heads

    sample = load_sample(translator, spec, "validation", size=500)
    report = measure_heads(translator, sample)          # what `aiayn heads` prints and draws
    report.heads[0]["delta_loss"], report.removable, report.pruning

For each head (kind, layer, head), on the sample's reference translations (teacher forcing):

* what it does (Voita et al., 2019): its *confidence*, the mean over queries of the largest weight;
  its mean attention distance sum_j w_ij |i - j|; and, for self-attention, the share of its weight on
  the previous, the same and the next token (a "positional" head puts most of it on one of them);
* what it is worth: the validation loss (token-level cross-entropy, no label smoothing) and the
  sacreBLEU of the model's translations with that head alone removed, and Michel et al.'s (2019)
  gradient score E_x |dL(x)/dm_h| (the derivative of one sentence's loss by the head's mask, at m = 1);
* the pruning curve (Michel et al., 2019): heads removed together, least important first (by the loss
  change, or by the gradient score), sacreBLEU after each, until it has fallen by more than
  `max_bleu_drop` (1 point): `removable` heads could go with at most that loss.

Heads are removed through the model's own forward (`head_mask`, `decoder_head_mask`,
`cross_attn_head_mask`: each head's output is multiplied by its mask before W^O), in the teacher-forced
passes and in the translations (`Translator.head_masks`), never by a second implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..errors import AiaynError
from .extract import KIND_NAMES, KINDS, padded_batch

# The forward's argument for each kind's heads.
MASK_ARGUMENTS = {"encoder": "head_mask", "decoder": "decoder_head_mask", "cross": "cross_attn_head_mask"}
IMPORTANCE = ("loss", "gradient")

Head = tuple[str, int, int]  # (kind, layer, head), layer and head from 0


def head_masks(config, removed: Iterable[Head] = (), requires_grad: bool = False, device=None) -> dict:
    """The forward's three masks `(N, h)`: 1 for every head, 0 for the `removed` (kind, layer, head)."""
    layers = {"encoder": config.num_encoder_layers, "decoder": config.num_decoder_layers}
    layers["cross"] = config.num_decoder_layers
    masks = {kind: torch.ones(layers[kind], config.num_heads, device=device) for kind in KINDS}
    for kind, layer, head in removed:
        masks[kind][layer, head] = 0.0
    return {MASK_ARGUMENTS[kind]: mask.requires_grad_(requires_grad) for kind, mask in masks.items()}


def all_heads(config) -> list[Head]:
    layers = {"encoder": config.num_encoder_layers, "decoder": config.num_decoder_layers}
    layers["cross"] = config.num_decoder_layers
    return [(kind, i, h) for kind in KINDS for i in range(layers[kind]) for h in range(config.num_heads)]


def head_name(head: Head) -> str:
    """("cross", 1, 0) -> "cross 2.1" (layer.head, from 1, as `aiayn attention --layer --head` count)."""
    kind, layer, number = head
    return f"{kind} {layer + 1}.{number + 1}"


# ---------------------------------------------------------------------------------------------
# The sample: held-out pairs, tokenized once
# ---------------------------------------------------------------------------------------------


@dataclass
class Sample:
    sources: list[str]
    references: list[str]
    source_ids: list[list[int]]
    target_ids: list[list[int]]
    origin: str = ""


def load_sample(translator, spec, split: str = "validation", size: int | None = 500) -> Sample:
    """The first `size` pairs of `split` (all with None) whose sides fit the model's length limit."""
    from ..data.corpus import load_split

    data = load_split(spec, split)
    count = len(data) if size is None else min(size, len(data))
    if count == 0:
        raise AiaynError(f"the {split} split holds no sentence pairs")
    return sample_of(translator, list(data["source"][:count]), list(data["target"][:count]), f"{split} split")


def sample_of(translator, sources: list[str], references: list[str], origin: str = "") -> Sample:
    """A `Sample` of given pairs; pairs with an empty or over-long side are left out."""
    limit = translator.max_source_tokens
    source_ids = translator.tokenizer(sources, add_special_tokens=True, verbose=False)["input_ids"]
    target_ids = translator.tokenizer(text_target=references, add_special_tokens=True, verbose=False)["input_ids"]
    keep = [
        i
        for i, (s, t) in enumerate(zip(source_ids, target_ids))
        if sources[i].strip() and references[i].strip() and len(s) <= limit and len(t) <= limit
    ]
    if not keep:
        raise AiaynError(f"no usable sentence pair in the {origin or 'sample'} (empty, or over the length limit)")
    return Sample(
        [sources[i] for i in keep],
        [references[i] for i in keep],
        [list(source_ids[i]) for i in keep],
        [list(target_ids[i]) for i in keep],
        origin,
    )


def batches(model, sample: Sample, batch_size: int = 64) -> list[dict]:
    """Padded teacher-forcing batches of the sample (`extract.padded_batch`), sorted by length."""
    order = sorted(range(len(sample.source_ids)), key=lambda i: len(sample.source_ids[i]))
    parts = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return [padded_batch(model, [sample.source_ids[i] for i in p], [sample.target_ids[i] for i in p]) for p in parts]


# ---------------------------------------------------------------------------------------------
# Loss, attention statistics, gradient scores
# ---------------------------------------------------------------------------------------------


def _forward(model, batch: dict, **kwargs):
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    return model(**inputs, use_cache=False, **kwargs)


def _token_nll(model, batch: dict, logits: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy of the batch's target tokens (no label smoothing)."""
    labels = batch["labels"].masked_fill(batch["labels"] == model.config.pad_token_id, -100)
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")


@torch.inference_mode()
def validation_loss(model, parts: list[dict], masks: dict | None = None) -> float:
    """Token-level cross-entropy of the references, with `masks` (the forward's head masks) applied."""
    total, tokens = 0.0, 0
    for batch in parts:
        logits = _forward(model, batch, **(masks or {})).logits
        total += float(_token_nll(model, batch, logits))
        tokens += int((batch["labels"] != model.config.pad_token_id).sum())
    return total / tokens


@torch.inference_mode()
def attention_statistics(model, parts: list[dict]) -> dict[Head, dict[str, float | None]]:
    """Confidence, mean distance and previous / same / next shares of every head, over every real query."""
    sums: dict[Head, torch.Tensor] = {}
    counts: dict[str, torch.Tensor] = {}
    for batch in parts:
        out = _forward(model, batch, output_attentions=True)
        queries = {"encoder": batch["attention_mask"], "decoder": batch["decoder_attention_mask"]}
        queries["cross"] = batch["decoder_attention_mask"]
        tensors = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
        for kind in KINDS:
            valid = queries[kind].float()  # (B, T_q)
            counts[kind] = counts.get(kind, 0) + valid.sum()
            for layer, weights in enumerate(tensors[kind]):
                w = weights.float()  # (B, h, T_q, T_k)
                t_q, t_k = w.shape[-2:]
                i = torch.arange(t_q)[:, None]
                j = torch.arange(t_k)[None, :]
                per_query = torch.stack(
                    [
                        w.amax(-1),  # confidence
                        (w * (i - j).abs()).sum(-1),  # distance
                        (w * (j == i - 1)).sum(-1),  # previous token
                        (w * (j == i)).sum(-1),  # same token
                        (w * (j == i + 1)).sum(-1),  # next token
                    ]
                )  # (5, B, h, T_q)
                totals = (per_query * valid[None, :, None, :]).sum((1, 3))  # (5, h)
                for head in range(w.size(1)):
                    key = (kind, layer, head)
                    sums[key] = sums.get(key, 0) + totals[:, head]
    stats = {}
    for key, total in sums.items():
        mean = (total / counts[key[0]]).tolist()
        positional = key[0] != "cross"  # previous / same / next: within one sequence only
        stats[key] = {
            "confidence": mean[0],
            "distance": mean[1],
            "previous": mean[2] if positional else None,
            "same": mean[3] if positional else None,
            "next": mean[4] if positional else None,
        }
    return stats


def gradient_scores(model, sample: Sample) -> dict[Head, float]:
    """Michel et al. (2019): I_h = E_x |dL(x)/dm_h| at m = 1, L(x) one sentence's summed token loss,
    averaged over the sample's sentences (one backward pass per sentence; dropout off)."""
    totals = {key: 0.0 for key in all_heads(model.config)}
    device = next(model.parameters()).device
    for source, target in zip(sample.source_ids, sample.target_ids):
        batch = padded_batch(model, [source], [target])
        masks = head_masks(model.config, requires_grad=True, device=device)
        with torch.enable_grad():
            loss = _token_nll(model, batch, _forward(model, batch, **masks).logits)
            grads = torch.autograd.grad(loss, list(masks.values()))
        for kind, grad in zip(KINDS, grads):  # head_masks gives them in this order
            for layer, row in enumerate(grad.abs().tolist()):
                for head, value in enumerate(row):
                    totals[(kind, layer, head)] += value
    return {key: value / len(sample.source_ids) for key, value in totals.items()}


# ---------------------------------------------------------------------------------------------
# BLEU with heads removed, and the pruning curve
# ---------------------------------------------------------------------------------------------


def masked_bleu(translator, sample: Sample, removed: Iterable[Head] = (), **decoding) -> tuple[float, list[str]]:
    """sacreBLEU of the sample's translations with the `removed` heads masked in every decoding step."""
    from ..evaluation.scoring import score

    removed = list(removed)
    device = translator.device
    translator.head_masks = head_masks(translator.model.config, removed, device=device) if removed else None
    try:
        hypotheses = translator.translate(sample.sources, **decoding)
    finally:
        translator.head_masks = None
    return float(
        score(hypotheses, sample.references, metrics=("sacrebleu",))["scores"]["sacrebleu"]["score"]
    ), hypotheses


@dataclass
class HeadReport:
    """`aiayn heads`' measurements: `heads` one row per head, `pruning` the curve's points."""

    base_loss: float
    base_bleu: float
    heads: list[dict]
    pruning: list[dict]
    removable: int
    total: int
    settings: dict = field(default_factory=dict)

    @property
    def removable_fraction(self) -> float:
        return self.removable / self.total

    def to_dict(self) -> dict:
        return {
            "settings": self.settings,
            "base": {"loss": self.base_loss, "bleu": self.base_bleu},
            "heads": self.heads,
            "pruning": self.pruning,
            "removable": self.removable,
            "total": self.total,
            "removable_fraction": self.removable_fraction,
        }


def measure_heads(
    translator,
    sample: Sample,
    *,
    importance: str = "loss",
    max_bleu_drop: float = 1.0,
    batch_size: int = 64,
    progress: Callable[[str], None] | None = None,
    **decoding,
) -> HeadReport:
    """Every head's statistics, masked loss and BLEU, gradient score, and the pruning curve (module
    docstring). `decoding` are `Translator.translate`'s options (`num_beams`, ...): the model's
    generation config by default."""
    if importance not in IMPORTANCE:
        raise AiaynError(f"{importance!r}: choose one of {', '.join(IMPORTANCE)}", key="importance")
    if not 0 <= max_bleu_drop <= 100:  # NaN too: BLEU is 0 to 100, and the report is JSON
        raise AiaynError(f"must be a number of BLEU points from 0 to 100, got {max_bleu_drop:g}", key="max_bleu_drop")
    say = progress or (lambda message: None)
    model = translator.model
    translator.decoding_options(**decoding)  # bad options fail before the work
    parts = batches(model, sample, batch_size)
    heads = all_heads(model.config)
    say(f"{len(sample.sources)} pairs, {len(heads)} heads: attention statistics and gradient scores")
    stats = attention_statistics(model, parts)
    gradients = gradient_scores(model, sample)
    base_loss = validation_loss(model, parts)
    base_bleu, _ = masked_bleu(translator, sample, **decoding)
    rows = []
    for number, head in enumerate(heads, 1):
        say(f"head {number}/{len(heads)} ({head_name(head)}) masked: loss and BLEU")
        loss = validation_loss(model, parts, head_masks(model.config, [head], device=translator.device))
        bleu, _ = masked_bleu(translator, sample, [head], **decoding)
        kind, layer, index = head
        rows.append(
            {
                "kind": kind,
                "layer": layer + 1,
                "head": index + 1,
                **stats[head],
                "loss": loss,
                "delta_loss": loss - base_loss,
                "bleu": bleu,
                "delta_bleu": bleu - base_bleu,
                "gradient": gradients[head],
            }
        )
    key = "delta_loss" if importance == "loss" else "gradient"
    order = sorted(range(len(heads)), key=lambda r: rows[r][key])
    pruning, removable, removed = [{"removed": 0, "head": None, "bleu": base_bleu, "loss": base_loss}], 0, []
    for r in order:
        removed.append(heads[r])
        say(f"pruning: {len(removed)} heads removed ({head_name(heads[r])} last)")
        bleu, _ = masked_bleu(translator, sample, removed, **decoding)
        loss = validation_loss(model, parts, head_masks(model.config, removed, device=translator.device))
        pruning.append({"removed": len(removed), "head": head_name(heads[r]), "bleu": bleu, "loss": loss})
        rows[r]["pruned"] = len(removed)
        if bleu < base_bleu - max_bleu_drop:
            break
        removable = len(removed)
    settings = {
        "sample": len(sample.sources),
        "origin": sample.origin,
        "importance": importance,
        "max_bleu_drop": max_bleu_drop,
        "decoding": {k: v for k, v in vars(translator.decoding_options(**decoding)).items() if k != "seed"},
    }
    return HeadReport(base_loss, base_bleu, rows, pruning, removable, len(heads), settings)


__all__ = [
    "IMPORTANCE",
    "KIND_NAMES",
    "MASK_ARGUMENTS",
    "HeadReport",
    "Sample",
    "all_heads",
    "attention_statistics",
    "gradient_scores",
    "head_masks",
    "head_name",
    "load_sample",
    "masked_bleu",
    "measure_heads",
    "sample_of",
    "validation_loss",
]
