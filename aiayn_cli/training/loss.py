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

import warnings
from contextlib import AbstractContextManager, nullcontext
from typing import NamedTuple

import torch

from ..model.modeling_aiayn import shift_tokens_right


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
    logits: torch.Tensor,
    labels: torch.Tensor,
    epsilon: float = 0.1,
    pad_token_id: int | None = 0,
    compiled: bool = False,
) -> SmoothedLoss:
    """(1 - eps) * nll + (eps / V) * sum_k -log p_k, summed over the non-pad target tokens.

    Args:
        logits (`(B, T, V)`): the pre-softmax scores; the log-softmax is taken in float32.
        labels (`LongTensor` of shape `(B, T)`): target ids; -100 and `pad_token_id` are ignored.
        epsilon (`float`): eps_ls (the paper: 0.1).
        compiled (`bool`): run the two passes below through `torch.compile` (inductor), which fuses each
            into one read of the scores (and one write of the gradient); where that cannot compile
            (no C++ compiler), a warning and the same maths eagerly.
    """
    mask = target_mask(labels, pad_token_id)  # (B, T)
    targets = labels.masked_fill(~mask, 0)
    loss, nll = _SmoothedCrossEntropy.apply(logits, targets, mask, epsilon, compiled)
    return SmoothedLoss(loss, nll, mask.sum())


def batch_loss(
    model,
    batch: dict[str, torch.Tensor],
    config,
    epsilon: float,
    autocast: AbstractContextManager | None = None,
    compiled: bool = False,
) -> SmoothedLoss:
    """The label-smoothed loss of one collated batch: the one function training and validation share.

    Teacher forcing (§3.1): the decoder reads the labels shifted right, with no cache; the scores stay in
    the autocast dtype (the loss reads them in float32, see `label_smoothed_cross_entropy`).

    Args:
        model: the model, or its prepared / compiled wrapper (its `config` is passed apart).
        batch: `input_ids`, `attention_mask` and `labels` on the model's device.
        config: the model's config (`pad_token_id`, `decoder_start_token_id`).
        autocast: the forward pass's mixed-precision context (`accelerator.autocast()`), or none.
    """
    decoder_input_ids = shift_tokens_right(batch["labels"], config.pad_token_id, config.decoder_start_token_id)
    with autocast if autocast is not None else nullcontext():
        logits = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=decoder_input_ids,
            use_cache=False,
        ).logits
    return label_smoothed_cross_entropy(logits, batch["labels"], epsilon, config.pad_token_id, compiled)


# The two passes over the (B, T, V) scores x, with lse = log sum_k exp x_k (so log p_k = x_k - lse):
#
#     nll = lse - x_y,    sum_k -log p_k = V * lse - sum_k x_k
#     d loss / d x_k = p_k - (1 - eps) [k = y] - eps / V,    d nll / d x_k = p_k - [k = y]
#
# Only lse, one number per position, is kept between them: not the (B, T, V) log-probabilities.


def _forward_sums(logits, targets, weight, epsilon: float):
    """The loss and nll summed over the positions (weight 0 for padding), and lse for the backward pass."""
    x = logits.float()
    lprobs = torch.log_softmax(x, dim=-1)  # (B, T, V)
    nll = -lprobs.gather(-1, targets[..., None]).squeeze(-1)
    smooth = -lprobs.sum(-1)
    lse = x[..., 0] - lprobs[..., 0]  # log p_k = x_k - lse, at any k
    loss = ((1.0 - epsilon) * nll + (epsilon / x.size(-1)) * smooth) * weight
    return loss.sum(), (nll * weight).sum(), lse


def _backward_grad(logits, lse, targets, weight, grad_loss, grad_nll, epsilon: float):
    """d(grad_loss * loss + grad_nll * nll) / d logits, in the scores' dtype: p * scale - uniform, less
    at_target at the target, with each coefficient one number per position (0 for padding).

    One rendering for both modes: eagerly its in-place steps make one float32 tensor (and the scores'
    dtype's copy); inductor fuses them into one loop that writes the scores' dtype. The value at the
    target is computed apart, in float32, and written over it (one number per position)."""
    scale = (weight * (grad_loss + grad_nll))[..., None]
    uniform = (weight * (grad_loss * (epsilon / logits.size(-1))))[..., None]
    at_target = (weight * (grad_loss * (1.0 - epsilon) + grad_nll))[..., None]
    lse = lse[..., None]
    p = logits.to(torch.float32, copy=True).sub_(lse).exp_()
    grad = p.mul_(scale).sub_(uniform).to(logits.dtype)
    p_target = (logits.gather(-1, targets[..., None]).float() - lse).exp()
    at = (p_target * scale - uniform - at_target).to(logits.dtype)
    # written by indexing (index_put_): PyTorch's CPU scatter_ is far slower on bf16 than on float32
    positions = torch.arange(targets.numel(), device=targets.device)
    grad.view(-1, grad.size(-1))[positions, targets.reshape(-1)] = at.reshape(-1)
    return grad


class _Passes:
    """The two passes, eager or through `torch.compile` (built once, on first use)."""

    def __init__(self) -> None:
        self._compiled: tuple | None = None
        self._failed = False

    def __call__(self, compiled: bool) -> tuple:
        if not compiled or self._failed:
            return _forward_sums, _backward_grad
        if self._compiled is None:
            self._compiled = (
                torch.compile(_forward_sums, dynamic=True),
                torch.compile(_backward_grad, dynamic=True),
            )
        return self._compiled

    def failed(self, error: Exception) -> None:
        self._failed = True
        warnings.warn(
            f"the compiled loss is not available here, computing it eagerly ({str(error).strip().splitlines()[0]})",
            stacklevel=3,
        )


_PASSES = _Passes()


def _run(compiled: bool, which: int, *args):
    try:
        return _PASSES(compiled)[which](*args)
    except torch._dynamo.exc.BackendCompilerFailed as error:  # no working C++ compiler, for one
        _PASSES.failed(error)
        return _PASSES(False)[which](*args)


class _SmoothedCrossEntropy(torch.autograd.Function):
    """The loss above in one pass over the (B, T, V) scores each way (with `compiled`; eagerly, a few).

    Autograd through `log_softmax`, `gather` and `sum` writes four (B, T, V) tensors in the backward
    pass (a zero-filled scatter among them) and keeps the float32 log-probabilities in between; this
    keeps the scores as they are and one number per position, and writes one tensor, the gradient.
    """

    @staticmethod
    def forward(ctx, logits, targets, mask, epsilon, compiled):
        weight = mask.to(torch.float32)
        loss, nll, lse = _run(compiled, 0, logits, targets, weight, epsilon)
        ctx.save_for_backward(logits, lse, targets, weight)
        ctx.epsilon, ctx.compiled = epsilon, compiled
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        logits, lse, targets, weight = ctx.saved_tensors
        args = (logits, lse, targets, weight, grad_loss.float(), grad_nll.float(), ctx.epsilon)
        return _run(ctx.compiled, 1, *args), None, None, None, None


__all__ = ["SmoothedLoss", "batch_loss", "label_smoothed_cross_entropy", "target_mask"]
