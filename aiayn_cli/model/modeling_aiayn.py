"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), as a Hugging Face model.

The file follows the paper's Section 3, one heading per subsection, after §5.4's dropout:

    5.4   Residual Dropout                    `Dropout` (used by every section below)
    3.2.1 Scaled Dot-Product Attention      `scaled_dot_product_attention`
    3.2.2 Multi-Head Attention               `MultiHeadAttention`
    3.3   Position-wise Feed-Forward Networks `PositionwiseFeedForward`
    3.4   Embeddings and Softmax              `Embeddings`, the tied pre-softmax projection
    3.5   Positional Encoding                 `sinusoidal_positional_encoding`, `PositionalEncoding`
    3.1   Encoder and Decoder Stacks          `SublayerConnection`, `EncoderLayer`, `DecoderLayer`,
                                              `Encoder`, `Decoder`
    The Hugging Face ladder                   `AiaynPreTrainedModel` -> `AiaynModel` ->
                                              `AiaynForConditionalGeneration`

Every deviation from the paper is a field of `AiaynConfig` whose default is the paper's choice
(`pre_norm=False`, `positional_encoding="sinusoidal"`, `scale_embedding=True`,
`tie_word_embeddings=True`, `attention_dropout=0`, `activation_dropout=0`).

This file uses relative imports only: it is copied next to saved checkpoints, so that they load
with `trust_remote_code=True` where `aiayn_cli` is not installed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationConfig, GenerationMixin, Pipeline, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import is_torch_flex_attn_available, is_torchdynamo_compiling

from .configuration_aiayn import AiaynConfig

if is_torch_flex_attn_available():
    from torch.nn.attention.flex_attention import create_block_mask

# ---------------------------------------------------------------------------------------------
# 5.4 Regularization: Residual Dropout
#
# "We apply dropout to the output of each sub-layer, before it is added to the sub-layer input
# and normalized. In addition, we apply dropout to the sums of the embeddings and the positional
# encodings in both the encoder and decoder stacks."
#
# On a CPU the mask is drawn from random bits, two elements per 32-bit draw (`random_` on int32): a
# value is kept where its 15-bit number is >= round(p * 2^15), with probability 1 - p to within 2^-16,
# and multiplied by 1 / (1 - p). Why: PyTorch's `bernoulli_` (behind `F.dropout`) and `torch.rand`
# draw one element at a time under the generator's lock on CPUs other than Intel's (docs/performance.md).
# ---------------------------------------------------------------------------------------------


