"""Contract tests of the model: sizes, masking, positions, save/load, cache, tying, HF integration."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
import textwrap

import helpers
import pytest
import torch
import torch.nn.functional as F
from helpers import word_level_tokenizer
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForSeq2SeqLM

from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration
from aiayn_cli.model import modeling_aiayn as modeling
from aiayn_cli.model.modeling_aiayn import CACHE_FIELD, Dropout, dropout_function, sinusoidal_positional_encoding

VOCAB = 72  # differs from every other dimension of the tiny preset


def tiny_model(**overrides) -> AiaynForConditionalGeneration:
    """`helpers.tiny_model` without dropout, from the random state as it is."""
    return helpers.tiny_model(VOCAB, seed=None, **{"dropout": 0.0, **overrides})


def random_batch(
    lengths: list[int], vocab: int = VOCAB, pad: int = 0, eos: int = 2
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded source ids (ending in </s>) and their attention mask."""
    width = max(lengths)
    ids = torch.full((len(lengths), width), pad)
    for row, n in enumerate(lengths):
        ids[row, : n - 1] = torch.randint(4, vocab, (n - 1,))
        ids[row, n - 1] = eos
    return ids, (ids != pad).long()


# -- sizes (Table 3) ----------------------------------------------------------------------------


@pytest.mark.parametrize("preset, low, high", [("base", 63.0e6, 65.5e6), ("big", 210e6, 215e6)])
def test_parameter_counts_match_the_paper(preset, low, high):
    config = AiaynConfig.from_preset(preset, vocab_size=37000)
    with torch.device("meta"):
        model = AiaynForConditionalGeneration(config)
    count = sum(p.numel() for p in model.parameters())  # shared parameters counted once
    assert low <= count <= high, count


def test_presets_are_table_3():
    base, big = AiaynConfig.from_preset("base"), AiaynConfig.from_preset("big")
    assert (base.num_encoder_layers, base.d_model, base.d_ff, base.num_heads, base.dropout) == (6, 512, 2048, 8, 0.1)
    assert (big.num_encoder_layers, big.d_model, big.d_ff, big.num_heads, big.dropout) == (6, 1024, 4096, 16, 0.3)
    assert base.d_k == 64 and big.d_k == 64
    assert not base.pre_norm and base.positional_encoding == "sinusoidal" and base.scale_embedding
    assert base.tie_word_embeddings


def test_generic_hf_names():
    config = AiaynConfig.from_preset("small")
    assert config.hidden_size == 256 and config.num_attention_heads == 4
    assert config.num_hidden_layers == 3 and config.intermediate_size == 1024


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(d_model=510),
        dict(d_model=0),
        dict(num_heads=-1),
        dict(dropout=1.0),
        dict(dropout=-0.1),
        dict(attention_dropout=1.5),
        dict(positional_encoding="rotary"),
        dict(num_encoder_layers=0),
        dict(vocab_size=2),
    ],
)
def test_impossible_configs_raise(kwargs):
    with pytest.raises(ValueError):
        AiaynConfig(**kwargs)


def test_unknown_preset_raises():
    with pytest.raises(ValueError, match="unknown preset"):
        AiaynConfig.from_preset("huge")


# -- masking -----------------------------------------------------------------------------------


def test_padding_does_not_change_a_sentence():
    model = tiny_model()
    src, mask = random_batch([5, 9, 12])
    tgt, tgt_mask = random_batch([4, 7, 10])
    with torch.no_grad():
        batched = model(
            input_ids=src, attention_mask=mask, decoder_input_ids=tgt, decoder_attention_mask=tgt_mask
        ).logits
        alone = model(input_ids=src[:1, :5], decoder_input_ids=tgt[:1, :4]).logits
    assert (batched[0, :4] - alone[0]).abs().max() <= 1e-5


