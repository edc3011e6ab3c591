"""The model's decoder one target position at a time, for `aiayn_cli.decoding.search`'s searches.

`IncrementalDecoder` runs the model's own modules one target position at a time. The encoder runs
once per batch; the encoder-decoder attention keys and values are computed once per sentence and
shared by its beams (the beams of a sentence are the queries of one attention call); the
self-attention keys and values live in preallocated tensors, written in place and reordered with
one `index_select` per step for all layers; the rows of finished sentences are dropped, so that the
batch shrinks as sentences finish. The projections are those of `PreparedWeights`: prepacked for
oneDNN on CPUs (`Projection`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..model.modeling_aiayn import AiaynForConditionalGeneration, sinusoidal_positional_encoding


class Projection:
    """x W^T + b (optionally followed by ReLU) for a fixed weight W.

    On CPUs the weight is prepacked once for oneDNN's GEMM (`torch.ops.mkldnn._linear_pointwise`,
    the kernel `torch.compile` uses for frozen CPU linears), which runs 2-3x faster than the BLAS
    call of `F.linear` on CPUs where MKL does not use AVX-512 (AMD). Elsewhere, or where oneDNN is
    unavailable, it is `F.linear`.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, relu: bool = False):
        self.weight, self.bias, self.relu = weight, bias, relu
        self.packed = None
        if weight.device.type == "cpu" and _onednn_available():
            try:  # packing, and one call, fail where oneDNN lacks a kernel for the dtype (fp16 on most CPUs)
                self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, 64)
                self(weight.new_zeros(1, weight.size(1)))
            except (RuntimeError, AttributeError):
                self.packed = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(
                x, self.packed, self.bias, "relu" if self.relu else "none", [], ""
            )
        y = F.linear(x, self.weight, self.bias)
        return F.relu(y) if self.relu else y


class _Norm:
    """A LayerNorm's function, without the module call around it (the decoder calls it 3N times a step)."""

    def __init__(self, norm: torch.nn.LayerNorm):
        self.shape, self.weight, self.bias, self.eps = norm.normalized_shape, norm.weight, norm.bias, norm.eps

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.shape, self.weight, self.bias, self.eps)


def _onednn_available() -> bool:
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


class PreparedWeights:
    """The model's projections in the form the fast path uses (every encoder and decoder layer's, and
    the pre-softmax projection), prepared from the weights as they are now: a `Translator` prepares
    them once; `decode()` without them prepares them for that call. Prepare again after the weights
    change (an optimizer step, `load_state_dict`): nothing here can see such in-place changes."""

    def __init__(self, model: AiaynForConditionalGeneration):
        relu = model.config.activation_function == "relu"

        def feed_forward(ffn) -> dict:
            return {
                "w_1": Projection(ffn.w_1.weight, ffn.w_1.bias, relu=relu),
                "w_2": Projection(ffn.w_2.weight, ffn.w_2.bias),
                "activation": None if relu else ffn.activation,
            }

        self.encoder_layers = []
        for layer in model.model.encoder.layers:
            sa = layer.self_attn
            self.encoder_layers.append(
                {
                    "qkv": Projection(sa.qkv_proj.weight, sa.qkv_proj.bias),
                    "self_out": Projection(sa.out_proj.weight, sa.out_proj.bias),
                    **feed_forward(layer.feed_forward),
                    "norms": (_Norm(layer.self_attn_sublayer.norm), _Norm(layer.feed_forward_sublayer.norm)),
                }
            )
        self.decoder_layers = []
        for layer in model.model.decoder.layers:
            sa, ca = layer.self_attn, layer.cross_attn
            self.decoder_layers.append(
                {
                    "qkv": Projection(sa.qkv_proj.weight, sa.qkv_proj.bias),
                    "self_out": Projection(sa.out_proj.weight, sa.out_proj.bias),
                    "q": Projection(ca.q_proj.weight, ca.q_proj.bias),
                    "kv": Projection(ca.kv_proj.weight, ca.kv_proj.bias),
                    "cross_out": Projection(ca.out_proj.weight, ca.out_proj.bias),
                    **feed_forward(layer.feed_forward),
                    "norms": (
                        _Norm(layer.self_attn_sublayer.norm),
                        _Norm(layer.cross_attn_sublayer.norm),
                        _Norm(layer.feed_forward_sublayer.norm),
                    ),
                }
            )
        self.lm_head = Projection(model.lm_head.weight)