def dropout_function(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """`F.dropout(x, p, training)`, with the mask from 15 random bits per element on a CPU (in eager mode: a
    compiled graph draws its masks with the compiler's own random numbers, `F.dropout`'s)."""
    if not training or p in (0.0, 1.0) or x.device.type != "cpu" or is_torchdynamo_compiling():
        return F.dropout(x, p=p, training=training)
    n = x.numel()
    bits = torch.empty((n + 1) // 2, dtype=torch.int32).random_().view(torch.int16)[:n]  # 2 x 16 bits a draw
    keep = (bits & 0x7FFF) >= round(p * 32768)  # 15 of them uniform: P(keep) = 1 - p
    return x * (keep.view(x.shape) * (1.0 / (1.0 - p))).to(x.dtype)


class Dropout(nn.Dropout):
    """`nn.Dropout`, through `dropout_function`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout_function(x, self.p, self.training)


# ---------------------------------------------------------------------------------------------
# 3.2.1 Scaled Dot-Product Attention
#
#     Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                                    (1)
# ---------------------------------------------------------------------------------------------


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Equation (1), on `torch.nn.functional.scaled_dot_product_attention`, or written out.

    The written-out form (scores in the inputs' dtype, the softmax in float32, as fairseq computes
    half-precision attention) is taken for the plots' weights and where it is the faster one: in
    training in bf16 or fp16 on a CPU, where PyTorch's fused CPU kernel runs forward and backward
    slower than the three steps at translation lengths. In fp32 the fused kernel is the faster there;
    on GPUs it is kept.

    Args:
        query (`torch.Tensor` of shape `(B, h, T_q, d_k)`), key (`(B, h, T_k, d_k)`), value (`(B, h, T_k, d_v)`).
        mask (`torch.BoolTensor` broadcastable to `(B, h, T_q, T_k)`, *optional*): True where a query may
            attend to a key ("setting to -inf all values in the input of the softmax which correspond to
            illegal connections", §3.2.3).
        dropout (`float`): dropout on the attention weights (not in the paper; 0 by default).
        need_weights (`bool`): also return the attention weights `(B, h, T_q, T_k)`, for plots; this takes
            the explicit path instead of the fused kernel.
    """
    if not need_weights and not _written_out_is_faster(query):
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout), None
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (B, h, T_q, T_k)
    if mask is not None:
        # the dtype's minimum, not -inf: a query that may see no key at all (a padded position) gets uniform
        # weights rather than NaN, as in transformers' models; every other row is the same (exp underflows to 0)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(value.dtype)
    return dropout_function(weights, dropout, training=dropout > 0) @ value, weights if need_weights else None


def _written_out_is_faster(query: torch.Tensor) -> bool:
    return (
        query.requires_grad  # first: False wherever nothing is trained, and the cheapest to read
        and torch.is_grad_enabled()
        and query.device.type == "cpu"
        and query.dtype in (torch.bfloat16, torch.float16)
    )


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Equation (1) written out, in the signature of transformers' attention interface (`attn_implementation="eager"`).

    Returns the heads `(B, T_q, h, d_v)` and the attention weights `(B, h, T_q, T_k)` that the plots draw.
    """
    heads, weights = scaled_dot_product_attention(query, key, value, attention_mask, dropout, need_weights=True)
    return heads.transpose(1, 2), weights


def sdpa_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Equation (1) on PyTorch's fused kernel (`attn_implementation="sdpa"`, the default), through
    `scaled_dot_product_attention` (written out where that is the faster).

    transformers' own "sdpa" function serves every model (grouped keys, `is_causal` guesses, tracing
    checks): a few microseconds a call that a beam search one token at a time pays 2N times a step.
    Returns the heads `(B, T_q, h, d_v)` and no weights.
    """
    heads, _ = scaled_dot_product_attention(query, key, value, attention_mask, dropout)
    return heads.transpose(1, 2), None


def flex_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Equation (1) on PyTorch's flex attention, through transformers' (`attn_implementation="flex_attention"`).

    The boolean mask becomes the `BlockMask` flex attention reads, as transformers' own models make theirs
    (`masking_utils`): query i may attend to key j where the mask, broadcast to `(B, 1, T_q, T_k)`, says so.
    transformers compiles flex attention (`torch.compile`) on its first call, on a CPU too. A query that may
    attend to no key (none here but a padded target position) gets zeros, where eager gives uniform weights.
    """
    if attention_mask is not None:
        batch, queries, keys = query.size(0), query.size(2), key.size(2)
        allowed = attention_mask.expand(batch, 1, queries, keys)

        def may_attend(b, h, q, k):
            return allowed[b, 0, q, k]

        attention_mask = create_block_mask(may_attend, batch, None, queries, keys, device=query.device)
    return ALL_ATTENTION_FUNCTIONS["flex_attention"](module, query, key, value, attention_mask, **kwargs)


def attention_function(config: AiaynConfig, need_weights: bool = False) -> Callable:
    """Equation (1)'s kernel for the model's `attn_implementation`: "sdpa" (the default) and "eager" here,
    others from transformers' attention interface; the written-out equation where the weights are asked for.

    The encoder and the decoder look it up once per forward and hand it to every attention: reading
    `config._attn_implementation` goes through transformers' attribute lookups, a dozen Python calls
    that a beam search one token at a time would otherwise pay in each of its 2N attentions per step.
    """
    implementation = config._attn_implementation
    if need_weights or implementation in (None, "eager"):
        return eager_attention_forward
    if implementation == "sdpa":  # itself written out where that is the faster (`_written_out_is_faster`)
        return sdpa_attention_forward
    if implementation == "flex_attention":
        return flex_attention_forward
    return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)


# ---------------------------------------------------------------------------------------------
# 3.2.2 Multi-Head Attention
#
#     MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O
#     where head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
# ---------------------------------------------------------------------------------------------


class MultiHeadAttention(nn.Module):
    """h parallel attention heads of width d_k = d_v = d_model / h (§3.2.2).

    The h projections W_i^Q, W_i^K, W_i^V are stored side by side in one matrix each, and in
    self-attention the three are one matrix (`qkv_proj`), so that each is a single matmul.
    Keys and values are cached for incremental decoding: decoder self-attention appends one
    position per step; encoder-decoder attention computes them once per source sentence.
    """

    def __init__(self, config: AiaynConfig, self_attention: bool, layer_idx: int | None = None):
        super().__init__()
        self.config = config  # `config._attn_implementation` picks equation (1)'s kernel
        self.num_heads = config.num_heads
        self.d_k = config.d_k
        self.scaling = config.d_k**-0.5
        self.is_causal = False  # the masks say which keys a query sees, the decoder's causal one included
        self.self_attention = self_attention
        self.layer_idx = layer_idx
        self.dropout = config.attention_dropout
        if self_attention:
            self.qkv_proj = nn.Linear(config.d_model, 3 * config.d_model)  # [W^Q | W^K | W^V]
        else:
            self.q_proj = nn.Linear(config.d_model, config.d_model)  # W^Q
            self.kv_proj = nn.Linear(config.d_model, 2 * config.d_model)  # [W^K | W^V]
        self.out_proj = nn.Linear(config.d_model, config.d_model)  # W^O

    def _split_heads(self, x: torch.Tensor, n: int, groups: int | None = None) -> tuple[torch.Tensor, ...]:
        # (B, T, n * d_model) -> n tensors of shape (B, h, T, d_k); with G `groups` (B = G * k), of shape
        # (G, h, k * T, d_k): the k rows of a group as one sequence of queries (a view either way)
        groups = groups if groups is not None else x.size(0)
        return x.view(groups, -1, n, self.num_heads, self.d_k).permute(2, 0, 3, 1, 4).unbind(0)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        need_weights: bool = False,
        head_mask: torch.Tensor | None = None,
        attention: Callable | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """
        Args:
            hidden_states (`(B, T, d_model)`): the queries (and, in self-attention, keys and values).
            key_value_states (`(B, S, d_model)`, *optional*): the encoder output, for encoder-decoder attention.
            mask (`BoolTensor` broadcastable to `(B, h, T, T_k)`, *optional*): True = may attend.
            cache (`EncoderDecoderCache`, *optional*): keys and values of earlier decoding steps; or any
                object with its members `self_attention_cache.update`, `cross_attention_cache.layers` and
                `.update`, `is_updated` (the preallocated `DecodingState` of `aiayn_cli.decoding.incremental`):
                the members transformers' own encoder-decoder models read (BART's attention).
                Where the cache holds encoder-decoder keys for fewer rows than there are queries (G sentences,
                B = G * k rows), each sentence's keys serve its k consecutive rows (its beams), in one call.
            head_mask (`(h,)`, *optional*): multiplies head_i before the concatenation (1 keeps it, 0 removes
                it: `Concat(m_1 head_1, ..., m_h head_h) W^O`); a float mask that requires grad gives
                dL/dm_i, Michel et al.'s (2019) head importance. The weights returned are the softmax's,
                whatever the mask.
            attention (*optional*): equation (1)'s kernel, `attention_function(config, need_weights)` (looked
                up here where not given).
        """
        batch, length, d_model = hidden_states.shape
        if self.self_attention:
            query, key, value = self._split_heads(self.qkv_proj(hidden_states), 3)
            if cache is not None:
                key, value = cache.self_attention_cache.update(key, value, self.layer_idx)
        else:
            if cache is not None and cache.is_updated.get(self.layer_idx):
                layer = cache.cross_attention_cache.layers[self.layer_idx]
                key, value = layer.keys, layer.values
            else:
                key, value = self._split_heads(self.kv_proj(key_value_states), 2)
                if cache is not None:
                    key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)
                    cache.is_updated[self.layer_idx] = True
            # G = key.size(0) sentences for B = G * k rows: each sentence's k rows query its keys together
            (query,) = self._split_heads(self.q_proj(hidden_states), 1, groups=key.size(0))
        dropout = self.dropout if self.training else 0.0
        attention = attention or attention_function(self.config, need_weights)
        heads, weights = attention(self, query, key, value, mask, scaling=self.scaling, dropout=dropout)
        if head_mask is not None:  # m_i head_i
            heads = heads * head_mask.to(heads.dtype)[None, None, :, None]
        # (B, T, h, d_k) or (G, k * T, h, d_k) -> (B, T, h * d_k): Concat(head_1, ..., head_h)
        concat = heads.reshape(batch, length, d_model)
        return self.out_proj(concat), weights if need_weights else None


# ---------------------------------------------------------------------------------------------
# 3.3 Position-wise Feed-Forward Networks
#
#     FFN(x) = max(0, x W_1 + b_1) W_2 + b_2                                                (2)
# ---------------------------------------------------------------------------------------------


class PositionwiseFeedForward(nn.Module):
    """Equation (2): two linear maps with a ReLU between, inner width d_ff (§3.3)."""

    def __init__(self, config: AiaynConfig):
        super().__init__()
        self.w_1 = nn.Linear(config.d_model, config.d_ff)
        self.w_2 = nn.Linear(config.d_ff, config.d_model)
        self.activation = F.relu if config.activation_function == "relu" else F.gelu
        self.dropout = Dropout(config.activation_dropout)  # not in the paper: 0 by default

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


# ---------------------------------------------------------------------------------------------
# 3.4 Embeddings and Softmax
#
# "We use learned embeddings to convert the input tokens and output tokens to vectors of
# dimension d_model. [...] we share the same weight matrix between the two embedding layers and
# the pre-softmax linear transformation [...]. In the embedding layers, we multiply those weights
# by sqrt(d_model)."
# ---------------------------------------------------------------------------------------------


class Embeddings(nn.Embedding):
    """Token embeddings, multiplied by sqrt(d_model) (§3.4; `scale_embedding`)."""

    def __init__(self, config: AiaynConfig, tied: bool = False):
        # tied: its weight becomes `shared`'s (`_tied_weights_keys`), so it is neither allocated nor
        # initialised here (nor draws random numbers: the same seed gives the same model as one matrix)
        weight = torch.empty(config.vocab_size, config.d_model, device="meta") if tied else None
        super().__init__(config.vocab_size, config.d_model, padding_idx=config.pad_token_id, _weight=weight)
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.tied = tied

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return super().forward(input_ids) * self.scale


# ---------------------------------------------------------------------------------------------
# 3.5 Positional Encoding
#
#     PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
#     PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))
# ---------------------------------------------------------------------------------------------


def sinusoidal_positional_encoding(
    positions: torch.Tensor, d_model: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The §3.5 table for `positions` (shape `(T,)`), interleaved: even columns sin, odd columns cos.

    Computed in float64 (float32 on MPS) and returned in `dtype` (float32 by default), so it matches
    the formula to ~1e-7 at every position (to float64's precision with `dtype=torch.float64`). It is
    computed, not stored: nothing to save, nothing that the meta-device construction of
    `from_pretrained` could leave uninitialized.
    """
    compute_dtype = torch.float32 if positions.device.type == "mps" else torch.float64
    two_i = torch.arange(0, d_model, 2, device=positions.device, dtype=compute_dtype)  # 2i
    angles = positions.to(compute_dtype)[:, None] / torch.pow(10000.0, two_i / d_model)[None, :]  # (T, d_model/2)
    encoding = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, d_model/2, 2)
    return encoding.flatten(-2)[:, :d_model].to(dtype)  # (T, d_model)