def test_future_decoder_tokens_never_change_past_logits():
    model = tiny_model()
    src, mask = random_batch([6, 8])
    tgt, _ = random_batch([10, 10])
    with torch.no_grad():
        reference = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        for t in range(tgt.size(1) - 1):
            changed = tgt.clone()
            changed[:, t + 1 :] = torch.randint(4, VOCAB, changed[:, t + 1 :].shape)
            logits = model(input_ids=src, attention_mask=mask, decoder_input_ids=changed).logits
            assert (logits[:, : t + 1] - reference[:, : t + 1]).abs().max() <= 1e-6
            if t + 1 < tgt.size(1):
                assert (logits[:, t + 1 :] - reference[:, t + 1 :]).abs().max() > 1e-4  # the future does matter


# -- 3.5 positional encoding -------------------------------------------------------------------


def paper_formula(length: int, d_model: int) -> torch.Tensor:
    table = torch.zeros(length, d_model, dtype=torch.float64)
    for pos in range(length):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            table[pos, 2 * i] = math.sin(angle)
            table[pos, 2 * i + 1] = math.cos(angle)
    return table


def test_positional_encoding_is_the_formula():
    table = sinusoidal_positional_encoding(torch.arange(1024), 64)
    assert (table.double() - paper_formula(1024, 64)).abs().max() <= 1e-6


def test_positional_encoding_enters_the_model():
    """The encoder input is sqrt(d_model) * embedding + PE (dropout off)."""
    model = tiny_model()
    src, _ = random_batch([7])
    captured = {}
    model.model.encoder.layers[0].register_forward_pre_hook(lambda m, args: captured.update(x=args[0]))
    with torch.no_grad():
        model.model.encoder(input_ids=src)
    expected = model.model.shared.weight[src[0]] * math.sqrt(64) + paper_formula(7, 64).float()
    assert (captured["x"][0] - expected).abs().max() <= 1e-5


def test_positional_encoding_after_reload_in_a_new_process(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path)
    script = textwrap.dedent(
        f"""
        import math, torch, aiayn_cli.model  # registers the Auto classes
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path)!r}).eval()
        captured = {{}}
        model.model.decoder.layers[0].register_forward_pre_hook(lambda m, a: captured.update(x=a[0]))
        ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])
        with torch.no_grad():
            model(input_ids=ids, decoder_input_ids=ids)
        pe = captured["x"][0] - model.model.shared.weight[ids[0]] * math.sqrt(64)
        table = torch.zeros(8, 64, dtype=torch.float64)
        for pos in range(8):
            for i in range(32):
                a = pos / 10000 ** (2 * i / 64)
                table[pos, 2 * i], table[pos, 2 * i + 1] = math.sin(a), math.cos(a)
        print(float((pe.double() - table).abs().max()))
        """
    )
    from helpers import cli_env

    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=cli_env(), timeout=300)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip().splitlines()[-1]) <= 1e-6


# -- save / load -------------------------------------------------------------------------------