def _feed_forward(layer: dict, x: torch.Tensor) -> torch.Tensor:
    """3.3: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (the ReLU fused into the first projection)."""
    y = layer["w_1"](x)
    if layer["activation"] is not None:
        y = layer["activation"](y)
    return layer["w_2"](y)


def encode(
    model: AiaynForConditionalGeneration,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    weights: PreparedWeights,
) -> torch.Tensor:
    """The encoder's output `(B, S, d_model)`: `model.model.encoder` computed with the prepared projections."""
    encoder, config = model.model.encoder, model.config
    batch, length = input_ids.shape
    h, d_k, d_model, pre_norm = config.num_heads, config.d_k, config.d_model, config.pre_norm
    x = encoder.embed_positions(encoder.embed_tokens(input_ids)).view(batch * length, d_model)  # 3.4, 3.5
    mask = None
    if attention_mask is not None and not bool(attention_mask.all()):
        mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
    for layer in weights.encoder_layers:
        self_norm, ffn_norm = layer["norms"]
        qkv = layer["qkv"](self_norm(x) if pre_norm else x).view(batch, length, 3, h, d_k).permute(2, 0, 3, 1, 4)
        heads = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=mask)  # (B, h, S, d_k)
        y = layer["self_out"](heads.transpose(1, 2).reshape(batch * length, d_model))
        x = x + y if pre_norm else self_norm(x + y)
        y = _feed_forward(layer, ffn_norm(x) if pre_norm else x)
        x = x + y if pre_norm else ffn_norm(x + y)
    if encoder.final_norm is not None:
        x = encoder.final_norm(x)
    return x.view(batch, length, d_model)