class PositionalEncoding(nn.Module):
    """Adds position information to the scaled embeddings, then dropout (§3.5, §5.4).

    `positional_encoding="sinusoidal"` is the paper's choice; "learned" is Table 3, row (E).
    """

    def __init__(self, config: AiaynConfig):
        super().__init__()
        self.d_model = config.d_model
        self.max_positions = config.max_position_embeddings
        self.learned = (
            nn.Embedding(config.max_position_embeddings, config.d_model)
            if config.positional_encoding == "learned"
            else None
        )
        self.dropout = Dropout(config.dropout)
        self.table: torch.Tensor | None = None  # `encoding(n)`, kept by a decoder that calls once per position

    def encoding(self, length: int, offset: int | torch.Tensor = 0, device: torch.device | None = None) -> torch.Tensor:
        """The encodings `(T, d_model)` of positions offset .. offset + T - 1 (`offset` a 0-d tensor after a
        fixed-size cache, whose length is counted on the device: computed from it, with no branch on it)."""
        if torch.is_tensor(offset):
            positions = torch.arange(length, device=device) + offset
            return (
                self.learned(positions)
                if self.learned is not None
                else sinusoidal_positional_encoding(positions, self.d_model)
            )
        if offset + length > self.max_positions and self.learned is not None:
            raise ValueError(
                f"sequence of {offset + length} positions is longer than max_position_embeddings={self.max_positions}"
            )
        if self.table is not None and offset + length <= self.table.size(0):
            return self.table[offset : offset + length]
        positions = torch.arange(offset, offset + length, device=device)
        if self.learned is not None:
            return self.learned(positions)
        return sinusoidal_positional_encoding(positions, self.d_model)

    def forward(self, embeddings: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
        """`embeddings` `(B, T, d_model)` hold positions offset .. offset + T - 1."""
        encoding = self.encoding(embeddings.size(1), offset, embeddings.device)
        return self.dropout(embeddings + encoding.to(embeddings.dtype))


# ---------------------------------------------------------------------------------------------
# 3.1 Encoder and Decoder Stacks
#
# "We employ a residual connection around each of the two sub-layers, followed by layer
# normalization. That is, the output of each sub-layer is LayerNorm(x + Sublayer(x))."
# "We apply dropout to the output of each sub-layer, before it is added to the sub-layer
# input and normalized." (§5.4)
# ---------------------------------------------------------------------------------------------


class SublayerConnection(nn.Module):
    """LayerNorm(x + Dropout(Sublayer(x))) (post-LN, the paper), or x + Dropout(Sublayer(LayerNorm(x)))."""

    def __init__(self, config: AiaynConfig):
        super().__init__()
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)
        self.pre_norm = config.pre_norm

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(GradientCheckpointingLayer):
    """Multi-head self-attention, then a position-wise feed-forward network (§3.1)."""

    def __init__(self, config: AiaynConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(config, self_attention=True)
        self.self_attn_sublayer = SublayerConnection(config)
        self.feed_forward = PositionwiseFeedForward(config)
        self.feed_forward_sublayer = SublayerConnection(config)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        need_weights: bool = False,
        head_mask: torch.Tensor | None = None,
        attention: Callable | None = None,
    ):
        weights = None

        def self_attention(h):
            nonlocal weights
            out, weights = self.self_attn(
                h, mask=mask, need_weights=need_weights, head_mask=head_mask, attention=attention
            )
            return out

        x = self.self_attn_sublayer(x, self_attention)
        return self.feed_forward_sublayer(x, self.feed_forward), weights