def test_save_load_round_trip(tmp_path, caplog):
    model = tiny_model()
    model.save_pretrained(tmp_path)
    src, mask = random_batch([6, 9])
    tgt, _ = random_batch([5, 5])
    with caplog.at_level(logging.WARNING):
        loaded, info = AiaynForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    loaded.eval()
    assert not any(info.values()), info  # no missing, unexpected, mismatched keys
    assert not [r for r in caplog.records if "key" in r.getMessage().lower()]
    with torch.no_grad():
        a = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        b = loaded(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    assert torch.equal(a, b)
    beams = dict(num_beams=4, max_new_tokens=12, early_stopping=True)
    assert torch.equal(
        model.generate(src, attention_mask=mask, **beams), loaded.generate(src, attention_mask=mask, **beams)
    )


def test_one_copy_of_the_shared_matrix(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        vocab_shaped = [k for k in f.keys() if f.get_slice(k).get_shape()[0] == VOCAB]
    assert vocab_shaped == ["model.shared.weight"], vocab_shaped
    loaded = AiaynForConditionalGeneration.from_pretrained(tmp_path)
    shared = loaded.model.shared.weight
    assert loaded.lm_head.weight is shared
    assert loaded.model.encoder.embed_tokens.weight is shared and loaded.model.decoder.embed_tokens.weight is shared


def test_saved_folder_has_paper_generation_config(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["length_penalty"] == 0.6
    assert generation["length_penalty_style"] == "gnmt"
    assert (generation["max_len_a"], generation["max_len_b"]) == (1.0, 50)
    config = json.loads((tmp_path / "config.json").read_text())
    assert "num_beams" not in config and "length_penalty" not in config


def test_untied_embeddings_are_three_matrices(tmp_path):
    model = tiny_model(tie_word_embeddings=False)
    weights = {
        id(model.model.encoder.embed_tokens.weight),
        id(model.model.decoder.embed_tokens.weight),
        id(model.lm_head.weight),
    }
    assert len(weights) == 3
    model.save_pretrained(tmp_path)
    loaded = AiaynForConditionalGeneration.from_pretrained(tmp_path)
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)
    assert loaded.lm_head.weight is not loaded.model.shared.weight


def test_resize_token_embeddings_keeps_the_tie(tmp_path):
    model = tiny_model()
    model.resize_token_embeddings(VOCAB + 7)
    assert model.config.vocab_size == VOCAB + 7
    shared = model.model.shared.weight
    assert shared.shape[0] == VOCAB + 7
    assert model.lm_head.weight is shared and model.model.decoder.embed_tokens.weight is shared
    src, _ = random_batch([5])
    assert model(input_ids=src, decoder_input_ids=src).logits.shape[-1] == VOCAB + 7
    model.save_pretrained(tmp_path)
    loaded = AiaynForConditionalGeneration.from_pretrained(tmp_path)
    assert loaded.lm_head.weight is loaded.model.shared.weight
    assert torch.equal(loaded.model.shared.weight, shared)


# -- incremental decoding ----------------------------------------------------------------------


def test_cached_decoding_equals_full_forward():
    model = tiny_model()
    src, mask = random_batch([4, 9, 12])
    tgt, _ = random_batch([8, 8, 8])
    with torch.no_grad():
        full = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, use_cache=False).logits
        encoder_outputs = model.get_encoder()(input_ids=src, attention_mask=mask)
        cache, steps = None, []
        for t in range(tgt.size(1)):
            out = model(
                encoder_outputs=encoder_outputs,
                attention_mask=mask,
                decoder_input_ids=tgt[:, t : t + 1],
                cache=cache,
                use_cache=True,
            )
            cache = out[CACHE_FIELD]
            steps.append(out.logits)
    assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-5


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generate_with_and_without_cache(num_beams):
    model = tiny_model()
    src, mask = random_batch([3, 7, 11, 5])
    kwargs = dict(num_beams=num_beams, max_new_tokens=15, early_stopping=True, do_sample=False)
    with_cache = model.generate(src, attention_mask=mask, use_cache=True, **kwargs)
    without = model.generate(src, attention_mask=mask, use_cache=False, **kwargs)
    assert torch.equal(with_cache, without)


def test_pre_norm_and_learned_positions_decode_consistently():
    for overrides in (dict(pre_norm=True), dict(positional_encoding="learned")):
        model = tiny_model(**overrides)
        src, mask = random_batch([4, 8])
        kwargs = dict(num_beams=4, max_new_tokens=10, early_stopping=True)
        assert torch.equal(
            model.generate(src, attention_mask=mask, **kwargs),
            model.generate(src, attention_mask=mask, use_cache=False, **kwargs),
        )


def test_learned_positions_reject_over_long_inputs():
    model = tiny_model(positional_encoding="learned", max_position_embeddings=16)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(input_ids=torch.ones(1, 17, dtype=torch.long), decoder_input_ids=torch.ones(1, 3, dtype=torch.long))


# -- loss and labels ---------------------------------------------------------------------------


def test_loss_is_cross_entropy_over_non_pad_targets():
    model = tiny_model()
    src, mask = random_batch([5, 8])
    labels, _ = random_batch([6, 3])  # second row padded with 0 = <pad>
    out = model(input_ids=src, attention_mask=mask, labels=labels)
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    assert decoder_input_ids[0, 0] == model.config.decoder_start_token_id
    assert torch.equal(decoder_input_ids[:, 1:], labels[:, :-1])
    logits = model(input_ids=src, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits
    keep = labels != 0
    expected = torch.nn.functional.cross_entropy(logits[keep], labels[keep])
    assert torch.allclose(out.loss, expected, atol=1e-6)
    minus_100 = labels.masked_fill(labels == 0, -100)
    assert torch.allclose(model(input_ids=src, attention_mask=mask, labels=minus_100).loss, expected, atol=1e-6)


def test_attention_weights_can_be_returned():
    model = tiny_model()
    src, mask = random_batch([4, 6])
    out = model(input_ids=src, attention_mask=mask, decoder_input_ids=src, output_attentions=True)
    assert len(out.cross_attentions) == 2 and out.cross_attentions[0].shape == (2, 4, 6, 6)
    assert torch.allclose(out.cross_attentions[0].sum(-1), torch.ones(2, 4, 6))
    assert out.cross_attentions[0][0, :, :, 4:].abs().max() == 0  # padded source positions get no attention


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_keeps_1_minus_p_and_scales_what_it_keeps(dtype):
    torch.manual_seed(0)
    x = torch.rand(200, 16, 64, dtype=dtype) + 0.5  # no zeros of its own
    x.requires_grad_(True)
    y = dropout_function(x, 0.3)
    kept = y != 0
    assert y.dtype == dtype and abs(kept.float().mean().item() - 0.7) < 0.01
    torch.testing.assert_close(y[kept], (x / 0.7)[kept].detach())
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.to(dtype) / 0.7)  # the same mask, backwards
    module = Dropout(0.3)
    assert torch.equal(module.eval()(x), x) and torch.equal(dropout_function(x, 0.0), x)
    assert not dropout_function(x, 1.0).any()
    torch.manual_seed(1)
    first = Dropout(0.3).train()(x)
    torch.manual_seed(1)
    assert torch.equal(first, Dropout(0.3).train()(x))  # the seed decides the mask


def test_dropout_masks_from_both_halves_of_each_random_draw_keep_1_minus_p():
    """Each 32-bit draw serves two neighbouring elements: both must be kept with probability 1 - p,
    independently of each other."""
    torch.manual_seed(0)
    kept = dropout_function(torch.ones(1_000_000), 0.3) != 0
    even, odd = kept[0::2].float(), kept[1::2].float()
    assert abs(even.mean().item() - 0.7) < 0.003 and abs(odd.mean().item() - 0.7) < 0.003
    assert abs((even * odd).mean().item() - 0.49) < 0.003  # independent: P(both kept) = 0.7^2
    assert abs((dropout_function(torch.ones(999_999), 0.9) != 0).float().mean().item() - 0.1) < 0.002


def test_bf16_training_attention_is_written_out_and_matches_the_fused_kernel(monkeypatch):
    """In training in bf16 on a CPU, equation (1) is computed in three steps (the fused kernel's
    backward is several times slower there); the result is the fused kernel's, to bf16's precision."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(6, 4, 9, 16) for _ in range(3))
    mask = torch.ones(9, 9, dtype=torch.bool).tril()
    reference = []
    for tensors in ([t.clone().requires_grad_(True) for t in (q, k, v)],):
        out = torch.nn.functional.scaled_dot_product_attention(*tensors, attn_mask=mask)
        out.square().sum().backward()
        reference = [out.detach()] + [t.grad for t in tensors]
    leaves = [t.to(torch.bfloat16).requires_grad_(True) for t in (q, k, v)]

    def fused_kernel(*args, **kwargs):
        raise AssertionError("the fused kernel was called")

    monkeypatch.setattr(modeling.F, "scaled_dot_product_attention", fused_kernel)
    out, weights = modeling.scaled_dot_product_attention(*leaves, mask)
    out.float().square().sum().backward()
    assert weights is None and out.dtype == torch.bfloat16
    for got, want in zip([out.detach()] + [t.grad for t in leaves], reference):
        torch.testing.assert_close(got.float(), want, atol=0.1, rtol=0.05)
    with pytest.raises(AssertionError, match="fused kernel"):  # fp32, and inference: the fused kernel
        modeling.scaled_dot_product_attention(q.requires_grad_(True), k, v, mask)
    with torch.no_grad(), pytest.raises(AssertionError, match="fused kernel"):
        modeling.scaled_dot_product_attention(*leaves, mask)
    config = AiaynConfig.from_preset("tiny", vocab_size=VOCAB, dropout=0.1)
    model, (src, src_mask) = AiaynForConditionalGeneration(config).train(), random_batch([5, 7])
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a training step under mixed precision
        logits = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=src).logits
    logits.float().sum().backward()
    assert logits.dtype == torch.bfloat16 and model.model.shared.weight.grad.abs().sum() > 0


# -- Hugging Face integration ------------------------------------------------------------------


def test_auto_classes_know_aiayn(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is AiaynConfig
    assert type(AutoModelForSeq2SeqLM.from_pretrained(tmp_path)) is AiaynForConditionalGeneration
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_aiayn.AiaynForConditionalGeneration"
    assert (tmp_path / "modeling_aiayn.py").is_file() and (tmp_path / "configuration_aiayn.py").is_file()


def test_loads_and_generates_without_the_package(tmp_path):
    """A saved folder is usable with trust_remote_code=True where `aiayn_cli` cannot be imported."""
    model = tiny_model()
    model.save_pretrained(tmp_path / "model")
    src, mask = random_batch([5, 8])
    expected = model.generate(src, attention_mask=mask, num_beams=4, max_new_tokens=10).tolist()
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["aiayn_cli"] = None  # importing aiayn_cli now raises ImportError
        import torch
        from transformers import AutoModelForSeq2SeqLM
        try:
            import aiayn_cli
            raise SystemExit("aiayn_cli is importable")
        except ImportError:
            pass
        model = AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path / "model")!r}, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        src = torch.tensor({src.tolist()})
        out = model.generate(src, attention_mask=(src != 0).long(), num_beams=4, max_new_tokens=10)
        print(out.tolist())
        """
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    env["HF_HOME"] = str(tmp_path / "hf_home")
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == str(expected)


def test_translation_pipeline_in_process():
    from aiayn_cli.model.modeling_aiayn import AiaynTranslationPipeline

    model = tiny_model()
    tokenizer = word_level_tokenizer()
    translator = AiaynTranslationPipeline(model=model, tokenizer=tokenizer)
    out = translator(["w1 w2 w3", "w4 w5"], max_new_tokens=5, num_beams=2)
    expected = model.generate(**tokenizer(["w1 w2 w3"], return_tensors="pt"), max_new_tokens=5, num_beams=2)
    second = model.generate(**tokenizer(["w4 w5"], return_tensors="pt"), max_new_tokens=5, num_beams=2)
    assert len(out) == 2
    assert out[0]["translation_text"] == tokenizer.decode(expected[0], skip_special_tokens=True)
    assert out[1]["translation_text"] == tokenizer.decode(second[0], skip_special_tokens=True)


def test_translation_pipeline_from_a_saved_folder(tmp_path):
    from transformers import pipeline

    model = tiny_model()
    model.save_pretrained(tmp_path)
    word_level_tokenizer().save_pretrained(tmp_path)
    translator = pipeline("translation", model=str(tmp_path), trust_remote_code=True)
    out = translator("w7 w8 w9", max_new_tokens=4)
    tokenizer = word_level_tokenizer()
    expected = model.eval().generate(**tokenizer(["w7 w8 w9"], return_tensors="pt"), max_new_tokens=4)
    assert out[0]["translation_text"] == tokenizer.decode(expected[0], skip_special_tokens=True)


# -- head masks (the forward's head_mask, decoder_head_mask, cross_attn_head_mask) ----------------


def _zeroing_head(module: torch.nn.Module, head: int, d_k: int):
    """A reference for removing `head` of an attention module: a hook that zeroes the head's slice of
    Concat(head_1, ..., head_h) just before W^O."""

    def hook(out_proj, args):
        concat = args[0].clone()  # (B, T, h * d_k)
        concat[..., head * d_k : (head + 1) * d_k] = 0
        return (concat,)

    return module.out_proj.register_forward_pre_hook(hook)


@pytest.mark.parametrize(
    "argument, layer, head", [("head_mask", 1, 2), ("decoder_head_mask", 0, 3), ("cross_attn_head_mask", 1, 0)]
)
def test_a_head_mask_equals_zeroing_that_heads_output(argument, layer, head):
    """fp32, to 1e-6: the model with one head masked through its forward == the unmasked model whose
    W^O reads a zero where that head's output was; and both differ from the unmasked model."""
    torch.manual_seed(3)
    model = tiny_model(num_encoder_layers=2, num_decoder_layers=2)
    config = model.config
    ids, mask = random_batch([7, 4, 6])
    decoder_ids = torch.randint(4, VOCAB, (3, 5))
    inputs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, use_cache=False)
    head_mask = torch.ones(2, config.num_heads)
    head_mask[layer, head] = 0.0
    with torch.no_grad():
        masked = model(**inputs, **{argument: head_mask}).logits
        unmasked = model(**inputs).logits
        ones = model(**inputs, **{argument: torch.ones(2, config.num_heads)}).logits
        stack = model.model.encoder if argument == "head_mask" else model.model.decoder
        attention = (
            stack.layers[layer].cross_attn if argument == "cross_attn_head_mask" else stack.layers[layer].self_attn
        )
        handle = _zeroing_head(attention, head, config.d_k)
        try:
            reference = model(**inputs).logits
        finally:
            handle.remove()
    assert torch.allclose(masked, reference, atol=1e-6, rtol=0)
    assert torch.equal(ones, unmasked)
    assert (masked - unmasked).abs().max() > 1e-3


