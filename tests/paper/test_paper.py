"""`aiayn paper`: each topic's claim checked against an independent computation, and its errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT, run_cli, save_tiny_model

from aiayn_cli.paper import complexity, normalization, positions, run_topic, scaling

# ---------------------------------------------------------------------------------------------
# positions (§3.5)
# ---------------------------------------------------------------------------------------------


def numpy_encoding(length: int, d_model: int) -> np.ndarray:
    """The §3.5 formula, written out again in numpy: PE(pos, 2i) = sin(pos / 10000^(2i/d)), cos for 2i+1."""
    pos = np.arange(length, dtype=np.float64)[:, None]
    frequencies = 1.0 / 10000.0 ** (np.arange(0, d_model, 2, dtype=np.float64) / d_model)
    table = np.empty((length, d_model))
    table[:, 0::2], table[:, 1::2] = np.sin(pos * frequencies), np.cos(pos * frequencies)
    return table


def test_positions_rotation_error_is_below_1e6_and_recomputed_independently(tmp_path):
    d_model, last_pos, last_k = 512, 1000, 100
    table = numpy_encoding(last_pos + last_k + 1, d_model)
    frequencies = 1.0 / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
    worst = 0.0
    for k in range(last_k + 1):
        c, s = np.cos(frequencies * k), np.sin(frequencies * k)  # M_k from the formula, not from PE(k)
        sin, cos = table[:last_pos, 0::2], table[:last_pos, 1::2]
        rotated_sin, rotated_cos = c * sin + s * cos, -s * sin + c * cos
        worst = max(worst, np.abs(rotated_sin - table[k : k + last_pos, 0::2]).max())
        worst = max(worst, np.abs(rotated_cos - table[k : k + last_pos, 1::2]).max())
    assert worst <= 1e-6

    result = run_topic("positions", tmp_path)
    printed = result.numbers["max_rotation_error"]
    assert printed <= 1e-6
    assert f"{printed:.2e}" in " ".join(result.notes)
    # the model's table is the formula (float64) and the library's M_k is the block-diagonal rotation
    from aiayn_cli.model.modeling_aiayn import sinusoidal_positional_encoding

    assert sinusoidal_positional_encoding(torch.arange(4), 8).dtype == torch.float32  # the model's default
    assert positions.encoding(4, 8).dtype == torch.float64
    model_table = positions.encoding(last_pos + last_k + 1, d_model).numpy()
    assert np.abs(model_table - table).max() < 1e-9
    m_7 = positions.rotation_matrix(torch.from_numpy(table[7])).numpy()
    assert np.abs(m_7 @ table[300] - table[307]).max() < 1e-9
    off_block = m_7.copy()
    for i in range(0, d_model, 2):
        off_block[i : i + 2, i : i + 2] = 0
    assert not off_block.any()
    assert result.numbers["wavelength_min"] == pytest.approx(2 * math.pi)
    assert result.numbers["wavelength_max"] < 10000 * 2 * math.pi
    assert {p.name for p in result.figures} >= {"positions_encoding.png", "positions_rotation_and_naive.png"}
    assert all(p.stat().st_size > 10_000 for p in result.figures)
    assert (tmp_path / "positions.md").read_text().startswith("# Positional encoding")


@pytest.mark.slow
def test_positions_with_a_learned_model_draws_both_tables(tmp_path):
    from helpers import word_level_tokenizer

    from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration

    config = AiaynConfig.from_preset("tiny", vocab_size=72, positional_encoding="learned", max_position_embeddings=64)
    AiaynForConditionalGeneration(config).save_pretrained(tmp_path / "learned")
    word_level_tokenizer().save_pretrained(tmp_path / "learned")
    result = run_topic("positions", tmp_path / "out", model=str(tmp_path / "learned"))
    assert (tmp_path / "out" / "positions_learned.png") in result.figures


# ---------------------------------------------------------------------------------------------
# scaling (§3.2.1)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d_k", [16, 64, 256])
def test_variance_of_q_dot_k_is_d_k_within_10_percent(d_k):
    assert scaling.dot_product_variance(d_k) == pytest.approx(d_k, rel=0.10)
    assert scaling.dot_product_variance(d_k, seed=1) == pytest.approx(d_k, rel=0.10)


def test_scaled_softmax_keeps_its_entropy_and_the_unscaled_one_collapses():
    scaled = {d: scaling.softmax_statistics(d, scaled=True) for d in (16, 256)}
    unscaled = {d: scaling.softmax_statistics(d, scaled=False) for d in (16, 256)}
    assert scaled[256]["entropy"] == pytest.approx(scaled[16]["entropy"], rel=0.1)
    assert unscaled[256]["entropy"] < 0.4 * unscaled[16]["entropy"]
    assert unscaled[256]["largest_weight"] > 0.8 > scaled[256]["largest_weight"]
    assert unscaled[256]["gradient_norm"] < scaled[256]["gradient_norm"]


def test_scaling_topic_with_a_model_reports_every_attention(tmp_path):
    save_tiny_model(tmp_path / "model")
    result = run_topic("scaling", tmp_path / "out", model=str(tmp_path / "model"))
    layers = result.numbers["trained_layers"]
    assert len(layers) == 6  # tiny: 2 encoder self, 2 decoder self, 2 cross
    assert all(layer["logit_std"] > 0 and layer["entropy"] > 0 for layer in layers)
    assert (tmp_path / "out" / "scaling_trained_layers.png").is_file()


def test_logit_spread_read_off_the_weights_is_the_spread_of_the_logits():
    weights_logits = torch.randn(3, 7)
    weights = weights_logits.softmax(-1)
    spread = weights.log().std(-1, unbiased=False)
    assert torch.allclose(spread, weights_logits.std(-1, unbiased=False), atol=1e-5)


# ---------------------------------------------------------------------------------------------
# masks (§3.2.3)
# ---------------------------------------------------------------------------------------------


def test_masks_are_the_models_masks_of_a_padded_batch(tmp_path):
    result = run_topic("masks", tmp_path)
    masks = result.numbers["masks"]
    encoder, decoder, cross = (masks[name] for name in masks)
    from aiayn_cli.paper.common import padded_batch, small_tokenizer

    batch = padded_batch(small_tokenizer())
    source, target = batch["attention_mask"].bool(), batch["decoder_attention_mask"].bool()
    assert source.sum(-1).unique().numel() == 3  # three lengths: real padding
    assert torch.equal(encoder, source[:, None, :].expand_as(encoder))
    assert torch.equal(cross, source[:, None, :].expand_as(cross))
    length = target.size(1)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    assert torch.equal(decoder, causal[None] & target[:, None, :])
    assert (tmp_path / "masks.png").stat().st_size < 300_000


# ---------------------------------------------------------------------------------------------
# complexity (§4, Table 1)
# ---------------------------------------------------------------------------------------------


def test_every_layer_is_timed_and_weighed_at_every_length():
    # Which layer is faster is what the topic measures on the user's CPU, not what a test asserts: the
    # times depend on the CPU's kernels and its load (the crossover itself is tested on given times below).
    results = complexity.measure((32, 2048), d_model=64, heads=4, rounds=1)
    assert len(results) == 4 and "self-attention" in results and "recurrent (LSTM)" in results
    for row in results.values():
        assert row[32]["seconds"] > 0 and row[2048]["seconds"] > 0
        assert row[2048]["bytes"] > row[32]["bytes"] > 0  # activations grow with n
    crossover = complexity.crossover(results)
    assert crossover is None or 32 <= crossover <= 2048


def test_crossover_is_interpolated_on_log_axes():
    times = {"self-attention": {8: 1.0, 64: 4.0}, "recurrent (LSTM)": {8: 2.0, 64: 2.0}}
    results = {name: {n: {"seconds": s} for n, s in values.items()} for name, values in times.items()}
    assert complexity.crossover(results) == pytest.approx(math.sqrt(8 * 64))
    results["self-attention"][64]["seconds"] = 1.5
    assert complexity.crossover(results) is None


def test_restricted_attention_is_the_models_attention_with_a_band_mask():
    from aiayn_cli import AiaynConfig
    from aiayn_cli.model.modeling_aiayn import MultiHeadAttention

    attention = MultiHeadAttention(AiaynConfig.from_preset("tiny", vocab_size=8), self_attention=True).eval()
    for n in (5, 32, 70):
        x = torch.randn(2, n, 64)
        i = torch.arange(n)
        band = (i[:, None] - i[None, :]).abs() <= 4
        with torch.no_grad():
            expected = attention(x, mask=band)[0]
            assert torch.allclose(complexity.restricted_attention(attention, x, 8), expected, atol=1e-5)


@pytest.mark.slow
def test_complexity_topic_with_its_defaults(tmp_path):
    result = run_topic("complexity", tmp_path)
    assert (tmp_path / "complexity.png").is_file() and "crossover" in result.notes[0]
    results = result.numbers["results"]
    assert all(row[n]["seconds"] > 0 for row in results.values() for n in complexity.LENGTHS)


# ---------------------------------------------------------------------------------------------
# teacher forcing
# ---------------------------------------------------------------------------------------------


def test_teacher_forced_choices_are_the_logits_argmax_and_free_running_is_translate_beam_1(tmp_path, capsys):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from aiayn_cli.paper.teacher_forcing import compare

    model_dir = save_tiny_model(tmp_path / "model", seed=3)
    source, target = "w5 w9 w11 w7", "w20 w21 w22"
    code, out, err = run_cli(
        "paper", "teacher-forcing", "--model", model_dir, "--source", source, "--target", target,
        "-o", tmp_path / "out",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    assert "what to notice" in out and (tmp_path / "out" / "teacher_forcing.png").is_file()

    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)
    comparison = compare(model, tokenizer, source, target)
    labels = tokenizer(text_target=[target], return_tensors="pt")["input_ids"]
    decoder_input_ids = torch.cat([torch.tensor([[model.config.decoder_start_token_id]]), labels[:, :-1]], dim=1)
    with torch.no_grad():
        logits = model(**tokenizer([source], return_tensors="pt"), decoder_input_ids=decoder_input_ids).logits
    assert comparison.decoder_input == decoder_input_ids[0].tolist()
    assert comparison.forced == logits.argmax(-1)[0].tolist()

    code, out, err = run_cli(
        "translate", "--model", model_dir, "--beam", "1", "--precision", "fp32", source, capsys=capsys
    )
    assert code == 0, err
    assert comparison.translation == out.strip() != ""
    assert comparison.free[:-1] == tokenizer(comparison.translation, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------------------------------------
# normalization
# ---------------------------------------------------------------------------------------------


def test_layer_norm_ignores_the_batch_and_batch_norm_does_not(tmp_path):
    result = run_topic("normalization", tmp_path)
    changes = result.numbers["changes"]
    assert all(change["LayerNorm"] == 0.0 for change in changes.values())
    for name in ("sentence 0 + sentence 1 only", "sentence 0 alone, padded"):
        assert changes[name]["BatchNorm"] > 0.1
    assert result.numbers["padding_effect"] > 0.1
    hidden = torch.randn(2, 5, 8)
    assert torch.allclose(normalization.batch_norm(hidden).reshape(-1, 8).mean(0), torch.zeros(8), atol=1e-5)


# ---------------------------------------------------------------------------------------------
# errors: one line, exit 2
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["paper", "attention-span"], "choose one of positions, scaling, masks, complexity, teacher-forcing"),
        (["paper", "teacher-forcing", "--source", "a", "--target", "b"], "needs --model"),
        (["paper", "teacher-forcing", "--model", "m", "--source", "a"], "needs a sentence pair"),
        (["paper", "teacher-forcing", "--model", "m", "--source", " ", "--target", "b"], "--source is empty"),
        (["paper", "masks", "--source", "a", "--target", ""], "--target is empty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, args, message):
    code, _, err = run_cli(*args, "-o", tmp_path / "out", capsys=capsys)
    assert code == 2
    assert err.count("\n") == 1 and message in err


def test_an_output_folder_that_cannot_be_written_is_one_line_and_exit_2(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, _, err = run_cli("paper", "positions", "-o", blocker / "figures", capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and str(blocker / "figures") in err


def test_the_tour_shows_committed_figures_under_300_kb():
    tour = REPO_ROOT / "docs" / "tour.md"
    text = tour.read_text(encoding="utf-8")
    linked = [line.split("](", 1)[1].split(")", 1)[0] for line in text.splitlines() if line.startswith("![")]
    assert linked
    for name in linked:
        path = (tour.parent / name).resolve()
        assert path.is_file(), name
        assert path.stat().st_size < 300_000, name
    assert "aiayn paper" in text and "docs/tour.md" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert Path(REPO_ROOT / "docs" / "tour").is_dir()