class DecoderLayer(GradientCheckpointingLayer):
    """Masked self-attention, encoder-decoder attention, then a feed-forward network (§3.1)."""

    def __init__(self, config: AiaynConfig, layer_idx: int):
        super().__init__()
        self.self_attn = MultiHeadAttention(config, self_attention=True, layer_idx=layer_idx)
        self.self_attn_sublayer = SublayerConnection(config)
        self.cross_attn = MultiHeadAttention(config, self_attention=False, layer_idx=layer_idx)
        self.cross_attn_sublayer = SublayerConnection(config)
        self.feed_forward = PositionwiseFeedForward(config)
        self.feed_forward_sublayer = SublayerConnection(config)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor | None,
        memory_mask: torch.Tensor | None,
        cache: Cache | None = None,
        need_weights: bool = False,
        head_mask: torch.Tensor | None = None,
        cross_attn_head_mask: torch.Tensor | None = None,
        attention: Callable | None = None,
    ):
        weights = {}

        def self_attention(h):
            out, weights["self"] = self.self_attn(
                h, mask=self_mask, cache=cache, need_weights=need_weights, head_mask=head_mask, attention=attention
            )
            return out

        def cross_attention(h):
            out, weights["cross"] = self.cross_attn(
                h,
                key_value_states=memory,
                mask=memory_mask,
                cache=cache,
                need_weights=need_weights,
                head_mask=cross_attn_head_mask,
                attention=attention,
            )
            return out

        x = self.self_attn_sublayer(x, self_attention)
        x = self.cross_attn_sublayer(x, cross_attention)
        return self.feed_forward_sublayer(x, self.feed_forward), weights.get("self"), weights.get("cross")


def padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """`(B, S)` 1/0 mask -> `(B, 1, 1, S)` boolean key mask; None when nothing is padded. A `(B, 1, 1, S)`
    mask is already one (a decoder fed one position at a time makes it once)."""
    if attention_mask is None or attention_mask.dim() == 4:
        return attention_mask
    # None lets the kernels skip the mask; a graph (`torch.compile`, `torch.export`) keeps the mask instead
    # of branching on its values
    if not is_torchdynamo_compiling() and bool(attention_mask.all()):
        return None
    return attention_mask.bool()[:, None, None, :]


def causal_mask(
    length: int,
    past_length: int | torch.Tensor,
    attention_mask: torch.Tensor | None,
    device: torch.device,
    cache_length: int | None = None,
) -> torch.Tensor | None:
    """Decoder self-attention mask `(B or 1, 1, T, past + T)`: position i sees positions <= i (§3.2.3).

    Built explicitly and aligned bottom-right, so that it is right with a KV cache (the T new
    queries are positions past .. past + T - 1). None where nothing needs masking: one new
    position and no padding. A `(B, 1, T, keys)` mask is already one (`generate()` makes it for a
    fixed-size cache). With a fixed-size cache of `cache_length` slots (`past_length` then a 0-d
    tensor), the mask spans every slot, the ones not yet written masked as future positions.
    """
    if attention_mask is not None and attention_mask.dim() == 4:
        return attention_mask.bool()
    keys = cache_length if cache_length is not None else past_length + length
    if attention_mask is not None and attention_mask.size(-1) < keys:
        attention_mask = F.pad(attention_mask, (0, keys - attention_mask.size(-1)))  # unwritten slots: future
    pad = padding_mask(attention_mask[:, -keys:] if attention_mask is not None else None)
    if length == 1 and pad is None and cache_length is None:
        return None
    query_positions = (torch.arange(length, device=device) + past_length)[:, None]
    mask = (torch.arange(keys, device=device)[None, :] <= query_positions)[None, None]  # (1, 1, T, keys)
    return mask if pad is None else mask & pad


def fixed_cache_length(cache: Cache | None) -> int | None:
    """The number of key slots of a fixed-size self-attention cache (`StaticCache`); None for a growing one."""
    self_attention_cache = getattr(cache, "self_attention_cache", None)
    if not isinstance(self_attention_cache, Cache) or not self_attention_cache.is_compileable:
        return None
    # `get_max_length` since transformers 5.24, `get_max_cache_shape` before
    get_length = getattr(self_attention_cache, "get_max_length", None) or self_attention_cache.get_max_cache_shape
    length = get_length()
    return length if length is not None and length > 0 else None


def layer_head_masks(head_mask: torch.Tensor | None, layers: int, heads: int, name: str) -> list:
    """A `(N, h)` head mask -> one `(h,)` row per layer (None for each layer without one)."""
    if head_mask is None:
        return [None] * layers
    if tuple(head_mask.shape) != (layers, heads):
        raise ValueError(f"{name} must have shape (layers, heads) = ({layers}, {heads}), got {tuple(head_mask.shape)}")
    return list(head_mask.unbind(0))


