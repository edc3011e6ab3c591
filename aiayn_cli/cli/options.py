"""Shared Typer options: one spelling for each thing, in every command (the vocabulary of
docs/cli.md, which `aiayn_cli.cli.reference` renders and tests/cli/test_cli_options.py enforces).

A model folder or Hub id is always `-m/--model`; an output file `-o/--output`, an output folder
`-o/--output-dir`; what a command computes in `--precision auto|fp32|bf16|fp16` (and
`--quantization int8` where it quantizes); where it runs `--device`, `auto` by default.

A command that reads parallel data takes the data options with `with_data_options`, as it takes
the decoding options with `with_decoding_options`: it declares a parameter `data` where they go in its
help, and receives there the checked `DataSpec`:

    @options.with_data_options()
    def heads(model: options.ModelOpt = ..., data: DataSpec | None = None, split: HeldOutSplitOpt = "validation"):
        pairs = load_sample(translator, data, split, sample)
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from ..errors import AiaynError
from ..precision import DEFAULT_INFERENCE_PRECISION

if TYPE_CHECKING:  # pragma: no cover
    from ..data.spec import DataSpec

# ---------------------------------------------------------------------------------------------
# The model, outputs, device and precision
# ---------------------------------------------------------------------------------------------

MODEL_HELP = "A model folder written by aiayn train or aiayn average, or a Hub id (user/name)."


def model_option(help: str = MODEL_HELP, panel: str | None = None) -> Any:
    """`-m/--model MODEL`: a model folder or a Hub id."""
    return typer.Option("--model", "-m", metavar="MODEL", help=help, rich_help_panel=panel, show_default=False)


def output_option(help: str, panel: str | None = None) -> Any:
    """`-o/--output FILE`: the file a command writes."""
    return typer.Option("--output", "-o", metavar="FILE", help=help, rich_help_panel=panel, show_default=False)


def output_dir_option(help: str, panel: str | None = None, show_default: bool = False) -> Any:
    """`-o/--output-dir FOLDER`: the folder a command writes."""
    return typer.Option(
        "--output-dir", "-o", metavar="FOLDER", help=help, rich_help_panel=panel, show_default=show_default
    )


ModelOpt = Annotated[str | None, model_option()]


def model_from_argument(model: str | None, positional: str | None, command: str) -> str:
    """`-m/--model`, or the positional MODEL of the previous version (with a deprecation notice)."""
    if positional is not None:
        if model is not None:
            raise AiaynError(f"and a positional {positional}: give the model once, as --model", key="model")
        typer.echo(
            f"warning: aiayn {command} MODEL is deprecated and goes away in the next version; use -m/--model MODEL",
            err=True,
        )
        return positional
    if model is None:
        raise AiaynError("is required: a model folder or a Hub id", key="model")
    if not model.strip():
        raise AiaynError("is empty: give a model folder or a Hub id", key="model")
    return model


Precision = Literal["auto", "fp32", "bf16", "fp16"]
PRECISION = DEFAULT_INFERENCE_PRECISION  # every command's default: the same tokens in each (docs/precision.md)
PRECISION_HELP = (
    "What the model computes in: fp32 (the default of every command: the same tokens in each, on every CPU), "
    "auto (bf16 where the device computes it natively: AVX512-BF16, AMX, Ampere+; else fp32; faster, and it "
    "can change a token), bf16 or fp16."
)


def precision_option(help: str = PRECISION_HELP, panel: str | None = None, show_default: bool = True) -> Any:
    """`--precision auto|fp32|bf16|fp16`."""
    return typer.Option("--precision", help=help, rich_help_panel=panel, show_default=show_default)


Quantization = Literal["none", "int8"]


def quantization_option(panel: str | None = None) -> Any:
    """`--quantization none|int8`: int8 weights for the linear maps (CPUs), float activations."""
    return typer.Option(
        "--quantization",
        help="int8: int8 weights for the linear maps, float32 activations (CPUs; with --precision auto or fp32).",
        rich_help_panel=panel,
    )


def report_dir_option(command: str) -> Any:
    """`-o/--output-dir FOLDER` of a command that writes its report (COMMAND.md, COMMAND.json, figures)."""
    return output_dir_option(
        f"Where {command}.md, {command}.json and the figures go (created if missing; other files there stay).",
        show_default=True,
    )


def overwrite_option(command: str) -> Any:
    """`--overwrite` of a command that writes named files into an output folder (the output rule:
    `files.staging_files`)."""
    return typer.Option(
        "--overwrite", help=f"Replace files in --output-dir that aiayn {command} did not write (or that were edited)."
    )


def device_option(panel: str | None = None) -> Any:
    """`--device auto|cpu|cuda|cuda:N|mps`, `auto` by default everywhere."""
    return typer.Option(
        "--device",
        metavar="DEVICE",
        help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps.",
        rich_help_panel=panel,
    )


def _check_threads(value: int | None) -> int | None:
    """At most four threads per core: --threads 1000000 started threads until none could be (a crash)."""
    cores = os.cpu_count() or 1
    if value is not None and value > 4 * cores:
        raise typer.BadParameter(f"at most {4 * cores} (4 per core of this machine's {cores}), got {value}")
    return value


def threads_option(panel: str | None = None) -> Any:
    """`--threads N`: the most CPU threads (at most four per core)."""
    return typer.Option(
        "--threads",
        min=1,
        callback=_check_threads,
        metavar="N",
        rich_help_panel=panel,
        help="The most CPU threads (default: PyTorch's, one per core); batches of few sentences decode on one, "
        "large batches are split, one part per thread. 1 is faster on a busy machine.",
        show_default=False,
    )


def max_tokens_option(panel: str | None = None) -> Any:
    return typer.Option(
        "--max-tokens", min=1, metavar="N", rich_help_panel=panel, help="Source tokens per batch, padding included."
    )


def batch_size_option(panel: str | None = None) -> Any:
    return typer.Option("--batch-size", min=1, metavar="N", rich_help_panel=panel, help="Sentences per batch.")


def on_long_option(panel: str | None = None) -> Any:
    return typer.Option(
        "--on-long",
        rich_help_panel=panel,
        help="Inputs longer than the model's limit: truncated (with a warning), skipped (an empty line) or an error.",
    )


OnLong = Literal["truncate", "skip", "error"]


def progress_option(panel: str | None = None) -> Any:
    """`--progress/--no-progress`: a progress bar on stderr; by default only where stderr is a terminal."""
    return typer.Option(
        "--progress/--no-progress",
        rich_help_panel=panel,
        help="Draw progress bars on stderr (default: when stderr is a terminal; never into a file).",
        show_default=False,
    )


def show_progress(progress: bool | None) -> bool:
    """`--progress` / `--no-progress`, or by default whether stderr is a terminal (a bar's carriage
    returns have no place in a log file)."""
    if progress is not None:
        return progress
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # closed or replaced
        return False


# ---------------------------------------------------------------------------------------------
# Decoding: the options of `DecodingOptions`, generated from its one definition
# ---------------------------------------------------------------------------------------------

DECODING = "Decoding (default: the model's generation_config)"


def decoding_parameters(exclude: tuple[str, ...] = (), panel: str = DECODING) -> list[inspect.Parameter]:
    """One Typer option per field of `DecodingOptions` that has a `Flag` (but those in `exclude`),
    each None by default (the model's generation_config decides), `--sample` a flag."""
    from typing import get_type_hints

    from ..decoding.defaults import DecodingOptions, decoding_flags

    types = get_type_hints(DecodingOptions)
    parameters = []
    for name, spec in decoding_flags().items():
        if name in exclude:
            continue
        kind = types[name]
        if spec.choices:
            kind = Literal[spec.choices]  # type: ignore[valid-type]
        decls = [spec.flag, *([spec.short] if spec.short else [])]
        if kind is bool:
            info = typer.Option(*decls, help=spec.help, rich_help_panel=panel)
            annotation, default = Annotated[bool, info], False
        else:
            info = typer.Option(*decls, metavar=spec.metavar, help=spec.help, rich_help_panel=panel, show_default=False)
            annotation, default = Annotated[kind | None, info], None
        parameters.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        )
    return parameters


