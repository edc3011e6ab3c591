"""Training recipes: typed dataclasses loaded from YAML, every key checked, flags on top.

A recipe is data: `recipes/*.yaml` open with the command that runs them; flags override single
keys (`--max-steps 100`, or any key with `--set lr_scale=2`, `--set model.dropout=0.3`); the
resolved recipe is saved as `recipe.yaml` beside the checkpoints, and loads back unchanged.

Every user mistake is an `AiaynError` that names the file and line (or the flag) and the key:
an unknown key, a missing required key, a value of the wrong type or outside its choices.

The defaults are the paper's recipe (§5.3, §5.4): Adam(0.9, 0.98, 1e-9), equation (3) with
4000 warmup steps, label smoothing 0.1, dropout from the model configuration.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from ..data.corpus import DataSpec
from ..errors import AiaynError
from ..model.configuration_aiayn import PRESETS, AiaynConfig


@dataclass
class ModelRecipe:
    """The model: a preset of `AiaynConfig` and/or explicit dimensions (these win over the preset)."""

    preset: Literal["base", "big", "small", "tiny"] | None = None
    """Table 3's `base` or `big`, or `small` / `tiny` for CPUs and tests; None: AiaynConfig's defaults (base)."""
    vocab_size: int | None = None
    """Checked against the tokenizer when given; None: the tokenizer's size."""
    d_model: int | None = None
    """Width of the embeddings and of every sub-layer output (§3.1)."""
    d_ff: int | None = None
    """Inner width of the feed-forward networks (§3.3)."""
    num_heads: int | None = None
    """Number of attention heads h (§3.2.2)."""
    num_encoder_layers: int | None = None
    """N, encoder (§3.1)."""
    num_decoder_layers: int | None = None
    """N, decoder (§3.1)."""
    dropout: float | None = None
    """P_drop (§5.4)."""
    attention_dropout: float | None = None
    """Dropout on the attention weights (not in the paper)."""
    activation_dropout: float | None = None
    """Dropout after the ReLU (not in the paper)."""
    activation_function: Literal["relu", "gelu"] | None = None
    """The feed-forward non-linearity (§3.3: relu)."""
    max_position_embeddings: int | None = None
    """The longest sequence the model accepts."""
    pre_norm: bool | None = None
    """LayerNorm before each sub-layer (the paper: False, post-LN)."""
    positional_encoding: Literal["sinusoidal", "learned"] | None = None
    """§3.5 (sinusoidal) or Table 3 row (E) (learned)."""
    scale_embedding: bool | None = None
    """Multiply the embeddings by sqrt(d_model) (§3.4: True)."""
    tie_word_embeddings: bool | None = None
    """One matrix for both embeddings and the pre-softmax projection (§3.4: True)."""

    def to_config(self, vocab_size: int) -> AiaynConfig:
        """The `AiaynConfig`: the preset, then the explicit values, with the tokenizer's vocabulary size."""
        overrides = {k: v for k, v in dataclasses.asdict(self).items() if v is not None and k != "preset"}
        overrides["vocab_size"] = vocab_size
        values = {**(PRESETS[self.preset] if self.preset else {}), **overrides}
        try:
            return AiaynConfig(**values)
        except Exception as err:  # the strict dataclass wraps the ValueError of validate_values
            message = str(err).strip().splitlines()[-1].strip()
            raise AiaynError(f"model: {message}") from None


