"""Training recipes: typed dataclasses loaded from YAML, every key checked, flags on top.

A recipe is data: `recipes/*.yaml` open with the command that runs them, and ship with the package
(`aiayn train multi30k_en_de` finds `recipes/multi30k_en_de.yaml` from any folder; `aiayn recipes`
lists them); flags override single keys (`--max-steps 100`, or any key with `--set lr_scale=2`,
`--set model.dropout=0.3`); the resolved recipe is saved as `recipe.yaml` beside the checkpoints,
and loads back unchanged.

Types and ranges are checked by pydantic against the dataclasses below (the `model` section takes
the fields of `AiaynConfig` itself); every user mistake is an `AiaynError` that names the file and
line (or the flag) and the key: an unknown or repeated key, a missing required key, a value of the
wrong type, outside its range or not finite.

The defaults are the paper's recipe (§5.3, §5.4): Adam(0.9, 0.98, 1e-9), equation (3) with
4000 warmup steps, label smoothing 0.1, dropout from the model configuration.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter, ValidationError

from .. import yaml_text
from ..data.spec import DATA_SOURCES, DataSpec
from ..errors import AiaynError
from ..files import atomic_open
from ..model.configuration_aiayn import LIBRARY_FIELDS, PRESETS, TOKEN_ID_FIELDS, AiaynConfig
from .shipped import find_recipe, shipped_recipes  # found without torch (the command line, first)

# Scalars are strict (`compile: 1` is not a boolean, `max_tokens: 4096.5` not an integer); an integer
# is a number. Ranges are part of the types.
_STRICT = {int: StrictInt, float: StrictFloat, bool: StrictBool, str: StrictStr}
PositiveInt = Annotated[StrictInt, Field(gt=0)]
PositiveFloat = Annotated[StrictFloat, Field(gt=0)]
NonNegativeInt = Annotated[StrictInt, Field(ge=0)]
NonNegativeFloat = Annotated[StrictFloat, Field(ge=0)]
Probability = Annotated[StrictFloat, Field(ge=0, lt=1)]
Seed = Annotated[StrictInt, Field(ge=0, lt=2**32)]
Duration = StrictStr | StrictFloat  # minutes, or '90m', '1.5h', '3600s' (checked by `parse_duration`)


def _strict(hint: Any) -> Any:
    """`hint` with every scalar made strict (unions member by member)."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        return Union[tuple(_strict(arg) for arg in typing.get_args(hint))]  # noqa: UP007
    return _STRICT.get(hint, hint)


# ---------------------------------------------------------------------------------------------
# The model section: the fields of AiaynConfig itself, each optional (a preset fills the rest)
# ---------------------------------------------------------------------------------------------

# AiaynConfig fields that are not the recipe's to set: token ids come from the tokenizer, the rest
# is Hugging Face plumbing.
_NOT_IN_RECIPES = frozenset(TOKEN_ID_FIELDS + LIBRARY_FIELDS)
MODEL_FIELDS = tuple(name for name in AiaynConfig.__annotations__ if name not in _NOT_IN_RECIPES)


def _model_to_config(self, vocab_size: int) -> AiaynConfig:
    """The `AiaynConfig`: the preset, then the explicit values, with the tokenizer's vocabulary size."""
    overrides = {k: v for k, v in dataclasses.asdict(self).items() if v is not None and k != "preset"}
    overrides["vocab_size"] = vocab_size
    values = {**(PRESETS[self.preset] if self.preset else {}), **overrides}
    try:
        return AiaynConfig(**values)
    except Exception as err:  # the strict dataclass wraps the ValueError of check_values
        message = str(err).strip().splitlines()[-1].strip()
        raise AiaynError(f"model: {message}") from None


def _config_hint(name: str) -> Any:
    """The annotation of one of AiaynConfig's own fields (its file has `from __future__ import annotations`)."""
    hint = AiaynConfig.__annotations__[name]
    return eval(hint, vars(sys.modules[AiaynConfig.__module__])) if isinstance(hint, str) else hint