def with_decoding_options(exclude: tuple[str, ...] = (), panel: str = DECODING) -> Callable:
    """A command decorator: the command takes the decoding options (`decoding_parameters`) and receives
    them as one argument, `decoding`, a dict of the `DecodingOptions` overrides given (checked:
    `aiayn_cli.decoding.defaults.given_options`)."""

    def wrap(command: Callable) -> Callable:
        from ..decoding.defaults import given_options

        signature = inspect.signature(command, eval_str=True)
        added = decoding_parameters(exclude, panel)
        names = [p.name for p in added]

        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in names}
            return command(**kwargs, decoding=given_options(values))

        kept = [p for p in signature.parameters.values() if p.name != "decoding"]
        run.__signature__ = signature.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
        return run

    return wrap


# ---------------------------------------------------------------------------------------------
# Parallel data
# ---------------------------------------------------------------------------------------------

PANEL = "Data"

DatasetOpt = Annotated[
    str | None,
    typer.Option(
        "--dataset",
        metavar="NAME",
        rich_help_panel=PANEL,
        help="A Hub dataset in the translation format (e.g. wmt14), or a folder written by save_to_disk.",
    ),
]
DatasetConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--dataset-config",
        metavar="NAME",
        rich_help_panel=PANEL,
        help="The Hub dataset's configuration (e.g. de-en for wmt14).",
    ),
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        metavar="FOLDER",
        rich_help_panel=PANEL,
        help="A folder of {split}.{lang} text files (or {split}.jsonl / {split}.tsv); "
        "validation is also found as val/valid/dev, test as test2016.",
    ),
]
PrefixOpt = Annotated[
    str | None,
    typer.Option(
        "--prefix",
        metavar="PREFIX",
        rich_help_panel=PANEL,
        help="Path prefix of two text files: PREFIX.{source-lang} and PREFIX.{target-lang}; may contain {split}.",
    ),
]
SourceFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--source-file",
        metavar="FILE",
        rich_help_panel=PANEL,
        help="Source sentences, one per line (with --target-file).",
    ),
]
TargetFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--target-file",
        metavar="FILE",
        rich_help_panel=PANEL,
        help="Target sentences, one per line, aligned with --source-file.",
    ),
]
DataFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-file",
        metavar="FILE",
        rich_help_panel=PANEL,
        help="One TSV (source<TAB>target) or JSONL (translation format) file; may contain {split}.",
    ),
]
DataFormatOpt = Annotated[
    str | None,
    typer.Option(
        "--data-format",
        metavar="tsv|jsonl",
        rich_help_panel=PANEL,
        help="Format of --data-file when its extension does not say: tsv or jsonl.",
    ),
]
SourceLangOpt = Annotated[
    str | None,
    typer.Option(
        "--source-lang",
        "-s",
        metavar="LANG",
        rich_help_panel=PANEL,
        help="Source language code (file suffix and translation key), e.g. en.",
    ),
]
TargetLangOpt = Annotated[
    str | None,
    typer.Option("--target-lang", "-t", metavar="LANG", rich_help_panel=PANEL, help="Target language code, e.g. de."),
]
SourceColumnOpt = Annotated[
    str | None,
    typer.Option(
        "--source-column",
        metavar="COLUMN",
        rich_help_panel=PANEL,
        help="Column of the source sentences: a name (nested keys with dots) or, for TSV, a 0-based index.",
    ),
]
TargetColumnOpt = Annotated[
    str | None,
    typer.Option(
        "--target-column",
        metavar="COLUMN",
        rich_help_panel=PANEL,
        help="Column of the target sentences, as --source-column.",
    ),
]
SplitOpt = Annotated[
    str,
    typer.Option(
        "--split",
        metavar="SPLIT",
        rich_help_panel=PANEL,
        help="Which split to read: train, validation or test (or a dataset's own name).",
    ),
]
MaxLengthOpt = Annotated[
    int | None,
    typer.Option(
        "--max-length",
        metavar="N",
        min=1,
        rich_help_panel=PANEL,
        help="Drop pairs with a side longer than this many whitespace-separated tokens (counted and reported).",
    ),
]
MaxRatioOpt = Annotated[
    float | None,
    typer.Option(
        "--max-ratio",
        metavar="X",
        min=1.0,
        rich_help_panel=PANEL,
        help="Drop pairs whose longer side has more than this many times the tokens of the shorter one.",
    ),
]
DedupOpt = Annotated[
    bool, typer.Option("--dedup/--no-dedup", rich_help_panel=PANEL, help="Drop repeated identical sentence pairs.")
]
HeldOutSplitOpt = Annotated[
    str, typer.Option("--split", metavar="SPLIT", rich_help_panel=PANEL, help="The held-out split to measure on.")
]

