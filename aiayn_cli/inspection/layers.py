"""Layer by layer: what the decoder would predict after each of its N layers (§3.1: "a stack of N = 6
identical layers"), and how each layer's encoder-decoder attention aligns.

    from aiayn_cli.inspection.layers import layer_predictions, measure_layers

    report = measure_layers(model, sample)                     # next-token accuracy and loss per layer
    grid = layer_predictions(model, tokenizer, source, reference)  # one sentence: the top choice per layer
    report, grid = inspect_layers(translator, sentence="A dog runs.")  # as `aiayn layers -m M "A dog runs."`

Each decoder layer's output goes through the model's own output projection (the tied pre-softmax
matrix of §3.4, `lm_head`), as if the layers above it were not there ("logit lens"). In the paper's
post-LN layers every layer's output is already layer-normalized, as the last one is; with `pre_norm`
the decoder's final LayerNorm is applied first, as it is to the last layer. The last layer's
predictions are the model's. Teacher forcing on the reference: position t reads y_(t-1) and predicts
y_t, at every layer.

Where true word alignments exist (the quickstart's `{split}.align`), `alignment_by_layer` gives the
AER of each layer's encoder-decoder attention, heads averaged (`alignment.measure`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import AiaynError
from .heads import Sample, batches


def layer_logits(model, decoder_hidden_states) -> list[torch.Tensor]:
    """The logits `(B, T, V)` of decoder layers 1 .. N: each layer's output through `lm_head` (after the
    final LayerNorm where the model is pre-norm)."""
    norm = model.get_decoder().final_norm
    outputs = decoder_hidden_states[1:]  # [0] is the embedded input
    return [model.lm_head(norm(h) if norm is not None else h) for h in outputs]


@dataclass
class LayerReport:
    """Per decoder layer (from 1): next-token accuracy and cross-entropy on the sample's references, and
    `echo`: the share of positions whose top choice is the token the position reads (y_(t-1)), which a
    layer whose output still carries its input embedding predicts through the tied projection."""

    accuracy: list[float]
    loss: list[float]
    tokens: int
    echo: list[float]
    aer: dict[str, float] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        layers = [
            {"layer": i + 1, "accuracy": a, "loss": lo, "echo": e}
            for i, (a, lo, e) in enumerate(zip(self.accuracy, self.loss, self.echo))
        ]
        return {"settings": self.settings, "tokens": self.tokens, "layers": layers, "aer": self.aer}


@torch.inference_mode()
def measure_layers(model, sample: Sample, batch_size: int = 64) -> LayerReport:
    """Next-token accuracy and loss (token-level cross-entropy, no label smoothing) of every decoder
    layer's prediction, teacher-forced on the sample's references."""
    n = model.config.num_decoder_layers
    correct, echo, nll, tokens = [0] * n, [0] * n, [0.0] * n, 0
    for batch in batches(model, sample, batch_size):
        labels = batch["labels"]
        real = labels != model.config.pad_token_id
        out = model(**{k: v for k, v in batch.items() if k != "labels"}, output_hidden_states=True, use_cache=False)
        targets = labels.masked_fill(~real, -100)
        for i, logits in enumerate(layer_logits(model, out.decoder_hidden_states)):
            logits = logits.float()
            choice = logits.argmax(-1)
            correct[i] += int(((choice == labels) & real).sum())
            echo[i] += int(((choice == batch["decoder_input_ids"]) & real).sum())
            nll[i] += float(
                F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum")
            )
        tokens += int(real.sum())
    return LayerReport([c / tokens for c in correct], [v / tokens for v in nll], tokens, [e / tokens for e in echo])


@dataclass
class LayerPredictions:
    """One sentence: `choices[layer][t]` the top token at position t after each layer, `probabilities`
    its probability, `reference` the tokens y_t; `inputs` what position t reads (`<s>` y_1 ...)."""

    source: str
    reference: str
    inputs: list[str]
    targets: list[str]
    choices: list[list[str]]
    probabilities: list[list[float]]
    target_probabilities: list[list[float]]


@torch.inference_mode()
def layer_predictions(model, tokenizer, source: str, reference: str) -> LayerPredictions:
    """The top choice of every decoder layer at every position of one teacher-forced sentence pair."""
    from .extract import padded_batch

    if not source.strip() or not reference.strip():
        raise AiaynError("the sentence and its reference must not be empty")
    src = tokenizer(source, add_special_tokens=True)["input_ids"]
    tgt = tokenizer(text_target=reference, add_special_tokens=True)["input_ids"]
    limit = model.config.max_position_embeddings
    if max(len(src), len(tgt)) > limit:
        raise AiaynError(f"the sentence pair has more than the model's limit of {limit} tokens")
    batch = padded_batch(model, [src], [tgt])
    labels = batch.pop("labels")
    out = model(**batch, output_hidden_states=True, use_cache=False)
    choices, probabilities, target_probabilities = [], [], []
    for logits in layer_logits(model, out.decoder_hidden_states):
        p = logits[0].float().softmax(-1)  # (T, V)
        best = p.max(-1)
        choices.append(_tokens(tokenizer, best.indices.tolist()))
        probabilities.append(best.values.tolist())
        target_probabilities.append(p.gather(-1, labels[0][:, None])[:, 0].tolist())
    return LayerPredictions(
        source,
        reference,
        _tokens(tokenizer, batch["decoder_input_ids"][0].tolist()),
        _tokens(tokenizer, labels[0].tolist()),
        choices,
        probabilities,
        target_probabilities,
    )


def inspect_layers(
    translator,
    data=None,
    split: str = "validation",
    size: int | None = None,
    sentence: str | None = None,
    reference: str | None = None,
) -> tuple[LayerReport, LayerPredictions]:
    """What `aiayn layers` shows: the per-layer report of the first `size` pairs of a data split (`data`,
    a `DataSpec`; AER per layer where the split has true alignments) or, without data, of the one
    `sentence`; and that sentence layer by layer (default: the split's first pair). Without
    `reference`, the sentence is teacher-forced on the model's own translation: each layer is then
    measured against what the whole model chooses."""
    from .heads import load_sample, sample_of

    if data is None and sentence is None:
        raise AiaynError("give a sentence or a data split to look at")
    if sentence is not None and reference is None:
        reference = translator.translate([sentence], on_long="error")[0]
    model = translator.model
    if data is not None:
        pairs = load_sample(translator, data, split, size)
        settings = {"split": split}
    else:
        pairs = sample_of(translator, [sentence], [reference], "sentence")
        settings = {"sentence": sentence}
    report = measure_layers(model, pairs)
    align_path = alignment_file(data, split) if data is not None else None
    if align_path is not None:
        report.aer = alignment_by_layer(model, translator.tokenizer, align_path, data.source_lang, data.target_lang,
                                        size)  # fmt: skip
    if sentence is None:
        sentence, reference = pairs.sources[0], pairs.references[0]
    grid = layer_predictions(model, translator.tokenizer, sentence, reference)
    report.settings = {**settings, "pairs": len(pairs.sources), "alignments": str(align_path)}
    return report, grid


def _tokens(tokenizer, ids: list[int]) -> list[str]:
    return [t.replace("\u2581", "_") for t in tokenizer.convert_ids_to_tokens(ids)]


def alignment_file(spec, split: str) -> Path | None:
    """The `{split}.align` file beside a data folder's split (the quickstart writes one), else None."""
    from ..data.corpus import split_candidates

    if not spec.data_dir:
        return None
    for name in split_candidates(split):
        path = Path(spec.data_dir) / f"{name}.align"
        if path.is_file() and (Path(spec.data_dir) / f"{name}.{spec.source_lang}").is_file():
            return path
    return None


def alignment_by_layer(model, tokenizer, align_path: Path, source_lang: str, target_lang: str, size: int | None):
    """AER of each decoder layer's encoder-decoder attention (heads averaged, the predicting position) and
    of the diagonal, on the first `size` pairs beside `align_path` ({name}.{lang} and {name}.align)."""
    from ..data.lines import read_lines
    from .alignment import measure

    def read(suffix: str) -> list[str]:
        lines = read_lines(align_path.with_suffix(f".{suffix}"))
        return lines[:size] if size is not None else lines

    sources, references, gold = read(source_lang), read(target_lang), read("align")
    if not len(sources) == len(references) == len(gold):
        raise AiaynError(f"{align_path}: not as many lines as {align_path.with_suffix('.' + source_lang)}")
    results = measure(model, tokenizer, sources, references, gold)
    return {name: value for name, value in results.items() if not name.endswith(" input")} | {"pairs": len(gold)}


__all__ = [
    "LayerPredictions",
    "LayerReport",
    "alignment_by_layer",
    "alignment_file",
    "inspect_layers",
    "layer_logits",
    "layer_predictions",
    "measure_layers",
]