ModelRecipe = dataclasses.make_dataclass(
    "ModelRecipe",
    [("preset", Literal["base", "big", "small", "tiny"] | None, field(default=None))]
    + [(name, _strict(_config_hint(name)) | None, field(default=None)) for name in MODEL_FIELDS],
    namespace={"to_config": _model_to_config, "__module__": __name__},
)
ModelRecipe.__doc__ = (
    "The model: a preset of `AiaynConfig` and/or any of its fields (these win over the preset); "
    "`vocab_size` is checked against the tokenizer when given, else taken from it."
)


@dataclass
class TokenizerTraining:
    """How `aiayn train` builds the recipe's tokenizer where its folder does not exist yet: as
    `aiayn train-tokenizer` would, on the recipe's training data (§5.1: one shared vocabulary)."""

    __pydantic_config__ = ConfigDict(extra="forbid", allow_inf_nan=False)

    vocab_size: PositiveInt = 37000
    """Size of the joint vocabulary (§5.1: about 37,000 for WMT 2014 English-German)."""
    algorithm: Literal["bpe", "unigram"] = "bpe"
    """The subword algorithm: byte-pair encoding (the paper's) or unigram (`train-tokenizer --algorithm`)."""
    min_frequency: PositiveInt = 2
    """BPE: the fewest occurrences of a pair to merge it."""
    sample_size: PositiveInt | None = None
    """Take the statistics from a uniform random sample of this many pairs; None: every pair
    (`train-tokenizer --sample-size`)."""


# Keys renamed in this version (old -> new), still read with a notice until the next one.
RENAMED_KEYS = {"tokenizer_training.model": "tokenizer_training.algorithm",
                "tokenizer_training.sample": "tokenizer_training.sample_size"}  # fmt: skip


