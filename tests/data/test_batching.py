"""aiayn_cli.data.batching (and tokenization.tokenize_split): cached tokenization, token-count batches, collation, accelerate."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pyarrow.compute as pc
import pytest
import torch
from corpora import make_pairs, write_text_split
from helpers import REPO_ROOT, cli_env

import aiayn_cli.data.tokenization as tokenization
from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration
from aiayn_cli.data.batching import Seq2SeqCollator, TokenBatchSampler, collate, token_batch_loader
from aiayn_cli.data.corpus import load_split
from aiayn_cli.data.spec import DataSpec
from aiayn_cli.data.tokenization import tokenize_split, train_tokenizer
from aiayn_cli.errors import AiaynError


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A synthetic corpus of 400 pairs, its tokenizer and its tokenized training split."""
    folder = tmp_path_factory.mktemp("small")
    write_text_split(folder / "data", "train", make_pairs(400, seed=11))
    train = load_split(DataSpec(data_dir=folder / "data", source_lang="en", target_lang="de"), "train")
    tokenizer = train_tokenizer(train, vocab_size=300, show_progress=False)
    return train, tokenizer, tokenize_split(train, tokenizer, cache_dir=folder / "cache")


def lengths(dataset) -> tuple[np.ndarray, np.ndarray]:
    return dataset.data.column("src_len").to_numpy(), dataset.data.column("tgt_len").to_numpy()


def padded_fraction(batches, src, tgt) -> float:
    real = sum(int(src[b].sum() + tgt[b].sum()) for b in batches)
    padded = sum(len(b) * int(src[b].max() + tgt[b].max()) for b in batches)
    return 1 - real / padded


# ---------------------------------------------------------------------------------------------
# tokenize_split
# ---------------------------------------------------------------------------------------------


def test_tokenize_split_gives_ids_ending_in_eos(tokenized_multi30k):
    data = tokenized_multi30k
    assert len(data) == 29000 and data.num_too_long == 0
    assert data.column_names == ["input_ids", "labels", "src_len", "tgt_len"]
    table = data.data
    for ids, length in (("input_ids", "src_len"), ("labels", "tgt_len")):
        assert pc.all(pc.equal(pc.list_value_length(table.column(ids)), table.column(length))).as_py()
        assert all(row[-1] == 2 and 2 not in row[:-1] and 3 not in row for row in table.column(ids).to_pylist())