class IncrementalDecoder:
    """The model's decoder, one target position per `step`, with in-place key/value caches.

    Rows are grouped by sentence, `rows_per_sentence` consecutive rows each (1 at first, the beam
    size after the first `select`). The self-attention keys and values of all layers are slices
    of one preallocated tensor `(rows, layers, 2, h, capacity, d_k)`; `select` copies the filled
    positions of the kept rows into a second such tensor (one `index_select` for all layers), and
    the two swap roles.
    """

    def __init__(
        self,
        model: AiaynForConditionalGeneration,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        capacity: int,
        max_rows: int,
        weights: PreparedWeights | None = None,
    ):
        """
        Args:
            model: an `AiaynForConditionalGeneration` in eval mode.
            input_ids (`(B, S)`), attention_mask (`(B, S)`, 1 for tokens): the source batch.
            capacity: the most target positions that will be fed (maximum output length + 1).
            max_rows: the most rows there will be (sentences times beams).
            weights: the model's prepared projections (default: prepared now).
        """
        config = model.config
        self.weights = weights if weights is not None else PreparedWeights(model)
        self.final_norm = model.model.decoder.final_norm
        self.pre_norm = config.pre_norm
        self.h, self.d_k, self.d_model = config.num_heads, config.d_k, config.d_model
        decoder = model.model.decoder
        embed = decoder.embed_tokens
        self.embed_weight, self.embed_scale = embed.weight, embed.scale
        dtype, device = embed.weight.dtype, embed.weight.device
        positions = torch.arange(capacity, device=device)
        if decoder.embed_positions.learned is not None:
            self.positions = decoder.embed_positions.learned(positions)
        else:
            self.positions = sinusoidal_positional_encoding(positions, self.d_model).to(dtype)  # (capacity, d_model)

        # The encoder runs once; each layer's encoder-decoder keys and values are computed once per sentence.
        memory = encode(model, input_ids, attention_mask, self.weights)  # (B, S, d_model)
        batch, source_length, _ = memory.shape
        self.memory_mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            self.memory_mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
        self.cross_kv = []
        for layer in self.weights.decoder_layers:
            kv = layer["kv"](memory.view(-1, self.d_model)).view(batch, source_length, 2, self.h, self.d_k)
            self.cross_kv.append(kv.permute(2, 0, 3, 1, 4))  # (2, B, h, S, d_k)

        shape = (max_rows, len(decoder.layers), 2, self.h, capacity, self.d_k)
        self._buffers = [torch.empty(shape, dtype=dtype, device=device) for _ in range(2)]
        self._current = 0
        self.cache = self._buffers[0][:batch]  # (N, layers, 2, h, capacity, d_k)
        self.batch, self.rows_per_sentence, self.position = batch, 1, 0

    def select(self, rows: torch.Tensor, sentences: torch.Tensor) -> None:
        n, filled = rows.numel(), self.position
        target = self._buffers[1 - self._current][:n]
        torch.index_select(self.cache[..., :filled, :], 0, rows, out=target[..., :filled, :])
        self.cache, self._current = target, 1 - self._current
        if sentences.numel() != self.batch:  # sentences finished, or rows became sentences of their own
            self.cross_kv = [kv.index_select(1, sentences) for kv in self.cross_kv]
            if self.memory_mask is not None:
                self.memory_mask = self.memory_mask.index_select(0, sentences)
            self.batch = sentences.numel()
        self.rows_per_sentence = n // self.batch

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        t, n, batch, beams = self.position, tokens.numel(), self.batch, self.rows_per_sentence
        h, d_k, d_model, pre_norm = self.h, self.d_k, self.d_model, self.pre_norm
        # 3.4 and 3.5: the scaled embedding plus the encoding of position t.
        x = F.embedding(tokens, self.embed_weight) * self.embed_scale + self.positions[t]  # (N, d_model)
        for i, layer in enumerate(self.weights.decoder_layers):
            self_norm, cross_norm, ffn_norm = layer["norms"]
            # Masked self-attention over positions 0..t; the new key and value are written in place.
            qkv = layer["qkv"](self_norm(x) if pre_norm else x).view(n, 3, h, d_k)
            self.cache[:, i, :, :, t] = qkv[:, 1:]
            keys, values = self.cache[:, i, 0, :, : t + 1], self.cache[:, i, 1, :, : t + 1]  # (N, h, t+1, d_k)
            heads = F.scaled_dot_product_attention(qkv[:, 0, :, None], keys, values)  # (N, h, 1, d_k)
            y = layer["self_out"](heads.view(n, d_model))
            x = x + y if pre_norm else self_norm(x + y)
            # Encoder-decoder attention: the beams of a sentence are the queries of one attention call.
            query = layer["q"](cross_norm(x) if pre_norm else x).view(batch, beams, h, d_k).transpose(1, 2)
            keys, values = self.cross_kv[i]  # (B, h, S, d_k) each
            heads = F.scaled_dot_product_attention(
                query, keys, values, attn_mask=self.memory_mask
            )  # (B, h, beams, d_k)
            y = layer["cross_out"](heads.transpose(1, 2).reshape(n, d_model))
            x = x + y if pre_norm else cross_norm(x + y)
            y = _feed_forward(layer, ffn_norm(x) if pre_norm else x)
            x = x + y if pre_norm else ffn_norm(x + y)
        if self.final_norm is not None:
            x = self.final_norm(x)
        self.position += 1
        return self.weights.lm_head(x)  # (N, V)


__all__ = ["IncrementalDecoder", "PreparedWeights", "Projection", "encode"]
