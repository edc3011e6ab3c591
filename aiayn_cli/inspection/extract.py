"""Attention, tokens and per-token log-probabilities of a trained model, for a batch of sentences.

    from aiayn_cli.inspection import explain

    [ex] = explain(model, tokenizer, ["A man rides a bike."])          # the model's own translation
    [ex] = explain(model, tokenizer, ["A man rides a bike."], ["Ein Mann fährt Fahrrad."])  # a reference
    ex.target_tokens, ex.token_log_probs, ex.score
    ex.cross_attentions[-1]        # the last layer's encoder-decoder attention, (1, h, T, S)

Without a reference the target is the model's translation by the paper's beam search, found by
`Translator` (the tokens `aiayn translate` prints); with one, the reference's tokens. Either way
the target is then run through the decoder in one teacher-forced pass of the model itself
(`model(..., output_attentions=True)`), which gives the three kinds of attention of §3.2.3 and the
log-probability of each target token (what `fairseq-generate --score-reference` reports).

Decoder position t reads y_{t-1} (`<s>` at t = 0) and predicts y_t: its row of decoder
self-attention and of encoder-decoder attention is the one that chose y_t.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from ..errors import AiaynError

KINDS = ("encoder", "decoder", "cross")
KIND_NAMES = {
    "encoder": "encoder self-attention",
    "decoder": "masked decoder self-attention",
    "cross": "encoder-decoder attention",
}


@dataclass
class Explanation:
    """One sentence pair as the model sees it.

    Attention tensors follow Hugging Face's `output_attentions` layout: a tuple with one tensor per
    layer, each `(1, h, T_query, T_key)`, without padding. `source_ids` end in `</s>`;
    `target_ids` are y_1 .. y_n, ending in `</s>`; the decoder reads `decoder_input_ids`
    (`<s>` y_1 .. y_{n-1}).
    """

    source: str
    target: str
    source_ids: list[int]
    target_ids: list[int]
    decoder_input_ids: list[int]
    source_tokens: list[str]
    target_tokens: list[str]
    decoder_input_tokens: list[str]
    source_words: list[int]  # the word each source token belongs to (special tokens: words of their own)
    target_words: list[int]
    decoder_input_words: list[int]
    token_log_probs: list[float]  # log p(y_t | y_<t, x), per target token
    log_prob: float  # their sum
    score: float  # log_prob / lp(n), the length penalty of the decoding options (what `aiayn translate` prints)
    length_penalty: str  # how `score` was normalized, in words
    is_reference: bool
    encoder_attentions: tuple[torch.Tensor, ...]
    decoder_attentions: tuple[torch.Tensor, ...]
    cross_attentions: tuple[torch.Tensor, ...]
    # eq. (1) from the model's own projections: q.k (not yet divided by sqrt(d_k); -inf where masked)
    # and |v| of every key, per kind, one tensor (h, T_query, T_key) / (h, T_key) per layer.
    raw_scores: dict[str, tuple[torch.Tensor, ...]] = field(default_factory=dict)
    value_norms: dict[str, tuple[torch.Tensor, ...]] = field(default_factory=dict)
    d_k: int = 0

    def attentions(self, kind: str) -> tuple[torch.Tensor, ...]:
        return {"encoder": self.encoder_attentions, "decoder": self.decoder_attentions, "cross": self.cross_attentions}[
            kind
        ]


def explain(
    model,
    tokenizer,
    sources: list[str],
    references: list[str] | None = None,
    *,
    device: str | None = "cpu",
    with_scores: bool = True,
    source_ids: list[list[int]] | None = None,
    **decoding_options,
) -> list[Explanation]:
    """Tokens, log-probabilities and attention for each source sentence (and its reference, if given).

    `model` is an `AiaynForConditionalGeneration` with its `tokenizer`, or a `Translator` (whose
    model, tokenizer and device are used; `tokenizer` is then ignored).

    `decoding_options` (`num_beams`, `length_penalty`, ...) override the model's generation config,
    as `aiayn translate`'s flags do. `source_ids`: the sources already encoded (as `Translator.encode`
    gives them). Raises `AiaynError` for an empty sentence, a sentence longer than the model's
    limit, or references that do not pair with the sources.
    """
    from ..decoding.translator import Translator

    translator = model if isinstance(model, Translator) else Translator(model, tokenizer, device=device)
    sources = list(sources)
    if references is not None and len(references) != len(sources):
        raise AiaynError(f"{len(references)} references for {len(sources)} sentences: give one reference per sentence")
    if not sources:
        raise AiaynError("no sentence to explain")
    options = translator.decoding_options(**decoding_options)
    source_ids = _encode(translator, sources, "sentence") if source_ids is None else source_ids
    if references is None:
        hypotheses = translator._decode(source_ids, options)  # the beam search of `aiayn translate`
        target_ids = [h[0].tokens + [translator.eos_id] for h in hypotheses]
        texts = [translator.detokenize(h[0].tokens) for h in hypotheses]
    else:
        target_ids = _encode(translator, list(references), "reference", target=True)
        texts = list(references)
    outputs = teacher_forced(translator.model, source_ids, target_ids, with_scores=with_scores)
    return [
        _explanation(translator, sources[i], texts[i], source_ids[i], target_ids[i], outputs, i, options, references)
        for i in range(len(sources))
    ]


def _encode(translator, sentences: list[str], what: str, target: bool = False) -> list[list[int]]:
    for number, sentence in enumerate(sentences, 1):
        if not sentence.strip():
            raise AiaynError(f"{what} {number} is empty: give a sentence to explain")
    if not target:
        return translator.encode(sentences, on_long="error", source=what)
    encoded = translator.tokenizer(text_target=sentences, add_special_tokens=True, truncation=False, verbose=False)
    limit = translator.max_source_tokens
    for number, tokens in enumerate(encoded["input_ids"], 1):
        if len(tokens) > limit:
            raise AiaynError(f"{what} {number}: {len(tokens)} tokens, more than the model's limit of {limit}")
    return [list(tokens) for tokens in encoded["input_ids"]]


# ---------------------------------------------------------------------------------------------
# One teacher-forced pass of the model
# ---------------------------------------------------------------------------------------------


def padded_batch(model, source_ids: list[list[int]], target_ids: list[list[int]]) -> dict[str, torch.Tensor]:
    """The model's inputs for sources and targets, right-padded: `input_ids`, `attention_mask`,
    `decoder_input_ids` (the targets shifted right by the model), `decoder_attention_mask`, `labels`."""
    pad = model.config.pad_token_id
    device = next(model.parameters()).device

    def pad_rows(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
        return ids.to(device), mask.to(device)

    input_ids, attention_mask = pad_rows(source_ids)
    labels, decoder_attention_mask = pad_rows(target_ids)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(labels),
        "decoder_attention_mask": decoder_attention_mask,
        "labels": labels,
    }


@torch.inference_mode()
def teacher_forced(model, source_ids: list[list[int]], target_ids: list[list[int]], with_scores: bool = True) -> dict:
    """`model(..., output_attentions=True)` on padded sources and targets: the model's outputs, the
    inputs, each target token's log-probability `(B, T)` and, with `with_scores`, eq. (1)'s raw
    scores and value norms per kind and layer (from `capture_scores`)."""
    batch = padded_batch(model, source_ids, target_ids)
    labels = batch.pop("labels")
    with capture_scores(model, enabled=with_scores) as captured:
        outputs = model(**batch, output_attentions=True, use_cache=False)
    log_probs = outputs.logits.float().log_softmax(-1).gather(-1, labels[..., None])[..., 0]  # (B, T)
    return {"outputs": outputs, "batch": batch, "labels": labels, "log_probs": log_probs, "captured": captured}


@contextlib.contextmanager
def capture_scores(model, enabled: bool = True) -> Iterator[dict]:
    """While active, every multi-head attention of the model records, per call, its raw scores
    q.k `(B, h, T_q, T_k)` (-inf where its mask forbids) and the norms |v| `(B, h, T_k)`, computed
    with that module's own projections W^Q, W^K, W^V (`captured[kind][layer]`).

    The model may be shared by threads (a server's): the hooks record only this thread's calls, so
    another thread translating or capturing at the same time neither runs them nor is recorded."""
    captured: dict[str, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {kind: {} for kind in KINDS}
    handles = []
    if enabled:
        modules = [("encoder", i, layer.self_attn) for i, layer in enumerate(model.get_encoder().layers)]
        for i, layer in enumerate(model.get_decoder().layers):
            modules += [("decoder", i, layer.self_attn), ("cross", i, layer.cross_attn)]
        owner = threading.get_ident()
        for kind, index, module in modules:
            handles.append(module.register_forward_hook(_recorder(captured[kind], index, owner), with_kwargs=True))
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def _recorder(store: dict, index: int, owner: int):
    def hook(module, args, *kwargs_and_output):
        # Another thread's call: not ours to record. (It may even come without kwargs: torch marks a hook
        # as taking them just after adding it, and a forward in between calls it with (args, output).)
        if threading.get_ident() != owner:
            return
        kwargs, _output = kwargs_and_output
        hidden = args[0] if args else kwargs["hidden_states"]
        if module.self_attention:
            query, key, value = module._split_heads(module.qkv_proj(hidden), 3)  # (B, h, T, d_k) each
        else:
            (query,) = module._split_heads(module.q_proj(hidden), 1)
            key, value = module._split_heads(module.kv_proj(kwargs["key_value_states"]), 2)
        scores = query.float() @ key.float().transpose(-2, -1)  # (B, h, T_q, T_k): q.k
        mask = kwargs.get("mask")
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        store[index] = (scores, value.float().norm(dim=-1))

    return hook


# ---------------------------------------------------------------------------------------------
# Per sentence
# ---------------------------------------------------------------------------------------------


def _explanation(translator, source, text, src, tgt, forced, i, options, references) -> Explanation:
    from ..decoding.search import length_penalty

    tokenizer, outputs, batch = translator.tokenizer, forced["outputs"], forced["batch"]
    s, t = len(src), len(tgt)
    decoder_input = batch["decoder_input_ids"][i, :t].tolist()
    log_probs = forced["log_probs"][i, :t].tolist()
    lp = length_penalty(t, options.length_penalty, options.length_penalty_style)
    captured = forced["captured"]
    sizes = {"encoder": (s, s), "decoder": (t, t), "cross": (t, s)}
    raw_scores = {
        k: tuple(v[0][i, :, : sizes[k][0], : sizes[k][1]].cpu() for _, v in sorted(captured[k].items())) for k in KINDS
    }
    value_norms = {k: tuple(v[1][i, :, : sizes[k][1]].cpu() for _, v in sorted(captured[k].items())) for k in KINDS}
    return Explanation(
        source=source,
        target=text,
        source_ids=list(src),
        target_ids=list(tgt),
        decoder_input_ids=decoder_input,
        source_tokens=tokenizer.convert_ids_to_tokens(list(src)),
        target_tokens=tokenizer.convert_ids_to_tokens(list(tgt)),
        decoder_input_tokens=tokenizer.convert_ids_to_tokens(decoder_input),
        source_words=word_index(tokenizer, src),
        target_words=word_index(tokenizer, tgt),
        decoder_input_words=word_index(tokenizer, decoder_input),
        token_log_probs=log_probs,
        log_prob=sum(log_probs),
        score=sum(log_probs) / lp,
        length_penalty=f"{options.length_penalty_style} alpha={options.length_penalty:g}: lp({t}) = {lp:.6f}",
        is_reference=references is not None,
        encoder_attentions=tuple(a[i : i + 1, :, :s, :s].float().cpu() for a in outputs.encoder_attentions),
        decoder_attentions=tuple(a[i : i + 1, :, :t, :t].float().cpu() for a in outputs.decoder_attentions),
        cross_attentions=tuple(a[i : i + 1, :, :t, :s].float().cpu() for a in outputs.cross_attentions),
        raw_scores=raw_scores,
        value_norms=value_norms,
        d_k=translator.model.config.d_k,
    )


def word_index(tokenizer, ids: list[int]) -> list[int]:
    """The word (from 0) each token belongs to, words being what the decoded text splits into at
    spaces; a special token (`<s>`, `</s>`) is a word of its own. Works for any tokenizer: a token
    starts a word when decoding it adds text that begins with a space."""
    special = set(tokenizer.all_special_ids)
    words: list[int] = []
    current, pieces, text = -1, [], ""
    for token in ids:
        if token in special:
            current, pieces, text = current + 1, [], ""
            words.append(current)
            continue
        pieces.append(token)
        decoded = tokenizer.decode(pieces, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        added = decoded[len(text) :]
        if len(pieces) == 1 or added[:1].isspace():
            current += 1
        text = decoded
        words.append(current)
    return words


__all__ = [
    "KINDS",
    "KIND_NAMES",
    "Explanation",
    "capture_scores",
    "explain",
    "padded_batch",
    "teacher_forced",
    "word_index",
]
