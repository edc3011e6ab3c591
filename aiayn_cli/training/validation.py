"""Validation during training: loss and perplexity over the validation split, BLEU on a fixed sample.

`load_validation` reads the recipe's split: this process's shard of it, and the sample for BLEU. Every
process validates its own shard; the sums are reduced over processes, the translations gathered, and
sacreBLEU is computed once on the detokenized hypotheses against the raw references.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader

from ..data.batching import Seq2SeqCollator, TokenBatchSampler
from ..data.corpus import load_split
from ..data.tokenization import tokenize_split
from ..evaluation.scoring import score
from .loss import batch_loss
from .recipe import TrainRecipe


@dataclass
class Validation:
    """The validation split of a recipe, as the run validates on it."""

    loader: DataLoader | None  # the whole split, tokenized, this process's shard
    bleu_sources: list[str]  # the fixed sample decoded for BLEU
    bleu_references: list[str]
    sources: list[str]  # the whole split's text
    references: list[str]


def load_validation(recipe: TrainRecipe, tokenizer, accelerator) -> Validation:
    """The recipe's validation split (empty without one): this process's loader over the whole split, the
    BLEU sample (`valid_bleu_samples`, drawn with the recipe's seed), the split's text."""
    if not recipe.valid_split:
        return Validation(None, [], [], [], [])
    valid_raw = load_split(recipe.data, recipe.valid_split)
    valid = tokenize_split(valid_raw, tokenizer)
    longest = max(max(valid["src_len"]), max(valid["tgt_len"]))
    valid_sampler = TokenBatchSampler.from_dataset(
        valid,
        max(recipe.valid_max_tokens or recipe.max_tokens, longest),
        shuffle=False,
        num_replicas=accelerator.num_processes,
        rank=accelerator.process_index,
    )
    loader = DataLoader(valid, batch_sampler=valid_sampler, collate_fn=Seq2SeqCollator(tokenizer.pad_token_id))
    indices = range(len(valid_raw))
    if recipe.valid_bleu_samples is not None and recipe.valid_bleu_samples < len(valid_raw):
        indices = sorted(random.Random(recipe.seed).sample(indices, recipe.valid_bleu_samples))
    sources = [valid_raw[i]["source"] for i in indices] if recipe.valid_bleu_samples != 0 else []
    references = [valid_raw[i]["target"] for i in indices] if sources else []
    return Validation(loader, sources, references, list(valid_raw["source"]), list(valid_raw["target"]))


@torch.no_grad()
def validation_loss(
    model, batches: Iterable[dict], accelerator, epsilon: float, compiled_loss: bool = False
) -> dict[str, float]:
    """Label-smoothed loss, nll and perplexity per target token over all processes' batches.

    Args:
        model: the unwrapped model (no collective calls: processes may hold different numbers of batches).
        batches: this process's collated validation batches.
        compiled_loss: the loss through `torch.compile` (see `batch_loss`).
    """
    was_training = model.training
    model.eval()
    config = model.config
    sums = torch.zeros(3, dtype=torch.float64, device=accelerator.device)  # loss, nll, ntokens
    for batch in batches:
        batch = {k: v.to(accelerator.device) for k, v in batch.items()}
        out = batch_loss(model, batch, config, epsilon, accelerator.autocast(), compiled_loss)
        sums += torch.stack([out.loss.double(), out.nll.double(), out.ntokens.double()])
    model.train(was_training)
    loss, nll, ntokens = accelerator.reduce(sums, reduction="sum").tolist()
    ntokens = max(ntokens, 1.0)
    return {"valid/loss": loss / ntokens, "valid/nll": nll / ntokens, "valid/ppl": math.exp(min(nll / ntokens, 50))}


def translate_sample(model, tokenizer, sources: list[str], beam_size: int = 1, max_tokens: int = 4096) -> list[str]:
    """Translate `sources` with the project's decoder (`aiayn translate`'s); detokenized hypotheses.

    The one place validation decodes: greedy (`beam_size` 1) or the paper's beam search with the
    model's length penalty and maximum length (§6.1), batches of at most `max_tokens` source tokens.
    The model is left in the mode it was in.
    """
    from ..decoding.translator import Translator

    was_training = model.training
    try:
        translator = Translator(model, tokenizer, device=next(model.parameters()).device)
        return translator.translate(sources, num_beams=beam_size, max_tokens=max_tokens)
    finally:
        model.train(was_training)


def validation_bleu(
    model, tokenizer, sources: list[str], references: list[str], accelerator, beam_size: int = 1, max_tokens: int = 4096
) -> tuple[float, list[str]]:
    """sacreBLEU of the sample, decoded in shards by every process; (BLEU, hypotheses) on every process.
    Scored by `aiayn evaluate`'s own code (`aiayn_cli.evaluation.score`)."""
    from accelerate.utils import gather_object

    rank, world = accelerator.process_index, accelerator.num_processes
    mine = list(range(rank, len(sources), world))
    hypotheses = translate_sample(model, tokenizer, [sources[i] for i in mine], beam_size, max_tokens)
    pairs = gather_object(list(zip(mine, hypotheses))) if world > 1 else list(zip(mine, hypotheses))
    ordered = [text for _, text in sorted(pairs)]
    if not ordered:
        return 0.0, ordered
    return float(score(ordered, references, metrics=("sacrebleu",))["scores"]["sacrebleu"]["score"]), ordered


def evaluate_model(
    model, recipe, tokenizer, loader, bleu_sources: list[str], bleu_references: list[str], accelerator
) -> dict[str, float]:
    """What a run's validation measures (`recipe`: its `TrainRecipe`): the loss on the whole split
    (`loader`), and sacreBLEU on its sample decoded as the recipe validates (`valid_beam_size`)."""
    metrics = validation_loss(model, loader, accelerator, recipe.label_smoothing, recipe.compile_loss)
    if bleu_sources:
        metrics["valid/bleu"], _ = validation_bleu(
            model,
            tokenizer,
            bleu_sources,
            bleu_references,
            accelerator,
            beam_size=recipe.valid_beam_size,
            max_tokens=recipe.valid_max_tokens or recipe.max_tokens,
        )
    return metrics


__all__ = [
    "Validation",
    "evaluate_model",
    "load_validation",
    "translate_sample",
    "validation_bleu",
    "validation_loss",
]
