"""The model's decoder one target position at a time, for `aiayn_cli.decoding.search`'s searches.

The maths is the model's: `IncrementalDecoder` calls the model's own `Encoder` and `Decoder`
modules (attention, the sub-layer connections, the feed-forward networks, masks, positions), as
fairseq's `SequenceGenerator` calls `model.forward_decoder(..., incremental_state)`. What this
module adds is only how the work is laid out:

* `PreparedModel`: a copy of the model's modules, sharing its parameters, where the leaf modules
  that run many times a step are replaced (`register_module`) by prepared ones computing the same
  thing: every linear map prepacked for oneDNN on CPUs (`Projection`; or int8 weights,
  `dtype="int8"`), LayerNorm on its parameters (`LayerNorm`), dropout as the identity (eval mode).
  The prepared leaves are called straight, without `nn.Module.__call__`'s hook checks; the modules
  around them are the model's classes, called as modules.
* `DecodingState`: the cache the model's attention reads and writes. The encoder runs once per
  batch; the encoder-decoder keys and values are computed once per sentence and shared by its beams
  (the beams of a sentence are the queries of one attention call); the self-attention keys and
  values live in preallocated tensors, written in place. At a beam step a hypothesis's cache stays in
  its slot for the first row that continues it and is copied for each further one
  (`IncrementalDecoder._keep_slots`, on CPUs: `CACHE_SLOT_DEVICES`); where the rows change otherwise,
  and at every step on other devices, one `index_select` for all layers moves them into place, and the rows of finished sentences are dropped, so that the batch
  shrinks as sentences finish.
"""

from __future__ import annotations

import copy
import itertools
import math
import threading
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..model.configuration_aiayn import AiaynConfig
from ..model.modeling_aiayn import AiaynForConditionalGeneration, PositionwiseFeedForward, padding_mask
from ..precision import onednn_amx

# The fields of `AiaynConfig` that the fast decoder does not handle: none. Every field reaches it
# through the model's own modules, which read them, and the equivalence tests (tests/decoding/test_decoding.py)
# switch each one. A field added to the config fails the contract test there, by name, until those
# tests switch it or it is listed here (then `PreparedModel` refuses a model that sets it).
UNSUPPORTED_CONFIG_FIELDS: frozenset[str] = frozenset()

PROJECTION_DTYPES = ("float", "int8")

# The devices on which a beam step keeps each row's cache in its slot and copies only the rows continued
# more than once (`IncrementalDecoder._keep_slots`); elsewhere one `index_select` moves every row. On a
# CPU the copies are fewer bytes; on a GPU their many small copies and the host's bookkeeping cost more
# than the one gather (`benchmarks/bench_decode.py --mode gpu --cache-paths` times both; CHANGELOG).
CACHE_SLOT_DEVICES = frozenset({"cpu"})

# A float32 linear map whose weight has at most `SMALL_WEIGHT` elements, called on at most `FEW_ROWS`
# rows, runs faster as the BLAS GEMM on the weight stored transposed than as oneDNN's prepacked kernel,
# whose fixed cost per call outweighs its speed there (`benchmarks/bench_gemm.py` measures both): the
# steps of a decode with few hypotheses (one sentence, beam 4) call such maps some 18 times a step.
FEW_ROWS = 16
SMALL_WEIGHT = 1 << 18

# An int8 linear map on a CPU with AMX runs on oneDNN's int8 GEMM (AMX's tiles) for calls of at least
# `AMX_INT8_MIN_ROWS` rows and `AMX_INT8_MIN_WORK` multiply-adds per thread (rows x in x out / threads;
# `AMX_INT8_NARROWING` times more for a map with fewer outputs than inputs, whose wider input costs more
# to quantize): there it is faster than the fbgemm kernel of PyTorch's dynamic quantization, despite
# quantizing the input in operators of its own; below, and on CPUs without AMX, fbgemm's is as fast or
# faster (`benchmarks/bench_gemm.py --int8` measures both; `amx_int8_min_rows`).
AMX_INT8_MIN_ROWS = 16
AMX_INT8_MIN_WORK = 1 << 24
AMX_INT8_NARROWING = 4


