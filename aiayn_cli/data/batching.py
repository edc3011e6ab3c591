"""Tokenized splits and token-count batches (§5.1 of the paper).

"Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens." Two pieces do this, over the splits `tokenization.tokenize_split` gives (`input_ids`, `labels`,
`src_len`, `tgt_len`):

- `TokenBatchSampler`: batches of sentences of similar length that hold at most `max_tokens`
  tokens on each side, padding included: a batch of n pairs satisfies
  `n * max(src_len) <= max_tokens` and `n * max(tgt_len) <= max_tokens` (together:
  `n * max(max_src_len, max_tgt_len) <= max_tokens`, fairseq's rule). The batches are built once
  from the seed; each epoch shuffles their order; each process of a distributed run gets the same
  number of batches, disjoint, covering every pair exactly once per epoch; an epoch can resume at
  batch k.
- `Seq2SeqCollator`: pads a batch into `input_ids`, `attention_mask` and `labels` (-100 where
  padded), which `AiaynForConditionalGeneration(**batch)` takes directly.

Using it with `accelerate`: the sampler shards by itself, so the DataLoader must NOT go through
`accelerator.prepare` (that would shard the shards). Build it for this process and move each
batch to the device:

    sampler = TokenBatchSampler.from_dataset(train, max_tokens=25000, seed=seed,
                                             num_replicas=accelerator.num_processes,
                                             rank=accelerator.process_index)
    loader = DataLoader(train, batch_sampler=sampler, collate_fn=Seq2SeqCollator(tokenizer.pad_token_id))
    model, optimizer = accelerator.prepare(model, optimizer)
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)            # and sampler.set_start(k) to resume at batch k
        for batch in loader:
            batch = {name: tensor.to(accelerator.device) for name, tensor in batch.items()}
            loss = model(**batch).loss
            ...

`token_batch_loader(dataset, max_tokens, pad_token_id, accelerator=...)` does the first two steps.
`sampler.state_dict()` / `load_state_dict()` hold the epoch and the next batch, for checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import datasets
import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler
from tqdm.auto import tqdm

from ..errors import AiaynError


class TokenBatchSampler(Sampler[list[int]]):
    """Batches of indices with at most `max_tokens` tokens per side, padding included.

    Sentences are sorted by the longer side's length, then by `src_len - tgt_len` (snaking, so
    that consecutive length groups join smoothly), ties in an order drawn from `seed`; batches are
    cut greedily from that order. The batches are fixed for the sampler's life; `set_epoch` draws
    a new order of them from `seed + epoch`; process `rank` of `num_replicas` takes every
    `num_replicas`-th batch of that order. When the number of batches is not a multiple of
    `num_replicas`, the largest batches are halved until it is, so that every process gets
    `len(sampler)` batches and every pair appears exactly once per epoch.

    Args:
        src_lengths, tgt_lengths: tokens of each pair's source and target (`src_len`, `tgt_len`).
        max_tokens: the most tokens of one side in a batch, padding included (paper: ~25,000).
        shuffle: shuffle the order of the batches each epoch (otherwise shortest first).
        seed: seeds the tie order and each epoch's order; must be the same on every process.
        num_replicas, rank: the number of processes and this one's index
            (`accelerator.num_processes`, `accelerator.process_index`).
        max_sentences: at most this many pairs in a batch, whatever their length.
        start_batch: the batch of this process's epoch that the next iteration starts at.
        show_progress: a progress bar while the batches are cut.

    The batches are two numpy arrays, whatever the corpus' size: `order` (the pairs, batch after
    batch) and `bounds` (batch `b` is `order[bounds[b]:bounds[b + 1]]`); the state to resume is four
    numbers (`state_dict`).
    """

    def __init__(
        self,
        src_lengths,
        tgt_lengths,
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        max_sentences: int | None = None,
        start_batch: int = 0,
        show_progress: bool = False,
    ):
        self.src_lengths = np.asarray(src_lengths, dtype=np.int32)
        self.tgt_lengths = np.asarray(tgt_lengths, dtype=np.int32)
        if self.src_lengths.shape != self.tgt_lengths.shape or self.src_lengths.ndim != 1:
            raise ValueError("src_lengths and tgt_lengths must be 1-D and of the same length")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas={num_replicas}), got {rank}")
        if len(self.src_lengths) < num_replicas:
            raise AiaynError(f"{len(self.src_lengths)} sentence pairs cannot feed {num_replicas} processes")
        longest = int(max(self.src_lengths.max(), self.tgt_lengths.max()))
        if max_tokens < longest:
            raise AiaynError(
                f"{{max_tokens}} {max_tokens} is less than the longest sentence ({longest} tokens); raise it or drop long pairs with {{max_length}}",
                mentions=("max_tokens", "max_length"),
            )
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.shuffle, self.seed = shuffle, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch, self.start_batch = 0, 0
        self.order, self.bounds = self._build_batches(show_progress)
        self.set_start(start_batch)

    @classmethod
    def from_dataset(cls, dataset: datasets.Dataset, max_tokens: int, **kwargs) -> TokenBatchSampler:
        """A sampler over the `src_len` and `tgt_len` columns of a `tokenize_split` result."""
        table = dataset.flatten_indices().data if dataset._indices is not None else dataset.data
        return cls(table.column("src_len").to_numpy(), table.column("tgt_len").to_numpy(), max_tokens, **kwargs)

    def _build_batches(self, show_progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
        src, tgt = self.src_lengths, self.tgt_lengths
        longer = np.maximum(src, tgt)
        snake = np.where(longer % 2 == 0, src - tgt, tgt - src)
        ties = np.random.default_rng(self.seed).permutation(len(src))
        order = _sort(ties, longer, snake)  # by `longer`, then `snake`, then `ties`
        bounds = _cut(longer[order], self.max_tokens, self.max_sentences or len(order), show_progress)
        index_type = np.int32 if len(order) < 2**31 else np.int64
        return order.astype(index_type), _split_to_multiple(bounds, self.num_replicas)

    @property
    def batches(self) -> list[np.ndarray]:
        """Every batch, as arrays of indices, in the order they were cut (one array per batch: for small data)."""
        return np.split(self.order, self.bounds[1:-1])

    def set_epoch(self, epoch: int) -> None:
        """Use the batch order of `epoch` (the same on every process)."""
        self.epoch = epoch

    def set_start(self, batch: int) -> None:
        """Start the next iteration at batch `batch` of this process's epoch (to resume); later ones start at 0."""
        if not 0 <= batch <= self.num_batches:
            raise ValueError(f"start batch must be in [0, {self.num_batches}], got {batch}")
        self.start_batch = batch

    @property
    def num_batches(self) -> int:
        """Batches of one whole epoch for each process."""
        return (len(self.bounds) - 1) // self.num_replicas

    def _epoch_order(self, epoch: int) -> np.ndarray:
        """The batches (numbers) of this process in `epoch`, in the order they are served."""
        count = len(self.bounds) - 1
        order = np.random.default_rng([self.seed, epoch]).permutation(count) if self.shuffle else np.arange(count)
        return order[self.rank :: self.num_replicas]

    def _batch(self, number: int) -> list[int]:
        return self.order[self.bounds[number] : self.bounds[number + 1]].tolist()

    def epoch_batches(self, epoch: int | None = None) -> list[list[int]]:
        """This process's batches of `epoch` (default: the current one), from the first."""
        return [self._batch(b) for b in self._epoch_order(self.epoch if epoch is None else epoch)]

    def __iter__(self):
        start, self.start_batch = self.start_batch, 0
        for number in self._epoch_order(self.epoch)[start:]:
            yield self._batch(int(number))

    def __len__(self) -> int:
        """Batches the next iteration yields: `num_batches - start_batch`, equal on every process."""
        return self.num_batches - self.start_batch

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "start_batch": self.start_batch,
            "seed": self.seed,
            "num_replicas": self.num_replicas,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (
            state.get("seed", self.seed) != self.seed
            or state.get("num_replicas", self.num_replicas) != self.num_replicas
        ):
            raise AiaynError(
                "the saved batch order was made with another seed or number of processes; resume with the same ones"
            )
        self.set_epoch(state["epoch"])
        self.set_start(state["start_batch"])

    def padding(self) -> dict[str, float]:
        """Token counts of all batches (both sides, padded) and the fraction that is padding."""
        sizes = np.diff(self.bounds)
        tokens = padded = 0
        for lengths in (self.src_lengths[self.order], self.tgt_lengths[self.order]):
            padded += int((np.maximum.reduceat(lengths, self.bounds[:-1]) * sizes).sum())
            tokens += int(lengths.sum())
        return {"tokens": tokens, "padded_tokens": padded, "padding": 1 - tokens / padded}