def test_second_run_reuses_the_cache(tokenized_multi30k, bpe_multi30k, multi30k_dir, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("tokenized again instead of loading the cache")

    monkeypatch.setattr(tokenization, "_encode_pairs", must_not_run)
    train = load_split(DataSpec(data_dir=multi30k_dir, source_lang="en", target_lang="de"), "train")
    cache_dir = tokenized_multi30k.cache_files[0]["filename"].rsplit("/", 1)[0]
    again = tokenize_split(train, bpe_multi30k, cache_dir=cache_dir)
    assert again.cache_files == tokenized_multi30k.cache_files
    assert again[123] == tokenized_multi30k[123]


def test_cache_key_follows_tokenizer_and_max_length(small, tmp_path):
    train, tokenizer, tokenized = small
    other = train_tokenizer(train, vocab_size=320, show_progress=False)
    files = {
        tokenize_split(train, t, max_length=m, cache_dir=tmp_path).cache_files[0]["filename"]
        for t, m in ((tokenizer, None), (other, None), (tokenizer, 8))
    }
    assert len(files) == 3


def test_max_length_drops_long_pairs_and_num_proc_gives_the_same(small, tmp_path):
    train, tokenizer, tokenized = small
    src, tgt = lengths(tokenized)
    short = tokenize_split(train, tokenizer, max_length=8, cache_dir=tmp_path / "one")
    expected = int(((src > 8) | (tgt > 8)).sum())
    assert 0 < expected < len(train)
    assert short.num_too_long == expected and len(short) == len(train) - expected
    assert max(lengths(short)[0].max(), lengths(short)[1].max()) <= 8
    parallel = tokenize_split(train, tokenizer, max_length=8, num_proc=2, cache_dir=tmp_path / "two")
    assert parallel["input_ids"][:] == short["input_ids"][:] and parallel["labels"][:] == short["labels"][:]


# ---------------------------------------------------------------------------------------------
# TokenBatchSampler
# ---------------------------------------------------------------------------------------------


def test_batches_fit_max_tokens_with_little_padding(tokenized_multi30k):
    src, tgt = lengths(tokenized_multi30k)
    sampler = TokenBatchSampler(src, tgt, max_tokens=4096, seed=0)
    batches = list(sampler)
    assert len(batches) == len(sampler) == sampler.num_batches
    for batch in batches:  # padding included, on each side
        assert len(batch) * src[batch].max() <= 4096 and len(batch) * tgt[batch].max() <= 4096
    assert sorted(i for batch in batches for i in batch) == list(range(len(src)))
    token_padding = padded_fraction(batches, src, tgt)
    order = np.random.default_rng(0).permutation(len(src))
    random_padding = padded_fraction([order[i : i + 64] for i in range(0, len(order), 64)], src, tgt)
    print(f"padding at max-tokens 4096: {token_padding:.2%} (random batches of 64: {random_padding:.2%})")
    assert token_padding <= 0.05 and token_padding == pytest.approx(sampler.padding()["padding"])
    assert random_padding > 5 * token_padding


@pytest.mark.parametrize("num_replicas", [2, 3])
def test_processes_get_disjoint_equal_batches_covering_every_pair(tokenized_multi30k, num_replicas):
    src, tgt = lengths(tokenized_multi30k)
    for epoch in (0, 1):
        per_rank = []
        for rank in range(num_replicas):
            sampler = TokenBatchSampler(src, tgt, max_tokens=4096, seed=3, num_replicas=num_replicas, rank=rank)
            sampler.set_epoch(epoch)
            per_rank.append(list(sampler))
            assert len(per_rank[-1]) == len(sampler)
        assert len({len(batches) for batches in per_rank}) == 1
        seen = [i for batches in per_rank for batch in batches for i in batch]
        assert len(seen) == len(src) and sorted(seen) == list(range(len(src)))


def test_uneven_batch_counts_are_evened_by_splitting():
    # Seven pairs of 10 tokens, 20 tokens per batch: 4 batches (2+2+2+1) for 3 processes -> 6 batches.
    src = tgt = np.full(7, 10)
    samplers = [TokenBatchSampler(src, tgt, max_tokens=20, num_replicas=3, rank=r) for r in range(3)]
    batches = [list(s) for s in samplers]
    assert [len(b) for b in batches] == [2, 2, 2]
    assert sorted(i for b in batches for batch in b for i in batch) == list(range(7))
    capped = TokenBatchSampler(np.full(9, 3), np.full(9, 4), max_tokens=1000, max_sentences=2)
    assert max(len(batch) for batch in capped) == 2 and len(capped) == 5
    with pytest.raises(AiaynError, match="cannot feed 8 processes"):
        TokenBatchSampler(src, tgt, max_tokens=20, num_replicas=8, rank=0)
    with pytest.raises(AiaynError, match="max_tokens 5 is less than the longest sentence"):
        TokenBatchSampler(src, tgt, max_tokens=5)


def _greedy_reference(src, tgt, max_tokens, cap, seed):
    """The batches cut pair by pair, in Python: what the arrays and the bisection must reproduce."""
    longer = np.maximum(src, tgt)
    snake = np.where(longer % 2 == 0, src - tgt, tgt - src)
    ties = np.random.default_rng(seed).permutation(len(src))
    order = ties[np.lexsort((snake[ties], longer[ties]))]
    batches, start, width = [], 0, 0
    for position, length in enumerate(longer[order].tolist()):
        size, width = position - start + 1, max(width, length)
        if size > 1 and (size * width > max_tokens or size > cap):
            batches.append(order[start:position].tolist())
            start, width = position, length
    return batches + [order[start:].tolist()]


@pytest.mark.parametrize("trial", range(6))
def test_batches_are_those_of_the_greedy_cut(trial):
    rng = np.random.default_rng(trial)
    n = int(rng.integers(1, 4000))
    src, tgt = rng.integers(1, 90, n), rng.integers(1, 90, n)
    max_tokens, cap = int(rng.integers(90, 5000)), [None, int(rng.integers(1, 60))][trial % 2]
    sampler = TokenBatchSampler(src, tgt, max_tokens=max_tokens, seed=trial, max_sentences=cap)
    expected = _greedy_reference(src, tgt, max_tokens, cap or n, trial)
    assert [batch.tolist() for batch in sampler.batches] == expected
    assert sampler.order.dtype == np.int32 and len(sampler.bounds) == len(expected) + 1
    assert len(pickle.dumps(sampler.state_dict())) < 200  # resuming needs a few numbers


def test_epochs_shuffle_batches_from_the_seed(tokenized_multi30k):
    src, tgt = lengths(tokenized_multi30k)
    a, b = (TokenBatchSampler(src, tgt, max_tokens=4096, seed=7) for _ in range(2))
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    second = list(a)
    assert second != first and sorted(map(tuple, second)) == sorted(map(tuple, first))
    fixed = TokenBatchSampler(src, tgt, max_tokens=4096, shuffle=False)
    widths = [max(src[batch].max(), tgt[batch].max()) for batch in fixed]
    assert widths == sorted(widths)  # shortest first, without shuffling


@pytest.mark.parametrize("num_replicas", [1, 2])
def test_restarting_at_batch_k_yields_the_rest_of_the_epoch(tokenized_multi30k, num_replicas):
    src, tgt = lengths(tokenized_multi30k)

    def make():
        return TokenBatchSampler(
            src,
            tgt,
            max_tokens=2048,
            seed=5,
            num_replicas=num_replicas,
            rank=num_replicas - 1,
        )

    sampler = make()
    sampler.set_epoch(4)
    full = list(sampler)
    for k in (0, 1, 17, len(full) - 1, len(full)):
        resumed = make()
        resumed.set_epoch(4)
        resumed.set_start(k)
        assert len(resumed) == len(full) - k
        assert list(resumed) == full[k:]
        assert list(resumed) == full  # the next pass is whole again
    # Through a checkpoint.
    sampler.set_start(9)
    state = json.loads(json.dumps(sampler.state_dict()))
    restored = make()
    restored.load_state_dict(state)
    assert list(restored) == full[9:]


# ---------------------------------------------------------------------------------------------
# Collation, the model's loss, accelerate
# ---------------------------------------------------------------------------------------------


def test_collator_pads_and_the_model_takes_the_batch(small):
    _, tokenizer, tokenized = small
    rows = [tokenized[i] for i in (0, 1, 2)]
    batch = Seq2SeqCollator(pad_token_id=0)(rows)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    width = max(len(r["input_ids"]) for r in rows)
    for i, row in enumerate(rows):
        n, m = len(row["input_ids"]), len(row["labels"])
        assert batch["input_ids"][i, :n].tolist() == row["input_ids"] and (batch["input_ids"][i, n:] == 0).all()
        assert batch["attention_mask"][i].tolist() == [1] * n + [0] * (width - n)
        assert batch["labels"][i, :m].tolist() == row["labels"] and (batch["labels"][i, m:] == -100).all()
    assert collate(rows, 0)["input_ids"].equal(batch["input_ids"])

    config = AiaynConfig.from_preset("tiny", vocab_size=len(tokenizer))
    model = AiaynForConditionalGeneration(config).eval()
    with torch.no_grad():
        loss = model(**batch).loss
        # The padded batch's loss is the token-weighted mean of each pair's own loss.
        single = [model(**collate([row], 0)).loss for row in rows]
    weights = torch.tensor([len(r["labels"]) for r in rows], dtype=torch.float)
    assert loss.item() == pytest.approx((torch.stack(single) * weights).sum().item() / weights.sum().item(), rel=1e-5)


def test_loader_for_accelerate(small):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    _, tokenizer, tokenized = small
    accelerator = Accelerator()
    try:
        loader = token_batch_loader(
            tokenized, max_tokens=256, pad_token_id=tokenizer.pad_token_id, seed=1, accelerator=accelerator
        )
        sampler = loader.batch_sampler
        assert (sampler.rank, sampler.num_replicas) == (accelerator.process_index, accelerator.num_processes)
        model = accelerator.prepare(
            AiaynForConditionalGeneration(AiaynConfig.from_preset("tiny", vocab_size=len(tokenizer)))
        )
        seen = 0
        for step, batch in enumerate(loader):
            batch = {name: tensor.to(accelerator.device) for name, tensor in batch.items()}
            assert batch["input_ids"].numel() <= 256 and (batch["labels"] != -100).sum() <= 256
            seen += batch["input_ids"].size(0)
            if step == 0:
                assert torch.isfinite(model(**batch).loss)
        assert seen == len(tokenized) and step + 1 == len(loader)
    finally:
        AcceleratorState._reset_state(True)


TWO_PROCESSES = """
import json, os, sys
import numpy as np
from accelerate import Accelerator
from aiayn_cli.data.batching import TokenBatchSampler
accelerator = Accelerator()
assert accelerator.num_processes == 2
rng = np.random.default_rng(0)
src, tgt = rng.integers(2, 60, 5001), rng.integers(2, 60, 5001)
sampler = TokenBatchSampler(src, tgt, max_tokens=1000, seed=2, num_replicas=accelerator.num_processes,
                            rank=accelerator.process_index)
sampler.set_epoch(1)
with open(os.path.join(sys.argv[1], f"rank{accelerator.process_index}.json"), "w") as f:
    json.dump(list(sampler), f)
"""


@pytest.mark.slow
def test_two_real_processes_under_torchrun(tmp_path):
    script = tmp_path / "shard.py"
    script.write_text(TWO_PROCESSES)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(script),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=cli_env(ACCELERATE_USE_CPU="true"),
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) > 0
    seen = sorted(i for batches in ranks for batch in batches for i in batch)
    assert seen == list(range(5001))