# Every data option, keyed by its `DataSpec` field, in the order of the help; a command's `split`
# option goes in before the cleaning ones (`CLEANING`).
DATA_OPTIONS: dict[str, Any] = {
    "dataset": DatasetOpt,
    "dataset_config": DatasetConfigOpt,
    "data_dir": DataDirOpt,
    "prefix": PrefixOpt,
    "source_file": SourceFileOpt,
    "target_file": TargetFileOpt,
    "data_file": DataFileOpt,
    "data_format": DataFormatOpt,
    "source_lang": SourceLangOpt,
    "target_lang": TargetLangOpt,
    "source_column": SourceColumnOpt,
    "target_column": TargetColumnOpt,
    "max_length": MaxLengthOpt,
    "max_ratio": MaxRatioOpt,
    "dedup": DedupOpt,
}
CLEANING = ("max_length", "max_ratio", "dedup")
# What most commands take: a source and its two languages (no format, columns or cleaning).
SOURCE_OPTIONS = tuple(name for name in DATA_OPTIONS if name not in ("data_format", "source_column",
                                                                     "target_column", *CLEANING))  # fmt: skip


def with_data_options(
    names: tuple[str, ...] = SOURCE_OPTIONS, need: Literal["required", "optional", "recipe"] = "required"
) -> Callable:
    """A command decorator: the command takes the data options `names` (keys of `DATA_OPTIONS`), shown
    where it declares its parameter `data` (and its own `split` option, if any, among them), and
    receives them as one argument, `data`:

    - need="required": the checked `DataSpec` (`data_spec`; no data source is an error);
    - need="optional": the checked `DataSpec`, or None when no data source is given;
    - need="recipe": a dict of the options given (`DataSpec` field -> value), which replace a recipe's
      keys (`recipe_overrides`); the recipe's `DataSpec` is checked when it loads.

    With "required" and "optional", a spec without `--source-lang`/`--target-lang` takes them from the
    recipe saved beside the model of the command's `model` option (`hub.publish.recipe_languages`)."""
    unknown = [name for name in names if name not in DATA_OPTIONS]
    if unknown:
        raise ValueError(f"not data options: {unknown}")

    def wrap(command: Callable) -> Callable:
        from ..data.spec import DATA_SOURCES

        signature = inspect.signature(command, eval_str=True)
        params = dict(signature.parameters)
        marker = params["data"]
        split = params.get("split")
        chosen = [name for name in DATA_OPTIONS if name in names]
        block = [inspect.Parameter(name, marker.kind, default=False if name == "dedup" else None,
                                   annotation=DATA_OPTIONS[name]) for name in chosen]  # fmt: skip
        if split is not None:
            at = next((i for i, p in enumerate(block) if p.name in CLEANING), len(block))
            block.insert(at, split.replace(kind=marker.kind))
        shown = []
        for param in params.values():
            if param.name == "data":
                shown.extend(block)
            elif param.name != "split":
                shown.append(param)

        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in chosen}
            if need == "recipe":
                given = {name: value for name, value in values.items() if value is not None}
                refuse_given_streams(given)
                return command(**kwargs, data=given)
            if need == "optional" and not any(values.get(name) is not None for name in DATA_SOURCES):
                return command(**kwargs, data=None)
            if kwargs.get("model"):
                from ..lookup import check_hub_model

                check_hub_model(kwargs["model"])  # a missing model first: its recipe may name the languages
                if not (values.get("source_lang") or values.get("target_lang")):
                    from ..hub.publish import recipe_languages

                    values.update(recipe_languages(kwargs["model"]))
            return command(**kwargs, data=data_spec(**values))

        run.__signature__ = signature.replace(parameters=shown)  # type: ignore[attr-defined]
        return run

    return wrap