@dataclass
class TrainRecipe:
    """Everything `aiayn train` needs; the defaults are the paper's (§5.3, §5.4)."""

    __pydantic_config__ = ConfigDict(extra="forbid", allow_inf_nan=False)

    # --- what to train, on what -------------------------------------------------------------
    model: ModelRecipe
    """The model (a mapping): `preset` and/or any field of `AiaynConfig`."""
    data: DataSpec
    """The data (a mapping of `DataSpec` fields): a Hub dataset or a folder or files; languages; cleaning.
    Relative paths are relative to the working directory."""
    tokenizer: StrictStr
    """The tokenizer folder written by `aiayn train-tokenizer` (or a Hub id)."""
    output_dir: StrictStr
    """Where checkpoints, metrics, the resolved recipe and the learning curve go."""
    tokenizer_training: TokenizerTraining | None = None
    """Where the `tokenizer` folder does not exist, `aiayn train` first builds it from the training
    split with these settings (a mapping: vocab_size, model, min_frequency, sample); None: the
    tokenizer must exist already (or be a Hub id)."""
    train_split: StrictStr = "train"
    """The split to train on."""
    valid_split: StrictStr | None = "validation"
    """The split to validate on (Multi30k's `val` files are found under this name too); null: none."""
    max_length: PositiveInt = 256
    """Training pairs with a side longer than this many tokens are dropped."""
    seed: Seed = 1
    """Seeds the model initialization, dropout and the batch order (0 to 2**32 - 1, NumPy's range)."""

    # --- batches (§5.1: ~25,000 source + ~25,000 target tokens per step) ----------------------
    max_tokens: PositiveInt = 4096
    """Tokens per batch and process (padding included), the larger of the source and target sides."""
    update_freq: PositiveInt = 1
    """Batches accumulated per optimizer step: tokens per step = max_tokens * update_freq * processes."""
    num_proc: PositiveInt | None = None
    """Processes for tokenizing the data; null: this machine's cores (one for fewer than 100,000 pairs)."""

    # --- 5.3 Optimizer ------------------------------------------------------------------------
    adam_betas: Annotated[list[Probability], Field(min_length=2, max_length=2)] = field(
        default_factory=lambda: [0.9, 0.98]
    )
    """beta1, beta2 of Adam (§5.3: 0.9, 0.98)."""
    adam_eps: PositiveFloat = 1e-9
    """epsilon of Adam (§5.3: 1e-9)."""
    weight_decay: NonNegativeFloat = 0.0
    """Decoupled weight decay (AdamW); 0 is the paper's Adam."""
    lr_schedule: Literal["noam", "inverse_sqrt", "constant"] = "noam"
    """`noam`: equation (3) times lr_scale; `inverse_sqrt`: fairseq's, peaking at `lr`; `constant`:
    `lr` after a linear warmup (with `lr_cooldown`: warmup-stable-decay)."""
    warmup_steps: PositiveInt = 4000
    """warmup_steps of equation (3) (§5.3: 4000)."""
    lr_scale: PositiveFloat = 1.0
    """Factor on equation (3) (noam)."""
    lr: PositiveFloat = 5e-4
    """Peak learning rate (inverse_sqrt, constant)."""
    warmup_init_lr: NonNegativeFloat = 0.0
    """Learning rate at step 0 (inverse_sqrt, constant)."""
    lr_cooldown: Annotated[StrictFloat, Field(gt=0, le=1)] | None = None
    """The last fraction of the run (of max_steps, max_epochs or max_time, whichever ends it first)
    over which the learning rate falls linearly to 0; None: no cooldown (the paper)."""
    clip_norm: PositiveFloat | None = None
    """Clip the gradient norm to this value; None: no clipping (the paper)."""

    # --- 5.4 Regularization -------------------------------------------------------------------
    label_smoothing: Probability = 0.1
    """eps_ls (§5.4: 0.1). Dropout is the model's `dropout`."""

    # --- precision and speed ------------------------------------------------------------------
    mixed_precision: Literal["auto", "no", "fp16", "bf16"] | None = "auto"
    """auto: bf16 where the device computes it natively (AVX512-BF16, AMX, Ampere+); on a CUDA GPU
    without it (T4, V100) fp16 with dynamic loss scaling; else fp32 (no). None: what `accelerate
    config` / `accelerate launch` say; otherwise this."""
    when_fp32: dict[StrictStr, Any] | None = None
    """Keys (a mapping, nested as in the recipe) that replace the recipe's where the run computes in
    fp32 (`auto` on a device without native bf16, or `no`): a time budget holds fewer steps there, and
    what suits a short run may differ. Flags (`--set`) still win; the run prints what it replaced."""
    compile: StrictBool = False
    """Run the model through `torch.compile`."""
    gradient_checkpointing: StrictBool = False
    """Keep only each layer's input in the forward pass and recompute the layer in the backward pass
    (`model.activation_checkpointing_enable()`, formerly `gradient_checkpointing_enable`): about a third
    more compute for much less activation memory (`big` on a 16-24 GB GPU); the same dropout masks, the
    same weights to rounding."""
    compile_loss: StrictBool = True
    """Run the loss's two passes over the (B, T, V) scores through `torch.compile` (one fused loop each;
    the same numbers to rounding); eagerly, with a warning, where there is no C++ compiler."""
    attention_kernels: Annotated[list[Literal["flash", "efficient", "cudnn", "math"]], Field(min_length=1)] | None = (
        None
    )
    """The kernels PyTorch's fused attention may choose from while the run trains and validates
    (`torch.nn.attention.sdpa_kernel`); None: all of them, PyTorch's own choice. On CUDA, cuDNN's
    kernel builds a plan for every new batch shape (milliseconds of host time each), and token-count
    batches keep bringing new shapes: [flash, efficient, math] leaves it out (with the padding mask,
    `efficient` computes). Which kernel computes equation (1) changes, not what it computes."""

    # --- how long -----------------------------------------------------------------------------
    max_steps: PositiveInt | None = 100000
    """Stop after this many optimizer steps (base: 100,000; big: 300,000)."""
    max_epochs: PositiveInt | None = None
    """Stop after this many passes over the training data."""
    max_time: Duration | None = None
    """Stop after this much training time, over all resumes: minutes, or '90m', '1.5h', '3600s'."""

    # --- validation ---------------------------------------------------------------------------
    valid_every_steps: PositiveInt | None = 1000
    """Validate every N steps (None: only by time and at the end)."""
    valid_every_minutes: PositiveFloat | None = None
    """Validate every M minutes of training."""
    valid_bleu_samples: NonNegativeInt | None = 200
    """Sentences of the validation split decoded for BLEU (a fixed sample); 0: no BLEU; None: all."""
    valid_beam_size: PositiveInt = 1
    """Beam size of the validation decoding (1: greedy)."""
    valid_max_tokens: PositiveInt | None = None
    """Tokens per validation batch; None: max_tokens."""
    best_metric: Literal["bleu", "loss"] = "bleu"
    """What makes the best checkpoint: higher validation BLEU or lower validation loss."""
    early_stopping_patience: PositiveInt | None = None
    """Stop after this many validations without a better best_metric; None: never."""

    # --- checkpoints and logs -----------------------------------------------------------------
    checkpoint_every_steps: PositiveInt | None = None
    """Save a checkpoint every N steps."""
    checkpoint_every_minutes: PositiveFloat | None = 10.0
    """Save a checkpoint every M minutes of training (§6.1: every 10 minutes)."""
    keep_last: PositiveInt = 5
    """Checkpoints kept (the best one is kept besides)."""
    history_steps: list[PositiveInt] | None = None
    """Also save the model alone (weights, config, tokenizer; no optimizer state) at these steps, into
    `history/checkpoint-<step>/`, never deleted: `aiayn attention --checkpoints RUN` shows how attention
    and alignment form during training. None: no history (a model's weights per step listed)."""
    average_last: PositiveInt | None = None
    """At the end, average the last N checkpoints into `averaged/` (§6.1: base 5, big 20)."""
    average_choose: StrictBool = True
    """End with the best on validation of: the last checkpoint, the best one, and the averages of the last
    k = 2..average_last checkpoints saved after the learning rate's peak (`training/selection.py`).
    §6.1 averaged a fixed number of checkpoints 10 minutes apart at the end of 12 hours or more; in a
    run of minutes they may still be in the warmup, and their mean a worse model than the last. False,
    or no validation split: the paper's plain average of the last average_last. Without average_last,
    nothing is averaged and this does nothing."""
    average_choose_by: Literal["sample", "beam"] = "sample"
    """What `average_choose` compares the candidates on. `sample`: the run's own validation, which chose
    its best checkpoint (BLEU on the `valid_bleu_samples` sentences decoded with `valid_beam_size`, the
    loss breaking ties). `beam`: BLEU on the whole validation split decoded as `aiayn translate` decodes,
    with the model's beam, under each alpha of `length_penalty_grid` (its own alpha without one): the final model
    and its alpha are chosen together, and a model is scored as a user will run it. One beam search of
    the split per candidate: about a minute in all for the CPU hour's end on 2 cores (docs/train.md)."""
    length_penalty_grid: Annotated[list[NonNegativeFloat], Field(min_length=1)] | None = None
    """At the very end, the length penalty alphas tried on the whole validation split (beam search with
    the model's beam size); the best goes into the final model's generation_config.json (`averaged/`,
    else the last checkpoint). Where the best is at an end of the grid, the grid goes on past it until the
    best is inside or at alpha 0 or 10 (`evaluation/length_penalty.py`). With `average_choose_by: beam`
    every candidate for the final model is scored under every alpha, and the pair is chosen together.
    §6.1 chose alpha on the development set; None: the paper's 0.6."""
    log_every_steps: PositiveInt = 20
    """Write train metrics every N steps."""
    trackers: list[StrictStr] = field(default_factory=lambda: ["tensorboard"])
    """accelerate trackers: tensorboard, wandb (when installed), ...; [] for none."""

    # --- several processes --------------------------------------------------------------------
    lost_process_after: Duration = "30s"
    """Under `accelerate launch` with 2+ processes: where one gives no sign of life for this long
    (killed, hung, its machine gone), the others stop (`training/heartbeat.py`) instead of waiting
    for NCCL's collective timeout; the same command resumes from the last checkpoint. Minutes, or
    '30s', '2m'."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data (paths as strings), as saved in `recipe.yaml`."""
        return _plain(dataclasses.asdict(self))

    def in_precision(self, precision: str | None) -> TrainRecipe:
        """The recipe as it runs in `precision` (accelerate's name: "no" is fp32): with `when_fp32`'s
        keys where that is fp32, else unchanged. Applying it twice changes nothing more."""
        if precision != "no" or not self.when_fp32:
            return self
        raw = _with_when_fp32(self)
        try:
            return _VALIDATOR.validate_python(raw)
        except ValidationError as err:
            raise _first_error(err, raw, {}, "when_fp32") from None

    def precision_changes(self, precision: str | None) -> list[str]:
        """What `in_precision(precision)` replaces, as 'key old -> new'."""
        if precision != "no" or not self.when_fp32:
            return []
        old, changes = yaml_text.leaves(self.to_dict()), []
        for key, value in yaml_text.leaves(self.when_fp32).items():
            if old.get(key) != value:
                changes.append(f"{key} {old.get(key)!r} -> {value!r}")
        return changes


