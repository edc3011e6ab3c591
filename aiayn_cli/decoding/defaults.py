"""The decoding options, declared once, and the defaults of a translation run, in a module that
imports no torch, so that `aiayn --help` shows them at once.

`DecodingOptions` is the one typed definition: each field's `Flag` says how the command line spells it
(`aiayn translate`, `evaluate --model`, `attention`: `aiayn_cli.cli.options.with_decoding_options`),
how `aiayn serve`'s request names it (`aiayn_cli.serving.requests.TranslateRequest`), and the values it
takes; `DecodingOptions.validate` (with `check_given`, the same checks on the values given alone) is
the one validation, whichever front end the values came from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..errors import AiaynError

ON_LONG = ("truncate", "skip", "error")  # what to do with an input longer than the model's limit
MAX_TOKENS = 2048  # source tokens per batch, padding included
BATCH_SIZE = 64  # sentences per batch
ENGINES = ("torch", "ctranslate2")  # aiayn's decoder; the model converted once and run by CTranslate2
LENGTH_PENALTY_STYLES = ("gnmt", "hf")
# The largest beam (and n-best): a beam's state grows with it (1,000,000 asked for a 29 GB allocation).
MAX_BEAM = 1024


@dataclass(frozen=True)
class Flag:
    """How a decoding option is spelled and which values it takes.

    Args:
        flag, short, metavar, help: the command-line option (`--beam`, `-b`, `N`, its help).
        low, high: the smallest and largest value; with `above_low`, the value must exceed `low`.
        request_high: the largest value one request to `aiayn serve` may ask for (a server limit).
        choices: the values a text option takes.
    """

    flag: str
    metavar: str | None
    help: str
    short: str | None = None
    low: float | None = None
    above_low: bool = False
    high: float | None = None
    request_high: float | None = None
    choices: tuple[str, ...] = ()

    @property
    def request_name(self) -> str:
        """The field's name in a request to `aiayn serve`: the flag without dashes (`beam`, `top_k`)."""
        return self.flag.removeprefix("--").replace("-", "_")


def _option(default: Any, flag: Flag) -> Any:
    return field(default=default, metadata={"flag": flag})


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

    num_beams: int = _option(
        4, Flag("--beam", "N", "Beam size; 1 is greedy search.", "-b", low=1, high=MAX_BEAM, request_high=32)
    )
    length_penalty: float = _option(
        0.6,
        Flag(
            "--length-penalty", "ALPHA", "alpha of the length penalty (0: summed log-probability).", low=-10, high=10
        ),  # fmt: skip
    )
    length_penalty_style: str = _option(
        "gnmt",
        Flag(
            "--length-penalty-style",
            None,
            "gnmt: ((5 + |Y|) / 6)^alpha, the paper's; hf: |Y|^alpha, as generate().",
            choices=LENGTH_PENALTY_STYLES,
        ),  # fmt: skip
    )
    max_len_a: float = _option(
        1.0, Flag("--max-len-a", "A", "At most A * input length + B tokens per output.", low=0, request_high=10)
    )
    max_len_b: int = _option(50, Flag("--max-len-b", "B", "See --max-len-a.", low=0, request_high=1024))
    min_len: int = 0
    nbest: int = _option(
        1,
        Flag(
            "--nbest",
            "N",
            "Hypotheses per input (at most the beam size; with --sample, the number of samples).",
            low=1,
            high=MAX_BEAM,
            request_high=32,
        ),  # fmt: skip
    )
    do_sample: bool = _option(False, Flag("--sample", None, "Sample from the model instead of searching (beam 1)."))
    temperature: float = _option(
        1.0, Flag("--temperature", "T", "Sampling temperature.", low=0, above_low=True, request_high=100)
    )
    top_k: int = _option(
        0, Flag("--top-k", "K", "Sample among the K most likely tokens (0: all).", low=0, request_high=1_000_000)
    )
    top_p: float = _option(
        1.0,
        Flag(
            "--top-p",
            "P",
            "Sample within the smallest set of tokens of probability >= P.",
            low=0,
            above_low=True,
            high=1,
        ),  # fmt: skip
    )
    seed: int | None = _option(None, Flag("--seed", "N", "Seed of --sample.", low=0, high=2**63 - 1))

    @classmethod
    def from_generation_config(cls, generation_config, **overrides) -> DecodingOptions:
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
        return replace(cls(**saved), **{k: v for k, v in overrides.items() if v is not None})

    def validate(self) -> None:
        """Raise `AiaynError` (a `ValueError`), keyed by the option, for values that cannot be decoded with."""
        check_given({f.name: getattr(self, f.name) for f in fields(self)})
        if self.min_len < 0:
            raise AiaynError(f"must be >= 0, got {self.min_len}", key="min_len")
        if not self.do_sample and self.nbest > self.num_beams:
            raise AiaynError(f"must be between 1 and the beam size ({self.num_beams}), got {self.nbest}", key="nbest")


