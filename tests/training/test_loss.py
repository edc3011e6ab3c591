"""Label-smoothed cross-entropy (§5.4) against its formula and PyTorch's implementation."""

import pytest
import torch
import torch.nn.functional as F

from aiayn_cli.training.loss import label_smoothed_cross_entropy


def _batch(vocab=11):
    torch.manual_seed(3)
    logits = torch.randn(3, 5, vocab, dtype=torch.float64)
    labels = torch.randint(4, vocab, (3, 5))
    labels[0, 3:] = -100  # padding as the collator writes it
    labels[1, 4] = 0  # padding as the pad id
    return logits, labels


def test_matches_the_formula_by_hand():
    logits, labels = _batch()
    eps, vocab = 0.1, logits.size(-1)
    out = label_smoothed_cross_entropy(logits, labels, epsilon=eps, pad_token_id=0)
    loss = nll = 0.0
    count = 0
    for b in range(labels.size(0)):
        for t in range(labels.size(1)):
            y = int(labels[b, t])
            if y in (-100, 0):
                continue
            logp = torch.log_softmax(logits[b, t], dim=-1)
            # q = (1 - eps) * onehot(y) + eps / V;  loss = -sum_k q_k log p_k
            q = torch.full((vocab,), eps / vocab, dtype=torch.float64)
            q[y] += 1 - eps
            loss += float(-(q * logp).sum())
            nll += float(-logp[y])
            count += 1
    assert int(out.ntokens) == count == 12
    assert float(out.loss) == pytest.approx(loss, rel=1e-6)
    assert float(out.nll) == pytest.approx(nll, rel=1e-6)


def test_equals_torch_label_smoothing_and_plain_nll():
    logits, labels = _batch(vocab=50)
    targets = labels.masked_fill(labels == 0, -100)
    out = label_smoothed_cross_entropy(logits, labels, epsilon=0.1)
    ref = F.cross_entropy(
        logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100, reduction="sum", label_smoothing=0.1
    )
    assert float(out.loss) == pytest.approx(float(ref), rel=1e-5)
    plain = label_smoothed_cross_entropy(logits, labels, epsilon=0.0)
    ref_nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100, reduction="sum")
    assert float(plain.loss) == pytest.approx(float(ref_nll), rel=1e-5)
    assert float(plain.nll) == pytest.approx(float(ref_nll), rel=1e-5)


def test_gradients_flow_and_smoothing_raises_the_floor():
    logits, labels = _batch()
    logits = logits.float().requires_grad_()
    out = label_smoothed_cross_entropy(logits, labels, epsilon=0.1)
    out.loss.backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0
    # padded positions get no gradient
    assert logits.grad[0, 3:].abs().sum() == 0
    # a perfectly confident correct prediction has zero nll but a positive smoothed loss
    confident = torch.full((1, 1, 6), -30.0)
    confident[0, 0, 4] = 30.0
    out = label_smoothed_cross_entropy(confident, torch.tensor([[4]]), epsilon=0.1)
    assert float(out.nll) < 1e-6 < float(out.loss)


def _autograd_reference(logits, labels, eps, pad_token_id=0):
    """The formula through autograd: log_softmax, gather and sum."""
    mask = (labels != -100) & (labels != pad_token_id)
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    nll = -lprobs.gather(-1, labels.masked_fill(~mask, 0)[..., None]).squeeze(-1)
    loss = ((1 - eps) * nll - (eps / logits.size(-1)) * lprobs.sum(-1)) * mask
    return loss.sum(), (nll * mask).sum()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradients_equal_autograd_through_the_formula(eps, compiled):
    logits, labels = _batch(vocab=37)
    logits = logits.float()
    mine = logits.clone().requires_grad_()
    ref = logits.clone().requires_grad_()
    out = label_smoothed_cross_entropy(mine, labels, epsilon=eps, compiled=compiled)
    loss, nll = _autograd_reference(ref, labels, eps)
    # both outputs carry gradient (as when the nll is part of an objective), with different weights
    (0.7 * out.loss + 0.3 * out.nll).backward()
    (0.7 * loss + 0.3 * nll).backward()
    assert float(out.loss.detach()) == pytest.approx(float(loss.detach()), rel=1e-6)
    assert torch.allclose(mine.grad, ref.grad, atol=1e-6)
    assert mine.grad[0, 3:].abs().sum() == 0 and mine.grad[1, 4].abs().sum() == 0  # padding: no gradient


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_bf16_scores_get_a_bf16_gradient_read_in_float32(compiled):
    logits, labels = _batch(vocab=37)
    mine = logits.bfloat16().requires_grad_()
    ref = logits.bfloat16().float().requires_grad_()
    label_smoothed_cross_entropy(mine, labels, epsilon=0.1, compiled=compiled).loss.backward()
    _autograd_reference(ref, labels, 0.1)[0].backward()
    assert mine.grad.dtype == torch.bfloat16
    assert torch.allclose(mine.grad.float(), ref.grad, atol=1e-2)


