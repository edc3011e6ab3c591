"""The model learns: a `tiny` Transformer masters sequence reversal within a fixed number of steps."""

from __future__ import annotations

import time

import pytest
import torch

from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration

SPECIALS, SYMBOLS = 4, 16  # <pad> <s> </s> <unk>, then the alphabet
# The budget is optimizer steps, not time, so that the outcome does not depend on the CPU: the run
# below reaches 98% after 300 steps (about 30 CPU-seconds on one thread of a 2-core AMD EPYC).
MAX_STEPS = 1500


def reversal_batch(generator: torch.Generator, size: int, min_len: int = 3, max_len: int = 10):
    """Random symbol strings (source) and their reversals (target), each ending in </s>, right-padded."""
    lengths = torch.randint(min_len, max_len + 1, (size,), generator=generator)
    src = torch.zeros(size, max_len + 1, dtype=torch.long)
    tgt = torch.zeros(size, max_len + 1, dtype=torch.long)
    for row, n in enumerate(lengths.tolist()):
        symbols = torch.randint(SPECIALS, SPECIALS + SYMBOLS, (n,), generator=generator)
        src[row, :n], src[row, n] = symbols, 2
        tgt[row, :n], tgt[row, n] = symbols.flip(0), 2
    return src, (src != 0).long(), tgt


def exact_match(model, src, mask, tgt) -> float:
    model.eval()
    with torch.no_grad():
        out = model.generate(src, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=tgt.size(1) + 1)
    model.train()
    hits = 0
    for hyp, ref in zip(out[:, 1:].tolist(), tgt.tolist()):
        hyp = hyp[: hyp.index(2) + 1] if 2 in hyp else hyp
        hits += hyp == ref[: ref.index(2) + 1]
    return hits / len(tgt)


@pytest.mark.slow
def test_tiny_model_learns_to_reverse():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_and_check()
    finally:
        torch.set_num_threads(threads)


def train_and_check():
    torch.manual_seed(0)
    config = AiaynConfig.from_preset("tiny", vocab_size=SPECIALS + SYMBOLS, dropout=0.0)
    model = AiaynForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.98), eps=1e-9)
    warmup = 200
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    # Held-out strings of 6+ symbols: 16^6 possibilities, so training almost never sees one of them.
    held_out = reversal_batch(torch.Generator().manual_seed(1234), 300, min_len=6)
    train_gen = torch.Generator().manual_seed(0)

    accuracy, step, start = 0.0, 0, time.process_time()
    while step < MAX_STEPS:
        src, mask, tgt = reversal_batch(train_gen, 128)
        loss = model(input_ids=src, attention_mask=mask, labels=tgt).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        step += 1
        if step % 150 == 0:
            accuracy = exact_match(model, *held_out)
            if accuracy >= 0.98:
                break
    elapsed = time.process_time() - start
    accuracy = exact_match(model, *held_out)
    print(f"reversal: {accuracy:.1%} exact match after {step} steps, {elapsed:.1f} CPU s")
    assert accuracy >= 0.95, f"{accuracy:.1%} exact match after {step} steps ({elapsed:.1f} CPU s)"