_VALIDATOR = TypeAdapter(TrainRecipe)


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
        "tokenizer_training",
        "num_proc",
        "compile",
        "compile_loss",
        "attention_kernels",
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
        "history_steps",
        "average_last",
        "average_choose",
        "average_choose_by",
        "length_penalty_grid",
        "log_every_steps",
        "trackers",
        "lost_process_after",
    }
)

# ---------------------------------------------------------------------------------------------
# Loading: YAML -> mapping with line numbers -> overrides -> checked dataclasses
# ---------------------------------------------------------------------------------------------


def load_recipe(
    path: str | os.PathLike | None, overrides: dict[str, Any] | None = None, flags: dict[str, str] | None = None
) -> TrainRecipe:
    """Read a recipe file (or none), apply `overrides` (dotted keys -> values), check every key.
    `flags`: the command-line flag that set an override (`max_time` -> `--max-time`), for the error
    line; the other overrides are named as `--set KEY`.

    Raises:
        AiaynError: naming the file and line, or the flag, of any unknown, repeated, missing or
            mistyped key, and of any value out of its range.
    """
    raw: dict[str, Any] = {}
    lines: dict[str, int] = {}
    source = str(path) if path is not None else "<flags>"
    if path is not None:
        raw, lines = _read_yaml(Path(path))
    where = {key: f"{source}:{line}" for key, line in lines.items()}
    _drop_replaced_source(raw, overrides or {})
    for key, value in (overrides or {}).items():
        _set_dotted(raw, key, value, source)
        where[key] = (flags or {}).get(key) or (f"--set {key}" if not key.startswith("--") else key)
    _rename_old_keys(raw, where)
    try:
        recipe = _VALIDATOR.validate_python(raw)
    except ValidationError as err:
        raise _first_error(err, raw, where, source) from None
    _check_values(recipe, where, source)
    if recipe.when_fp32:
        recipe = _check_when_fp32(recipe, where, source, set(overrides or {}))
    return recipe