class Encoder(nn.Module):
    """A stack of N identical layers (§3.1) over the embedded, position-encoded source."""

    def __init__(self, config: AiaynConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.config = config  # `config._attn_implementation` picks equation (1)'s kernel
        self.embed_tokens = embed_tokens
        self.embed_positions = PositionalEncoding(config)
        self.layers = nn.ModuleList([EncoderLayer(config) for _ in range(config.num_encoder_layers)])
        self.final_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.pre_norm else None

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        return_dict: bool = True,
        head_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        """
        Args:
            input_ids (`LongTensor` of shape `(B, S)`): source token ids.
            attention_mask (`Tensor` of shape `(B, S)`, *optional*): 1 for tokens, 0 for padding.
            head_mask (`Tensor` of shape `(N, h)`, *optional*): multiplies each self-attention head's output
                (1 keeps, 0 removes; `MultiHeadAttention`).
        """
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        x = self.embed_positions(inputs_embeds)  # (B, S, d_model)
        mask = padding_mask(attention_mask)
        hidden_states, attentions = (x,), ()
        masks = layer_head_masks(head_mask, len(self.layers), self.layers[0].self_attn.num_heads, "head_mask")
        attention = attention_function(self.config, output_attentions)
        for layer, layer_mask in zip(self.layers, masks):
            x, weights = layer(x, mask, need_weights=output_attentions, head_mask=layer_mask, attention=attention)
            hidden_states, attentions = hidden_states + (x,), attentions + (weights,)
        if self.final_norm is not None:
            x = self.final_norm(x)
        output = BaseModelOutput(
            last_hidden_state=x,
            hidden_states=hidden_states if output_hidden_states else None,
            attentions=attentions if output_attentions else None,
        )
        return output if return_dict else output.to_tuple()


class Decoder(nn.Module):
    """A stack of N identical layers (§3.1), masked so that position i depends only on positions < i."""

    def __init__(self, config: AiaynConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.config = config  # `config._attn_implementation` picks equation (1)'s kernel
        self.embed_tokens = embed_tokens
        self.embed_positions = PositionalEncoding(config)
        self.layers = nn.ModuleList([DecoderLayer(config, i) for i in range(config.num_decoder_layers)])
        self.final_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.pre_norm else None

    def forward(
        self,
        input_ids: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        head_mask: torch.Tensor | None = None,
        cross_attn_head_mask: torch.Tensor | None = None,
        return_dict: bool = True,
    ) -> BaseModelOutputWithPastAndCrossAttentions | tuple:
        """
        Args:
            input_ids (`LongTensor` of shape `(B, T)`): the target shifted right (or the new tokens, with a cache).
            encoder_hidden_states (`(B, S, d_model)`): the encoder output ("memory").
            attention_mask (`(B, past + T)`, *optional*): 1 for target tokens, 0 for padding.
            encoder_attention_mask (`(B, S)`, *optional*): 1 for source tokens, 0 for padding (or the boolean
                `(B, 1, 1, S)` mask `padding_mask` makes of it).
            cache (`EncoderDecoderCache`, *optional*): the keys and values of earlier steps, updated in place.
            head_mask, cross_attn_head_mask (`(N, h)`, *optional*): multiply each head's output of the masked
                self-attention, and of the encoder-decoder attention (1 keeps, 0 removes).
            return_dict: False gives the fields that are not None as a tuple, the last hidden state first
                (without building the output object: a decoder fed one position at a time calls this per step).
        """
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        past_length = cache.get_seq_length() if cache is not None else 0
        x = self.embed_positions(inputs_embeds, offset=past_length)  # (B, T, d_model)
        self_mask = causal_mask(x.size(1), past_length, attention_mask, x.device, fixed_cache_length(cache))
        memory_mask = padding_mask(encoder_attention_mask)
        hidden_states, self_attentions, cross_attentions = (x,), (), ()
        n, h = len(self.layers), self.layers[0].self_attn.num_heads
        masks = zip(
            layer_head_masks(head_mask, n, h, "decoder_head_mask"),
            layer_head_masks(cross_attn_head_mask, n, h, "cross_attn_head_mask"),
        )
        attention = attention_function(self.config, output_attentions)
        for layer, (self_head_mask, cross_head_mask) in zip(self.layers, masks):
            x, self_weights, cross_weights = layer(
                x,
                encoder_hidden_states,
                self_mask,
                memory_mask,
                cache=cache,
                need_weights=output_attentions,
                head_mask=self_head_mask,
                cross_attn_head_mask=cross_head_mask,
                attention=attention,
            )
            hidden_states = hidden_states + (x,)
            self_attentions, cross_attentions = self_attentions + (self_weights,), cross_attentions + (cross_weights,)
        if self.final_norm is not None:
            x = self.final_norm(x)
        if not return_dict:
            shown = (hidden_states if output_hidden_states else None,) + (
                (self_attentions, cross_attentions) if output_attentions else ()
            )
            return (x,) + tuple(value for value in shown if value is not None)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=x,
            hidden_states=hidden_states if output_hidden_states else None,
            attentions=self_attentions if output_attentions else None,
            cross_attentions=cross_attentions if output_attentions else None,
        )


# ---------------------------------------------------------------------------------------------
# The Hugging Face ladder: AiaynPreTrainedModel -> AiaynModel -> AiaynForConditionalGeneration
# ---------------------------------------------------------------------------------------------

# transformers 5.24 renamed the KV cache `past_key_values` -> `cache`, in `generate()`'s calls to
# `forward` and in the output classes; the models take either name and answer with the installed one.
CACHE_FIELD = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


def _cache_argument(cache: Cache | None, kwargs: dict) -> Cache | None:
    """The cache passed as `cache`, or as `past_key_values` (the name before transformers 5.24, which
    warns there as transformers' own models do)."""
    older = kwargs.pop("past_key_values", None)
    if older is not None and CACHE_FIELD == "cache":
        warnings.warn(
            "`past_key_values` is deprecated and will be removed in version 5.40.0: pass the cache as `cache`",
            FutureWarning,
            stacklevel=3,
        )
    return cache if cache is not None else older


class AiaynPreTrainedModel(PreTrainedModel):
    """Weights initialization and the Hugging Face plumbing shared by the aiayn models.

    Initialization follows fairseq's `transformer` (the paper does not specify one; tensor2tensor
    and fairseq agree on the essentials): every linear map Xavier-uniform with zero bias, token
    embeddings N(0, d_model^-0.5) with a zero padding row (so that the sqrt(d_model)-scaled
    embeddings have unit variance), learned positions likewise, LayerNorm gain 1 and bias 0.
    """

    config_class = AiaynConfig
    config: AiaynConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    _no_split_modules = ["EncoderLayer", "DecoderLayer"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.init_std if self.config.init_std is not None else self.config.d_model**-0.5
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding) and not getattr(module, "tied", False):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)