# ---------------------------------------------------------------------------------------------
# The linear maps: prepacked for oneDNN, or int8
# ---------------------------------------------------------------------------------------------


def linear_map(
    weight: torch.Tensor, bias: torch.Tensor | None, relu: bool = False
) -> tuple[Callable[[torch.Tensor], torch.Tensor], bool]:
    """x -> x W^T + b for a fixed weight W (max(0, x W^T + b) with `relu`), and whether it is prepacked.

    Prepacked (`prepacked_linear`) where oneDNN runs, else the public `F.linear`. A small float32 weight
    (at most `SMALL_WEIGHT` elements) is also kept transposed, and calls on at most `FEW_ROWS` rows take
    the BLAS GEMM on it: it reads the weight in its stored order, and costs less per call.
    """
    weight = weight.detach()
    bias = bias.detach() if bias is not None else None
    prepacked = prepacked_linear(weight, bias, relu)
    if prepacked is None:
        return _f_linear(weight, bias, relu), False
    if weight.dtype != torch.float32 or weight.numel() > SMALL_WEIGHT:
        return prepacked, True
    few_rows = _f_linear(weight.t().contiguous().t(), bias, relu)  # W^T stored, passed as a view of W
    columns = weight.size(1)

    def by_rows(x: torch.Tensor) -> torch.Tensor:
        return few_rows(x) if x.numel() <= FEW_ROWS * columns else prepacked(x)

    return by_rows, True


def prepacked_linear(
    weight: torch.Tensor, bias: torch.Tensor | None, relu: bool = False
) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """x -> x W^T + b (max(0, .) with `relu`, fused) as oneDNN's GEMM on W packed once; None where it
    does not run (not on a CPU, no oneDNN, a dtype without a kernel: fp16 on most CPUs).

    This is the kernel `torch.compile` uses for frozen CPU linears, faster than the BLAS call of
    `F.linear` on CPUs where MKL does not use AVX-512 (AMD; `benchmarks/bench_gemm.py` measures both).
    Its operators are private to PyTorch (`torch.ops.mkldnn._reorder_linear_weight`,
    `_linear_pointwise`): this is the one place that names them.
    """
    if weight.device.type != "cpu" or not _onednn_available():
        return None
    try:  # packing, and one call, fail where oneDNN lacks a kernel for the dtype
        kernel = torch.ops.mkldnn._linear_pointwise.default._op  # the kernel, called straight
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 64)
        activation = "relu" if relu else "none"

        def prepacked(x: torch.Tensor) -> torch.Tensor:
            return kernel(x, packed, bias, activation, [], "")

        prepacked(weight.new_zeros(1, weight.size(1)))
        return prepacked
    except (RuntimeError, AttributeError):
        return None