def _rename_old_keys(raw: dict[str, Any], where: dict[str, str]) -> None:
    """The previous version's spellings (`RENAMED_KEYS`), read as the new ones with a one-line notice."""
    for old, new in RENAMED_KEYS.items():
        section, old_name = old.split(".")
        mapping = raw.get(section)
        if not isinstance(mapping, dict) or old_name not in mapping:
            continue
        new_name = new.split(".")[1]
        if new_name in mapping:
            raise AiaynError(f"{where.get(old, old)}: '{old}' is the old name of '{new}'; give only '{new}'")
        mapping[new_name] = mapping.pop(old_name)
        where.setdefault(new, where.get(old, old))
        print(f"warning: {where.get(old, old)}: '{old}' is now '{new}'; the old name goes away in the next version",
              file=sys.stderr)  # fmt: skip


def _drop_replaced_source(raw: dict[str, Any], overrides: dict[str, Any]) -> None:
    """An override that names a data source (`data.data_dir`) replaces the recipe's source whole."""
    given = {
        key for key, value in overrides.items() if value is not None and key in {f"data.{n}" for n in DATA_SOURCES}
    }
    if given and isinstance(raw.get("data"), dict):
        for name in DATA_SOURCES:
            if f"data.{name}" not in given:
                raw["data"].pop(name, None)


