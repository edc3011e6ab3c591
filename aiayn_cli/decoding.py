"""Fast decoding for `AiaynForConditionalGeneration`: beam search as in the paper (§6.1), greedy, sampling.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 [38]. [...] We set the
maximum output length during inference to input length + 50, but terminate early when possible."

Two parts:

* `IncrementalDecoder` runs the model's own modules one target position at a time. The encoder
  runs once per batch; the encoder-decoder attention keys and values are computed once per
  sentence and shared by its beams (the beams of a sentence are the queries of one attention
  call); the self-attention keys and values live in preallocated tensors, written in place and
  reordered with one `index_select` per step for all layers; the rows of finished sentences are
  dropped, so that the batch shrinks as sentences finish.
* `beam_search` and `sample_search` drive any object with the `step` / `select` interface of
  `IncrementalDecoder` (the tests also drive them with a scripted distribution).

Beam search semantics (fairseq's, and Hugging Face's `early_stopping=True`):

* at each step every live hypothesis is extended by every token; the 2 * beam best candidates by
  summed log-probability are kept, so that hypotheses that end do not starve the beam;
* a candidate ending in `</s>` among the best `beam` is finished, with score
  sum log p / lp(|Y|), where |Y| counts the generated tokens including `</s>` and lp is GNMT's
  ((5 + |Y|) / 6) ** alpha [38] (`length_penalty_style="gnmt"`) or Hugging Face's |Y| ** alpha
  (`"hf"`);
* the best `beam` candidates that do not end are the live hypotheses of the next step;
* a sentence stops when it has `beam` finished hypotheses ("stop when all beams are finished"),
  or at its maximum length max_len_a * |x| + max_len_b (|x|: source tokens, `</s>` included),
  where `</s>` is forced. No bound on what live hypotheses could still reach is used (with GNMT's
  penalty a longer hypothesis can still overtake a finished one): this is the paper's
  "terminate early when possible", as in fairseq and in `generate(early_stopping=True)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Protocol

import torch
import torch.nn.functional as F

from .modeling_aiayn import AiaynForConditionalGeneration, sinusoidal_positional_encoding

LENGTH_PENALTY_STYLES = ("gnmt", "hf")


# ---------------------------------------------------------------------------------------------
# Options: the model's generation_config (§6.1 defaults), overridden by the caller
# ---------------------------------------------------------------------------------------------


@dataclass
class DecodingOptions:
    """How to decode. `DecodingOptions.from_generation_config` reads a model's saved defaults.

    Args:
        num_beams: beam size; 1 is greedy search (or sampling, with `do_sample`).
        length_penalty: alpha of the length penalty; 0 ranks by summed log-probability.
        length_penalty_style: "gnmt", ((5 + |Y|) / 6) ** alpha (the paper's [38]), or "hf", |Y| ** alpha.
        max_len_a, max_len_b: at most `max_len_a * |x| + max_len_b` tokens before `</s>`.
        min_len: `</s>` is not allowed before this many tokens (0: no minimum).
        nbest: hypotheses returned per sentence (at most num_beams; with sampling, the number of samples).
        do_sample: sample from the model's distribution instead of searching.
        temperature, top_k, top_p: sampling filters (top_k 0 and top_p 1.0 disable them).
        seed: seed of the sampling generator (None: not seeded).
    """

    num_beams: int = 4
    length_penalty: float = 0.6
    length_penalty_style: str = "gnmt"
    max_len_a: float = 1.0
    max_len_b: int = 50
    min_len: int = 0
    nbest: int = 1
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    @classmethod
    def from_generation_config(cls, generation_config, **overrides) -> "DecodingOptions":
        """Defaults from a `GenerationConfig` (fields it lacks keep the paper's values), then the
        `overrides` that are not None."""
        saved = {}
        if generation_config is not None:
            for f in fields(cls):
                value = getattr(generation_config, f.name, None)
                if value is not None:
                    saved[f.name] = value
            if not saved.get("do_sample"):  # generate()'s sampling defaults mean nothing for search
                for name in ("top_k", "top_p", "temperature"):
                    saved.pop(name, None)
        options = replace(cls(**saved), **{k: v for k, v in overrides.items() if v is not None})
        return options

    def validate(self) -> None:
        """Raise `ValueError`, naming the option, for values that cannot be decoded with."""
        if self.num_beams < 1:
            raise ValueError(f"num_beams must be >= 1, got {self.num_beams}")
        if self.length_penalty_style not in LENGTH_PENALTY_STYLES:
            raise ValueError(f"length_penalty_style must be one of {', '.join(LENGTH_PENALTY_STYLES)}, "
                             f"got {self.length_penalty_style!r}")
        if self.nbest < 1 or (not self.do_sample and self.nbest > self.num_beams):
            raise ValueError(f"nbest must be between 1 and num_beams ({self.num_beams}), got {self.nbest}")
        if self.max_len_a < 0 or self.max_len_b < 0 or self.min_len < 0:
            raise ValueError("max_len_a, max_len_b and min_len must be >= 0")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.top_k < 0 or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_k must be >= 0 and top_p in (0, 1], got {self.top_k} and {self.top_p}")


def length_penalty(length: int, alpha: float, style: str = "gnmt") -> float:
    """lp(|Y|), which a finished hypothesis's summed log-probability is divided by.

    GNMT [38] (Wu et al., 2016, eq. 14): lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha.
    Hugging Face `generate()`: lp(Y) = |Y|^alpha.
    """
    if style == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if style == "hf":
        return float(length) ** alpha
    raise ValueError(f"length_penalty_style must be one of {', '.join(LENGTH_PENALTY_STYLES)}, got {style!r}")


@dataclass
class Hypothesis:
    """A finished translation: token ids without `<s>` and `</s>`, its score (log_prob / lp) and log-probability."""

    tokens: list[int]
    score: float
    log_prob: float


# ---------------------------------------------------------------------------------------------
# The incremental decoder over the model's modules
# ---------------------------------------------------------------------------------------------


class StepDecoder(Protocol):
    """What the searches need: next-token logits for the current rows, and a way to keep some rows."""

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """`tokens` `(N,)`: the token fed at the current position of every row -> logits `(N, V)`."""

    def select(self, rows: torch.Tensor, sentences: torch.Tensor) -> None:
        """Keep `rows` (indices into the current rows, grouped by sentence, as many per sentence),
        which belong to `sentences` (indices into the current sentences: all of them, in order,
        when their number does not change)."""


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
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "relu" if self.relu else "none", [], "")
        y = F.linear(x, self.weight, self.bias)
        return F.relu(y) if self.relu else y


class _Norm:
    """A LayerNorm's function, without the module call around it (the decoder calls it 3N times a step)."""

    def __init__(self, norm: torch.nn.LayerNorm):
        self.shape, self.weight, self.bias, self.eps = norm.normalized_shape, norm.weight, norm.bias, norm.eps

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.shape, self.weight, self.bias, self.eps)


def _onednn_available() -> bool:
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


class PreparedWeights:
    """The model's projections in the form the fast path uses (every encoder and decoder layer's, and
    the pre-softmax projection), prepared from the weights as they are now: a `Translator` prepares
    them once; `decode()` without them prepares them for that call. Prepare again after the weights
    change (an optimizer step, `load_state_dict`): nothing here can see such in-place changes."""

    def __init__(self, model: AiaynForConditionalGeneration):
        relu = model.config.activation_function == "relu"

        def feed_forward(ffn) -> dict:
            return {"w_1": Projection(ffn.w_1.weight, ffn.w_1.bias, relu=relu),
                    "w_2": Projection(ffn.w_2.weight, ffn.w_2.bias),
                    "activation": None if relu else ffn.activation}

        self.encoder_layers = []
        for layer in model.model.encoder.layers:
            sa = layer.self_attn
            self.encoder_layers.append({
                "qkv": Projection(sa.qkv_proj.weight, sa.qkv_proj.bias),
                "self_out": Projection(sa.out_proj.weight, sa.out_proj.bias),
                **feed_forward(layer.feed_forward),
                "norms": (_Norm(layer.self_attn_sublayer.norm), _Norm(layer.feed_forward_sublayer.norm)),
            })
        self.decoder_layers = []
        for layer in model.model.decoder.layers:
            sa, ca = layer.self_attn, layer.cross_attn
            self.decoder_layers.append({
                "qkv": Projection(sa.qkv_proj.weight, sa.qkv_proj.bias),
                "self_out": Projection(sa.out_proj.weight, sa.out_proj.bias),
                "q": Projection(ca.q_proj.weight, ca.q_proj.bias),
                "kv": Projection(ca.kv_proj.weight, ca.kv_proj.bias),
                "cross_out": Projection(ca.out_proj.weight, ca.out_proj.bias),
                **feed_forward(layer.feed_forward),
                "norms": (_Norm(layer.self_attn_sublayer.norm), _Norm(layer.cross_attn_sublayer.norm),
                          _Norm(layer.feed_forward_sublayer.norm)),
            })
        self.lm_head = Projection(model.lm_head.weight)



def _feed_forward(layer: dict, x: torch.Tensor) -> torch.Tensor:
    """3.3: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (the ReLU fused into the first projection)."""
    y = layer["w_1"](x)
    if layer["activation"] is not None:
        y = layer["activation"](y)
    return layer["w_2"](y)


def encode(model: AiaynForConditionalGeneration, input_ids: torch.Tensor,
           attention_mask: torch.Tensor | None, weights: PreparedWeights) -> torch.Tensor:
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

    def __init__(self, model: AiaynForConditionalGeneration, input_ids: torch.Tensor,
                 attention_mask: torch.Tensor | None, capacity: int, max_rows: int,
                 weights: PreparedWeights | None = None):
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
            heads = F.scaled_dot_product_attention(query, keys, values, attn_mask=self.memory_mask)  # (B, h, beams, d_k)
            y = layer["cross_out"](heads.transpose(1, 2).reshape(n, d_model))
            x = x + y if pre_norm else cross_norm(x + y)
            y = _feed_forward(layer, ffn_norm(x) if pre_norm else x)
            x = x + y if pre_norm else ffn_norm(x + y)
        if self.final_norm is not None:
            x = self.final_norm(x)
        self.position += 1
        return self.weights.lm_head(x)  # (N, V)


# ---------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------


def _force_eos(lprobs: torch.Tensor, rows: torch.Tensor, eos_id: int) -> None:
    """At a row's maximum length only `</s>` may follow: every other entry becomes -inf, in place."""
    if bool(rows.any()):
        eos = lprobs[rows, eos_id]
        lprobs[rows] = -math.inf
        lprobs[rows, eos_id] = eos


def beam_search(decoder: StepDecoder, max_lens: list[int], options: DecodingOptions, bos_id: int,
                eos_id: int, device: torch.device | str = "cpu") -> list[list[Hypothesis]]:
    """Beam search over `len(max_lens)` sentences; each sentence's best `options.nbest` hypotheses, best first.

    Args:
        decoder: one row per sentence, before any position has been fed.
        max_lens: for each sentence, the most tokens before `</s>` (`</s>` is then forced).
    """
    beam, alpha, style = options.num_beams, options.length_penalty, options.length_penalty_style
    batch = len(max_lens)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    alive = list(range(batch))  # the original index of each current sentence
    max_len_rows = torch.tensor(max_lens, device=device)  # (N,)
    scores = torch.zeros(batch, 1, device=device)  # (B, beams): summed log-probabilities of the live hypotheses
    history = torch.empty(batch, 0, dtype=torch.long, device=device)  # (N, t): the tokens generated so far
    tokens = torch.full((batch,), bos_id, dtype=torch.long, device=device)
    t = 0
    while True:
        lprobs = F.log_softmax(decoder.step(tokens).float(), dim=-1)  # (N, V)
        vocab = lprobs.size(-1)
        if t < options.min_len:
            lprobs[:, eos_id] = -math.inf
        _force_eos(lprobs, max_len_rows <= t, eos_id)
        n_sentences, beams = scores.shape
        candidates = lprobs.add_(scores.view(-1, 1)).view(n_sentences, beams * vocab)  # in place: lprobs is done
        top_scores, top_ids = candidates.topk(min(2 * beam, beams * vocab), dim=1)  # (B, 2 * beam)
        top_beams, top_tokens = top_ids // vocab, top_ids % vocab
        ends = top_tokens == eos_id

        # Candidates ending in </s> among the best `beam` are finished.
        new_finished = ends[:, :beam] & (top_scores[:, :beam] > -math.inf)
        if bool(new_finished.any()):
            lp = length_penalty(t + 1, alpha, style)
            for b, j in new_finished.nonzero().tolist():
                done = finished[alive[b]]
                if len(done) < beam:
                    raw = float(top_scores[b, j])
                    done.append(Hypothesis(history[b * beams + int(top_beams[b, j])].tolist(), raw / lp, raw))

        # The best `beam` candidates that do not end are the next live hypotheses.
        order = ends.long() * ends.size(1) + torch.arange(ends.size(1), device=device)
        keep = order.topk(beam, dim=1, largest=False).indices  # (B, beam), in candidate order
        scores, keep_beams, keep_tokens = top_scores.gather(1, keep), top_beams.gather(1, keep), top_tokens.gather(1, keep)

        # A sentence with `beam` finished hypotheses, or at its maximum length, is done.
        at_max = (max_len_rows.view(n_sentences, beams)[:, 0] <= t).tolist()
        still = [b for b in range(n_sentences) if len(finished[alive[b]]) < beam and not at_max[b]]
        t += 1
        if not still:
            break
        if len(still) < n_sentences:
            sentences = torch.tensor(still, device=device)
            scores, keep_beams, keep_tokens = scores[sentences], keep_beams[sentences], keep_tokens[sentences]
            alive = [alive[b] for b in still]
        else:
            sentences = torch.arange(n_sentences, device=device)
        rows = (sentences.unsqueeze(1) * beams + keep_beams).view(-1)  # (B' * beam,)
        decoder.select(rows, sentences)
        tokens = keep_tokens.view(-1)
        history = torch.cat([history[rows], tokens[:, None]], dim=1)
        max_len_rows = max_len_rows[rows]
    for hyps in finished:
        hyps.sort(key=lambda hyp: hyp.score, reverse=True)
    return [hyps[: options.nbest] for hyps in finished]


# ---------------------------------------------------------------------------------------------
# Greedy search and sampling
# ---------------------------------------------------------------------------------------------


def sample_search(decoder: StepDecoder, max_lens: list[int], options: DecodingOptions, bos_id: int,
                  eos_id: int, device: torch.device | str = "cpu") -> list[list[Hypothesis]]:
    """Greedy search (`do_sample=False`), or sampling with temperature, top-k and top-p (`options.nbest`
    samples per sentence). Every row is its own sentence for the decoder, and rows finish one by one.

    A hypothesis's `log_prob` is the model's log-probability (temperature 1, unfiltered).
    """
    samples = options.nbest if options.do_sample else 1
    batch = len(max_lens)
    generator = None
    if options.do_sample and options.seed is not None:
        generator = torch.Generator(device=device).manual_seed(options.seed)
    results: list[list[Hypothesis]] = [[] for _ in range(batch)]
    owner = [b for b in range(batch) for _ in range(samples)]  # the sentence of each row
    if samples > 1:
        rows = torch.tensor(owner, device=device)
        decoder.select(rows, rows)
    max_len_rows = torch.tensor([max_lens[b] for b in owner], device=device)
    log_probs = torch.zeros(len(owner), device=device)
    history = torch.empty(len(owner), 0, dtype=torch.long, device=device)  # (N, t)
    tokens = torch.full((len(owner),), bos_id, dtype=torch.long, device=device)
    t = 0
    while True:
        logits = decoder.step(tokens).float()  # (N, V)
        if t < options.min_len:
            logits[:, eos_id] = -math.inf
        _force_eos(logits, max_len_rows <= t, eos_id)
        lprobs = F.log_softmax(logits, dim=-1)
        tokens = _sample(logits, options, generator) if options.do_sample else lprobs.argmax(dim=-1)
        log_probs = log_probs + lprobs.gather(1, tokens[:, None]).squeeze(1)
        t += 1
        ended = (tokens == eos_id).tolist()
        if any(ended):
            lp = length_penalty(t, options.length_penalty, options.length_penalty_style)
            for r in (r for r, e in enumerate(ended) if e):
                raw = float(log_probs[r])
                results[owner[r]].append(Hypothesis(history[r].tolist(), raw / lp, raw))
            kept = [r for r, e in enumerate(ended) if not e]
            if not kept:
                break
            rows = torch.tensor(kept, device=device)
            decoder.select(rows, rows)
            owner = [owner[r] for r in kept]
            max_len_rows, log_probs, history, tokens = max_len_rows[rows], log_probs[rows], history[rows], tokens[rows]
        history = torch.cat([history, tokens[:, None]], dim=1)
    for hyps in results:
        hyps.sort(key=lambda hyp: hyp.score, reverse=True)
    return results


def _sample(logits: torch.Tensor, options: DecodingOptions, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from softmax(logits / temperature), within the top-k and the top-p nucleus."""
    logits = logits / options.temperature
    if 0 < options.top_k < logits.size(-1):
        kth = logits.topk(options.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if options.top_p < 1.0:
        sorted_logits, sorted_ids = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        outside = probs.cumsum(dim=-1) - probs >= options.top_p  # the token that crosses top_p stays in
        logits = logits.scatter(-1, sorted_ids, sorted_logits.masked_fill(outside, -math.inf))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(1)


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def max_output_lengths(source_lengths: list[int], options: DecodingOptions, cap: int) -> list[int]:
    """The most tokens before `</s>` for each sentence: max_len_a * |x| + max_len_b, at most `cap`."""
    return [max(min(options.min_len, cap), min(cap, int(options.max_len_a * n + options.max_len_b)))
            for n in source_lengths]


def output_length_cap(model: AiaynForConditionalGeneration) -> int:
    """The longest output the model can give, in tokens before `</s>`: the decoder sees at most
    `max_position_embeddings` positions (`<s>` and the tokens before `</s>`), and `generate()`'s
    `max_length` counts `<s>` and `</s>` too."""
    cap = model.config.max_position_embeddings - 1
    generation_max = getattr(model.generation_config, "max_length", None)
    if generation_max:
        cap = min(cap, generation_max - 2)
    return max(cap, 0)


@torch.inference_mode()
def decode(model: AiaynForConditionalGeneration, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
           options: DecodingOptions, weights: PreparedWeights | None = None) -> list[list[Hypothesis]]:
    """Translate one padded batch: each sentence's hypotheses, best first (`options.nbest` of them).

    Args:
        input_ids (`(B, S)`), attention_mask (`(B, S)`, 1 for tokens): the source batch, on the model's device.
        weights: `PreparedWeights(model)`, to reuse across calls while the weights do not change
            (default: prepared for this call).
    """
    options.validate()
    config = model.config
    if attention_mask is None:
        lengths = [input_ids.size(1)] * input_ids.size(0)
    else:
        lengths = attention_mask.sum(-1).tolist()
    max_lens = max_output_lengths(lengths, options, output_length_cap(model))
    searching = options.num_beams > 1 and not options.do_sample
    rows = input_ids.size(0) * (options.num_beams if searching else options.nbest if options.do_sample else 1)
    decoder = IncrementalDecoder(model, input_ids, attention_mask, capacity=max(max_lens) + 1, max_rows=rows,
                                 weights=weights)
    search = beam_search if searching else sample_search
    return search(decoder, max_lens, options, config.decoder_start_token_id, config.eos_token_id, input_ids.device)


__all__ = [
    "DecodingOptions",
    "Hypothesis",
    "IncrementalDecoder",
    "PreparedWeights",
    "beam_search",
    "decode",
    "length_penalty",
    "max_output_lengths",
    "output_length_cap",
    "sample_search",
]