def _sort(ties: np.ndarray, longer: np.ndarray, snake: np.ndarray) -> np.ndarray:
    """`ties` sorted (stably) by `longer`, then `snake`: two radix sorts on 16-bit keys where they fit
    (twice as fast as `np.lexsort` on millions of pairs, the same order)."""
    if longer.max(initial=0) < 2**16 and np.abs(snake).max(initial=0) < 2**15:
        by_snake = ties[np.argsort((snake + 2**15).astype(np.uint16)[ties], kind="stable")]
        return by_snake[np.argsort(longer.astype(np.uint16)[by_snake], kind="stable")]
    return ties[np.lexsort((snake[ties], longer[ties]))]


def _cut(lengths: np.ndarray, max_tokens: int, cap: int, show_progress: bool = False) -> np.ndarray:
    """Batch bounds over `lengths` (sorted, ascending), cut greedily: each batch is the longest run
    from its start whose size times its last (longest) length is at most `max_tokens`, and of at
    most `cap` pairs (at least one pair). Found by bisection: a Python step per batch, not per pair."""
    n, bounds, start = len(lengths), [0], 0
    with tqdm(total=n, desc="Batching", unit=" pairs", unit_scale=True, disable=None if show_progress else True) as bar:
        while start < n:
            low = start + 1
            high = max(low, min(n, start + cap, start + max_tokens // max(int(lengths[start]), 1)))
            while low < high:  # the largest end with (end - start) * lengths[end - 1] <= max_tokens
                middle = (low + high + 1) // 2
                if (middle - start) * int(lengths[middle - 1]) <= max_tokens:
                    low = middle
                else:
                    high = middle - 1
            bounds.append(low)
            bar.update(low - start)
            start = low
    return np.asarray(bounds, dtype=np.int64)


def _split_to_multiple(bounds: np.ndarray, multiple: int) -> np.ndarray:
    """Halve the largest batches until their number is a multiple of `multiple`."""
    while (len(bounds) - 1) % multiple:
        largest = int(np.argmax(np.diff(bounds)))  # the first of the largest
        half = (int(bounds[largest + 1] - bounds[largest]) + 1) // 2
        bounds = np.insert(bounds, largest + 1, bounds[largest] + half)
    return bounds


# ---------------------------------------------------------------------------------------------
# Collation
# ---------------------------------------------------------------------------------------------


@dataclass
class Seq2SeqCollator:
    """Pad a list of `tokenize_split` rows into `input_ids`, `attention_mask` and `labels`.

    `labels` are padded with -100 (ignored by the loss); the model builds its decoder inputs by
    shifting them right, so no `decoder_input_ids` are needed.
    """

    pad_token_id: int = 0
    label_pad_id: int = -100
    pad_to_multiple_of: int | None = None

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        input_ids = self._pad([row["input_ids"] for row in features], self.pad_token_id)
        lengths = torch.tensor([len(row["input_ids"]) for row in features])
        batch = {
            "input_ids": input_ids,
            "attention_mask": (torch.arange(input_ids.size(1)) < lengths[:, None]).long(),
        }  # (B, S)
        if "labels" in features[0]:
            batch["labels"] = self._pad([row["labels"] for row in features], self.label_pad_id)
        return batch

    def _pad(self, sequences: list, value: int) -> torch.Tensor:
        width = max(len(sequence) for sequence in sequences)
        if self.pad_to_multiple_of:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        out = torch.full((len(sequences), width), value, dtype=torch.long)
        for row, sequence in enumerate(sequences):
            out[row, : len(sequence)] = torch.as_tensor(sequence, dtype=torch.long)
        return out


def collate(batch: list[dict[str, Any]], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """`Seq2SeqCollator(pad_id)(batch)`."""
    return Seq2SeqCollator(pad_id)(batch)


def token_batch_loader(
    dataset: datasets.Dataset,
    max_tokens: int,
    pad_token_id: int = 0,
    *,
    shuffle: bool = True,
    seed: int = 0,
    accelerator=None,
    num_workers: int = 0,
    **sampler_kwargs,
) -> DataLoader:
    """A DataLoader of token-count batches for this process (not to be passed to `accelerator.prepare`).

    Its sampler is `loader.batch_sampler` (for `set_epoch`, `set_start`, `state_dict`).
    """
    num_replicas = accelerator.num_processes if accelerator is not None else 1
    rank = accelerator.process_index if accelerator is not None else 0
    sampler = TokenBatchSampler.from_dataset(
        dataset, max_tokens, shuffle=shuffle, seed=seed, num_replicas=num_replicas, rank=rank, **sampler_kwargs
    )
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=Seq2SeqCollator(pad_token_id),
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
    )


__all__ = [
    "Seq2SeqCollator",
    "TokenBatchSampler",
    "collate",
    "token_batch_loader",
]