def test_a_float_head_mask_gives_the_gradient_of_the_loss_by_each_head():
    """Michel et al. (2019): dL/dm_i at m = 1, in float64 (the loss from the logits here: the model's own
    loss is computed in float32), against central differences to 1e-7."""
    torch.manual_seed(4)
    model = tiny_model().double()
    ids, mask = random_batch([6, 5])
    labels = torch.randint(4, VOCAB, (2, 4))

    def loss(gate: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=ids, attention_mask=mask, labels=labels, cross_attn_head_mask=gate).logits
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())

    gate = torch.ones(model.config.num_decoder_layers, model.config.num_heads, dtype=torch.float64, requires_grad=True)
    (gradient,) = torch.autograd.grad(loss(gate), gate)
    eps = 1e-5
    with torch.no_grad():
        for layer, head in [(0, 0), (1, 3)]:
            up, down = gate.detach().clone(), gate.detach().clone()
            up[layer, head] += eps
            down[layer, head] -= eps
            assert float(gradient[layer, head]) == pytest.approx(float(loss(up) - loss(down)) / (2 * eps), abs=1e-7)
    assert gradient.abs().min() > 1e-5  # every head matters a little in a random model


def test_a_head_mask_of_the_wrong_shape_names_the_argument():
    model = tiny_model()
    ids, mask = random_batch([5])
    with pytest.raises(ValueError, match="decoder_head_mask must have shape"):
        model(input_ids=ids, decoder_input_ids=ids, decoder_head_mask=torch.ones(3))


