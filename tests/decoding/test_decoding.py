"""The fast decoder and the paper's beam search (aiayn_cli/decoding/incremental.py, aiayn_cli/decoding/search.py)
against slow, obvious references."""

from __future__ import annotations

import math
import threading
from dataclasses import replace

import helpers
import pytest
import torch
import torch.nn.functional as F

from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration
from aiayn_cli.decoding import incremental
from aiayn_cli.decoding.incremental import (
    UNSUPPORTED_CONFIG_FIELDS,
    IncrementalDecoder,
    PreparedModel,
    encode,
    linear_map,
)
from aiayn_cli.decoding.search import DecodingOptions, beam_search, decode, length_penalty, top_k
from aiayn_cli.errors import AiaynError
from aiayn_cli.model.configuration_aiayn import LIBRARY_FIELDS, TOKEN_ID_FIELDS
from aiayn_cli.precision import onednn_amx

PAD, BOS, EOS = 0, 1, 2


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_model(seed: int = 0, **overrides) -> AiaynForConditionalGeneration:
    """A random tiny model (40 tokens) whose translations end at varied lengths (`helpers.tiny_model`)."""
    return helpers.tiny_model(40, seed=seed, varied_lengths=True, **overrides)


def source_batch(lengths: list[int], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sentences of the given lengths (`</s>` included), right-padded."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), PAD)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, : n - 1] = torch.randint(4, 40, (n - 1,), generator=generator)
        ids[i, n - 1] = EOS
        mask[i, :n] = 1
    return ids, mask


# ---------------------------------------------------------------------------------------------
# The slow reference: the paper's beam search written plainly, one full forward per hypothesis
# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def next_log_probs(model, source: list[int], prefix: list[int]) -> torch.Tensor:
    """log p(. | source, <s> prefix) from one full, non-incremental forward pass."""
    out = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([[BOS] + prefix]), use_cache=False)
    return F.log_softmax(out.logits[0, -1].float(), dim=-1)


def reference_beam_search(
    model, source: list[int], beam: int, alpha: float, style: str, max_len: int, min_len: int = 0
) -> list[tuple[list[int], float]]:
    """Keep the 2 * beam best extensions; those ending in </s> among the best `beam` are finished;
    the best `beam` others live on; stop with `beam` finished or at max_len (where </s> is forced)."""
    live = [([], 0.0)]
    finished = []
    for t in range(max_len + 1):
        candidates = []
        for tokens, score in live:
            lprobs = next_log_probs(model, source, tokens)
            if t < min_len:
                lprobs[EOS] = -math.inf
            if t == max_len:
                lprobs = torch.where(torch.arange(lprobs.numel()) == EOS, lprobs, -math.inf)
            candidates += [(score + float(lp), tokens, v) for v, lp in enumerate(lprobs.tolist())]
        candidates.sort(key=lambda c: c[0], reverse=True)
        candidates = candidates[: 2 * beam]
        for score, tokens, v in candidates[:beam]:
            if v == EOS and score > -math.inf and len(finished) < beam:
                finished.append((tokens, score / length_penalty(t + 1, alpha, style)))
        if len(finished) >= beam:
            break
        live = [(tokens + [v], score) for score, tokens, v in candidates if v != EOS][:beam]
    return sorted(finished, key=lambda f: f[1], reverse=True)


# ---------------------------------------------------------------------------------------------
# Every switch of the config: the fast decoder (the model's modules, prepared) == the references
# ---------------------------------------------------------------------------------------------

# A value other than `tiny_model`'s for every field of AiaynConfig that changes what the model computes.
CONFIG_SWITCHES = {
    "pre_norm": True,
    "positional_encoding": "learned",
    "activation_function": "gelu",
    "scale_embedding": False,
    "tie_word_embeddings": True,
    "layer_norm_eps": 1e-2,
    "dropout": 0.3,  # in eval mode, dropout of every kind must change nothing
    "attention_dropout": 0.3,
    "activation_dropout": 0.3,
    "num_heads": 2,
    "d_model": 32,
    "d_ff": 48,
    "num_encoder_layers": 1,
    "num_decoder_layers": 3,
    "init_std": 0.2,
}
# Fields that need no switch: the sizes of the tables (every test below exercises them), and the fields
# that do not change what the model computes (token ids, Hugging Face's).
NOT_SWITCHES = {"vocab_size", "max_position_embeddings", *TOKEN_ID_FIELDS, *LIBRARY_FIELDS}
VARIANTS = [{}] + [{name: value} for name, value in CONFIG_SWITCHES.items()] + [dict(CONFIG_SWITCHES)]


def variant_id(overrides: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in overrides.items()) if len(overrides) < 2 else "all-switches"