def check_saved_options(model, path_or_hub_id: str) -> None:
    """A local model folder's generation_config.json holds options that can be decoded with (as
    `DecodingOptions.from_generation_config` reads them from `model`), or an `AiaynError` naming the
    file: a saved value is not an option the user gave. Every loader of a model to decode or share
    asks it, right after `aiayn_cli.model.loading.load_pretrained`."""
    path = Path(str(path_or_hub_id)).expanduser() / "generation_config.json"
    if not path.is_file():
        return
    try:
        DecodingOptions.from_generation_config(model.generation_config).validate()
    except AiaynError as err:
        raise AiaynError(f"{path}: {err.key or 'a value'} {err.message}") from None


# ---------------------------------------------------------------------------------------------
# What every engine shares: the length penalty, the length limits, the hypotheses
# ---------------------------------------------------------------------------------------------


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


def max_output_lengths(source_lengths: list[int], options: DecodingOptions, cap: int) -> list[int]:
    """The most tokens before `</s>` for each sentence: max_len_a * |x| + max_len_b, at most `cap`."""
    return [
        max(min(options.min_len, cap), min(cap, int(options.max_len_a * n + options.max_len_b))) for n in source_lengths
    ]


def output_length_cap(model) -> int:
    """The longest output the model can give, in tokens before `</s>`: the decoder sees at most
    `max_position_embeddings` positions (`<s>` and the tokens before `</s>`), and `generate()`'s
    `max_length` counts `<s>` and `</s>` too."""
    cap = model.config.max_position_embeddings - 1
    generation_max = getattr(model.generation_config, "max_length", None)
    if generation_max:
        cap = min(cap, generation_max - 2)
    return max(cap, 0)


def decoding_flags() -> dict[str, Flag]:
    """Field name -> its `Flag`, for the fields a user can set."""
    return {f.name: f.metadata["flag"] for f in fields(DecodingOptions) if "flag" in f.metadata}


def check_given(values: Mapping[str, Any]) -> None:
    """Each value that is not None is one its option takes (finite, within its bounds, one of its
    choices); `AiaynError` keyed by the field otherwise. Needs no model: the command line checks
    what it was given before loading one."""
    flags = decoding_flags()
    for name, value in values.items():
        spec = flags.get(name)
        if value is None or spec is None or isinstance(value, bool):
            continue
        if spec.choices:
            if value not in spec.choices:
                raise AiaynError(f"must be one of {', '.join(spec.choices)}, got {value!r}", key=name)
            continue
        if not isinstance(value, (int, float)):  # a saved generation_config.json's "four"
            raise AiaynError(f"must be a number, got {value!r}", key=name)
        if isinstance(value, float) and not math.isfinite(value):
            raise AiaynError(f"must be a finite number, got {value}", key=name)
        if spec.low is not None and (value <= spec.low if spec.above_low else value < spec.low):
            raise AiaynError(f"must be {'>' if spec.above_low else '>='} {spec.low:g}, got {value}", key=name)
        if spec.high is not None and value > spec.high:
            raise AiaynError(f"must be <= {spec.high:g}, got {value}", key=name)


def given_options(values: Mapping[str, Any]) -> dict[str, Any]:
    """The `DecodingOptions` overrides a front end was given (None: the model's generation_config
    decides): sampling searches with one beam, and `do_sample` False means "not asked for"."""
    given = dict(values)
    if given.get("do_sample"):
        given["num_beams"] = 1
    else:
        given["do_sample"] = None
    check_given(given)
    return given
