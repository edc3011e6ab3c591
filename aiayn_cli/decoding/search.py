"""Fast decoding for `AiaynForConditionalGeneration`: beam search as in the paper (§6.1), greedy, sampling.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 [38]. [...] We set the
maximum output length during inference to input length + 50, but terminate early when possible."

Two parts, and how a batch meets a CPU's threads (`parallel.py`: split into parts, one thread each):

* `IncrementalDecoder` (`aiayn_cli/decoding/incremental.py`) calls the model's own `Encoder` and
  `Decoder` one target position at a time, with in-place key/value caches, dropping the rows of
  finished sentences.
* `beam_search`, `greedy_search` and `sample_search` drive any object with the `step` / `select`
  interface of `IncrementalDecoder` (the tests also drive them with a scripted distribution);
  `STRATEGIES` says which one a `DecodingOptions` asks for.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

from ..model.modeling_aiayn import AiaynForConditionalGeneration
from .defaults import DecodingOptions, Hypothesis, length_penalty, max_output_lengths, output_length_cap
from .incremental import IncrementalDecoder, PreparedModel
from .parallel import cpu_threads_for, decode_in_parts, parallel_parts

# The options (`DecodingOptions`, what they take, how each front end spells them), `Hypothesis`, the
# length penalty and the length limits are declared in `defaults.py`, which needs no torch (the
# ctranslate2 engine ranks and limits with them too); the searches below read them.


# ---------------------------------------------------------------------------------------------
# The interface the searches drive
# ---------------------------------------------------------------------------------------------


class StepDecoder(Protocol):
    """What the searches need: next-token logits for the current rows, and a way to keep some rows."""

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """`tokens` `(N,)`: the token fed at the current position of every row -> logits `(N, V)`, a tensor
        of the caller's (beam search turns it into log-probabilities in place)."""

    def select(self, rows: torch.Tensor, sentences: torch.Tensor) -> None:
        """Keep `rows` (indices into the current rows, grouped by sentence, as many per sentence),
        which belong to `sentences` (indices into the current sentences: all of them, in order,
        when their number does not change)."""


# ---------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------


def _force_eos(lprobs: torch.Tensor, rows: torch.Tensor, eos_id: int) -> None:
    """At a row's maximum length only `</s>` may follow: every other entry becomes -inf, in place."""
    if bool(rows.any()):
        eos = lprobs[rows, eos_id]
        lprobs[rows] = -math.inf
        lprobs[rows, eos_id] = eos