def refuse_given_streams(data: dict[str, Any]) -> None:
    """A device or a pipe given as a data file (`--target-file /dev/full`) is refused as reading the data
    would refuse it (`text_files.refuse_streams`), but before the recipe loads torch and transformers:
    at once, not seconds later. A path with `{split}` is checked when its split is read."""
    from ..data.text_files import refuse_streams

    named = [data[name] for name in ("source_file", "target_file", "data_file") if name in data]
    refuse_streams([Path(str(path)) for path in named if "{split}" not in str(path)])


def data_spec(**fields: Any) -> DataSpec:
    """The `DataSpec` of a command's data options (`DataSpec` field -> value), checked (raises `AiaynError`)."""
    from ..data.spec import DataSpec

    spec = DataSpec(**fields)
    spec.validate()
    return spec


# Decoding engines (`aiayn translate`, `aiayn evaluate --model`, `aiayn serve`)


def engine_option(panel: str | None = None) -> Any:
    """`--engine torch|ctranslate2`: which decoder runs the model."""
    return typer.Option(
        "--engine",
        metavar="torch|ctranslate2",
        rich_help_panel=panel,
        help="torch: aiayn's decoder (every option). ctranslate2: the model converted once for CTranslate2 (kept "
        "in the cache folder, $AIAYN_CACHE) and decoded there, its finished hypotheses ranked by the same length "
        "penalty (the paper's GNMT by default); --quantization int8 is its int8.",
    )