def _f_linear(weight: torch.Tensor, bias: torch.Tensor | None, relu: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    if relu:
        return lambda x: F.relu(F.linear(x, weight, bias))
    return lambda x: F.linear(x, weight, bias)


def int8_linear_map(linear: nn.Module, relu: bool = False) -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> x W^T + b (max(0, .) with `relu`, fused) for a dynamically quantized linear map
    (`torch.ao.nn.quantized.dynamic.Linear`, int8 weights): the operator its forward calls
    (`quantized::linear_dynamic`, or `linear_relu_dynamic`), on its packed weight, called straight; on a
    CPU with AMX, calls with enough work per thread (`amx_int8_min_rows`) take `amx_int8_linear` on the
    same int8 weight instead."""
    packed = linear._packed_params._packed_params
    reduce_range = linear.version is not None and linear.version >= 4  # as its forward decides
    operator = torch.ops.quantized.linear_relu_dynamic if relu else torch.ops.quantized.linear_dynamic
    kernel = operator.default._op

    def fbgemm(x: torch.Tensor) -> torch.Tensor:
        return kernel(x, packed, reduce_range)

    tiles = amx_int8_linear(linear.weight(), linear.bias(), relu)
    if tiles is None:
        return fbgemm
    fan_in, fan_out = linear.in_features, linear.out_features
    min_elements: dict[int, int] = {}  # threads -> the fewest input elements of a call that takes AMX

    def by_rows(x: torch.Tensor) -> torch.Tensor:
        threads = torch.get_num_threads()
        if threads not in min_elements:
            min_elements[threads] = amx_int8_min_rows(fan_in, fan_out, threads) * fan_in
        return tiles(x) if x.numel() >= min_elements[threads] else fbgemm(x)

    return by_rows


def amx_int8_min_rows(fan_in: int, fan_out: int, threads: int) -> int:
    """The fewest rows of a call that `int8_linear_map` runs on AMX (where the CPU has it) for a map of
    `fan_in` inputs and `fan_out` outputs on `threads` threads."""
    work = AMX_INT8_MIN_WORK * threads * (AMX_INT8_NARROWING if fan_out < fan_in else 1)
    return max(AMX_INT8_MIN_ROWS, -(-work // (fan_in * fan_out)))


def amx_int8_linear(
    weight: torch.Tensor, bias: torch.Tensor | None, relu: bool = False
) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """x -> x W^T + b (max(0, .) with `relu`, fused) as oneDNN's int8 GEMM, for a weight quantized per
    output row (`torch.qint8`, zero points 0), with x quantized per call (uint8, one scale per call, as
    `torch.quantize_per_tensor_dynamic` chooses it); None where oneDNN has no AMX here (`onednn_amx`:
    none on the CPU, or `ONEDNN_MAX_CPU_ISA` rules it out) or the operators are missing. Like
    `prepacked_linear`'s, its operators (`torch.ops.onednn.qlinear_prepack`, `qlinear_pointwise`) are
    private to PyTorch: this is the one place that names them."""
    if not (
        weight.device.type == "cpu"
        and onednn_amx()
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.onednn, "qlinear_prepack")
        and hasattr(torch.ops.onednn, "qlinear_pointwise")
    ):
        return None
    try:
        packed = torch.ops.onednn.qlinear_prepack(weight.int_repr(), None)
        scales = weight.q_per_channel_scales().float()
        zero_points = weight.q_per_channel_zero_points()
        kernel = torch.ops.onednn.qlinear_pointwise.default._op
        bias = bias.float() if bias is not None else None
        activation = "relu" if relu else "none"

        def tiles(x: torch.Tensor) -> torch.Tensor:
            q = torch.quantize_per_tensor_dynamic(x.reshape(-1, x.size(-1)), torch.quint8, False)
            y = kernel(
                q.int_repr(), q.q_scale(), q.q_zero_point(), packed, scales, zero_points, bias,
                1.0, 0, torch.float32, activation, [], "",
            )  # fmt: skip
            return y.view(*x.shape[:-1], y.size(-1))

        tiles(torch.zeros(1, weight.size(1)))  # fails here, not at the first decode, where it cannot run
        return tiles
    except (RuntimeError, AttributeError):
        return None


def _onednn_available() -> bool:
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


# The prepared leaves below define `__call__` as their forward: calling one skips `nn.Module.__call__`'s
# hook checks (a decoding step calls some 15 leaves a layer), so hooks registered on them do not run.


class Projection(nn.Module):
    """An `nn.Linear` prepared: x W^T + b for its weight W as it is now, computed by `linear_map`
    (prepacked for oneDNN's GEMM where it runs), or by `int8_linear_map` for the int8 form of one
    (PyTorch's dynamic quantization); `relu`: max(0, x W^T + b), fused into the GEMM where it is packed
    or int8."""

    def __init__(self, linear: nn.Module, relu: bool = False):
        super().__init__()
        self.relu, self.int8 = relu, not isinstance(linear, nn.Linear)
        if self.int8:
            self.function, self.packed = int8_linear_map(linear, relu), True
        else:
            self.function, self.packed = linear_map(linear.weight, linear.bias, relu)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.function(x)

    forward = __call__

    def extra_repr(self) -> str:
        return f"packed={self.packed}, int8={self.int8}, relu={self.relu}"


class LayerNorm(nn.Module):
    """An `nn.LayerNorm` prepared: its function on its parameters, the model's tensors (held as a plain
    pair, which is read without `nn.Module.__getattr__`, not registered again)."""

    def __init__(self, norm: nn.LayerNorm):
        super().__init__()
        self.shape, self.eps = norm.normalized_shape, norm.eps
        self.affine = (norm.weight, norm.bias)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.affine
        return torch.layer_norm(x, self.shape, weight, bias, self.eps)

    forward = __call__


class Identity(nn.Module):
    """Dropout in eval mode."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x

    forward = __call__


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _replace_leaves(modules: nn.Module) -> None:
    """Replace the leaf modules the decoder calls many times a step by prepared ones that compute the
    same thing: `nn.Linear` and its int8 form -> `Projection`, `nn.LayerNorm` -> `LayerNorm`,
    `nn.Dropout` -> `Identity` (eval mode); the ReLU of a feed-forward network joins its first
    projection. The modules around them (attention, sub-layer connections, the feed-forward networks,
    the stacks) stay the model's."""
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear

    for parent in list(modules.modules()):
        relu = isinstance(parent, PositionwiseFeedForward) and parent.activation is F.relu
        if relu:
            parent.activation = _identity  # ... applied by w_1
        for name, child in list(parent.named_children()):
            if type(child) in (nn.Linear, Int8Linear):
                parent.register_module(name, Projection(child, relu=relu and name == "w_1"))
            elif type(child) is nn.LayerNorm:
                parent.register_module(name, LayerNorm(child))
            elif isinstance(child, nn.Dropout):
                parent.register_module(name, Identity())


def _int8_linears(module: nn.Module) -> None:
    """Every `nn.Linear` in `module` becomes int8 weights (one scale per output row) with float
    activations, quantized per call (PyTorch's dynamic quantization, fbgemm/oneDNN kernels)."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    if torch.backends.quantized.engine == "none":
        raise RuntimeError("this PyTorch build has no quantized CPU kernels")
    with warnings.catch_warnings():  # PyTorch announces the end of its quantized tensors: nothing a user can act on
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*deprecated")
        quantize_dynamic(module, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)


class PreparedModel:
    """The model's encoder, decoder and pre-softmax projection, with their linear maps prepared for
    the fast path (`dtype="float"`: `Projection`; `"int8"`: int8 weights, CPU only).

    The modules are copies that share every parameter with the model, but a linear map's prepared
    form is made from the weights as they are now: a `Translator` prepares once; `decode()` without a
    prepared model prepares for that call. Prepare again after the weights change (an optimizer step,
    `load_state_dict`): the packed and int8 forms do not follow in-place changes.
    """

    def __init__(self, model: AiaynForConditionalGeneration, dtype: str = "float"):
        if dtype not in PROJECTION_DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(PROJECTION_DTYPES)}, got {dtype!r}")
        _check_supported(model.config)
        self.config, self.dtype = model.config, dtype
        shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
        modules = nn.ModuleDict(
            {"encoder": model.model.encoder, "decoder": model.model.decoder, "lm_head": model.lm_head}
        )
        modules = copy.deepcopy(modules, memo=shared).eval()  # new modules, the model's parameters
        if dtype == "int8":
            if model.lm_head.weight.device.type != "cpu":
                raise ValueError("int8 decoding runs on CPUs only")
            _int8_linears(modules)
        _replace_leaves(modules)
        self.encoder, self.decoder, self.lm_head = modules.encoder, modules.decoder, modules.lm_head
        self._spare: list[list[torch.Tensor]] = []  # the cache memory of finished decodes, smallest first
        self._lock = threading.Lock()  # decoders of one `decode()` run on threads of their own
        self._lent = self._most_lent = 0  # memory held by decoders now, and the most at once so far

    def take_memory(self, numel: int, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
        """Two flat tensors of at least `numel` elements for a `DecodingState`: the smallest that a
        finished decode gave back (`give_back`) where one is large enough, else new ones.

        A batch's key/value cache is tens to hundreds of MB: allocated anew for every batch, each of
        its pages would be faulted in (zeroed by the kernel) again. Taken memory belongs to one decoder until it is given back,
        so decoders that run at the same time (threads, or interleaved by hand) never share it.
        """
        with self._lock:
            self._lent += 1
            self._most_lent = max(self._most_lent, self._lent)
            for i, (spare, _) in enumerate(self._spare):  # smallest first
                if spare.numel() >= numel and spare.dtype == dtype and spare.device == device:
                    return self._spare.pop(i)
            if self._spare:  # none fits: the smallest goes before the new tensors are made
                del self._spare[0]
        return [torch.empty(numel, dtype=dtype, device=device) for _ in range(2)]

    def give_back(self, memory: list[torch.Tensor]) -> None:
        """Keep a finished decode's cache memory for the next `take_memory`: the largest memories, as many
        as decoders have held at once (one, for decodes one after another; one per thread for a batch
        split over threads)."""
        with self._lock:
            self._lent -= 1
            self._spare.append(memory)
            self._spare.sort(key=lambda m: m[0].numel())
            del self._spare[: max(0, len(self._spare) - self._most_lent)]


def _check_supported(config: AiaynConfig) -> None:
    """ValueError where the config sets a field the fast decoder does not handle (away from its default)."""
    for name in sorted(UNSUPPORTED_CONFIG_FIELDS):
        if getattr(config, name) != getattr(AiaynConfig(), name):
            raise ValueError(f"the fast decoder does not handle {name}={getattr(config, name)!r} yet")


def encode(
    model: AiaynForConditionalGeneration,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    prepared: PreparedModel | None = None,
    head_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The encoder's output `(B, S, d_model)`: the model's `Encoder`, with the prepared projections
    (and the forward's `head_mask`, `(N, h)`, where given)."""
    prepared = prepared if prepared is not None else PreparedModel(model)
    _keep_positions(prepared.encoder.embed_positions, input_ids.size(1), model.lm_head.weight)
    return prepared.encoder(input_ids=input_ids, attention_mask=attention_mask, head_mask=head_mask).last_hidden_state


def _keep_positions(positions: nn.Module, length: int, like: torch.Tensor) -> None:
    """Let the prepared copy's `PositionalEncoding` keep its table for positions 0 .. length - 1 (at least,
    up to the next power of two), computed once instead of at every call."""
    if positions.table is None or positions.table.size(0) < length:
        length = max(length, min(1 << (length - 1).bit_length(), positions.max_positions))
        positions.table = positions.encoding(length, device=like.device).to(like.dtype)


# ---------------------------------------------------------------------------------------------
# The cache the model's attention reads and writes
# ---------------------------------------------------------------------------------------------


class _SelfAttentionBuffers:
    """`DecodingState.self_attention_cache`: the new keys and values are written in place."""

    def __init__(self, state: DecodingState):
        self.state = state

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`key`, `value` `(N, h, T, d_k)` at the current positions -> all keys and values so far."""
        keys, values = self.state.layers[layer_idx]  # (N, h, capacity, d_k) each
        start, length = self.state.position, key.size(2)
        keys.narrow(2, start, length).copy_(key)
        values.narrow(2, start, length).copy_(value)
        return keys.narrow(2, 0, start + length), values.narrow(2, 0, start + length)  # (N, h, t + 1, d_k)


class _CrossAttentionLayer:
    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values


class _CrossAttentionCache:
    """`DecodingState.cross_attention_cache`: each layer's encoder-decoder keys and values, one row per sentence."""

    def __init__(self):
        self.layers: dict[int, _CrossAttentionLayer] = {}

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.layers[layer_idx] = _CrossAttentionLayer(key, value)
        return key, value

    def select(self, sentences: torch.Tensor) -> None:
        for layer in self.layers.values():
            layer.keys, layer.values = layer.keys.index_select(0, sentences), layer.values.index_select(0, sentences)


class DecodingState:
    """The incremental state of the model's decoder, in the shape of `EncoderDecoderCache` (the members
    `MultiHeadAttention` uses), with the self-attention keys and values of all layers in one
    preallocated tensor `(rows, layers, 2, h, capacity, d_k)`."""

    def __init__(
        self,
        config,
        max_rows: int,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device,
        prepared: PreparedModel | None = None,
    ):
        """`prepared`: where the cache's memory comes from and goes back to (`release`), so that it is
        reused from one decode to the next (default: new tensors)."""
        shape = (max_rows, config.num_decoder_layers, 2, config.num_heads, capacity, config.d_k)
        numel = math.prod(shape)
        if prepared is not None:
            self.storage = prepared.take_memory(numel, dtype, device)
        else:
            self.storage = [torch.empty(numel, dtype=dtype, device=device) for _ in range(2)]
        self._buffers = [tensor[:numel].view(shape) for tensor in self.storage]
        self._current = 0
        self.cache = self._buffers[0]
        self.position = 0
        self.self_attention_cache = _SelfAttentionBuffers(self)
        self.cross_attention_cache = _CrossAttentionCache()
        self.is_updated: dict[int, bool] = {}

    @property
    def cache(self) -> torch.Tensor:
        """The self-attention keys and values `(N, layers, 2, h, capacity, d_k)` of the N current rows."""
        return self._cache

    @cache.setter
    def cache(self, cache: torch.Tensor) -> None:
        self._cache = cache
        self.layers = [layer.unbind(1) for layer in cache.unbind(1)]  # per layer: (keys, values), views

    def get_seq_length(self) -> int:
        return self.position

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep `rows` of the self-attention cache: one `index_select` into the other buffer, for all layers."""
        n, filled = rows.numel(), self.position
        target = self._buffers[1 - self._current][:n]
        torch.index_select(self.cache[..., :filled, :], 0, rows, out=target[..., :filled, :])
        self.cache, self._current = target, 1 - self._current

    def copy_rows(self, pairs: list[tuple[int, int]]) -> None:
        """Copy the self-attention cache of row `source` to row `target` for each `(source, target)` (no
        row is both), for all layers, in place."""
        filled = self.cache[..., : self.position, :]
        for source, target in pairs:
            filled[target].copy_(filled[source])


# ---------------------------------------------------------------------------------------------
# The decoder the searches drive
# ---------------------------------------------------------------------------------------------


class IncrementalDecoder:
    """The model's decoder, one target position per `step`, with in-place key/value caches.

    Rows are grouped by sentence, `rows_per_sentence` consecutive rows each (1 at first, the beam
    size after the first `select`).
    """

    def __init__(
        self,
        model: AiaynForConditionalGeneration,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        capacity: int,
        max_rows: int,
        prepared: PreparedModel | None = None,
        head_masks: dict[str, torch.Tensor] | None = None,
        keep_slots: bool | None = None,
    ):
        """
        Args:
            model: an `AiaynForConditionalGeneration` in eval mode.
            input_ids (`(B, S)`), attention_mask (`(B, S)`, 1 for tokens): the source batch.
            capacity: the most target positions that will be fed (maximum output length + 1).
            max_rows: the most rows there will be (sentences times beams).
            prepared: the model's prepared modules (default: prepared now).
            head_masks: the model's forward arguments `head_mask`, `decoder_head_mask`,
                `cross_attn_head_mask` (`(N, h)` each, any of them), applied at every step.
            keep_slots: whether beam steps keep each row's cache in its slot (`_keep_slots`) or move
                every row (default: by the device, `CACHE_SLOT_DEVICES`); the logits are the same.
        """
        self.prepared = prepared if prepared is not None else PreparedModel(model)
        weight = model.lm_head.weight
        masks = head_masks or {}
        self.decoder_masks = {
            "head_mask": masks.get("decoder_head_mask"),
            "cross_attn_head_mask": masks.get("cross_attn_head_mask"),
        }
        self.memory = encode(model, input_ids, attention_mask, self.prepared, masks.get("head_mask"))  # once
        self.source_mask = padding_mask(attention_mask)  # (B, 1, 1, S) or None, made once
        self.state = DecodingState(model.config, max_rows, capacity, weight.dtype, weight.device, self.prepared)
        _keep_positions(self.prepared.decoder.embed_positions, capacity, weight)  # not at every step
        self.state.cache = self.state.cache[: input_ids.size(0)]
        self.batch, self.rows_per_sentence = input_ids.size(0), 1
        if keep_slots is None:
            keep_slots = weight.device.type in CACHE_SLOT_DEVICES
        self.keep_slots = keep_slots
        self.slots: list[int] | None = None  # where each row's cache is (None: row i in row i)
        self._to_slots = self._from_slots = None  # the same as index tensors: rows -> slots, slots -> rows

    def select(self, rows: torch.Tensor, sentences: torch.Tensor) -> None:
        same_shape = sentences.numel() == self.batch and rows.numel() == self.batch * self.rows_per_sentence
        if self.keep_slots and same_shape and self.rows_per_sentence > 1:  # the common beam step
            self._keep_slots(rows.tolist())
            return
        if self.slots is not None:
            rows = self._to_slots.index_select(0, rows)
            self.slots = self._to_slots = self._from_slots = None
        self.state.select_rows(rows)
        if sentences.numel() != self.batch:  # sentences finished, or rows became sentences of their own
            self.state.cross_attention_cache.select(sentences)
            if self.memory is not None:  # before the first step: the keys are not computed yet
                self.memory = self.memory.index_select(0, sentences)
            if self.source_mask is not None:
                self.source_mask = self.source_mask.index_select(0, sentences)
            self.batch = sentences.numel()
        self.rows_per_sentence = rows.numel() // self.batch

    def _keep_slots(self, rows: list[int]) -> None:
        """`select` where every sentence keeps its number of rows: a row's cache stays where it is (its
        slot) for the first row that continues it, and is copied into a slot that no row continues (of the
        same sentence) for each further one: the cache of those rows only is copied, not every row's. A
        step runs the rows in slot order, which is the same computation row by row: each sentence's rows are a block of slots,
        as the encoder-decoder attention reads them."""
        n, k = len(rows), self.rows_per_sentence
        slots = self.slots if self.slots is not None else range(n)
        parents = [slots[row] for row in rows]  # the slot each new row continues
        new, taken = [-1] * n, [False] * n
        for i, parent in enumerate(parents):
            if not taken[parent]:
                new[i], taken[parent] = parent, True
        copies = []
        for i in (i for i in range(n) if new[i] < 0):  # continues a row that another row kept
            free = next(slot for slot in range(i // k * k, i // k * k + k) if not taken[slot])
            new[i], taken[free] = free, True
            copies.append((parents[i], free))
        self.state.copy_rows(copies)
        if new == list(range(n)):
            self.slots = self._to_slots = self._from_slots = None
            return
        self.slots = new
        device = self.state.cache.device
        self._to_slots = torch.tensor(new, device=device)
        self._from_slots = torch.empty_like(self._to_slots).scatter_(0, self._to_slots, torch.arange(n, device=device))

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """`tokens` `(N,)` at the current position -> next-token logits `(N, V)`: the model's `Decoder`."""
        if self.slots is not None:  # the rows in slot order
            tokens = tokens.index_select(0, self._from_slots)
        out = self.prepared.decoder(
            tokens[:, None],
            self.memory,
            encoder_attention_mask=self.source_mask,
            cache=self.state,
            **self.decoder_masks,
            return_dict=False,
        )[0]  # the last hidden state (N, 1, d_model)
        self.memory = None  # the encoder-decoder keys and values are in the state from now on
        self.state.position += 1
        last = out[:, 0] if self.slots is None else out[:, 0].index_select(0, self._to_slots)  # in row order
        return self.prepared.lm_head(last)  # (N, V)

    def release(self) -> None:
        """Give the cache's memory back to the prepared model, for the next decoder; this one is done."""
        self.prepared.give_back(self.state.storage)
        self.state = None


__all__ = [
    "CACHE_SLOT_DEVICES",
    "DecodingState",
    "IncrementalDecoder",
    "LayerNorm",
    "PreparedModel",
    "Projection",
    "UNSUPPORTED_CONFIG_FIELDS",
    "amx_int8_linear",
    "amx_int8_min_rows",
    "encode",
    "int8_linear_map",
    "linear_map",
    "prepacked_linear",
]
