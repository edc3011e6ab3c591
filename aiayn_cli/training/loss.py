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
    targets = labels.masked_fill(~mask, 0)
    loss, nll = _SmoothedCrossEntropy.apply(logits, targets, mask, epsilon)
    return SmoothedLoss(loss, nll, mask.sum())


class _SmoothedCrossEntropy(torch.autograd.Function):
    """The loss above in one pass over the (B, T, V) scores each way.

    With p = softmax(x):

        d loss / d x_k = p_k - (1 - eps) [k = y] - eps / V,    d nll / d x_k = p_k - [k = y].

    Autograd through `log_softmax`, `gather` and `sum` writes four (B, T, V) tensors in the backward
    pass (a zero-filled scatter among them); this writes one, the gradient, in place.
    """

    @staticmethod
    def forward(ctx, logits, targets, mask, epsilon):
        lprobs = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
        nll = -lprobs.gather(-1, targets[..., None]).squeeze(-1)  # -log p_y, (B, T)
        smooth = -lprobs.sum(-1)  # sum_k -log p_k, (B, T)
        weight = mask.to(lprobs.dtype)
        loss = ((1.0 - epsilon) * nll + (epsilon / lprobs.size(-1)) * smooth) * weight
        ctx.save_for_backward(lprobs, targets, weight)
        ctx.epsilon, ctx.dtype = epsilon, logits.dtype
        return loss.sum(), (nll * weight).sum()

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        lprobs, targets, weight = ctx.saved_tensors
        eps, vocab_size = ctx.epsilon, lprobs.size(-1)
        scale = (weight * (grad_loss + grad_nll))[..., None]  # (B, T, 1)
        grad = lprobs.exp().mul_(scale)  # p * scale, (B, T, V)
        grad.sub_((weight * (grad_loss * (eps / vocab_size)))[..., None])
        at_target = (weight * (grad_loss * (1.0 - eps) + grad_nll))[..., None]
        grad.scatter_add_(-1, targets[..., None], -at_target)
        return grad.to(ctx.dtype), None, None, None


__all__ = ["SmoothedLoss", "label_smoothed_cross_entropy", "target_mask"]
