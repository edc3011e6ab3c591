"""Training-step and beam-search throughput of aiayn's model next to HF MarianMTModel, in one run.

Both models get the same dimensions and the paper's architecture (ReLU, post-LN, sinusoidal
positions, sqrt(d_model)-scaled embeddings tied three ways), the same batch, the same thread
count, and both decode through `generate()`. Runs alternate between the two models and the
median of the repeats is reported, so the ratio holds up on a busy machine.

    python benchmarks/bench_model.py                      # small and base, 2 threads
    python benchmarks/bench_model.py --dims small --repeats 7 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import MarianMTModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration
from aiayn_cli.model.configuration_aiayn import PRESETS
from benchmarks import common


def build_pair(dims: str, vocab_size: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    ours = AiaynForConditionalGeneration(AiaynConfig.from_preset(dims, vocab_size=vocab_size))
    marian = MarianMTModel(
        common.marian_config(
            dims,
            vocab_size,
            dropout=PRESETS[dims]["dropout"],
            max_position_embeddings=1024,
            pad_token_id=0,
            eos_token_id=2,
            bos_token_id=1,
            decoder_start_token_id=1,
            forced_eos_token_id=None,
        )
    )
    return ours, marian


def make_batch(batch_size: int, src_len: int, tgt_len: int, vocab_size: int, seed: int = 0):
    """A batch with realistic length spread: lengths uniform in [len/2, len], right-padded."""
    g = torch.Generator().manual_seed(seed)

    def side(max_len):
        lengths = torch.randint(max_len // 2, max_len + 1, (batch_size,), generator=g)
        ids = torch.randint(4, vocab_size, (batch_size, max_len), generator=g)
        positions = torch.arange(max_len)[None, :]
        ids = ids.masked_fill(positions >= lengths[:, None], 0)
        ids[torch.arange(batch_size), lengths - 1] = 2
        return ids

    src, labels = side(src_len), side(tgt_len)
    return {"input_ids": src, "attention_mask": (src != 0).long(), "labels": labels.masked_fill(labels == 0, -100)}


def time_training(model, batch, steps: int) -> float:
    """Seconds for `steps` optimizer steps (forward, backward, Adam) on the same batch."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    start = time.perf_counter()
    for _ in range(steps):
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start


def time_decoding(model, batch, new_tokens: int) -> float:
    """Seconds for beam-4 `generate()` of exactly `new_tokens` tokens per sentence (eos suppressed)."""
    model.eval()
    with torch.inference_mode():
        start = time.perf_counter()
        model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            num_beams=4,
            do_sample=False,
            min_new_tokens=new_tokens,
            max_new_tokens=new_tokens,
            length_penalty=1.0,
            early_stopping=True,
        )
        return time.perf_counter() - start


def median_ratio(run, ours, marian, repeats: int) -> tuple[float, float]:
    """Median seconds of ours and of Marian, alternating, after one warm-up run each."""
    run(ours), run(marian)
    times = {"ours": [], "marian": []}
    for _ in range(repeats):
        times["ours"].append(run(ours))
        times["marian"].append(run(marian))
    return statistics.median(times["ours"]), statistics.median(times["marian"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dims", default="small,base", help="comma-separated presets (small, base, big, tiny)")
    parser.add_argument("--vocab-size", type=int, default=10000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--src-len", type=int, default=24)
    parser.add_argument("--tgt-len", type=int, default=26)
    parser.add_argument("--train-steps", type=int, default=3)
    parser.add_argument("--decode-batch-size", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(common.machine_line())
    print(f"threads={args.threads} vocab={args.vocab_size} torch={torch.__version__}")
    header = f"{'dims':<6} {'measure':<22} {'aiayn tok/s':>12} {'Marian tok/s':>13} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for dims in args.dims.split(","):
        ours, marian = build_pair(dims, args.vocab_size)
        train_batch = make_batch(args.batch_size, args.src_len, args.tgt_len, args.vocab_size)
        tokens = int((train_batch["labels"] != -100).sum()) * args.train_steps
        t_ours, t_marian = median_ratio(
            lambda m: time_training(m, train_batch, args.train_steps), ours, marian, args.repeats
        )
        print(
            f"{dims:<6} {'train (target tokens)':<22} {tokens / t_ours:>12.0f} {tokens / t_marian:>13.0f} "
            f"{t_marian / t_ours:>6.2f}x"
        )
        decode_batch = make_batch(args.decode_batch_size, args.src_len, args.tgt_len, args.vocab_size, seed=1)
        tokens = args.decode_batch_size * args.new_tokens
        t_ours, t_marian = median_ratio(
            lambda m: time_decoding(m, decode_batch, args.new_tokens), ours, marian, args.repeats
        )
        print(
            f"{dims:<6} {'beam-4 generate()':<22} {tokens / t_ours:>12.0f} {tokens / t_marian:>13.0f} "
            f"{t_marian / t_ours:>6.2f}x"
        )


if __name__ == "__main__":
    main()