@dataclass
class TrainRecipe:
    """Everything `aiayn train` needs; the defaults are the paper's (§5.3, §5.4)."""

    # --- what to train, on what -------------------------------------------------------------
    model: ModelRecipe
    """The model (a mapping): `preset` and/or dimensions."""
    data: DataSpec
    """The data (a mapping of `DataSpec` fields): a Hub dataset or a folder or files; languages; cleaning.
    Relative paths are relative to the working directory."""
    tokenizer: str
    """The tokenizer folder written by `aiayn train-tokenizer` (or a Hub id)."""
    output_dir: str
    """Where checkpoints, metrics, the resolved recipe and the learning curve go."""
    train_split: str = "train"
    """The split to train on."""
    valid_split: str | None = "validation"
    """The split to validate on (Multi30k's `val` files are found under this name too); null: none."""
    max_length: int = 256
    """Training pairs with a side longer than this many tokens are dropped."""
    seed: int = 1
    """Seeds the model initialization, dropout and the batch order."""

    # --- batches (§5.1: ~25,000 source + ~25,000 target tokens per step) ----------------------
    max_tokens: int = 4096
    """Tokens per batch and process (padding included), the larger of the source and target sides."""
    update_freq: int = 1
    """Batches accumulated per optimizer step: tokens per step = max_tokens * update_freq * processes."""
    num_proc: int = 1
    """Processes for tokenizing the data."""

    # --- 5.3 Optimizer ------------------------------------------------------------------------
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    """beta1, beta2 of Adam (§5.3: 0.9, 0.98)."""
    adam_eps: float = 1e-9
    """epsilon of Adam (§5.3: 1e-9)."""
    weight_decay: float = 0.0
    """Decoupled weight decay (AdamW); 0 is the paper's Adam."""
    lr_schedule: Literal["noam", "inverse_sqrt"] = "noam"
    """`noam`: equation (3) times lr_scale; `inverse_sqrt`: fairseq's, peaking at `lr`."""
    warmup_steps: int = 4000
    """warmup_steps of equation (3) (§5.3: 4000)."""
    lr_scale: float = 1.0
    """Factor on equation (3) (noam)."""
    lr: float = 5e-4
    """Peak learning rate (inverse_sqrt)."""
    warmup_init_lr: float = 0.0
    """Learning rate at step 0 (inverse_sqrt)."""
    clip_norm: float | None = None
    """Clip the gradient norm to this value; None: no clipping (the paper)."""

    # --- 5.4 Regularization -------------------------------------------------------------------
    label_smoothing: float = 0.1
    """eps_ls (§5.4: 0.1). Dropout is the model's `dropout`."""

    # --- precision and speed ------------------------------------------------------------------
    mixed_precision: Literal["auto", "no", "fp16", "bf16"] | None = "auto"
    """auto: bf16 where the device computes it natively (AVX512-BF16, AMX, Ampere+), else fp32 (no);
    None: what `accelerate config` / `accelerate launch` say; otherwise this."""
    compile: bool = False
    """Run the model through `torch.compile`."""

    # --- how long -----------------------------------------------------------------------------
    max_steps: int | None = 100000
    """Stop after this many optimizer steps (base: 100,000; big: 300,000)."""
    max_epochs: int | None = None
    """Stop after this many passes over the training data."""
    max_time: str | float | None = None
    """Stop after this much training time, over all resumes: minutes, or '90m', '1.5h', '3600s'."""

    # --- validation ---------------------------------------------------------------------------
    valid_every_steps: int | None = 1000
    """Validate every N steps (None: only by time and at the end)."""
    valid_every_minutes: float | None = None
    """Validate every M minutes of training."""
    valid_bleu_samples: int | None = 200
    """Sentences of the validation split decoded for BLEU (a fixed sample); 0: no BLEU; None: all."""
    valid_beam_size: int = 1
    """Beam size of the validation decoding (1: greedy)."""
    valid_max_tokens: int | None = None
    """Tokens per validation batch; None: max_tokens."""
    best_metric: Literal["bleu", "loss"] = "bleu"
    """What makes the best checkpoint: higher validation BLEU or lower validation loss."""
    early_stopping_patience: int | None = None
    """Stop after this many validations without a better best_metric; None: never."""

    # --- checkpoints and logs -----------------------------------------------------------------
    checkpoint_every_steps: int | None = None
    """Save a checkpoint every N steps."""
    checkpoint_every_minutes: float | None = 10.0
    """Save a checkpoint every M minutes of training (§6.1: every 10 minutes)."""
    keep_last: int = 5
    """Checkpoints kept (the best one is kept besides)."""
    average_last: int | None = None
    """At the end, average the last N checkpoints into `averaged/` (§6.1: base 5, big 20)."""
    log_every_steps: int = 20
    """Write train metrics every N steps."""
    trackers: list[str] = field(default_factory=lambda: ["tensorboard"])
    """accelerate trackers: tensorboard, wandb (when installed), ...; [] for none."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data (paths as strings), as saved in `recipe.yaml`."""
        return _plain(dataclasses.asdict(self))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, Path) else value


# Keys that may change when a run is resumed: how long it runs and what it writes, not what it computes.
RESUMABLE_CHANGES = frozenset(
    {
        "output_dir",
        "tokenizer",
        "num_proc",
        "compile",
        "max_steps",
        "max_epochs",
        "max_time",
        "valid_every_steps",
        "valid_every_minutes",
        "valid_bleu_samples",
        "valid_beam_size",
        "valid_max_tokens",
        "early_stopping_patience",
        "checkpoint_every_steps",
        "checkpoint_every_minutes",
        "keep_last",
        "average_last",
        "log_every_steps",
        "trackers",
    }
)