# Keys decided before the precision is (the accelerator is made from them): not for `when_fp32`.
_BEFORE_PRECISION = frozenset({"mixed_precision", "when_fp32", "output_dir", "trackers"})


def _with_when_fp32(recipe: TrainRecipe) -> dict[str, Any]:
    """The recipe's plain data with the keys of its `when_fp32` put in."""
    raw = recipe.to_dict()
    for key, value in yaml_text.leaves(recipe.when_fp32 or {}).items():
        _set_dotted(raw, key, value, "when_fp32")
    return raw


def _check_when_fp32(recipe: TrainRecipe, where: dict[str, str], source: str, flagged: set[str]) -> TrainRecipe:
    """Check `when_fp32` as the recipe it makes (every key known, typed, in range; the lines named are
    its own), and drop the keys a flag sets: flags win."""
    kept: dict[str, Any] = {}
    for key, value in yaml_text.leaves(recipe.when_fp32).items():
        if key.split(".")[0] in _BEFORE_PRECISION:
            raise AiaynError(
                f"{where.get('when_fp32.' + key, source)}: 'when_fp32.{key}' cannot depend on the precision "
                "(it is decided before the precision is)"
            )
        if not any(key == flag or key.startswith(flag + ".") for flag in flagged):
            _set_dotted(kept, key, value, source)
    recipe = dataclasses.replace(recipe, when_fp32=kept or None)
    raw = _with_when_fp32(recipe)
    fp32_where = {**where, **{key: where.get(f"when_fp32.{key}", source) for key in yaml_text.leaves(kept)}}
    try:
        fp32 = _VALIDATOR.validate_python(raw)
    except ValidationError as err:
        raise _first_error(err, raw, fp32_where, source) from None
    _check_values(fp32, fp32_where, source)
    return recipe


