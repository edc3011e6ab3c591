"""Configuration of the Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Field names are the paper's symbols (Table 3): `d_model`, `d_ff`, `num_heads` (h), the number of
layers N for the encoder and the decoder, and the dropout rate P_drop. Every deviation from the
paper is a field whose default is the paper's choice. `attribute_map` gives the generic names
that Hugging Face tools look for (`hidden_size`, `num_attention_heads`, ...).

This file imports only `transformers`: it is copied next to saved checkpoints and must load
there with `trust_remote_code=True`.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

# Table 3 of the paper, plus two sizes for CPUs and tests. `vocab_size` is not part of a preset:
# it comes from the tokenizer (the paper: a shared BPE vocabulary of about 37,000 tokens).
PRESETS: dict[str, dict] = {
    # Table 3, "base": N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1.
    "base": dict(d_model=512, d_ff=2048, num_heads=8, num_encoder_layers=6, num_decoder_layers=6, dropout=0.1),
    # Table 3, "big": N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3.
    "big": dict(d_model=1024, d_ff=4096, num_heads=16, num_encoder_layers=6, num_decoder_layers=6, dropout=0.3),
    # For CPUs: a Multi30k-sized model.
    "small": dict(d_model=256, d_ff=1024, num_heads=4, num_encoder_layers=3, num_decoder_layers=3, dropout=0.1),
    # For tests and synthetic tasks.
    "tiny": dict(d_model=64, d_ff=256, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, dropout=0.1),
}

POSITIONAL_ENCODINGS = ("sinusoidal", "learned")

# The fields that do not change what the model computes: the special tokens' ids (the tokenizer's),
# and how Hugging Face treats the model. Every other field of `AiaynConfig` is the model's.
TOKEN_ID_FIELDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
LIBRARY_FIELDS = ("use_cache", "is_encoder_decoder", "custom_pipelines")


@strict
class AiaynConfig(PreTrainedConfig):
    r"""Configuration of [`AiaynForConditionalGeneration`].

    Args:
        vocab_size (`int`): size of the joint source/target vocabulary (paper §5.1: ~37,000 BPE tokens).
        d_model (`int`): width of every sub-layer output and of the embeddings (§3.1). Paper: 512.
        d_ff (`int`): inner width of the position-wise feed-forward networks (§3.3). Paper: 2048.
        num_heads (`int`): number of attention heads h (§3.2.2); d_k = d_v = d_model / h. Paper: 8.
        num_encoder_layers (`int`): N for the encoder stack (§3.1). Paper: 6.
        num_decoder_layers (`int`): N for the decoder stack (§3.1). Paper: 6.
        dropout (`float`): P_drop, applied to each sub-layer output and to the sums of embeddings and
            positional encodings (§5.4). Paper: 0.1 (base), 0.3 (big, EN-DE).
        attention_dropout (`float`): dropout on the attention weights. Not in the paper: 0.0.
        activation_dropout (`float`): dropout after the ReLU of the feed-forward network. Not in the paper: 0.0.
        activation_function (`str`): the feed-forward non-linearity (§3.3). Paper: "relu".
        max_position_embeddings (`int`): the longest sequence the model accepts, in tokens.
        layer_norm_eps (`float`): epsilon of every LayerNorm.
        scale_embedding (`bool`): multiply the embeddings by sqrt(d_model) (§3.4). Paper: True.
        tie_word_embeddings (`bool`): one matrix for the source embeddings, the target embeddings
            and the pre-softmax projection (§3.4). Paper: True.
        pre_norm (`bool`): LayerNorm before each sub-layer instead of after it. Paper: False (post-LN,
            `LayerNorm(x + Sublayer(x))`, §3.1).
        positional_encoding (`str`): "sinusoidal" (§3.5, the paper's choice) or "learned" (Table 3, row E).
        init_std (`float`, *optional*): standard deviation of the embedding initialization. Default
            (None): d_model ** -0.5, as fairseq does, so that the scaled embeddings have unit variance.
        pad_token_id, bos_token_id, eos_token_id, decoder_start_token_id (`int`): special token ids of
            the tokenizer made by `aiayn train-tokenizer` (`<pad>`=0, `<s>`=1, `</s>`=2).
    """

    model_type = "aiayn"
    # The KV cache, by its names after and before transformers 5.24.
    keys_to_ignore_at_inference = ["cache", "past_key_values"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "encoder_attention_heads": "num_heads",
        "decoder_attention_heads": "num_heads",
        # the decoder's: generate() sizes its key/value cache by it
        "num_hidden_layers": "num_decoder_layers",
        "encoder_layers": "num_encoder_layers",
        "decoder_layers": "num_decoder_layers",
        "intermediate_size": "d_ff",
        "encoder_ffn_dim": "d_ff",
        "decoder_ffn_dim": "d_ff",
        "max_length_positions": "max_position_embeddings",
    }

    vocab_size: int = 37000
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    activation_dropout: float | int = 0.0
    activation_function: str = "relu"
    max_position_embeddings: int = 1024
    layer_norm_eps: float = 1e-5
    scale_embedding: bool = True
    tie_word_embeddings: bool = True
    pre_norm: bool = False
    positional_encoding: str = "sinusoidal"
    init_std: float | None = None
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = 1
    use_cache: bool = True
    is_encoder_decoder: bool = True
    custom_pipelines: dict | None = None

    def __post_init__(self, **kwargs):
        if self.custom_pipelines is None:
            # transformers 5 has no built-in translation pipeline: saved folders carry ours
            # (it lives in modeling_aiayn.py, which is copied beside every checkpoint).
            self.custom_pipelines = {
                "translation": {
                    "impl": "modeling_aiayn.AiaynTranslationPipeline",
                    "pt": ["AutoModelForSeq2SeqLM"],
                    "type": "text",
                }
            }
        super().__post_init__(**kwargs)
        self.check_values()

    def check_values(self) -> None:
        """Raise `ValueError`, naming the field, for values the model cannot be built with."""
        for name in (
            "vocab_size",
            "d_model",
            "d_ff",
            "num_heads",
            "num_encoder_layers",
            "num_decoder_layers",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"AiaynConfig: {name} must be a positive integer, got {value!r}")
        if self.d_model % self.num_heads != 0:
            raise ValueError(
                f"AiaynConfig: d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads}) "
                "so that d_k = d_v = d_model / h (§3.2.2)"
            )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
                raise ValueError(f"AiaynConfig: {name} must be in [0, 1), got {value!r}")
        if self.positional_encoding not in POSITIONAL_ENCODINGS:
            raise ValueError(
                f"AiaynConfig: positional_encoding must be one of {', '.join(POSITIONAL_ENCODINGS)}, "
                f"got {self.positional_encoding!r}"
            )
        if self.activation_function not in ("relu", "gelu"):
            raise ValueError(
                f"AiaynConfig: activation_function must be 'relu' or 'gelu', got {self.activation_function!r}"
            )
        for name in TOKEN_ID_FIELDS:
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(f"AiaynConfig: {name} ({value}) must be in [0, vocab_size={self.vocab_size})")

    @property
    def d_k(self) -> int:
        """Width of one attention head: d_k = d_v = d_model / h (§3.2.2)."""
        return self.d_model // self.num_heads

    @classmethod
    def from_preset(cls, name: str, **overrides) -> AiaynConfig:
        """A configuration from Table 3 (`base`, `big`) or a CPU size (`small`, `tiny`), with overrides."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})


__all__ = ["AiaynConfig", "LIBRARY_FIELDS", "PRESETS", "TOKEN_ID_FIELDS"]