class AiaynModel(AiaynPreTrainedModel):
    """The encoder-decoder without the pre-softmax projection; returns the decoder's last hidden states."""

    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: AiaynConfig):
        super().__init__(config)
        # §3.4: one embedding matrix for the joint source/target vocabulary: `post_init` ties the
        # encoder's and the decoder's to `shared` (`_tied_weights_keys`, as BART does); with
        # tie_word_embeddings=False the three stay separate matrices.
        self.shared = Embeddings(config)
        self.encoder = Encoder(config, Embeddings(config, tied=config.tie_word_embeddings))
        self.decoder = Decoder(config, Embeddings(config, tied=config.tie_word_embeddings))
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.shared = value
        if self.config.tie_word_embeddings:
            self.encoder.embed_tokens = value
            self.decoder.embed_tokens = value

    def get_encoder(self, modality: str | None = None) -> Encoder:
        return self.encoder

    def get_decoder(self) -> Decoder:
        return self.decoder

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        head_mask: torch.Tensor | None = None,
        decoder_head_mask: torch.Tensor | None = None,
        cross_attn_head_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        """
        Args:
            input_ids (`LongTensor` of shape `(B, S)`): source token ids.
            attention_mask (`Tensor` of shape `(B, S)`, *optional*): 1 for source tokens, 0 for padding.
            decoder_input_ids (`LongTensor` of shape `(B, T)`): target ids shifted right
                (`prepare_decoder_input_ids_from_labels`), or only the new ones with `cache`.
            decoder_attention_mask (`Tensor` of shape `(B, T)`, *optional*): 1 for target tokens, 0 for padding.
            encoder_outputs (`BaseModelOutput`, *optional*): a precomputed encoder output.
            cache (`EncoderDecoderCache`, *optional*): the KV cache of incremental decoding (`past_key_values`,
                the name transformers before 5.24 passes, is taken too).
            use_cache (`bool`, *optional*): create and return a cache when none is given.
            head_mask, decoder_head_mask, cross_attn_head_mask (`Tensor` of shape `(N, h)`, *optional*): multiply
                the output of each head of the encoder's self-attention, the decoder's masked self-attention and
                the encoder-decoder attention before W^O (1 keeps a head, 0 removes it; the names of BART and
                Marian): `aiayn heads` removes heads this way.
        """
        cache = _cache_argument(cache, kwargs)
        output_attentions = bool(output_attentions if output_attentions is not None else self.config.output_attentions)
        output_hidden_states = bool(
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        use_cache = use_cache if use_cache is not None else (self.config.use_cache and not self.training)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                head_mask=head_mask,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        decoder_outputs = self.decoder(
            decoder_input_ids,
            encoder_outputs.last_hidden_state,
            attention_mask=decoder_attention_mask,
            encoder_attention_mask=attention_mask,
            cache=cache if use_cache else None,
            inputs_embeds=decoder_inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            head_mask=decoder_head_mask,
            cross_attn_head_mask=cross_attn_head_mask,
        )
        output = Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_FIELD: cache if use_cache else None},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )
        return output if return_dict is not False else output.to_tuple()


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs for teacher forcing: `<s> y_1 .. y_{n-1}` from labels `y_1 .. y_n` (-100 -> pad)."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill_(shifted == -100, pad_token_id)


# ---------------------------------------------------------------------------------------------
# 6.1 Machine Translation: the decoding defaults
#
# "We used beam search with a beam size of 4 and length penalty alpha = 0.6 [38]. [...] We set
# the maximum output length during inference to input length + 50, but terminate early when
# possible."
# ---------------------------------------------------------------------------------------------


def paper_generation_config(config: AiaynConfig) -> GenerationConfig:
    """The paper's decoding settings (§6.1), saved as `generation_config.json` with every model.

    `length_penalty_style="gnmt"` asks for GNMT's penalty ((5 + |Y|) / 6) ** alpha [38], which
    `aiayn translate` applies; `generate()` itself knows only its own |Y| ** alpha, which is a
    different number for the same alpha. `max_len_a` / `max_len_b` give the maximum output length
    a * input length + b (the paper: 1 * input + 50); `max_length` is only the absolute cap.
    """
    return GenerationConfig(
        num_beams=4,
        length_penalty=0.6,
        length_penalty_style="gnmt",
        max_len_a=1.0,
        max_len_b=50,
        max_length=config.max_position_embeddings,
        early_stopping=True,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
    )


