"""§4 Why Self-Attention, Table 1: one layer of each kind, timed and weighed on this machine.

Table 1 of the paper, for a sequence of n positions of width d:

    layer type                      complexity per layer   sequential operations   maximum path length
    self-attention                  O(n^2 d)               O(1)                    O(1)
    recurrent                       O(n d^2)               O(n)                    O(n)
    convolutional (kernel k)        O(k n d^2)             O(1)                    O(log_k(n))
    self-attention (restricted, r)  O(r n d)               O(1)                    O(n/r)

"self-attention layers are faster than recurrent layers when the sequence length n is smaller than
the representation dimensionality d". The self-attention layer is the model's `MultiHeadAttention`;
the restricted one is the same module's projections and the model's `scaled_dot_product_attention`,
applied to blocks of r queries with a band mask over their neighbours.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .common import TopicResult, markdown_table, pyplot, save_figure, write_markdown

D_MODEL, HEADS = 512, 8
LENGTHS = tuple(2**i for i in range(3, 13))  # n = 8 .. 4096
KERNEL, NEIGHBOURS = 3, 32  # the convolution's k, the restricted attention's r
THREADS = 1  # one core: per-layer costs not blurred by threads waiting on each other on a busy machine
TABLE_1 = [
    ["self-attention", "O(n^2 d)", "O(1)", "O(1)"],
    ["recurrent (LSTM)", "O(n d^2)", "O(n)", "O(n)"],
    [f"convolutional (k = {KERNEL})", "O(k n d^2)", "O(1)", "O(log_k(n))"],
    [f"self-attention restricted (r = {NEIGHBOURS})", "O(r n d)", "O(1)", "O(n/r)"],
]


def restricted_attention(attention: nn.Module, x: torch.Tensor, r: int) -> torch.Tensor:
    """Self-attention over the r + 1 nearest positions (|i - j| <= r/2), at O(r n d) cost: queries in
    blocks of r attend to their block and its two neighbours, through the model's attention function."""
    from ..model.modeling_aiayn import scaled_dot_product_attention

    batch, n, d_model = x.shape
    blocks = -(-n // r)
    query, key, value = attention._split_heads(attention.qkv_proj(F.pad(x, (0, 0, 0, blocks * r - n))), 3)
    heads, d_k = query.shape[1], query.shape[-1]  # (B, h, blocks * r, d_k)

    def windows(t):  # (B, h, blocks * r, d_k) -> (B * blocks, h, 3r, d_k): blocks b-1, b, b+1
        padded = F.pad(t, (0, 0, r, r)).unfold(2, 3 * r, r)  # (B, h, blocks, d_k, 3r)
        return padded.permute(0, 2, 1, 4, 3).reshape(batch * blocks, heads, 3 * r, d_k)

    queries = query.view(batch, heads, blocks, r, d_k).transpose(1, 2).reshape(batch * blocks, heads, r, d_k)
    offsets = torch.arange(3 * r)[None, :] - r - torch.arange(r)[:, None]  # key position - query position
    key_positions = torch.arange(blocks)[:, None] * r - r + torch.arange(3 * r)[None, :]  # (blocks, 3r)
    mask = (offsets.abs() <= r // 2)[None] & ((key_positions >= 0) & (key_positions < n))[:, None, :]
    out, _ = scaled_dot_product_attention(queries, windows(key), windows(value), mask[:, None].repeat(batch, 1, 1, 1))
    out = out.view(batch, blocks, heads, r, d_k).permute(0, 1, 3, 2, 4).reshape(batch, blocks * r, d_model)
    return attention.out_proj(out[:, :n])


def make_layers(d_model: int = D_MODEL, heads: int = HEADS, seed: int = 0) -> dict[str, Callable]:
    """One layer of each kind of Table 1, as functions of x `(1, n, d_model)`."""
    from ..model import AiaynConfig
    from ..model.modeling_aiayn import MultiHeadAttention

    torch.manual_seed(seed)
    config = AiaynConfig.from_preset("base", d_model=d_model, num_heads=heads, d_ff=4 * d_model, vocab_size=8)
    attention = MultiHeadAttention(config, self_attention=True).eval()
    lstm = nn.LSTM(d_model, d_model, batch_first=True).eval()
    conv = nn.Conv1d(d_model, d_model, KERNEL, padding=KERNEL // 2).eval()
    return {
        "self-attention": lambda x: attention(x)[0],
        "recurrent (LSTM)": lambda x: lstm(x)[0],
        f"convolution (k = {KERNEL})": lambda x: conv(x.transpose(1, 2)).transpose(1, 2),
        f"restricted self-attention (r = {NEIGHBOURS})": lambda x: restricted_attention(attention, x, NEIGHBOURS),
    }


def peak_activation_bytes(function: Callable, x: torch.Tensor) -> int:
    """The most bytes of tensors that one call holds at once, counting the tensors it allocates (as
    PyTorch's dispatcher sees them: a fused kernel's internal scratch space is not counted)."""
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class PeakMemory(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live, self.known, self.current, self.peak = [], set(), 0, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            alive = []
            for ref, key, size in self.live:  # storages freed since the last operation
                if ref.expired():
                    self.current -= size
                    self.known.discard(key)
                else:
                    alive.append((ref, key, size))
            self.live = alive
            for tensor in tree_flatten(out)[0]:
                if isinstance(tensor, torch.Tensor):
                    storage = tensor.untyped_storage()
                    if storage.data_ptr() not in self.known and storage.nbytes() > 0:
                        self.known.add(storage.data_ptr())
                        self.live.append((StorageWeakRef(storage), storage.data_ptr(), storage.nbytes()))
                        self.current += storage.nbytes()
            self.peak = max(self.peak, self.current)
            return out

    with torch.inference_mode(), PeakMemory() as meter:
        function(x)
    return meter.peak


def seconds_per_call(function: Callable, x: torch.Tensor, min_seconds: float = 0.01) -> float:
    """Wall time of one call: calls repeated until `min_seconds` have passed, averaged."""
    calls, start = 0, time.perf_counter()
    with torch.inference_mode():
        while True:
            function(x)
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                return elapsed / calls


def measure(
    lengths=LENGTHS, d_model: int = D_MODEL, heads: int = HEADS, threads: int = THREADS, rounds: int = 3
) -> dict[str, dict[int, dict[str, float]]]:
    """{layer: {n: {"seconds", "bytes"}}}: per n, the layers take turns (`rounds` times below n = 1024,
    once above, where a call is long), and each keeps its fastest time; the first call of each, not
    timed, measures the memory."""
    layers = make_layers(d_model, heads)
    results: dict[str, dict[int, dict[str, float]]] = {name: {} for name in layers}
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for n in lengths:
            x = torch.randn(1, n, d_model, generator=torch.Generator().manual_seed(n))
            for name, layer in layers.items():
                results[name][n] = {"bytes": peak_activation_bytes(layer, x), "seconds": math.inf}
            for _ in range(rounds if n < 1024 else 1):
                for name, layer in layers.items():
                    seconds = seconds_per_call(layer, x)
                    results[name][n]["seconds"] = min(results[name][n]["seconds"], seconds)
    finally:
        torch.set_num_threads(previous)
    return results


def crossover(results: dict, faster: str = "self-attention", slower: str = "recurrent (LSTM)") -> float | None:
    """The n (log-interpolated) where `faster` stops being faster than `slower`; None if it never does."""
    lengths = sorted(results[faster])
    ratios = [results[faster][n]["seconds"] / results[slower][n]["seconds"] for n in lengths]
    for (n1, r1), (n2, r2) in zip(zip(lengths, ratios), zip(lengths[1:], ratios[1:])):
        if r1 < 1 <= r2:
            return math.exp(
                math.log(n1) + (math.log(n2) - math.log(n1)) * -math.log(r1) / (math.log(r2) - math.log(r1))
            )
    return None


def run(output_dir: Path, **_) -> TopicResult:
    result = TopicResult("complexity", output_dir)
    results = measure()
    cross = crossover(results)
    result.numbers.update(results=results, crossover=cross)
    result.figures.append(_plot(pyplot(), results, cross, output_dir))
    first, last = LENGTHS[0], LENGTHS[-1]
    attention, rnn = results["self-attention"], results["recurrent (LSTM)"]
    where = f"n = {cross:.0f}" if cross is not None else f"no crossover between n = {first} and {last}"
    result.notes += [
        f"measured crossover: self-attention stops being faster than the LSTM at {where} (d = {D_MODEL}; "
        f"the paper: when n exceeds d)",
        f"self-attention / LSTM time: {attention[32]['seconds'] / rnn[32]['seconds']:.2f} at n = 32, "
        f"{attention[last]['seconds'] / rnn[last]['seconds']:.2f} at n = {last}",
        "on log axes the slopes are the exponents of n: about 2 for self-attention at large n, 1 for the "
        "others; the LSTM's n steps run one after the other, the others' positions all at once",
        "memory: the fused attention kernel never holds the n x n weights, so its activations grow ~linearly; "
        "the n^2 is in the compute",
    ]
    rows = [
        [*row, f"{results[name][last]['seconds'] * 1e3:.1f}", f"{results[name][last]['bytes'] / 2**20:.1f}"]
        for row, name in zip(TABLE_1, results)
    ]
    header = ["layer type", "complexity per layer", "sequential operations", "maximum path length"]
    header += [f"measured ms, n = {last}", f"peak MiB, n = {last}"]
    timings = [[n, *(f"{results[name][n]['seconds'] * 1e3:.3f}" for name in results)] for n in LENGTHS]
    sections = [
        f"Table 1 beside one layer of each, d = {D_MODEL}, measured with {THREADS} thread(s).",
        markdown_table(header, rows),
        markdown_table(["n", *(f"{name} (ms)" for name in results)], timings),
        f"Measured crossover (self-attention slower than the LSTM from): {where}.",
    ]
    write_markdown(result, "Self-attention against recurrence and convolution (§4, Table 1)", sections)
    return result


def _plot(plt, results: dict, cross: float | None, output_dir: Path) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    formulas = dict(zip(results, ("O(n^2 d)", "O(n d^2), n sequential steps", "O(k n d^2)", "O(r n d)")))
    for name, styles in zip(results, ("o-", "s-", "^-", "d-")):
        lengths = sorted(results[name])
        left.loglog(
            lengths, [results[name][n]["seconds"] * 1e3 for n in lengths], styles, label=f"{name}: {formulas[name]}"
        )
        right.loglog(lengths, [results[name][n]["bytes"] / 2**20 for n in lengths], styles, label=name)
    for ax in (left, right):
        ax.axvline(D_MODEL, color="grey", linestyle=":", label=f"n = d = {D_MODEL} (the paper's crossover)")
        ax.set_xticks(LENGTHS, [str(n) for n in LENGTHS], rotation=45)
        ax.set_xlabel("sequence length n (positions)")
    if cross is not None:
        left.axvline(cross, color="tab:red", linestyle="--", label=f"measured crossover n = {cross:.0f}")
    left.set(ylabel="time per layer (ms, one forward pass)")
    left.set_title(f"Time of one layer, d = {D_MODEL}, {THREADS} CPU thread", fontsize=10)
    right.set(ylabel="peak activation memory (MiB)")
    right.set_title("Peak memory of the tensors one forward pass allocates", fontsize=10)
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.suptitle("Table 1 measured: self-attention against a recurrent layer, a convolution and local attention")
    fig.tight_layout()
    return save_figure(fig, output_dir / "complexity.png")
