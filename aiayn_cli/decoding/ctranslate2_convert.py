"""`aiayn export --to ctranslate2`: the model as a CTranslate2 Transformer, built from its weights.

    from aiayn_cli.decoding.ctranslate2_convert import export_ctranslate2

    export_ctranslate2("runs/base/averaged", "runs/base-ct2", quantization="int8")

CTranslate2's `TransformerSpec` is filled directly from the model's modules, layer by layer: the
paper's post-LN layers (`pre_norm: true` exports as CTranslate2's pre-norm, with the final
LayerNorms), ReLU (or GELU), embeddings scaled by sqrt(d_model) and one vocabulary for both sides.
The position table is set explicitly: the model's own `sinusoidal_positional_encoding` (§3.5,
sin and cos interleaved, which CTranslate2's built-in table does not do) or the learned table
(`positional_encoding: learned`). The folder also holds the tokenizer and a README with the
Python that runs it.

CTranslate2 ranks finished hypotheses by log p / |Y|^alpha (Hugging Face's length penalty), not by
the paper's GNMT penalty ((5 + |Y|) / 6)^alpha: its translations match
`aiayn translate --length-penalty-style hf`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch

from ..errors import AiaynError
from ..files import check_output_folder, staging_dir
from ..model.modeling_aiayn import AiaynForConditionalGeneration, sinusoidal_positional_encoding
from .defaults import check_saved_options

QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16", "int8_float16", "int8_bfloat16")


def export_ctranslate2(
    model_dir: str | Path, output_dir: str | Path, quantization: str = "float32", overwrite: bool = False
) -> Path:
    """Write `model_dir` (an aiayn model folder or Hub id) as a CTranslate2 model folder `output_dir` (absent,
    empty, or with `overwrite` an earlier export: `files.check_output_folder`)."""
    try:
        from ctranslate2.specs import transformer_spec  # noqa: F401
    except ImportError:
        raise AiaynError(
            "aiayn export {to} ctranslate2 needs CTranslate2: pip install 'aiayn-cli[ctranslate2]'", mentions=("to",)
        ) from None
    if quantization not in QUANTIZATIONS:
        raise AiaynError(f"{quantization}: choose one of {', '.join(QUANTIZATIONS)}", key="quantization")
    inputs = [model_dir] if Path(model_dir).exists() else []
    output_dir = check_output_folder(
        output_dir, own=is_export_file, what="a CTranslate2 export", overwrite=overwrite, inputs=inputs, key="output"
    )
    model, tokenizer = load(str(model_dir))
    return save_ctranslate2(model, tokenizer, output_dir, quantization)


def save_ctranslate2(
    model: AiaynForConditionalGeneration,
    tokenizer,
    output_dir: str | Path,
    quantization: str = "float32",
    keep_existing: bool = False,
    finish: Callable[[Path], None] | None = None,
) -> Path:
    """Write a loaded model (float32, checked as `load` checks it) as a CTranslate2 model folder: the
    weights, the tokenizer, the generation_config and a README, all or nothing (`staging_dir`).
    `keep_existing`: where `output_dir` appeared meanwhile (another process converted the same
    model), keep it. `finish`: called on the filled folder before it takes `output_dir`'s place."""
    spec = transformer_spec_of(model, tokenizer)
    spec.validate()
    spec.optimize(quantization=None if quantization == "float32" else quantization)

    output_dir = Path(output_dir)
    with staging_dir(output_dir, keep_existing=keep_existing) as staging:
        spec.save(str(staging))
        tokenizer.save_pretrained(staging)
        model.generation_config.save_pretrained(staging)
        (staging / "README.md").write_text(readme(model, quantization), encoding="utf-8")
        if finish is not None:
            finish(staging)
    return output_dir


EXPORT_FILES = frozenset(
    {
        "model.bin",
        "config.json",
        "shared_vocabulary.json",
        "shared_vocabulary.txt",
        "README.md",
        "generation_config.json",
    }
)


def is_export_file(path: Path) -> bool:
    """A file an export folder holds: CTranslate2's, the tokenizer's, the README."""
    from ..data.tokenization import TOKENIZER_FILES

    return (path.name in EXPORT_FILES or path.name in TOKENIZER_FILES) and path.is_file() and not path.is_symlink()


def load(model_dir: str):
    from ..data.vocabulary import check_tokenizer, model_vocabulary
    from ..model.loading import load_pretrained

    model, tokenizer = load_pretrained(model_dir)
    check_saved_options(model, model_dir)
    if not isinstance(model, AiaynForConditionalGeneration):
        raise AiaynError(f"{model_dir}: not an aiayn model ({type(model).__name__})")
    check_tokenizer(tokenizer, where=f"{model_dir}: the tokenizer", **model_vocabulary(model.config))
    return model.float().eval(), tokenizer


# ---------------------------------------------------------------------------------------------
# The spec, module by module
# ---------------------------------------------------------------------------------------------