_POSITIVE = (
    "max_length",
    "max_tokens",
    "update_freq",
    "num_proc",
    "warmup_steps",
    "keep_last",
    "log_every_steps",
    "valid_beam_size",
)


# ---------------------------------------------------------------------------------------------
# Loading: YAML -> mapping with line numbers -> overrides -> checked dataclasses
# ---------------------------------------------------------------------------------------------


def load_recipe(path: str | os.PathLike | None, overrides: dict[str, Any] | None = None) -> TrainRecipe:
    """Read a recipe file (or none), apply `overrides` (dotted keys -> values), check every key.

    Raises:
        AiaynError: naming the file and line, or the flag, of any unknown, missing or mistyped key.
    """
    raw: dict[str, Any] = {}
    lines: dict[str, int] = {}
    source = str(path) if path is not None else "<flags>"
    if path is not None:
        raw, lines = _read_yaml(Path(path))
    where = {key: f"{source}:{line}" for key, line in lines.items()}
    for key, value in (overrides or {}).items():
        _set_dotted(raw, key, value, source)
        where[key] = f"--set {key}" if not key.startswith("--") else key
    recipe = _build(TrainRecipe, raw, "", where, source)
    _check_values(recipe, where, source)
    return recipe


def _read_yaml(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise AiaynError(f"cannot read recipe {path}: {err.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
        node = yaml.compose(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise AiaynError(f"{path}{line}: not valid YAML ({getattr(err, 'problem', err)})") from None
    if not isinstance(data, dict):
        raise AiaynError(f"{path}: a recipe must be a mapping of keys to values")
    lines: dict[str, int] = {}
    _key_lines(node, "", lines)
    return data, lines


def _key_lines(node: Any, prefix: str, lines: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = f"{prefix}{key_node.value}"
            lines[key] = key_node.start_mark.line + 1
            _key_lines(value_node, key + ".", lines)


def _set_dotted(raw: dict[str, Any], key: str, value: Any, source: str) -> None:
    parts = key.split(".")
    target = raw
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise AiaynError(f"--set {key}: '{part}' is not a mapping in {source}")
    target[parts[-1]] = value


def _build(cls: type, raw: Any, prefix: str, where: dict[str, str], source: str) -> Any:
    """`cls(**raw)` after checking that every key exists and every value has the field's type."""
    name = prefix.rstrip(".") or "recipe"
    if not isinstance(raw, dict):
        raise AiaynError(f"{where.get(name, source)}: '{name}' must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            known = ", ".join(fields)
            raise AiaynError(f"{where.get(prefix + str(key), source)}: unknown key '{prefix}{key}' (known: {known})")
    values = {}
    for key, f in fields.items():
        full = prefix + key
        if key not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise AiaynError(f"{source}: missing required key '{full}'")
            continue
        value, hint = raw[key], hints[key]
        if dataclasses.is_dataclass(hint):
            values[key] = _build(hint, value, full + ".", where, source)
        elif not _has_type(value, hint):
            raise AiaynError(
                f"{where.get(full, source)}: '{full}' must be {_type_name(hint)}, got {value!r} ({type(value).__name__})"
            )
        else:
            values[key] = _coerce(value, hint)
    return cls(**values)


def _coerce(value: Any, hint: Any) -> Any:
    """An integer given for a float-typed field becomes a float (YAML writes `1` for 1.0)."""
    allowed = typing.get_args(hint) if _is_union(hint) else (hint,)
    if isinstance(value, int) and not isinstance(value, bool) and float in allowed and int not in allowed:
        return float(value)
    return value


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType)


def _has_type(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if _is_union(hint):
        return any(_has_type(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is Path:
        return isinstance(value, (str, Path))
    if origin is Literal:
        return value in args
    if origin is list:
        return isinstance(value, list) and all(_has_type(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) for k in value)
    raise TypeError(f"recipe: unsupported field type {hint!r}")


def _type_name(hint: Any) -> str:
    if _is_union(hint):
        return " or ".join(_type_name(arg) for arg in typing.get_args(hint))
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is list:
        return f"a list of {_type_name(typing.get_args(hint)[0])}"
    if typing.get_origin(hint) is dict:
        return "a mapping"
    return {
        type(None): "null",
        bool: "true/false",
        int: "an integer",
        float: "a number",
        str: "a string",
        Path: "a path",
    }.get(hint, str(hint))


def _check_values(recipe: TrainRecipe, where: dict[str, str], source: str) -> None:
    """Range checks that types cannot express."""

    def fail(key: str, what: str) -> None:
        raise AiaynError(f"{where.get(key, source)}: '{key}' {what}")

    for key in _POSITIVE:
        if getattr(recipe, key) <= 0:
            fail(key, f"must be positive, got {getattr(recipe, key)}")
    for key in (
        "max_steps",
        "max_epochs",
        "valid_every_steps",
        "checkpoint_every_steps",
        "average_last",
        "early_stopping_patience",
        "valid_max_tokens",
        "valid_every_minutes",
        "checkpoint_every_minutes",
        "clip_norm",
    ):
        value = getattr(recipe, key)
        if value is not None and value <= 0:
            fail(key, f"must be positive or null, got {value}")
    if recipe.valid_bleu_samples is not None and recipe.valid_bleu_samples < 0:
        fail("valid_bleu_samples", "must be >= 0 or null")
    if not 0.0 <= recipe.label_smoothing < 1.0:
        fail("label_smoothing", f"must be in [0, 1), got {recipe.label_smoothing}")
    if len(recipe.adam_betas) != 2 or not all(0.0 <= b < 1.0 for b in recipe.adam_betas):
        fail("adam_betas", f"must be two numbers in [0, 1), got {recipe.adam_betas}")
    if recipe.average_last is not None and recipe.average_last > recipe.keep_last:
        fail("average_last", f"({recipe.average_last}) must not exceed keep_last ({recipe.keep_last})")
    if recipe.max_time is not None:
        try:
            parse_duration(recipe.max_time)
        except ValueError as err:
            fail("max_time", str(err))
    if recipe.best_metric == "bleu" and (recipe.valid_bleu_samples == 0 or recipe.valid_split is None):
        fail(
            "best_metric",
            "is 'bleu' but no BLEU is computed (valid_bleu_samples: 0 or valid_split: null); use best_metric: loss",
        )
    try:
        recipe.data.validate()
    except AiaynError as err:
        raise AiaynError(f"{where.get('data', source)}: data: {err}") from None
    if recipe.max_steps is None and recipe.max_epochs is None and recipe.max_time is None:
        raise AiaynError(f"{source}: set at least one of max_steps, max_epochs, max_time")


_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?\s*$")


def parse_duration(value: str | float | int) -> float:
    """Seconds in a duration: a number of minutes, or '1h30m', '90m', '1.5h', '3600s'."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value) * 60.0
    else:
        text = str(value).strip()
        try:
            seconds = float(text) * 60.0
        except ValueError:
            match = _DURATION.match(text)
            if not text or match is None or not any(match.groups()):
                raise ValueError(f"must be minutes or a duration like '90m', '1.5h', '3600s', got {value!r}") from None
            hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
            seconds = hours * 3600 + minutes * 60 + secs
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"must be a positive duration, got {value!r}")
    return seconds


# ---------------------------------------------------------------------------------------------
# Saving and comparing resolved recipes
# ---------------------------------------------------------------------------------------------


def save_recipe(recipe: TrainRecipe, path: str | os.PathLike) -> None:
    """Write the resolved recipe as YAML, atomically (a temporary file, then a rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "# The resolved recipe of this run: `aiayn train` loads it back unchanged.\n"
    text += yaml.safe_dump(recipe.to_dict(), sort_keys=False, default_flow_style=None)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def recipe_differences(old: TrainRecipe, new: TrainRecipe) -> list[str]:
    """Keys (dotted) whose values differ and may not change when a run is resumed."""
    differences = []

    def walk(a: dict, b: dict, prefix: str) -> None:
        for key in sorted(set(a) | set(b)):
            full = prefix + key
            if not prefix and key in RESUMABLE_CHANGES:
                continue
            if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
                walk(a[key], b[key], full + ".")
            elif a.get(key) != b.get(key):
                differences.append(f"{full}: {a.get(key)!r} -> {b.get(key)!r}")

    walk(old.to_dict(), new.to_dict(), "")
    return differences


def recipe_field_docs(cls: type = TrainRecipe) -> dict[str, str]:
    """The docstring under each field of a recipe dataclass (for help texts and documentation)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    docs = {}
    for node, following in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = following.value.value
    return docs


__all__ = [
    "ModelRecipe",
    "RESUMABLE_CHANGES",
    "TrainRecipe",
    "load_recipe",
    "parse_duration",
    "recipe_differences",
    "recipe_field_docs",
    "save_recipe",
]
