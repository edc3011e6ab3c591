"""5.4 Regularization: label smoothing.

"During training, we employed label smoothing of value eps_ls = 0.1. This hurts perplexity, as
the model learns to be more unsure, but improves accuracy and BLEU score."

The variant computed here spreads eps_ls uniformly over the whole vocabulary (the target
included), so the smoothed target distribution is q = (1 - eps) * onehot(y) + eps / V, and

    loss(y) = -sum_k q_k log p_k = (1 - eps) * nll(y) + (eps / V) * sum_k -log p_k

This is Szegedy et al.'s formulation, tensor2tensor's, fairseq's `label_smoothed_cross_entropy`
before 2020 (`eps_i = eps / V`) and PyTorch's `cross_entropy(label_smoothing=eps)`. fairseq
today spreads eps over the V - 1 other tokens instead (`eps_i = eps / (V - 1)`); for V in the
thousands the two differ by less than eps / V per token.

Losses are *sums* over the non-pad target tokens: the training loop divides by the number of
non-pad target tokens in the whole global batch (all accumulation steps, all processes), as
fairseq does, so that every token weighs the same whatever the batch shapes.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F


class SmoothedLoss(NamedTuple):
    """Sums over the non-pad target tokens of one batch."""

    loss: torch.Tensor  # label-smoothed cross-entropy, summed (the training objective)
    nll: torch.Tensor  # plain negative log-likelihood, summed (perplexity = exp(nll / ntokens))
    ntokens: torch.Tensor  # number of non-pad target tokens


def target_mask(labels: torch.Tensor, pad_token_id: int | None = 0) -> torch.Tensor:
    """True for the target tokens that count: labels that are neither -100 nor the pad id."""
    mask = labels != -100
    if pad_token_id is not None:
        mask &= labels != pad_token_id
    return mask


def label_smoothed_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float = 0.1, pad_token_id: int | None = 0
) -> SmoothedLoss:
    """(1 - eps) * nll + (eps / V) * sum_k -log p_k, summed over the non-pad target tokens.

    Args:
        logits (`(B, T, V)`): the pre-softmax scores; the log-softmax is taken in float32.
        labels (`LongTensor` of shape `(B, T)`): target ids; -100 and `pad_token_id` are ignored.
        epsilon (`float`): eps_ls (the paper: 0.1).
    """
    mask = target_mask(labels, pad_token_id)  # (B, T)
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    targets = labels.masked_fill(~mask, 0)
    nll = -lprobs.gather(-1, targets[..., None]).squeeze(-1)  # -log p_y, (B, T)
    smooth = -lprobs.sum(-1)  # sum_k -log p_k, (B, T)
    vocab_size = lprobs.size(-1)
    # Padding is masked by multiplication, not indexing: in length-sorted batches it is a few
    # percent of the positions, and the backward of boolean indexing costs more than that.
    loss = ((1.0 - epsilon) * nll + (epsilon / vocab_size) * smooth) * mask
    return SmoothedLoss(loss.sum(), (nll * mask).sum(), mask.sum())


__all__ = ["SmoothedLoss", "label_smoothed_cross_entropy", "target_mask"]