def _read_yaml(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise AiaynError(f"cannot read recipe {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise AiaynError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        node = yaml_text.compose(text)
        data = yaml_text.loads(text) or {}
    except RecursionError:
        raise AiaynError(f"{path}: nested too deeply to be a recipe") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise AiaynError(f"{path}{line}: not valid YAML ({getattr(err, 'problem', err)})") from None
    if not isinstance(data, dict):
        raise AiaynError(f"{path}: a recipe must be a mapping of keys to values")
    lines: dict[str, int] = {}
    _key_lines(node, "", lines, path)
    return data, lines


def _key_lines(node: Any, prefix: str, lines: dict[str, int], path: Path) -> None:
    """The line of every (dotted) key; a key given twice in one mapping is an error (YAML keeps the last)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key, line = f"{prefix}{key_node.value}", key_node.start_mark.line + 1
            if key in seen:
                raise AiaynError(f"{path}:{line}: key '{key}' given twice (lines {seen[key]} and {line})")
            seen[key] = lines[key] = line
            _key_lines(value_node, key + ".", lines, path)


def _set_dotted(raw: dict[str, Any], key: str, value: Any, source: str) -> None:
    parts = key.split(".")
    target = raw
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise AiaynError(f"--set {key}: '{part}' is not a mapping in {source}")
    target[parts[-1]] = value


_TYPE_TAGS = frozenset({"str", "float", "int", "bool", "none"})


def _first_error(err: ValidationError, raw: dict[str, Any], where: dict[str, str], source: str) -> AiaynError:
    """One line for the first key pydantic found wrong: where it is, what it must be, what it was."""
    errors = err.errors()
    key = _dotted(errors[0]["loc"])
    same_key = [e for e in errors if _dotted(e["loc"]) == key]
    kind, value = same_key[0]["type"], same_key[0].get("input")
    at = where.get(key, source)
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        parent = key.rpartition(".")[0]
        known = _known_keys(parent)
        return AiaynError(f"{at}: unknown key '{key}' (known: {', '.join(known)})")
    if kind in ("missing", "missing_argument"):
        return AiaynError(f"{source}: missing required key '{key}'")
    messages = [e["msg"] for e in same_key]
    if any(m.startswith("Input should be ") for m in messages):
        messages = [m for m in messages if m.startswith("Input should be ")]
        wanted = " or ".join(dict.fromkeys(m.removeprefix("Input should be ") for m in messages))
        return AiaynError(f"{_named(key, where, source)} must be {wanted}, got {value!r}")
    return AiaynError(f"{_named(key, where, source)}: {messages[0][0].lower()}{messages[0][1:]}, got {value!r}")


def _named(key: str, where: dict[str, str], source: str) -> str:
    """How an error names a key: its flag (`--max-time`), or where it was set and the key."""
    at = where.get(key, source)
    return at if at.startswith("--") and not at.startswith("--set ") else f"{at}: '{key}'"


def _dotted(loc: tuple) -> str:
    """The recipe key of a pydantic error location (without union tags and list indices)."""
    parts = [p for p in loc if isinstance(p, str) and re.fullmatch(r"[a-z_][a-z0-9_]*", p) and p not in _TYPE_TAGS]
    return ".".join(parts) or "recipe"


def _known_keys(section: str) -> list[str]:
    cls = {"": TrainRecipe, "model": ModelRecipe, "data": DataSpec}.get(section, TrainRecipe)
    return [f.name for f in dataclasses.fields(cls)]


def _check_values(recipe: TrainRecipe, where: dict[str, str], source: str) -> None:
    """What the types cannot say: durations, and keys that must agree with each other."""

    def fail(key: str, what: str) -> None:
        raise AiaynError(f"{_named(key, where, source)} {what}")

    if recipe.average_last is not None and recipe.average_last > recipe.keep_last:
        fail("average_last", f"({recipe.average_last}) must not exceed keep_last ({recipe.keep_last})")
    if recipe.length_penalty_grid is not None and recipe.valid_split is None:
        fail("length_penalty_grid", "needs a validation split to choose on (valid_split is null)")
    for key in ("max_time", "lost_process_after"):
        if getattr(recipe, key) is not None:
            try:
                parse_duration(getattr(recipe, key))
            except ValueError as err:
                fail(key, str(err))
    if recipe.best_metric == "bleu" and (recipe.valid_bleu_samples == 0 or recipe.valid_split is None):
        fail(
            "best_metric",
            "is 'bleu' but no BLEU is computed (valid_bleu_samples: 0 or valid_split: null); use best_metric: loss",
        )
    try:
        recipe.data.validate()
    except AiaynError as err:
        keys = [key for key in (err.key, *err.mentions) if key]
        flags = {key: where.get(f"data.{key}", "") for key in keys}
        if keys and all(flag.startswith("--") and not flag.startswith("--set ") for flag in flags.values()):
            raise AiaynError(err.render(lambda key: flags[key])) from None  # all from the command line's flags
        named = err.render(lambda key: f"'data.{key}'")
        raise AiaynError(f"{where.get('data', source)}: data: {named}") from None
    if recipe.max_steps is None and recipe.max_epochs is None and recipe.max_time is None:
        raise AiaynError(f"{source}: set at least one of max_steps, max_epochs, max_time")
    for key, value in yaml_text.leaves(dataclasses.asdict(recipe)).items():  # the run saves its recipe as UTF-8 YAML
        if isinstance(value, str) and any("\udc80" <= ch <= "\udcff" for ch in value):
            shown = ascii(value.encode("utf-8", "surrogateescape"))[2:-1]
            fail(key, f"holds a byte that is not UTF-8 ({shown}); the recipe saved with the run is UTF-8 text")
    _check_model_fits(recipe, where, source)


def _check_model_fits(recipe: TrainRecipe, where: dict[str, str], source: str) -> None:
    """A model whose training state cannot fit in this machine's memory is refused before anything is
    built: its layers' weights alone (embeddings not counted), times four in fp32 (the weights, their
    gradients, Adam's two moments), against the physical memory. (`--set model.d_ff=1000000000` asked
    for 256 GB.)"""
    values = {**(PRESETS[recipe.model.preset] if recipe.model.preset else {}), **{
        k: v for k, v in dataclasses.asdict(recipe.model).items() if v is not None and k != "preset"}}  # fmt: skip
    defaults = AiaynConfig()
    d, d_ff = values.get("d_model", defaults.d_model), values.get("d_ff", defaults.d_ff)
    encoder = values.get("num_encoder_layers", defaults.num_encoder_layers)
    decoder = values.get("num_decoder_layers", defaults.num_decoder_layers)
    # Per layer (§3.1): attention's four d x d projections, the feed-forward's d x d_ff twice; a decoder
    # layer has two attentions.
    parameters = encoder * (4 * d * d + 2 * d * d_ff) + decoder * (8 * d * d + 2 * d * d_ff)
    needed = 16 * parameters
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not on this system: nothing to compare with
        return
    if needed > memory:
        changed = [key for key in ("d_model", "d_ff", "num_encoder_layers", "num_decoder_layers")
                   if f"model.{key}" in where] or ["preset"]  # fmt: skip
        key = "model." + changed[0]
        at = where.get(key, source)
        raise AiaynError(
            f"{at if at.startswith('--') else f'{at}: {key!r}'}: a model of {parameters:,} parameters needs at least "
            f"{needed / 2**30:,.1f} GiB to train (weights, gradients and Adam's moments in fp32); this machine has "
            f"{memory / 2**30:,.1f} GiB"
        )


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
    """Write the resolved recipe as YAML, atomically (complete or absent)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "# The resolved recipe of this run: `aiayn train` loads it back unchanged.\n"
    text += yaml.safe_dump(recipe.to_dict(), sort_keys=False, default_flow_style=None)
    with atomic_open(path) as out:
        out.write(text)


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
            elif _compared(full, a.get(key)) != _compared(full, b.get(key)):
                differences.append(f"{full}: {a.get(key)!r} -> {b.get(key)!r}")

    walk(old.to_dict(), new.to_dict(), "")
    return differences


# Keys that name local files or folders: `data` and `./data` (or its absolute path) are one folder.
PATH_KEYS = frozenset(
    {"data.data_dir", "data.prefix", "data.source_file", "data.target_file", "data.data_file", "data.cache_dir"}
)


def _compared(key: str, value: Any) -> Any:
    """A recipe value as runs are compared: a local path resolved (links followed), anything else as it is."""
    if key in PATH_KEYS and isinstance(value, str) and value:
        return os.path.realpath(os.path.expanduser(value))
    return value


def recipe_field_docs(cls: type = TrainRecipe) -> dict[str, str]:
    """The documentation of each field of a recipe dataclass (for help texts and documentation):
    the docstring under the field, or for the model section the `Args:` of `AiaynConfig`."""
    import ast
    import inspect

    if cls is ModelRecipe:
        args = re.findall(r"^\s{8}(\w+) \(`[^`]*`(?:, \*optional\*)?\): (.+)$", AiaynConfig.__doc__ or "", re.M)
        docs = {name: text for name, text in args}
        docs["preset"] = "Table 3's `base` or `big`, or `small` / `tiny` for CPUs and tests; None: AiaynConfig's."
        return docs
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
    "MODEL_FIELDS",
    "ModelRecipe",
    "RESUMABLE_CHANGES",
    "TokenizerTraining",
    "TrainRecipe",
    "find_recipe",
    "load_recipe",
    "parse_duration",
    "recipe_differences",
    "recipe_field_docs",
    "save_recipe",
    "shipped_recipes",
]
