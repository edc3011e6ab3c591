"""How `decode()` uses a CPU's threads: a large batch split into parts, each decoded on one thread of
its own, and small steps kept on one thread.

A sentence's hypotheses do not depend on the sentences decoded beside it, so a split gives the same
result as one part; the searches themselves (`search.py`) know nothing of threads. On other devices
than CPUs nothing here changes anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import torch

from .defaults import DecodingOptions

Result = TypeVar("Result")

# A decoding step's matrix products are (rows, d_model) times a weight: up to this many elements in
# the rows, splitting them over CPU threads costs more in synchronisation than it saves on CPUs with
# AVX-512 and no AMX; above it the threads share each operation (`python benchmarks/bench_decode.py
# --threads 1 2` measures both; its results files `bench_decode.*.threads.json`, docs/engines.md).
ONE_THREAD_MAX_ELEMENTS = 2048

# Where two threads win from one sentence on, a step being bound by reading its weights (two threads
# read them faster): CPUs whose ATen kernels are AVX2 (no AVX-512), and CPUs with AMX
# (`bench_decode.intel-xeon-amx.threads.json`, `bench_decode.intel-xeon-amx-as-avx2.threads.json`).
ONE_THREAD_MAX_ELEMENTS_BY_KIND = {"AVX2": 0, "AMX": 0}

# Where every thread gets at least this many rows, a batch is split over the threads (`parallel_parts`).
SPLIT_MIN_ROWS = 64


def one_thread_max_elements() -> int:
    """The most row elements (rows x d_model) of a step decoded on one CPU thread, for this CPU's kind:
    its ATen kernels (`torch.backends.cpu.get_cpu_capability()`), or AMX where it has AVX-512 and AMX."""
    kind = torch.backends.cpu.get_cpu_capability()
    if kind != "AVX2" and torch.cpu._is_amx_tile_supported():
        kind = "AMX"
    return ONE_THREAD_MAX_ELEMENTS_BY_KIND.get(kind, ONE_THREAD_MAX_ELEMENTS)


@contextmanager
def cpu_threads_for(elements: int, device: torch.device) -> Iterator[None]:
    """Decode on one CPU thread where a step's rows hold at most `one_thread_max_elements()` values
    (rows x d_model), on PyTorch's thread count (`torch.set_num_threads`, the most used) elsewhere."""
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1 or elements > one_thread_max_elements():
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def parallel_parts(sentences: int, rows_per_sentence: int, options: DecodingOptions, device: torch.device) -> int:
    """Into how many parts `decode()` splits a batch of `sentences`, each part decoded on a CPU thread
    of its own: one part per thread of PyTorch's count where each gets at least `SPLIT_MIN_ROWS` rows
    (sentences x beams), else 1 (the threads share each operation, or one thread decodes).

    Parts share no work: each thread runs every operation of its part alone, without waiting for the
    other threads at every operation of a step, but each reads every weight itself, which costs where
    the rows are few (`bench_decode.py` measures both against CTranslate2's `inter_threads`). Not for
    sampling: its random numbers would then depend on the split (and so on the thread count)."""
    threads = torch.get_num_threads()
    if device.type != "cpu" or options.do_sample or sentences * rows_per_sentence < SPLIT_MIN_ROWS * threads:
        return 1
    return min(threads, sentences)


def decode_in_parts(
    decode_part: Callable[[torch.Tensor, torch.Tensor | None, list[int]], list[Result]],
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    max_lens: list[int],
    parts: int,
) -> list[Result]:
    """`decode_part(input_ids, attention_mask, max_lens)` over the batch: on the calling thread for one
    part, else on `parts` consecutive slices of the sentences (each cut to its longest source), each
    on one CPU thread in a worker of its own; the results in the batch's order. PyTorch's thread count
    comes back, errors included (a worker's error reaches the caller)."""
    if parts == 1:
        return decode_part(input_ids, attention_mask, max_lens)
    lengths = attention_mask.sum(-1).tolist() if attention_mask is not None else None
    jobs = []
    for sentences in torch.arange(len(max_lens)).tensor_split(parts):
        first, last = int(sentences[0]), int(sentences[-1]) + 1
        width = max(lengths[first:last]) if lengths is not None else input_ids.size(1)
        mask = attention_mask[first:last, :width] if attention_mask is not None else None
        jobs.append((input_ids[first:last, :width], mask, max_lens[first:last]))
    threads = torch.get_num_threads()
    try:
        with ThreadPoolExecutor(parts, thread_name_prefix="aiayn-decode") as pool:
            futures = [pool.submit(_on_one_thread, decode_part, *job) for job in jobs]
            return [result for future in futures for result in future.result()]
    finally:
        torch.set_num_threads(threads)  # the workers' calls set the process-wide count to 1


def _on_one_thread(decode_part, input_ids, attention_mask, max_lens) -> list:
    """A worker of `decode_in_parts`: its part of the batch on this thread alone (OpenMP's and MKL's
    thread counts are per thread; inference mode is too)."""
    torch.set_num_threads(1)
    with torch.inference_mode():
        return decode_part(input_ids, attention_mask, max_lens)


__all__ = [
    "ONE_THREAD_MAX_ELEMENTS",
    "ONE_THREAD_MAX_ELEMENTS_BY_KIND",
    "SPLIT_MIN_ROWS",
    "cpu_threads_for",
    "decode_in_parts",
    "one_thread_max_elements",
    "parallel_parts",
]