def transformer_spec_of(model: AiaynForConditionalGeneration, tokenizer):
    """CTranslate2's `TransformerSpec` holding `model`'s weights and `tokenizer`'s vocabulary."""
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}
    spec = transformer_spec.TransformerSpec.from_config(
        (config.num_encoder_layers, config.num_decoder_layers),
        config.num_heads,
        pre_norm=config.pre_norm,  # post-LN (the paper) unless pre_norm: true
        activation=activation[config.activation_function],
    )
    encoder, decoder = model.model.encoder, model.model.decoder
    set_stack(spec.encoder, encoder, config)
    spec.encoder.embeddings[0].weight = tensor(encoder.embed_tokens.weight)
    for layer_spec, layer in zip(spec.encoder.layer, encoder.layers):
        set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_sublayer.norm)
        set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_sublayer.norm)

    set_stack(spec.decoder, decoder, config)
    spec.decoder.embeddings.weight = tensor(decoder.embed_tokens.weight)
    set_linear(spec.decoder.projection, model.lm_head)  # tied to the embeddings unless tie_word_embeddings: false
    for layer_spec, layer in zip(spec.decoder.layer, decoder.layers):
        set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_sublayer.norm)
        set_attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_sublayer.norm)
        set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_sublayer.norm)

    tokens = tokenizer.convert_ids_to_tokens(list(range(config.vocab_size)))
    if len(set(tokens)) != len(tokens):
        raise AiaynError("the tokenizer maps two ids to the same token: CTranslate2 needs one token per id")
    spec.register_source_vocabulary(tokens)  # §5.1: one shared vocabulary
    spec.register_target_vocabulary(tokens)
    spec.config.bos_token = tokenizer.bos_token
    spec.config.eos_token = tokenizer.eos_token
    spec.config.unk_token = tokenizer.unk_token
    spec.config.decoder_start_token = tokens[config.decoder_start_token_id]
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    return spec


def set_stack(spec, stack, config) -> None:
    """Embedding scale (§3.4), position table (§3.5) and, with pre_norm, the final LayerNorm."""
    spec.scale_embeddings = math.sqrt(config.d_model) if config.scale_embedding else 1.0
    spec.position_encodings.encodings = position_table(stack.embed_positions, config)
    if config.pre_norm:
        set_layer_norm(spec.layer_norm, stack.final_norm)


def position_table(positional_encoding, config) -> torch.Tensor:
    """The model's own table for positions 0 .. max_position_embeddings - 1: learned, or §3.5's
    interleaved sinusoids (CTranslate2's built-in table puts all the sines before all the cosines)."""
    if positional_encoding.learned is not None:
        return tensor(positional_encoding.learned.weight)
    positions = torch.arange(config.max_position_embeddings)
    return sinusoidal_positional_encoding(positions, config.d_model).contiguous()


def set_attention(spec, attention, norm) -> None:
    """Self-attention: [W^Q | W^K | W^V] is CTranslate2's fused first linear map; encoder-decoder
    attention: W^Q, then [W^K | W^V]; W^O last. The sub-layer's LayerNorm goes with it."""
    if attention.self_attention:
        set_linear(spec.linear[0], attention.qkv_proj)
    else:
        set_linear(spec.linear[0], attention.q_proj)
        set_linear(spec.linear[1], attention.kv_proj)
    set_linear(spec.linear[-1], attention.out_proj)
    set_layer_norm(spec.layer_norm, norm)


def set_feed_forward(spec, feed_forward, norm) -> None:
    set_linear(spec.linear_0, feed_forward.w_1)
    set_linear(spec.linear_1, feed_forward.w_2)
    set_layer_norm(spec.layer_norm, norm)


def set_linear(spec, linear: torch.nn.Linear) -> None:
    spec.weight = tensor(linear.weight)
    if linear.bias is not None:
        spec.bias = tensor(linear.bias)


def set_layer_norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = tensor(norm.weight), tensor(norm.bias)


def tensor(parameter: torch.Tensor) -> torch.Tensor:
    return parameter.detach().float().contiguous().clone()


# ---------------------------------------------------------------------------------------------
# The folder's README
# ---------------------------------------------------------------------------------------------


def readme(model: AiaynForConditionalGeneration, quantization: str) -> str:
    options = model.generation_config
    beam = getattr(options, "num_beams", 4) or 4
    alpha = getattr(options, "length_penalty", 0.6)
    return f"""# CTranslate2 model exported by `aiayn export`

The Transformer of "Attention Is All You Need" (d_model {model.config.d_model}, \
{model.config.num_encoder_layers}+{model.config.num_decoder_layers} layers), weights saved as \
`{quantization}`, with its tokenizer.

```python
import ctranslate2
from transformers import AutoTokenizer

folder = "."  # this folder
tokenizer = AutoTokenizer.from_pretrained(folder)
translator = ctranslate2.Translator(folder, device="cpu", compute_type="default")

sentences = ["A man rides a bike."]
source = [tokenizer.convert_ids_to_tokens(tokenizer(s)["input_ids"]) for s in sentences]  # ends with </s>
results = translator.translate_batch(
    source, beam_size={beam}, length_penalty={alpha}, min_decoding_length=0, max_decoding_length=256
)
print([tokenizer.decode(tokenizer.convert_tokens_to_ids(r.hypotheses[0]), skip_special_tokens=True) for r in results])
```

CTranslate2 divides a hypothesis's log-probability by |Y|^alpha, not by the paper's GNMT penalty
((5 + |Y|) / 6)^alpha that `aiayn translate` uses by default: its translations are those of
`aiayn translate --length-penalty-style hf` (with the same beam and alpha), not always those of
plain `aiayn translate`. `max_decoding_length` is a number of tokens for every sentence, where
`aiayn translate` allows |x| + 50 per sentence; `min_decoding_length=0` allows an empty translation,
as `aiayn translate` does.
"""