def test_every_config_field_is_switched_by_the_equivalence_tests():
    """The contract: a field added to AiaynConfig fails here, by name, until the equivalence tests below
    switch it (CONFIG_SWITCHES) or the fast decoder lists it as unsupported."""
    fields = set(AiaynConfig.__annotations__)
    for name in sorted(fields - set(CONFIG_SWITCHES) - NOT_SWITCHES - UNSUPPORTED_CONFIG_FIELDS):
        pytest.fail(
            f"AiaynConfig.{name}: no value for it in CONFIG_SWITCHES (tests/decoding/test_decoding.py), so nothing "
            "tests that the fast decoder computes what the model does with it; add one, or list it in "
            "UNSUPPORTED_CONFIG_FIELDS (aiayn_cli/decoding/incremental.py)"
        )
    assert set(CONFIG_SWITCHES) <= fields, (
        f"switches of fields AiaynConfig no longer has: {set(CONFIG_SWITCHES) - fields}"
    )
    assert not set(CONFIG_SWITCHES) & (NOT_SWITCHES | UNSUPPORTED_CONFIG_FIELDS)
    defaults = tiny_model().config
    assert all(getattr(defaults, name) != value for name, value in CONFIG_SWITCHES.items())


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("onednn", [True, False], ids=["onednn-where-it-runs", "public-fallback"])
@pytest.mark.parametrize("shape", [(5, 16), (3, 1, 16), (40, 16)], ids=["few-rows", "few-rows-3d", "many-rows"])
def test_linear_map_computes_what_f_linear_does(monkeypatch, relu, dtype, onednn, shape):
    """`linear_map`: oneDNN's prepacked kernel where it runs (a small fp32 weight on at most `FEW_ROWS`
    rows: the BLAS GEMM on the transposed weight; else, or with oneDNN hidden, F.linear), the same numbers
    as F.linear (+ ReLU) to the rounding of `dtype` (fp32: 1e-5; bf16, fp16: 2e-2)."""
    if not onednn:
        monkeypatch.setattr(incremental, "_onednn_available", lambda: False)
    generator = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(24, 16, generator=generator), torch.randn(24, generator=generator)
    x = torch.randn(*shape, generator=generator)
    assert (x.numel() // 16 <= incremental.FEW_ROWS) == (shape != (40, 16))
    weight, bias, x = weight.to(dtype), bias.to(dtype), x.to(dtype)
    function, packed = linear_map(weight, bias, relu=relu)
    expected = F.linear(x.float(), weight.float(), bias.float())
    expected = F.relu(expected) if relu else expected
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(function(x).float(), expected, rtol=tolerance, atol=tolerance)
    assert function(x).dtype == dtype
    if not onednn:
        assert not packed


@pytest.mark.parametrize("length", [9, 64 * 8, 64 * 8 + 1, 10_000, 4 * 10_003])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_top_k_is_topk(length, dtype):
    """`top_k` (chunk maxima first) gives `torch.topk`'s values and ids: rows shorter than k chunks, a
    last chunk cut short, -inf entries (a forced </s>), a row with fewer than k finite values."""
    generator = torch.Generator().manual_seed(length)
    x = torch.randn(5, length, generator=generator).to(dtype)
    x[1, ::3] = -math.inf
    x[2] = -math.inf
    x[2, length // 2] = 0.0
    values, ids = top_k(x, 8)
    expected = x.topk(8, dim=1)
    torch.testing.assert_close(values, expected.values, rtol=0, atol=0)
    assert bool((ids >= 0).all()) and bool((ids < length).all())
    torch.testing.assert_close(x.gather(1, ids), values, rtol=0, atol=0)  # each id holds its value (ties: any)
    for row, row_values in zip(ids.tolist(), values.tolist(), strict=True):
        finite_ids = [i for i, v in zip(row, row_values, strict=True) if v > -math.inf]
        assert len(set(finite_ids)) == len(finite_ids)  # distinct (-inf fillers may repeat)
    if dtype == torch.float32:  # no ties among random fp32 values
        finite = expected.values > -math.inf
        assert torch.equal(ids[finite], expected.indices[finite])


def test_prepared_model_is_modules_sharing_the_models_parameters():
    """`PreparedModel` holds `nn.Module`s: the model's own classes around prepared leaves (`Projection`,
    `LayerNorm`, `Identity`), with the model's parameters, not copies."""
    model = helpers.tiny_model()
    prepared = PreparedModel(model)
    leaves = {type(m) for m in prepared.decoder.modules() if not list(m.children())}
    assert leaves <= {incremental.Projection, incremental.LayerNorm, incremental.Identity, type(model.model.shared)}
    assert incremental.Projection in leaves
    assert not any(
        type(m) in (torch.nn.Linear, torch.nn.LayerNorm, torch.nn.Dropout) for m in prepared.decoder.modules()
    )
    model_parameters = {id(p) for p in model.parameters()}
    assert {id(p) for p in prepared.decoder.parameters()} <= model_parameters


@pytest.mark.parametrize("overrides", VARIANTS, ids=variant_id)
def test_beam_search_equals_reference(overrides):
    model = tiny_model(**overrides)
    lengths = [9, 4, 7, 2]
    ids, mask = source_batch(lengths)
    options = DecodingOptions(num_beams=4, nbest=4, length_penalty=0.6, max_len_a=0.5, max_len_b=5)
    fast = decode(model, ids, mask, options)
    finished_early = 0
    for i, n in enumerate(lengths):
        max_len = int(0.5 * n + 5)
        slow = reference_beam_search(model, ids[i, :n].tolist(), 4, 0.6, "gnmt", max_len)
        assert [h.tokens for h in fast[i]] == [tokens for tokens, _ in slow]
        assert [h.score for h in fast[i]] == pytest.approx([score for _, score in slow], abs=1e-4)
        finished_early += all(len(h.tokens) < max_len for h in fast[i])
    if overrides == {}:
        assert finished_early >= 2  # the comparison covers sentences that stop before their limit


@pytest.mark.parametrize("overrides", VARIANTS, ids=variant_id)
def test_greedy_equals_generate_for_every_switch(overrides):
    model = tiny_model(**overrides)
    ids, mask = source_batch([9, 4, 7, 2, 9, 5])
    fast = decode(model, ids, mask, DecodingOptions(num_beams=1, max_len_a=0, max_len_b=12))
    reference = model.generate(
        input_ids=ids, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=12, max_length=None
    )
    for hyps, row in zip(fast, reference.tolist()):
        tokens = row[1:]  # without <s>
        tokens = tokens[: tokens.index(EOS)] if EOS in tokens else tokens
        assert hyps[0].tokens == tokens


@pytest.mark.parametrize("overrides", VARIANTS, ids=variant_id)
def test_batch_of_64_equals_one_at_a_time(overrides):
    """A sentence's hypotheses do not depend on what it is batched with (padding, finished neighbours)."""
    model = tiny_model(**overrides)
    lengths = [2 + (7 * i) % 11 for i in range(64)]
    ids, mask = source_batch(lengths, seed=2)
    options = DecodingOptions(num_beams=4, nbest=2, max_len_a=0.5, max_len_b=4)
    together = decode(model, ids, mask, options)
    for i in range(0, 64, 8):  # every 8th sentence, decoded alone
        n = lengths[i]
        alone = decode(model, ids[i : i + 1, :n], mask[i : i + 1, :n], options)[0]
        assert [h.tokens for h in together[i]] == [h.tokens for h in alone]
        assert [h.score for h in together[i]] == pytest.approx([h.score for h in alone], abs=1e-4)


def test_beam_search_equals_reference_with_hf_penalty_and_min_len():
    model = tiny_model(seed=3)
    lengths = [6, 3, 8]
    ids, mask = source_batch(lengths, seed=4)
    options = DecodingOptions(
        num_beams=3, nbest=3, length_penalty=1.0, length_penalty_style="hf", max_len_a=0, max_len_b=9, min_len=3
    )
    fast = decode(model, ids, mask, options)
    for i, n in enumerate(lengths):
        slow = reference_beam_search(model, ids[i, :n].tolist(), 3, 1.0, "hf", 9, min_len=3)
        assert [h.tokens for h in fast[i]] == [tokens for tokens, _ in slow]
        assert all(len(h.tokens) >= 3 for h in fast[i])


def test_greedy_equals_generate():
    model = tiny_model()
    ids, mask = source_batch([9, 4, 7, 2, 9, 5, 3, 8])
    fast = decode(model, ids, mask, DecodingOptions(num_beams=1, max_len_a=0, max_len_b=20))
    reference = model.generate(
        input_ids=ids, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=20, max_length=None
    )
    for hyps, row in zip(fast, reference.tolist()):
        tokens = row[1:]  # without <s>
        tokens = tokens[: tokens.index(EOS)] if EOS in tokens else tokens
        assert hyps[0].tokens == tokens
    assert len({len(h[0].tokens) for h in fast}) > 1


def test_beam_search_with_hf_penalty_equals_generate():
    """With generate()'s penalty |Y|^alpha and early_stopping=True, the same hypotheses as generate()
    for sentences that finish before the length limit (where generate() stops without </s>)."""
    model = tiny_model(seed=5)
    ids, mask = source_batch([9, 4, 7, 2, 9, 5, 3, 8, 6, 4, 7, 5], seed=6)
    fast = decode(
        model,
        ids,
        mask,
        DecodingOptions(num_beams=4, nbest=4, length_penalty=0.6, length_penalty_style="hf", max_len_a=0, max_len_b=30),
    )
    reference = model.generate(
        input_ids=ids,
        attention_mask=mask,
        num_beams=4,
        num_return_sequences=4,
        length_penalty=0.6,
        early_stopping=True,
        do_sample=False,
        max_new_tokens=31,
        max_length=None,
        output_scores=True,
        return_dict_in_generate=True,
    )
    compared = 0
    for i, hyps in enumerate(fast):
        if any(len(h.tokens) >= 30 for h in hyps):
            continue
        rows = reference.sequences[4 * i : 4 * i + 4].tolist()
        expected = [row[1 : row.index(EOS, 1)] for row in rows]
        assert [h.tokens for h in hyps] == expected
        assert [h.score for h in hyps] == pytest.approx(
            reference.sequences_scores[4 * i : 4 * i + 4].tolist(), abs=1e-4
        )
        compared += 1
    assert compared >= 4


def test_encoder_equals_model_encoder():
    model = tiny_model(pre_norm=True)
    ids, mask = source_batch([9, 4, 7])
    expected = model.model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    with torch.inference_mode():
        got = encode(model, ids, mask, PreparedModel(model))
    real = mask.bool()
    assert torch.allclose(got[real], expected[real], atol=1e-5)


# ---------------------------------------------------------------------------------------------
# 1. GNMT's length penalty ranks differently from generate()'s: a hand-computed example
# ---------------------------------------------------------------------------------------------


def test_length_penalty_formulas():
    assert length_penalty(2, 0.6, "gnmt") == pytest.approx(1.096903)  # (7/6)^0.6
    assert length_penalty(4, 0.6, "gnmt") == pytest.approx(1.275425)  # (9/6)^0.6
    assert length_penalty(1, 0.6, "gnmt") == 1.0  # GNMT's lp is 1 for a one-token output
    assert length_penalty(4, 0.6, "hf") == pytest.approx(2.297397)  # 4^0.6
    assert length_penalty(7, 0.0, "gnmt") == length_penalty(7, 0.0, "hf") == 1.0
    with pytest.raises(ValueError):
        length_penalty(3, 0.6, "marian")


class ScriptedDecoder:
    """A 'model' whose next-token distribution is a table keyed by the prefix, for hand-computed searches.

    Vocabulary: 0 <pad>, 1 <s>, 2 </s>, 3 "a", 4 "b"."""

    def __init__(self, table: dict[tuple, list[float]], default: list[float]):
        self.table, self.default = table, default
        self.prefixes = [()]  # one row: the start, before <s> is fed
        self.rows_seen = []

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.prefixes = [p + (int(t),) for p, t in zip(self.prefixes, tokens)]
        self.rows_seen.append(len(self.prefixes))
        probs = [self.table.get(p[1:], self.default) for p in self.prefixes]  # without <s>
        return torch.tensor(probs).log()

    def select(self, rows: torch.Tensor, sentences: torch.Tensor) -> None:
        self.prefixes = [self.prefixes[r] for r in rows.tolist()]


A, B = 3, 4
#                 <pad>   <s>    </s>   a      b
TABLE = {
    (): [1 / 30, 1 / 30, 1 / 30, 0.50, 0.40],
    (A,): [0.05, 0.05, 0.60, 0.20, 0.10],
    (B,): [0.025, 0.025, 0.025, 0.025, 0.90],
    (B, B): [0.025, 0.025, 0.025, 0.025, 0.90],
    (B, B, B): [0.05, 0.05, 0.65, 0.05, 0.20],
}
DEFAULT = [0.15, 0.10, 0.05, 0.40, 0.30]


def test_gnmt_penalty_picks_a_different_hypothesis_than_hf_penalty():
    """Beam 2, alpha 0.6. By hand:

    step 1: a (0.5), b (0.4) live.
    step 2: "a </s>" = 0.5 * 0.6 = 0.30 is among the 2 best (b b 0.36, a </s> 0.30): finished,
            raw log p = log 0.30 = -1.203973, |Y| = 2. Live: b b (0.36), a a (0.10).
    step 3: b b b (0.324), a a a (0.04) live; no </s> among the 2 best.
    step 4: "b b b </s>" = 0.324 * 0.65 = 0.2106 is the best: finished, raw = -1.557795, |Y| = 4.
            Two finished: stop.
    GNMT: A = -1.203973 / (7/6)^0.6 (1.096903) = -1.097611,  B = -1.557795 / (9/6)^0.6 (1.275425) = -1.221393
          -> "a" wins.
    HF:   A = -1.203973 / 2^0.6 (1.515717) = -0.794326,      B = -1.557795 / 4^0.6 (2.297397) = -0.678070
          -> "b b b" wins.
    """
    results = {}
    for style in ("gnmt", "hf"):
        options = DecodingOptions(
            num_beams=2, nbest=2, length_penalty=0.6, length_penalty_style=style, max_len_a=0, max_len_b=10
        )
        decoder = ScriptedDecoder(TABLE, DEFAULT)
        results[style] = beam_search(decoder, [10], options, BOS, EOS)[0]
        assert decoder.rows_seen == [1, 2, 2, 2]  # four steps, then both hypotheses are finished
    gnmt, hf = results["gnmt"], results["hf"]
    assert [h.tokens for h in gnmt] == [[A], [B, B, B]]
    assert [h.score for h in gnmt] == pytest.approx([-1.097611, -1.221393], abs=2e-6)
    assert [h.tokens for h in hf] == [[B, B, B], [A]]
    assert [h.score for h in hf] == pytest.approx([-0.678070, -0.794326], abs=2e-6)
    assert [h.log_prob for h in hf] == pytest.approx([math.log(0.2106), math.log(0.30)], abs=1e-6)


# ---------------------------------------------------------------------------------------------
# Lengths, shrinking batches, sampling, options
# ---------------------------------------------------------------------------------------------


class Spy:
    """Records how many rows the decoder computes at each step."""

    def __init__(self, decoder: IncrementalDecoder):
        self.decoder, self.rows = decoder, []

    def step(self, tokens):
        self.rows.append(tokens.numel())
        return self.decoder.step(tokens)

    def select(self, rows, sentences):
        self.decoder.select(rows, sentences)


@torch.inference_mode()
def test_finished_sentences_leave_the_batch():
    model = tiny_model()
    lengths = [9, 4, 7, 2, 9, 5]
    ids, mask = source_batch(lengths)
    options = DecodingOptions(num_beams=4, max_len_a=0, max_len_b=12)
    spy = Spy(IncrementalDecoder(model, ids, mask, capacity=13, max_rows=24))
    hyps = beam_search(spy, [12] * 6, options, BOS, EOS)
    assert spy.rows[0] == 6 and spy.rows[1] == 24  # one row per sentence at <s>, then 4 beams each
    assert all(a >= b for a, b in zip(spy.rows[1:], spy.rows[2:]))  # never grows
    assert spy.rows[-1] < 24  # sentences that finished early were dropped
    assert all(n % 4 == 0 for n in spy.rows[1:])
    assert len(hyps) == 6


@torch.inference_mode()
def test_rows_that_stay_in_their_slots_give_the_logits_of_rows_moved_into_place(monkeypatch):
    """Beam steps copy only the caches of rows continued more than once (`_keep_slots`): the logits at
    every step equal those of a decoder that moves every row, through repeats, swaps, sentences that
    finish and a step where every row stays."""
    model = tiny_model()
    ids, mask = source_batch([9, 4, 7])
    kept, moving = (IncrementalDecoder(model, ids, mask, 10, 12, keep_slots=keep) for keep in (True, False))
    copied, moved = [], 0
    copy_rows = kept.state.copy_rows
    monkeypatch.setattr(kept.state, "copy_rows", lambda pairs: (copied.append(len(pairs)), copy_rows(pairs)))
    generator = torch.Generator().manual_seed(0)
    tokens = torch.full((3,), BOS)
    for step in range(8):
        torch.testing.assert_close(kept.step(tokens), moving.step(tokens))  # the same maths, rows in another order
        sentences = torch.arange(kept.batch)
        if step == 0:  # <s> -> 4 beams a sentence
            rows = sentences.repeat_interleave(4)
        elif step == 5:  # the second sentence finishes
            sentences = torch.tensor([0, 2])
            rows = torch.tensor([0, 1, 2, 3, 8, 9, 10, 11])
        elif step == 6:  # every row goes on in its own slot
            rows = torch.arange(4 * kept.batch)
        else:  # each beam continues a beam of its sentence, some more than once
            rows = (torch.randint(0, 4, (kept.batch, 4), generator=generator) + 4 * sentences[:, None]).view(-1)
            moved += int((rows != torch.arange(rows.numel())).sum())
        for decoder in (kept, moving):
            decoder.select(rows, sentences)
        tokens = torch.randint(3, 40, (rows.numel(),), generator=generator)
    assert kept.state.cache.size(0) == 8 and kept.slots is not None  # rows out of slot order at the end
    assert len(copied) == 6 and 0 in copied and 0 < sum(copied) < moved  # copies, fewer than rows moved
    assert moving.slots is None  # the other path moved every row into place


def test_the_cache_path_is_chosen_by_device_and_both_give_the_same_hypotheses(monkeypatch):
    """Beam steps keep rows in their cache slots on CPUs only (`CACHE_SLOT_DEVICES`); the path other
    devices take, forced on this CPU, gives the same hypotheses and scores (fp32), sentences finishing
    on the way."""
    import aiayn_cli.decoding.incremental as incremental

    assert "cpu" in incremental.CACHE_SLOT_DEVICES and "cuda" not in incremental.CACHE_SLOT_DEVICES
    kept = []
    keep_slots = IncrementalDecoder._keep_slots
    monkeypatch.setattr(IncrementalDecoder, "_keep_slots", lambda self, rows: (kept.append(1), keep_slots(self, rows)))
    model = tiny_model()
    ids, mask = source_batch([2 + (5 * i) % 9 for i in range(12)], seed=3)
    options = DecodingOptions(num_beams=4, nbest=3, max_len_a=0.5, max_len_b=5)
    in_slots = decode(model, ids, mask, options)
    assert kept
    kept.clear()
    monkeypatch.setattr(incremental, "CACHE_SLOT_DEVICES", frozenset())
    moved = decode(model, ids, mask, options)
    assert not kept
    assert [[h.tokens for h in hyps] for hyps in moved] == [[h.tokens for h in hyps] for hyps in in_slots]
    for a, b in zip(moved, in_slots):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
    assert len({len(h[0].tokens) for h in in_slots}) > 1  # sentences of several lengths: some finish first


def test_max_length_is_a_times_source_plus_b():
    model = tiny_model(tie_word_embeddings=True)  # outputs run to the limit
    lengths = [9, 4, 2]
    ids, mask = source_batch(lengths)
    for beams in (1, 4):
        options = DecodingOptions(num_beams=beams, nbest=beams, max_len_a=1.0, max_len_b=3)
        for hyps, n in zip(decode(model, ids, mask, options), lengths):
            assert max(len(h.tokens) for h in hyps) == n + 3  # input length + b, then </s> is forced
            assert all(len(h.tokens) <= n + 3 for h in hyps)


def test_generate_stops_at_the_paper_maximum_length(caplog):
    """model.generate() without a length: max_len_a * S + max_len_b new tokens, capped by max_length;
    max_new_tokens alone is honoured without transformers' "both were set" warning."""
    model = tiny_model()
    ids = torch.tensor([[5, 6, 7, 8, EOS]])
    model.generation_config.max_len_b = 3
    never_ends = {"suppress_tokens": [EOS]}
    for beams in (1, 4):
        assert model.generate(ids, num_beams=beams, **never_ends).shape[1] == 1 + 5 + 3  # <s> + 1 * S + b
    assert model.generate(input_ids=ids, max_new_tokens=12, **never_ends).shape[1] == 1 + 12
    assert model.generate(ids, max_length=4, **never_ends).shape[1] == 4
    model.generation_config.max_len_b, model.generation_config.max_length = 50, 20
    assert model.generate(ids, **never_ends).shape[1] == 20
    assert "seem to have been set" not in caplog.text


def test_sampling_is_seeded_and_filters():
    model = tiny_model()
    ids, mask = source_batch([9, 4, 7])
    sample = DecodingOptions(num_beams=1, do_sample=True, seed=7, nbest=3, temperature=1.5, max_len_a=0, max_len_b=15)
    first, second = decode(model, ids, mask, sample), decode(model, ids, mask, sample)
    assert [[h.tokens for h in s] for s in first] == [[h.tokens for h in s] for s in second]
    assert all(len(s) == 3 for s in first)
    other = decode(model, ids, mask, DecodingOptions(**{**sample.__dict__, "seed": 8}))
    assert [[h.tokens for h in s] for s in other] != [[h.tokens for h in s] for s in first]
    # top-k = 1 and a tiny top-p (even one below float32's precision) leave one candidate: greedy search.
    greedy = [h[0].tokens for h in decode(model, ids, mask, DecodingOptions(num_beams=1, max_len_a=0, max_len_b=15))]
    for narrow in ({"top_k": 1}, {"top_p": 1e-6}, {"top_p": 5e-324}):
        options = DecodingOptions(num_beams=1, do_sample=True, seed=1, max_len_a=0, max_len_b=15, **narrow)
        assert [h[0].tokens for h in decode(model, ids, mask, options)] == greedy


def test_options_come_from_the_generation_config():
    model = tiny_model()
    options = DecodingOptions.from_generation_config(model.generation_config)
    assert (options.num_beams, options.length_penalty, options.length_penalty_style) == (4, 0.6, "gnmt")
    assert (options.max_len_a, options.max_len_b) == (1.0, 50)
    options = DecodingOptions.from_generation_config(model.generation_config, num_beams=2, length_penalty=None)
    assert (options.num_beams, options.length_penalty) == (2, 0.6)
    with pytest.raises(ValueError, match="nbest"):
        DecodingOptions(num_beams=2, nbest=3).validate()


@pytest.mark.parametrize("name", ["length_penalty", "max_len_a", "temperature", "top_p"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_options_must_be_finite(name, value):
    with pytest.raises(AiaynError, match="finite") as raised:
        replace(DecodingOptions(do_sample=name == "temperature"), **{name: value}).validate()
    assert raised.value.key == name


@pytest.mark.gpu
def test_cuda_decoding_equals_cpu():
    ids, mask = source_batch([9, 4, 7, 2, 9, 5])
    cpu_model, gpu_model = tiny_model(), tiny_model().cuda()
    for options in (
        DecodingOptions(num_beams=4, nbest=4, max_len_a=0.5, max_len_b=6),
        DecodingOptions(num_beams=1, max_len_a=0, max_len_b=12),
    ):
        cpu = decode(cpu_model, ids, mask, options)
        gpu = decode(gpu_model, ids.cuda(), mask.cuda(), options)
        assert [[h.tokens for h in s] for s in gpu] == [[h.tokens for h in s] for s in cpu]
        for a, b in zip(cpu, gpu):
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-3)
    sample = DecodingOptions(num_beams=1, do_sample=True, seed=3, nbest=2, top_p=0.9, max_len_a=0, max_len_b=10)
    first = decode(gpu_model, ids.cuda(), mask.cuda(), sample)
    assert first == decode(gpu_model, ids.cuda(), mask.cuda(), sample)


def test_cache_memory_is_reused_across_decodes_and_never_shared():
    """One `PreparedModel` lends a finished decode's cache memory to the next (larger, smaller, other
    options): the hypotheses are those of fresh memory; two decoders alive at once get their own."""
    model = tiny_model()
    prepared = PreparedModel(model)
    options = DecodingOptions(num_beams=4, nbest=2, max_len_a=0.5, max_len_b=6)
    batches = [source_batch(lengths, seed=i) for i, lengths in enumerate([[9, 4, 7], [3], [9, 9, 8, 7, 6, 5, 2]])]
    fresh = [decode(model, ids, mask, options) for ids, mask in batches]  # new memory every time
    for (ids, mask), expected in zip(batches + batches[::-1], fresh + fresh[::-1]):
        assert decode(model, ids, mask, options, prepared) == expected
    lent = prepared._spare[0][0]
    assert decode(model, *batches[1], options, prepared) == fresh[1]
    assert prepared._spare[0][0].data_ptr() == lent.data_ptr()  # the largest memory, kept and reused

    ids, mask = batches[0]
    first = IncrementalDecoder(model, ids, mask, capacity=12, max_rows=12, prepared=prepared)
    second = IncrementalDecoder(model, ids, mask, capacity=12, max_rows=12, prepared=prepared)
    assert {t.data_ptr() for t in first.state.storage}.isdisjoint(t.data_ptr() for t in second.state.storage)
    first.release()
    second.release()


def with_beam_search(search) -> tuple:
    """The registered strategies, with `search` as beam search's function."""
    import aiayn_cli.decoding.search as search_module

    return tuple(replace(s, search=search) if s.name == "beam" else s for s in search_module.STRATEGIES)


def test_small_batches_decode_on_one_thread_and_the_thread_count_comes_back(monkeypatch):
    """A step of few rows (rows x d_model <= ONE_THREAD_MAX_ELEMENTS, on CPUs with AVX-512 kernels) runs
    on one CPU thread, faster than on several; larger batches use PyTorch's count; the count is
    restored, errors included."""
    import aiayn_cli.decoding.parallel as parallel_module
    import aiayn_cli.decoding.search as search_module

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)

    seen = []
    real = search_module.beam_search

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(search_module, "STRATEGIES", with_beam_search(recording))
    monkeypatch.setattr(parallel_module, "SPLIT_MIN_ROWS", 10**6)  # no batch split over threads
    model = tiny_model()  # d_model 64 (tiny preset): 4 beams x 8 sentences = 2,048 elements
    options = DecodingOptions(num_beams=4, max_len_a=0.0, max_len_b=4)
    torch.set_num_threads(2)
    assert model.config.d_model * 4 * 8 == parallel_module.ONE_THREAD_MAX_ELEMENTS
    for sentences, threads in [(1, 1), (8, 1), (9, 2)]:
        ids, mask = source_batch([5] * sentences)
        decode(model, ids, mask, options)
        assert seen.pop() == threads and torch.get_num_threads() == 2
    monkeypatch.setattr(search_module, "STRATEGIES", with_beam_search(lambda *a, **k: 1 / 0))
    with pytest.raises(ZeroDivisionError):
        decode(model, *source_batch([5]), options)
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize(
    ("capability", "amx", "elements"),
    [("AVX512", False, 2048), ("AVX512", True, 0), ("AVX2", False, 0), ("AVX2", True, 0), ("DEFAULT", False, 2048)],
)
def test_one_thread_decodes_small_steps_only_where_measured_faster(monkeypatch, capability, amx, elements):
    """On AVX2-only CPUs and on CPUs with AMX two threads decode even one sentence faster than one;
    elsewhere one thread up to 2,048 row elements."""
    import aiayn_cli.decoding.parallel as parallel_module

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert parallel_module.one_thread_max_elements() == elements
    torch.set_num_threads(2)
    try:
        with parallel_module.cpu_threads_for(4 * 256, torch.device("cpu")):  # one sentence, beam 4, small
            inside = torch.get_num_threads()
    finally:
        torch.set_num_threads(1)
    assert inside == (1 if elements else 2)


def test_a_batch_split_over_threads_decodes_as_on_one_thread(monkeypatch):
    """With several CPU threads a large batch is split, one part per thread, each part decoded on one
    thread in a worker of its own; every sentence gets the hypotheses it gets on one thread, the
    thread count comes back, and a worker's error reaches the caller."""
    import aiayn_cli.decoding.search as search_module
    from aiayn_cli.decoding.parallel import parallel_parts

    model = tiny_model()
    lengths = [2 + (5 * i) % 9 for i in range(43)]
    ids, mask = source_batch(lengths, seed=4)
    options = DecodingOptions(num_beams=3, nbest=2, max_len_a=0.5, max_len_b=4)
    alone = decode(model, ids, mask, options)  # one thread (the fixture): no split
    assert parallel_parts(43, 3, options, ids.device) == 1

    seen = []
    real = search_module.beam_search

    def recording(decoder, max_lens, *args, **kwargs):
        seen.append((threading.current_thread().name, torch.get_num_threads(), len(max_lens)))
        return real(decoder, max_lens, *args, **kwargs)

    monkeypatch.setattr(search_module, "STRATEGIES", with_beam_search(recording))
    torch.set_num_threads(2)
    assert parallel_parts(43, 3, options, ids.device) == 2  # 129 rows: 64 a thread
    assert parallel_parts(42, 3, options, ids.device) == 1  # 126 rows: threads share each step
    assert parallel_parts(43, 3, DecodingOptions(do_sample=True), ids.device) == 1
    together = decode(model, ids, mask, options)
    assert sorted(n for _, _, n in seen) == [21, 22] and all(t == 1 for _, t, _ in seen)
    assert all(name.startswith("aiayn-decode") for name, _, _ in seen)
    assert torch.get_num_threads() == 2
    assert [[h.tokens for h in hyps] for hyps in together] == [[h.tokens for h in hyps] for hyps in alone]
    for a, b in zip(together, alone):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
    prepared = PreparedModel(model)  # each part's cache memory is kept for the next batch's parts
    assert decode(model, ids, mask, options, prepared) == together
    kept = {memory[0].data_ptr() for memory in prepared._spare}
    assert len(kept) == 2
    assert decode(model, ids, mask, options, prepared) == together
    assert {memory[0].data_ptr() for memory in prepared._spare} == kept
    monkeypatch.setattr(search_module, "STRATEGIES", with_beam_search(lambda *a, **k: 1 / 0))
    with pytest.raises(ZeroDivisionError):
        decode(model, ids, mask, options)
    assert torch.get_num_threads() == 2


def test_decoding_follows_weights_changed_in_place():
    """Weights changed where no version counter sees it (`.data`, fused optimizers) are not served
    stale: `decode()` without prepared weights prepares them from the weights as they are."""
    model, other = tiny_model(seed=0), tiny_model(seed=3)
    ids, mask = source_batch([5, 7, 9])
    options = DecodingOptions(num_beams=2, max_len_a=0.0, max_len_b=10)
    before = decode(model, ids, mask, options)
    for p, q in zip(model.parameters(), other.parameters()):
        p.data.copy_(q.data)  # bumps no version counter
    after = decode(model, ids, mask, options)
    assert [h[0].tokens for h in after] == [h[0].tokens for h in decode(other, ids, mask, options)]
    assert [h[0].tokens for h in after] != [h[0].tokens for h in before]


# ---------------------------------------------------------------------------------------------
# int8 decoding (`aiayn translate --quantization int8`)
# ---------------------------------------------------------------------------------------------


def test_int8_decoding_quantizes_every_linear_map_and_stays_close():
    model = tiny_model()
    prepared = PreparedModel(model, "int8")
    float_linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    leaves = [m for part in (prepared.encoder, prepared.decoder, prepared.lm_head) for m in part.modules()]
    assert sum(isinstance(m, incremental.Projection) and m.int8 for m in leaves) == float_linears
    assert not any(isinstance(m, torch.nn.Linear) or type(m).__module__.startswith("torch.ao") for m in leaves)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the model itself is untouched
    lengths = [2 + (7 * i) % 11 for i in range(32)]
    ids, mask = source_batch(lengths, seed=2)
    with torch.inference_mode():
        exact = IncrementalDecoder(model, ids, mask, capacity=4, max_rows=32).step(torch.full((32,), BOS))
        int8 = IncrementalDecoder(model, ids, mask, capacity=4, max_rows=32, prepared=prepared).step(
            torch.full((32,), BOS)
        )
    assert (int8 - exact).abs().max() < 0.05 * exact.abs().max()
    assert not torch.equal(int8, exact)  # int8 kernels ran
    options = DecodingOptions(num_beams=4, max_len_a=0.5, max_len_b=6)
    same = [
        a[0].tokens == b[0].tokens
        for a, b in zip(decode(model, ids, mask, options, prepared), decode(model, ids, mask, options))
    ]
    assert sum(same) >= 20  # 24 of 32 on this random model, with AVX2 and with AMX int8 kernels


@pytest.mark.parametrize("relu", [False, True])
def test_int8_projection_computes_what_the_quantized_module_does(relu):
    """`Projection` on PyTorch's dynamically quantized linear map calls the operator the module's forward
    calls (with the ReLU fused where asked): the same numbers, bit for bit."""
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear

    _, quantized = _int8_module(24, 40)
    assert isinstance(quantized, Int8Linear)
    x = torch.randn(5, 24)
    expected = quantized(x).relu() if relu else quantized(x)
    got = incremental.Projection(quantized, relu=relu)(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert bool((expected < 0).any()) != relu


def _int8_module(fan_in: int, fan_out: int):
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    torch.manual_seed(0)
    float_map = torch.nn.Sequential(torch.nn.Linear(fan_in, fan_out))
    return float_map[0], quantize_dynamic(float_map, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)[
        0
    ]


@pytest.mark.parametrize("relu", [False, True])
def test_amx_int8_linear_is_close_to_the_float_map_where_the_cpu_has_amx(relu):
    float_map, quantized = _int8_module(64, 300)
    tiles = incremental.amx_int8_linear(quantized.weight(), quantized.bias(), relu)
    if not onednn_amx():
        assert tiles is None
        pytest.skip("oneDNN has no AMX here (no AMX tiles, or ONEDNN_MAX_CPU_ISA rules them out): fbgemm only")
    x = torch.randn(3, 5, 64)
    expected = float_map(x).relu() if relu else float_map(x)
    got = tiles(x)
    assert got.shape == expected.shape and got.dtype == torch.float32
    assert (got - expected).abs().max() < 0.02 * expected.abs().max()
    assert not torch.equal(got, expected)  # int8 kernels ran
    if relu:
        assert bool((got >= 0).all())


@pytest.mark.parametrize("amx", [False, True])
def test_int8_maps_take_the_amx_kernel_for_calls_with_many_outputs_only(monkeypatch, amx):
    """With AMX, calls of at least `amx_int8_min_rows` rows (for the map and the thread count) take
    oneDNN's int8 GEMM, others fbgemm's; without AMX every call takes fbgemm's."""
    _, quantized = _int8_module(16, 1000)
    calls = []
    fake = (lambda x: calls.append(x.size(0)) or torch.zeros(x.size(0), 1000)) if amx else None
    monkeypatch.setattr(incremental, "amx_int8_linear", lambda *args: fake)
    function = incremental.int8_linear_map(quantized)
    threshold = incremental.amx_int8_min_rows(16, 1000, torch.get_num_threads())
    assert threshold >= incremental.AMX_INT8_MIN_ROWS
    assert incremental.amx_int8_min_rows(16, 1000, 2) >= incremental.amx_int8_min_rows(16, 1000, 1)
    assert incremental.amx_int8_min_rows(1000, 16, 1) > incremental.amx_int8_min_rows(16, 1000, 1)  # narrowing
    for rows in (1, threshold - 1, threshold, 4 * threshold):
        x = torch.randn(rows, 16)
        y = function(x)
        if not (amx and rows >= threshold):
            torch.testing.assert_close(y, quantized(x), rtol=0, atol=0)  # fbgemm's, as the module computes
    assert calls == ([threshold, 4 * threshold] if amx else [])


def test_decoding_with_head_masks_equals_full_forwards_with_them():
    """The fast decoder removes the heads the forward's masks remove: greedy decoding with masks of all
    three kinds == greedy by full forward passes given the same masks (and differs from unmasked)."""
    model = tiny_model()
    config = model.config
    masks = {
        name: torch.ones(layers, config.num_heads)
        for name, layers in [
            ("head_mask", config.num_encoder_layers),
            ("decoder_head_mask", config.num_decoder_layers),
            ("cross_attn_head_mask", config.num_decoder_layers),
        ]
    }
    masks["head_mask"][0, 1] = masks["decoder_head_mask"][1, 0] = masks["cross_attn_head_mask"][1, 2] = 0.0
    masks["cross_attn_head_mask"][0, 3] = 0.0
    lengths = [9, 4, 7, 5]
    ids, mask = source_batch(lengths)
    options = DecodingOptions(num_beams=1, max_len_a=0, max_len_b=10)
    fast = decode(model, ids, mask, options, head_masks=masks)
    plain = decode(model, ids, mask, options)
    with torch.no_grad():
        for i, n in enumerate(lengths):
            tokens: list[int] = []
            while len(tokens) < 10:
                logits = model(
                    input_ids=ids[i : i + 1, :n],
                    decoder_input_ids=torch.tensor([[BOS] + tokens]),
                    use_cache=False,
                    **masks,
                ).logits
                token = int(logits[0, -1].argmax())
                if token == EOS:
                    break
                tokens.append(token)
            assert fast[i][0].tokens == tokens
    assert [h[0].tokens for h in fast] != [h[0].tokens for h in plain]


@pytest.mark.parametrize(
    ("options", "name", "rows"),
    [
        (DecodingOptions(num_beams=4), "beam", 4),
        (DecodingOptions(num_beams=1), "greedy", 1),
        (DecodingOptions(num_beams=1, do_sample=True, nbest=3), "sampling", 3),
    ],
)
def test_the_options_choose_one_registered_strategy(options, name, rows):
    """`STRATEGIES` is the one place that maps options to a search and its decoder rows per sentence."""
    from aiayn_cli.decoding.search import strategy_for

    strategy = strategy_for(options)
    assert (strategy.name, strategy.rows(options)) == (name, rows)


def test_greedy_search_takes_the_most_likely_token_at_every_step():
    """`greedy_search` against a plain reference: at every step the argmax of one full forward pass (fp32)."""
    from aiayn_cli.decoding.search import greedy_search

    model = tiny_model(seed=4)
    ids, mask = source_batch([7, 5, 9])
    with torch.no_grad():
        decoder = IncrementalDecoder(model, ids, mask, capacity=13, max_rows=3)
        fast = greedy_search(decoder, [12] * 3, DecodingOptions(num_beams=1), BOS, EOS)
    for i, n in enumerate([7, 5, 9]):
        prefix: list[int] = []
        for _ in range(12):
            token = int(next_log_probs(model, ids[i, :n].tolist(), prefix).argmax())
            if token == EOS:
                break
            prefix.append(token)
        assert fast[i][0].tokens == prefix