EngineOpt = Annotated[str, engine_option()]


def check_engine(engine: str) -> None:
    """Before anything loads: `engine` is one of `ENGINES`."""
    from ..decoding.defaults import ENGINES

    if engine not in ENGINES:
        raise AiaynError(f"{engine}: choose one of {', '.join(ENGINES)}", key="engine")


__all__ = [
    "DataDirOpt",
    "DataFileOpt",
    "DataFormatOpt",
    "DatasetConfigOpt",
    "DatasetOpt",
    "DedupOpt",
    "EngineOpt",
    "MaxLengthOpt",
    "MaxRatioOpt",
    "PrefixOpt",
    "SourceColumnOpt",
    "SourceFileOpt",
    "SourceLangOpt",
    "SplitOpt",
    "TargetColumnOpt",
    "TargetFileOpt",
    "TargetLangOpt",
    "HeldOutSplitOpt",
    "check_engine",
    "data_spec",
    "with_data_options",
]


# Recipe keys from the command line (`aiayn train`, `aiayn prepare`)


def recipe_overrides(set_values: list[str] | None, data: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """The recipe keys a command line sets: `--set KEY=VALUE` (YAML values) first, then a data
    source (given one, it replaces the recipe's whole source: `data` maps `DataSpec` fields to flag
    values), then the other flags that were given (`flags` maps dotted recipe keys to flag values)."""
    import yaml

    from .. import yaml_text
    from ..data.spec import DATA_SOURCES

    overrides: dict[str, Any] = {}
    for item in set_values or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise AiaynError(f"--set {item}: expected KEY=VALUE, e.g. --set lr_scale=2")
        if not all(part.isidentifier() for part in key.strip().split(".")):
            raise AiaynError(f"--set {item}: KEY is a recipe key, dotted within a section (e.g. model.d_ff)")
        try:
            overrides[key.strip()] = yaml_text.loads(text) if text.strip() else None
        except yaml.YAMLError:
            raise AiaynError(f"--set {item}: the value is not valid YAML") from None
        except RecursionError:
            raise AiaynError(f"--set {key.strip()}: the value is nested too deeply") from None
    if any(data.get(name) is not None for name in DATA_SOURCES):
        overrides.update({f"data.{name}": _plain(data.get(name)) for name in DATA_SOURCES})
    given = {**{f"data.{k}": v for k, v in data.items() if k not in DATA_SOURCES}, **flags}
    overrides.update({key: _plain(value) for key, value in given.items() if value is not None})
    return overrides


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value