# -- graphs: torch.compile(fullgraph=True), attention implementations, gradient checkpointing -----------


def test_training_forward_and_a_decoding_step_compile_to_one_graph_each():
    """`torch.compile(fullgraph=True)` raises at any graph break (dynamo's tracing, backend "eager": the graph
    is run as traced, so fp32 numbers equal eager's to 1e-6). The training forward in train mode, with
    padding (the mask's values decide nothing in a graph); one decoding step on a fixed-size cache, three
    steps running, against the model without compiling on the growing cache."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache, StaticCache

    torch.manual_seed(0)
    model = tiny_model(dropout=0.1)
    ids, mask = random_batch([7, 4, 6])
    labels = torch.randint(4, VOCAB, (3, 5))

    def loss(ids, mask, labels):
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss

    model.train()
    compiled = torch.compile(loss, fullgraph=True, backend="eager")(ids, mask, labels)
    compiled.backward()
    assert torch.isfinite(compiled) and model.model.shared.weight.grad.abs().sum() > 0
    model.eval()
    torch.testing.assert_close(
        torch.compile(loss, fullgraph=True, backend="eager")(ids, mask, labels), loss(ids, mask, labels)
    )

    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        config = model.config

        def step(tokens, cache):
            return model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=tokens, cache=cache)

        static = EncoderDecoderCache(StaticCache(config=config, max_cache_len=4), StaticCache(config, max_cache_len=7))
        growing = EncoderDecoderCache(DynamicCache(), DynamicCache())
        compiled_step = torch.compile(step, fullgraph=True, backend="eager")
        for tokens in labels[:, :3].split(1, dim=1):
            torch.testing.assert_close(compiled_step(tokens, static).logits, step(tokens, growing).logits)


def test_attention_implementations_give_the_same_numbers_and_eager_the_weights():
    """`attn_implementation` is honoured: "eager" (equation (1) written out) and "sdpa" (the default) agree to
    1e-5 in fp32, with padding and the causal mask; each takes its own path; eager returns the weights."""
    torch.manual_seed(0)
    model = tiny_model().eval()
    assert model.config._attn_implementation == "sdpa"
    ids, mask = random_batch([7, 4, 6])
    batch = {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": ids[:, :5]}
    config = model.model.decoder.layers[0].cross_attn.config
    assert modeling.attention_function(config) is modeling.sdpa_attention_forward
    assert modeling.attention_function(config, need_weights=True) is modeling.eager_attention_forward
    with torch.no_grad():
        sdpa = model(**batch).logits
        model.set_attn_implementation("eager")
        eager = model(**batch, output_attentions=True)
    assert modeling.attention_function(config) is modeling.eager_attention_forward
    torch.testing.assert_close(eager.logits, sdpa, atol=1e-5, rtol=1e-5)
    weights = eager.cross_attentions[0]  # (B, h, T, S)
    assert weights.shape == (3, 4, 5, 7) and torch.allclose(weights.sum(-1), torch.ones(3, 4, 5))
    assert weights[1, :, :, 4:].abs().max() == 0  # the padded source positions of the second sentence


def _eager_and_flex(run):
    """`run(model)` with `attn_implementation="eager"`, then "flex_attention" (PyTorch's flex attention through
    transformers, which compiles it on its first call, on a CPU too: some ten seconds for each new shape)."""
    torch.manual_seed(0)
    model = tiny_model().eval()
    outputs = []
    with torch.no_grad():
        for implementation in ("eager", "flex_attention"):
            model.set_attn_implementation(implementation)
            outputs.append(run(model))
    config = model.model.decoder.layers[0].cross_attn.config
    assert modeling.attention_function(config) is modeling.flex_attention_forward
    return outputs


@pytest.mark.slow  # flex attention is compiled on first use: a minute and more with a cold compile cache
def test_flex_attention_gives_eager_numbers():
    """Flex attention agrees with eager to 1e-5 in fp32, with padding and the causal mask."""
    ids, mask = random_batch([7, 4, 6])
    eager, flex = _eager_and_flex(lambda model: model(ids, attention_mask=mask, decoder_input_ids=ids[:, :5]).logits)
    torch.testing.assert_close(flex, eager, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_flex_attention_gives_eager_beams():
    """Beam search with its cache (each sentence's beams query its encoder keys together) gives eager's tokens."""
    ids, mask = random_batch([7, 4, 6])
    search = {"attention_mask": mask, "num_beams": 2, "max_new_tokens": 4, "min_new_tokens": 4}
    eager, flex = _eager_and_flex(lambda model: model.generate(ids, **search))
    assert torch.equal(flex, eager)


def test_gradient_checkpointing_gives_the_same_gradients():
    """`activation_checkpointing_enable()` (formerly `gradient_checkpointing_enable()`): the layers'
    activations recomputed in backward, dropout included (the random state is replayed), so the gradients
    equal those without checkpointing (fp32, to 1e-6)."""
    torch.manual_seed(0)
    model = tiny_model(dropout=0.1).train()
    ids, mask = random_batch([7, 4, 6])
    labels = torch.randint(4, VOCAB, (3, 5))
    grads = []
    for enable in (False, True):
        if enable:
            (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
        model.zero_grad()
        torch.manual_seed(1)
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert model.model.encoder.layers[0].gradient_checkpointing
    for without, with_checkpointing in zip(*grads):
        torch.testing.assert_close(with_checkpointing, without, atol=1e-6, rtol=1e-5)