def top_k(x: torch.Tensor, k: int, chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """`x.topk(k, dim=1)` for rows much longer than k, as beam search's candidates are (beams * vocab).

    PyTorch's CPU top-k reads a long row more slowly than the step's log-softmax does; the maxima of
    chunks of `chunk` columns take one fast pass instead. The k best values lie in the k chunks with the
    best maxima (a value outside them has k chunk maxima above it), so one small top-k picks those
    chunks and another their best k values: the same values and ids as `topk` (ties aside, whose
    order `topk` does not define either; in a row with fewer than k values above -inf, the ids of its
    -inf values may repeat). CPU only: elsewhere `topk` itself.
    """
    rows, length = x.shape
    if x.device.type != "cpu" or length <= k * chunk:
        return x.topk(k, dim=1)
    whole = length - length % chunk
    maxima = x[:, :whole].view(rows, -1, chunk).amax(-1)  # (rows, whole / chunk)
    if whole < length:
        maxima = torch.cat([maxima, x[:, whole:].amax(-1, keepdim=True)], dim=1)
    chunks = maxima.topk(k, dim=1).indices  # (rows, k)
    ids = (chunks[:, :, None] * chunk + torch.arange(chunk, device=x.device)).view(rows, -1)
    past_end = ids >= length  # in the last, shorter chunk: -inf, at the last column
    ids = ids.clamp_(max=length - 1)
    values = x.gather(1, ids).masked_fill_(past_end, -math.inf)
    best, at = values.topk(k, dim=1)
    return best, ids.gather(1, at)


def beam_search(
    decoder: StepDecoder,
    max_lens: list[int],
    options: DecodingOptions,
    bos_id: int,
    eos_id: int,
    device: torch.device | str = "cpu",
) -> list[list[Hypothesis]]:
    """Beam search over `len(max_lens)` sentences; each sentence's best `options.nbest` hypotheses, best first.

    Args:
        decoder: one row per sentence, before any position has been fed.
        max_lens: for each sentence, the most tokens before `</s>` (`</s>` is then forced).
    """
    beam, alpha, style = options.num_beams, options.length_penalty, options.length_penalty_style
    batch = len(max_lens)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    alive = list(range(batch))  # the original index of each current sentence
    scores = torch.zeros(batch, 1, device=device)  # (B, beams): summed log-probabilities of the live hypotheses
    history = torch.empty(batch, 0, dtype=torch.long, device=device)  # (N, t): the tokens generated so far
    tokens = torch.full((batch,), bos_id, dtype=torch.long, device=device)
    offsets = {}  # (sentences, beams) -> every sentence's first candidate id, numbering all candidates in one row
    t = 0
    while True:
        logits = decoder.step(tokens).float()  # (N, V)
        lprobs = torch.log_softmax(logits, dim=-1, out=logits)  # in place: no second (N, V) tensor to allocate
        n_sentences, beams = scores.shape
        vocab = lprobs.size(-1)
        if t < options.min_len:
            lprobs[:, eos_id] = -math.inf
        at_max = [max_lens[s] <= t for s in alive]
        if any(at_max):
            _force_eos(lprobs, torch.tensor(at_max, device=device).repeat_interleave(beams), eos_id)
        candidates = lprobs.add_(scores.view(-1, 1)).view(n_sentences, beams * vocab)  # in place: lprobs is done
        # A candidate's id is beam * vocab + token.
        top_scores, top_ids = top_k(candidates, min(2 * beam, beams * vocab))  # (B, 2 * beam)
        ends = top_ids % vocab == eos_id

        # Candidates ending in </s> among the best `beam` are finished.
        if bool(ends[:, :beam].any()):
            new_finished = ends[:, :beam] & (top_scores[:, :beam] > -math.inf)
            lp = length_penalty(t + 1, alpha, style)
            for b, j in new_finished.nonzero().tolist():
                done = finished[alive[b]]
                if len(done) < beam:
                    raw = float(top_scores[b, j])
                    row = b * beams + int(top_ids[b, j]) // vocab
                    done.append(Hypothesis(history[row].tolist(), raw / lp, raw))

        # The best `beam` candidates that do not end are the next live hypotheses (a stable sort keeps
        # candidate order).
        keep = ends.sort(dim=1, stable=True).indices[:, :beam]  # (B, beam)
        scores, keep_ids = top_scores.gather(1, keep), top_ids.gather(1, keep)

        # A sentence with `beam` finished hypotheses, or at its maximum length, is done.
        still = [b for b in range(n_sentences) if len(finished[alive[b]]) < beam and not at_max[b]]
        t += 1
        if not still:
            break
        if len(still) < n_sentences:
            sentences = torch.tensor(still, device=device)
            scores, keep_ids = scores[sentences], keep_ids[sentences]
            alive = [alive[b] for b in still]
            offset = (sentences * (beams * vocab)).unsqueeze(1)
        else:
            if (n_sentences, beams) not in offsets:
                sentences = torch.arange(n_sentences, device=device)
                offsets[n_sentences, beams] = sentences, (sentences * (beams * vocab)).unsqueeze(1)
            sentences, offset = offsets[n_sentences, beams]
        flat = (keep_ids + offset).view(-1)  # (sentence * beams + beam) * vocab + token
        rows, tokens = flat // vocab, flat % vocab  # (B' * beam,) each
        decoder.select(rows, sentences)
        history = torch.cat([history[rows], tokens[:, None]], dim=1)
    for hyps in finished:
        hyps.sort(key=lambda hyp: hyp.score, reverse=True)
    return [hyps[: options.nbest] for hyps in finished]


# ---------------------------------------------------------------------------------------------
# Greedy search and sampling
# ---------------------------------------------------------------------------------------------


def greedy_search(
    decoder: StepDecoder,
    max_lens: list[int],
    options: DecodingOptions,
    bos_id: int,
    eos_id: int,
    device: torch.device | str = "cpu",
) -> list[list[Hypothesis]]:
    """The most likely token at every step (`num_beams=1`, `do_sample=False`): one hypothesis per sentence."""
    return _row_search(decoder, max_lens, options, bos_id, eos_id, device, 1, lambda logits, lprobs: lprobs.argmax(-1))


def sample_search(
    decoder: StepDecoder,
    max_lens: list[int],
    options: DecodingOptions,
    bos_id: int,
    eos_id: int,
    device: torch.device | str = "cpu",
) -> list[list[Hypothesis]]:
    """Sampling with temperature, top-k and top-p (`do_sample=True`): `options.nbest` samples per sentence."""
    generator = None
    if options.seed is not None:
        generator = torch.Generator(device=device).manual_seed(options.seed)
    return _row_search(
        decoder,
        max_lens,
        options,
        bos_id,
        eos_id,
        device,
        options.nbest,
        lambda logits, _: _sample(logits, options, generator),
    )


def _row_search(decoder, max_lens, options, bos_id, eos_id, device, samples, pick) -> list[list[Hypothesis]]:
    """Greedy search and sampling: `samples` rows per sentence, each its own hypothesis; `pick(logits, lprobs)`
    gives each row's next token. Rows finish one by one. A hypothesis's `log_prob` is the model's
    log-probability (temperature 1, unfiltered)."""
    batch = len(max_lens)
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
        tokens = pick(logits, lprobs)
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
        outside[:, 0] = False  # and the most likely one always does (top_p below float precision)
        logits = logits.scatter(-1, sorted_ids, sorted_logits.masked_fill(outside, -math.inf))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(1)


# ---------------------------------------------------------------------------------------------
# The strategies: the one place that says which search the options ask for
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Strategy:
    """A decoding strategy: `search` drives the decoder (the signature of `beam_search`), `rows(options)`
    is how many decoder rows each sentence takes, `asked(options)` whether the options ask for it."""

    name: str
    search: Callable[..., list[list[Hypothesis]]]
    rows: Callable[[DecodingOptions], int]
    asked: Callable[[DecodingOptions], bool]


# In order: the first whose `asked` holds decodes (a new strategy goes here, with its options in
# `defaults.py` and a test; docs/contributing.md shows the steps).
STRATEGIES = (
    Strategy("sampling", sample_search, rows=lambda o: o.nbest, asked=lambda o: o.do_sample),
    Strategy("beam", beam_search, rows=lambda o: o.num_beams, asked=lambda o: o.num_beams > 1),
    Strategy("greedy", greedy_search, rows=lambda o: 1, asked=lambda o: True),
)


def strategy_for(options: DecodingOptions) -> Strategy:
    """The strategy the options ask for."""
    return next(strategy for strategy in STRATEGIES if strategy.asked(options))


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


@torch.inference_mode()
def decode(
    model: AiaynForConditionalGeneration,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    options: DecodingOptions,
    prepared: PreparedModel | None = None,
    head_masks: dict[str, torch.Tensor] | None = None,
) -> list[list[Hypothesis]]:
    """Translate one padded batch: each sentence's hypotheses, best first (`options.nbest` of them).

    On a CPU with several threads a large batch is decoded in parts, one thread each
    (`parallel.decode_in_parts`); the result is the same.

    Args:
        input_ids (`(B, S)`), attention_mask (`(B, S)`, 1 for tokens): the source batch, on the model's device.
        prepared: `PreparedModel(model)` (or its int8 form), to reuse across calls while the weights
            do not change (default: prepared for this call, in float).
        head_masks: the model's forward arguments `head_mask`, `decoder_head_mask`, `cross_attn_head_mask`
            (`(N, h)` each, any of them): decode with those heads removed.
    """
    options.validate()
    if attention_mask is None:
        lengths = [input_ids.size(1)] * input_ids.size(0)
    else:
        lengths = attention_mask.sum(-1).tolist()
    max_lens = max_output_lengths(lengths, options, output_length_cap(model))
    strategy = strategy_for(options)
    prepared = prepared if prepared is not None else PreparedModel(model)  # once, for every part
    config = model.config

    def decode_part(ids: torch.Tensor, mask: torch.Tensor | None, part_max_lens: list[int]) -> list[list[Hypothesis]]:
        rows = ids.size(0) * strategy.rows(options)
        with cpu_threads_for(rows * config.d_model, ids.device):
            decoder = IncrementalDecoder(
                model,
                ids,
                mask,
                capacity=max(part_max_lens) + 1,
                max_rows=rows,
                prepared=prepared,
                head_masks=head_masks,
            )
            try:
                bos, eos = config.decoder_start_token_id, config.eos_token_id
                return strategy.search(decoder, part_max_lens, options, bos, eos, ids.device)
            finally:
                decoder.release()  # its cache memory serves the next batch

    parts = parallel_parts(len(max_lens), strategy.rows(options), options, input_ids.device)
    return decode_in_parts(decode_part, input_ids, attention_mask, max_lens, parts)


__all__ = [
    "DecodingOptions",
    "Hypothesis",
    "beam_search",
    "decode",
    "length_penalty",
    "max_output_lengths",
    "output_length_cap",
    "STRATEGIES",
    "Strategy",
    "greedy_search",
    "sample_search",
    "strategy_for",
]