class AiaynForConditionalGeneration(AiaynPreTrainedModel, GenerationMixin):
    """The Transformer for translation: `AiaynModel` plus the pre-softmax projection tied to the embeddings (§3.4).

    Works with `generate()` (greedy, beam search, sampling), `pipeline("translation")`,
    `save_pretrained` / `from_pretrained` / `push_to_hub`, and `Seq2SeqTrainer`.
    """

    _tied_weights_keys = {
        "lm_head.weight": "model.shared.weight",
        "model.encoder.embed_tokens.weight": "model.shared.weight",
        "model.decoder.embed_tokens.weight": "model.shared.weight",
    }

    def __init__(self, config: AiaynConfig):
        super().__init__(config)
        self.model = AiaynModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)  # the pre-softmax projection
        self.post_init()
        self.generation_config = paper_generation_config(config)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.shared

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def get_encoder(self, modality: str | None = None) -> Encoder:
        return self.model.encoder

    def get_decoder(self) -> Decoder:
        return self.model.decoder

    def _resize_token_embeddings(self, new_num_tokens: int, pad_to_multiple_of: int | None = None, *args):
        embeddings = self._get_resized_embeddings(self.get_input_embeddings(), new_num_tokens, pad_to_multiple_of)
        resized = Embeddings(self.config)  # keeps the sqrt(d_model) scale
        resized.num_embeddings = embeddings.num_embeddings
        resized.weight = embeddings.weight
        self.set_input_embeddings(resized)
        if not self.config.tie_word_embeddings:
            for stack in (self.model.encoder, self.model.decoder):
                old = stack.embed_tokens
                stack.embed_tokens.weight = self._get_resized_embeddings(old, new_num_tokens, pad_to_multiple_of).weight
                stack.embed_tokens.num_embeddings = stack.embed_tokens.weight.shape[0]
            self.lm_head = self._get_resized_lm_head(self.lm_head, resized.num_embeddings)
        return self.get_input_embeddings()

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        head_mask: torch.Tensor | None = None,
        decoder_head_mask: torch.Tensor | None = None,
        cross_attn_head_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """
        Args:
            labels (`LongTensor` of shape `(B, T)`, *optional*): target ids; positions holding -100 or the
                pad id are ignored. When given, `decoder_input_ids` default to the labels shifted right,
                and `loss` is the mean cross-entropy over the non-pad target tokens.
            (other arguments as in `AiaynModel.forward`)

        Returns:
            `Seq2SeqLMOutput` with `logits` of shape `(B, T, vocab_size)`.
        """
        cache = _cache_argument(cache, kwargs)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            head_mask=head_mask,
            decoder_head_mask=decoder_head_mask,
            cross_attn_head_mask=cross_attn_head_mask,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (B, T, vocab_size)
        loss = None
        if labels is not None:
            targets = labels.masked_fill(labels == self.config.pad_token_id, -100)
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)
        output = Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)},
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )
        return output if return_dict is not False else output.to_tuple()

    def generate(self, inputs: torch.Tensor | None = None, generation_config: GenerationConfig | None = None, **kwargs):
        """`GenerationMixin.generate`, stopping at the paper's maximum output length (§6.1).

        With neither `max_length` nor `max_new_tokens`, at most `max_len_a * S + max_len_b` tokens are
        generated (S: the padded source length; the generation config's `max_len_a` / `max_len_b`, the
        paper's 1 and 50), and never past `max_length`. `max_new_tokens` alone becomes the same
        `max_length`, so that transformers does not warn that both were set.
        """
        config = generation_config if generation_config is not None else self.generation_config
        if kwargs.get("max_length") is None and getattr(config, "max_new_tokens", None) is None:
            new_tokens, cap = kwargs.pop("max_new_tokens", None), None
            source = inputs if inputs is not None else kwargs.get("input_ids")
            a, b = getattr(config, "max_len_a", None), getattr(config, "max_len_b", None)
            if new_tokens is None and source is not None and a is not None and b is not None:
                new_tokens = int(a * source.shape[-1] + b)
                cap = config.max_length or self.config.max_position_embeddings
            if new_tokens is not None:
                prompt = kwargs.get("decoder_input_ids")
                length = (prompt.shape[-1] if prompt is not None else 1) + new_tokens  # after the start token
                kwargs["max_length"] = min(length, cap) if cap is not None else length
        return super().generate(inputs, generation_config, **kwargs)


# ---------------------------------------------------------------------------------------------
# Using the model: `pipeline("translation", ...)`
# ---------------------------------------------------------------------------------------------


class AiaynTranslationPipeline(Pipeline):
    """Sentences in, `{"translation_text": ...}` out, decoding with the model's generation config.

    transformers 5 has no built-in translation pipeline, so every saved aiayn folder declares this
    one in `config.custom_pipelines`:

        pipeline("translation", model="user/aiayn-model", trust_remote_code=True)
        AiaynTranslationPipeline(model=model, tokenizer=tokenizer)  # a model already in memory

    Keyword arguments (`num_beams`, `max_new_tokens`, ...) are passed to `generate()`.
    """

    def __call__(self, inputs: str | list[str], **generate_kwargs) -> list[dict]:
        """One sentence or a list of them -> a list of `{"translation_text": ...}` (as in transformers 4)."""
        outputs = super().__call__(inputs, **generate_kwargs)
        return [outputs] if isinstance(inputs, str) else outputs

    def _sanitize_parameters(self, **generate_kwargs):
        return {}, generate_kwargs, {}

    def preprocess(self, text: str):
        return self.tokenizer(text, return_tensors="pt", truncation=True)

    def _forward(self, inputs, **generate_kwargs):
        return {"output_ids": self.model.generate(**inputs, **generate_kwargs)}

    def postprocess(self, outputs):
        return {"translation_text": self.tokenizer.decode(outputs["output_ids"][0], skip_special_tokens=True)}


__all__ = [
    "AiaynTranslationPipeline",
    "AiaynForConditionalGeneration",
    "AiaynModel",
    "AiaynPreTrainedModel",
    "paper_generation_config",
    "sinusoidal_positional_encoding",
]