def test_the_compiled_loss_keeps_its_numbers_as_the_shapes_change():
    # one graph for every batch shape (dynamic shapes): each shape's numbers, eager and compiled
    for batch, length, vocab in [(3, 5, 37), (7, 2, 37), (2, 9, 101)]:
        torch.manual_seed(batch)
        logits = torch.randn(batch, length, vocab)
        labels = torch.randint(1, vocab, (batch, length))
        labels[0, -1] = 0
        grads = []
        for compiled in (False, True):
            scores = logits.clone().requires_grad_()
            out = label_smoothed_cross_entropy(scores, labels, epsilon=0.1, compiled=compiled)
            (out.loss + 0.5 * out.nll).backward()
            grads.append((float(out.loss.detach()), float(out.nll.detach()), scores.grad))
        (loss_e, nll_e, grad_e), (loss_c, nll_c, grad_c) = grads
        assert loss_c == pytest.approx(loss_e, rel=1e-5) and nll_c == pytest.approx(nll_e, rel=1e-5)
        assert torch.allclose(grad_c, grad_e, atol=1e-6)
        assert grad_c[0, -1].abs().sum() == 0  # padding: no gradient


def test_where_the_loss_cannot_compile_it_warns_once_and_computes_it_eagerly(monkeypatch):
    import aiayn_cli.training.loss as loss_module

    def no_compiler(fn, **kwargs):
        def fails(*args):
            raise torch._dynamo.exc.BackendCompilerFailed(fn, RuntimeError("No working C++ compiler found"), None)

        return fails

    monkeypatch.setattr(loss_module, "_PASSES", loss_module._Passes())
    monkeypatch.setattr(loss_module.torch, "compile", no_compiler)
    logits, labels = _batch(vocab=37)
    mine, ref = logits.float().requires_grad_(), logits.float().requires_grad_()
    with pytest.warns(UserWarning, match="the compiled loss is not available here") as caught:
        out = label_smoothed_cross_entropy(mine, labels, epsilon=0.1, compiled=True)
        out.loss.backward()
    assert len(caught) == 1
    loss, _ = _autograd_reference(ref, labels, 0.1)
    loss.backward()
    assert float(out.loss.detach()) == pytest.approx(float(loss.detach()), rel=1e-6)
    assert torch.allclose(mine.grad, ref.grad, atol=1e-6)


def test_batch_loss_is_the_models_own_cross_entropy_without_smoothing():
    # the one loss of training and validation (shift, forward without cache, smoothed loss) agrees with
    # the model's `labels -> loss` (mean cross-entropy over the non-pad targets) where eps is 0; float32
    from helpers import tiny_model

    from aiayn_cli.training.loss import batch_loss

    model = tiny_model()
    torch.manual_seed(1)
    labels = torch.randint(4, 72, (3, 6))
    labels[0, 4:] = 0  # padding
    batch = {"input_ids": torch.randint(4, 72, (3, 5)), "attention_mask": torch.ones(3, 5, dtype=torch.long)}
    batch["attention_mask"][1, 3:] = 0
    batch["labels"] = labels
    with torch.no_grad():
        out = batch_loss(model, batch, model.config, epsilon=0.0)
        smoothed = batch_loss(model, batch, model.config, epsilon=0.1)
        own = model(**batch).loss
    assert int(out.ntokens) == 16
    assert float(out.loss / out.ntokens) == pytest.approx(float(own), rel=1e-5)
    assert float(out.nll) == pytest.approx(float(out.loss), rel=1e-6)
    assert float(smoothed.nll) == pytest.approx(float(out.nll), rel=1e-6) and float(smoothed.loss) > float(out.loss)
