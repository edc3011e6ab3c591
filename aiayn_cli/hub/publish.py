"""Sharing a trained model on the Hugging Face Hub: the folder, its model card, the upload.

`stage_folder` writes exactly what is uploaded: the weights (safetensors), config.json with
`auto_map` and the modeling code (so it loads with `trust_remote_code=True` anywhere),
generation_config.json (the paper's decoding), the tokenizer, the training recipe, the learning
curve and a model card (README.md) whose YAML metadata the Hub reads. `push_folder` uploads it
through `huggingface_hub`. The token comes from `--token`, `HF_TOKEN` or the saved login, and
is never printed: every error message is scrubbed of it.

Nothing local is published: paths in the recipe and in the evaluation results (data folders,
files, the output folder) are reduced to their last component (`without_local_paths`).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import yaml_text
from ..errors import AiaynError, first_line
from ..files import check_output_folder, staging_dir

CITATION = """@inproceedings{vaswani2017attention,
  title     = {Attention Is All You Need},
  author    = {Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and
               Gomez, Aidan N. and Kaiser, {\\L}ukasz and Polosukhin, Illia},
  booktitle = {Advances in Neural Information Processing Systems},
  volume    = {30},
  year      = {2017}
}"""

RECIPE_NAMES = ("recipe.yaml",)
# Keys that hold a local path (the tokenizer is published beside the model; the dataset may be a Hub id).
PATH_KEYS = {
    "output_dir",
    "tokenizer",
    "data_dir",
    "source_file",
    "target_file",
    "data_file",
    "hypotheses",
    "references",
}
CURVE_NAMES = ("learning_curve.png",)


@dataclass
class CardInfo:
    """What the model card says beyond the model itself; found beside the model when not given."""

    repo_id: str
    source_lang: str | None = None
    target_lang: str | None = None
    license: str = "apache-2.0"
    datasets: list[str] = field(default_factory=list)
    recipe: Path | None = None
    learning_curve: Path | None = None
    evaluation: dict | None = None  # the JSON written by `aiayn evaluate --json`
    evaluation_split: str | None = None


def find_beside(model_dir: Path, names: tuple[str, ...]) -> Path | None:
    """The first of `names` in the model folder or in the run folder above it (checkpoints live there)."""
    for folder in (model_dir, model_dir.parent):
        for name in names:
            if (folder / name).is_file():
                return folder / name
    return None


def load_for_staging(model_dir: Path):
    """The model and tokenizer of a folder written by `aiayn train` / `aiayn average` (or any aiayn folder)."""
    from ..lookup import check_not_a_run_folder
    from ..model import AiaynForConditionalGeneration  # registers the auto classes

    check_not_a_run_folder(model_dir, key=None)
    if not (model_dir / "config.json").is_file():
        raise AiaynError(f"{model_dir}: not a model folder (no config.json)")
    if not any((model_dir / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise AiaynError(f"{model_dir}: no tokenizer files (tokenizer.json); save the tokenizer beside the model")
    from ..decoding.defaults import check_saved_options
    from ..model.loading import load_pretrained

    model, tokenizer = load_pretrained(str(model_dir))
    check_saved_options(model, model_dir)
    if not isinstance(model, AiaynForConditionalGeneration):
        raise AiaynError(f"{model_dir}: holds a {type(model).__name__}, not an aiayn model")
    if len(tokenizer) != model.config.vocab_size:
        raise AiaynError(
            f"{model_dir}: the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
            f"{model.config.vocab_size}"
        )
    return model, tokenizer


def model_card(model, info: CardInfo) -> str:
    """README.md: YAML metadata for the Hub, then what the model is, how it was trained, how to use it."""
    from huggingface_hub import EvalResult, ModelCardData

    config = model.config
    languages = [lang for lang in (info.source_lang, info.target_lang) if lang]
    eval_results, signatures = [], []
    scores = (info.evaluation or {}).get("scores", {})
    for key, metric_type in (("sacrebleu", "sacrebleu"), ("chrf", "chrf"), ("ter", "ter")):
        if key in scores:
            eval_results.append(
                EvalResult(
                    task_type="translation",
                    dataset_type=info.datasets[0] if info.datasets else "custom",
                    dataset_name=info.datasets[0] if info.datasets else "custom",
                    dataset_split=info.evaluation_split,
                    metric_type=metric_type,
                    metric_value=round(float(scores[key]["score"]), 2),
                    metric_config=scores[key].get("signature"),
                )
            )
            signatures.append(
                f"| {metric_type} | {float(scores[key]['score']):.2f} | `{scores[key].get('signature', '')}` |"
            )
    data = ModelCardData(
        language=languages or None,
        license=info.license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "transformer", "aiayn", "attention-is-all-you-need", "custom_code"],
        datasets=info.datasets or None,
        metrics=["sacrebleu", "chrf", "ter"] if eval_results else None,
        model_name=info.repo_id.split("/")[-1],
        eval_results=eval_results or None,
    )
    pair = f"{info.source_lang}→{info.target_lang}" if languages else "translation"
    sections = [
        f"---\n{data.to_yaml()}\n---",
        f"# {info.repo_id.split('/')[-1]}",
        f"A {pair} Transformer as in *Attention Is All You Need* (Vaswani et al., 2017), trained with "
        "[aiayn](https://pypi.org/project/aiayn-cli/): post-LN encoder-decoder, sinusoidal positions, "
        "embeddings scaled by √d_model, one matrix shared by both embeddings and the pre-softmax projection.",
        "| d_model | d_ff | h | N (enc/dec) | P_drop | vocabulary | parameters |\n|---|---|---|---|---|---|---|\n"
        f"| {config.d_model} | {config.d_ff} | {config.num_heads} | {config.num_encoder_layers}/"
        f"{config.num_decoder_layers} | {config.dropout} | {config.vocab_size} | {model.num_parameters():,} |",
    ]
    if signatures:
        sections.append("## Results\n\n| metric | score | signature |\n|---|---|---|\n" + "\n".join(signatures))
    sections.append(
        "## Usage\n\nFrom the shell (beam 4, GNMT length penalty α = 0.6, max length = input + 50, as in §6.1):\n\n"
        f'```bash\npip install aiayn-cli\necho "A sentence to translate." | aiayn translate --model {info.repo_id}\n```\n\n'
        "From Python:\n\n"
        "```python\nfrom transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline\n\n"
        f'tokenizer = AutoTokenizer.from_pretrained("{info.repo_id}", trust_remote_code=True)\n'
        f'model = AutoModelForSeq2SeqLM.from_pretrained("{info.repo_id}", trust_remote_code=True)\n'
        'inputs = tokenizer(["A sentence to translate."], return_tensors="pt")\n'
        "print(tokenizer.batch_decode(model.generate(**inputs), skip_special_tokens=True))\n\n"
        f'translator = pipeline("translation", model="{info.repo_id}", trust_remote_code=True)\n```\n\n'
        "`trust_remote_code=True` lets transformers read this model's code (`modeling_aiayn.py`); the tokenizer "
        "needs it too only because transformers reads the model's config to find the tokenizer.\n\n"
        "`generate()` applies transformers' length penalty |Y|^α; `aiayn translate` applies the paper's "
        "((5 + |Y|) / 6)^α (see `generation_config.json`)."
    )
    if info.recipe is not None:
        sections.append(f"## Training recipe\n\n```yaml\n{public_recipe(info.recipe).strip()}\n```")
    if info.learning_curve is not None:
        sections.append(f"## Learning curve\n\n![learning curve]({info.learning_curve.name})")
    sections.append(f"## Citation\n\n```bibtex\n{CITATION}\n```")
    return "\n\n".join(sections) + "\n"


def languages_from_recipe(recipe: Path | None) -> tuple[str | None, str | None, list[str]]:
    """Source and target languages and dataset names from a saved recipe.yaml, where it has them."""
    if recipe is None:
        return None, None, []
    try:
        data = (yaml_text.loads(recipe.read_text(encoding="utf-8")) or {}).get("data", {}) or {}
    except yaml.YAMLError as err:
        raise AiaynError(f"{recipe}: not valid YAML: {first_line(err)}") from None
    dataset = data.get("dataset")
    datasets = [dataset] if isinstance(dataset, str) and not _is_local_path(dataset) else []
    return data.get("source_lang"), data.get("target_lang"), datasets


def recipe_languages(model: str | Path) -> dict[str, str]:
    """`source_lang` and `target_lang` from the recipe saved beside a local model folder, where it has
    them (`aiayn serve` names the languages by them; `aiayn evaluate` reads a data split by them)."""
    folder = Path(model)
    if not folder.is_dir():
        return {}
    try:
        source, target, _ = languages_from_recipe(find_beside(folder, RECIPE_NAMES))
    except (AiaynError, OSError):  # a recipe we cannot read only costs the languages
        return {}
    return {key: value for key, value in (("source_lang", source), ("target_lang", target)) if value}


def _is_local_path(value: str) -> bool:
    """An absolute or explicitly relative path, or one that exists here (a Hub id `user/name` does not)."""
    if value.startswith(("/", "~", "./", "../", ".\\", "..\\")) or value[1:3] in (":\\", ":/"):
        return True
    return ("/" in value or "\\" in value) and Path(value).expanduser().exists()


def without_local_paths(data: Any, key: str = "") -> Any:
    """`data` (parsed YAML or JSON) with every local path reduced to its last component."""
    if isinstance(data, dict):
        return {k: without_local_paths(v, str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [without_local_paths(v, key) for v in data]
    if isinstance(data, str) and (key in PATH_KEYS or _is_local_path(data)):
        return Path(data).name
    return data


def public_recipe(recipe: Path) -> str:
    """The text of a saved recipe.yaml as published: its local paths reduced to their last component."""
    try:
        data = yaml_text.loads(recipe.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise AiaynError(f"{recipe}: not valid YAML: {first_line(err)}") from None
    header = "# The training recipe (local paths reduced to their last component).\n"
    return header + yaml.safe_dump(without_local_paths(data), sort_keys=False, default_flow_style=None)


def stage_folder(model_dir: str | Path, output_dir: str | Path, info: CardInfo) -> list[Path]:
    """Write the exact folder that `push` uploads into `output_dir` (atomically); return its files."""
    model_dir, named = Path(model_dir), Path(output_dir)
    if not model_dir.is_dir():
        raise AiaynError(f"{model_dir}: no such model folder")
    output_dir = check_output_folder(  # absent or empty: the output rule of files.py
        output_dir,
        own=lambda path: False,
        what="a folder for the Hub",
        overwrite=None,
        inputs=[model_dir],
        key="output_dir",
    )
    model, tokenizer = load_for_staging(model_dir)
    info.recipe = info.recipe or find_beside(model_dir, RECIPE_NAMES)
    info.learning_curve = info.learning_curve or find_beside(model_dir, CURVE_NAMES)
    source, target, datasets = languages_from_recipe(info.recipe)
    info.source_lang, info.target_lang = info.source_lang or source, info.target_lang or target
    info.datasets = info.datasets or datasets

    with staging_dir(output_dir) as staging:  # removed on any error (a full disk included)
        model.save_pretrained(staging)  # weights, config.json + auto_map + code, generation_config.json
        tokenizer.save_pretrained(staging)
        if info.recipe is not None:
            (staging / info.recipe.name).write_text(public_recipe(info.recipe), encoding="utf-8")
        if info.learning_curve is not None:
            shutil.copy2(info.learning_curve, staging / info.learning_curve.name)
        if info.evaluation is not None:
            text = json.dumps(without_local_paths(info.evaluation), indent=2) + "\n"
            (staging / "eval_results.json").write_text(text, encoding="utf-8")
        (staging / "README.md").write_text(model_card(model, info), encoding="utf-8")
    return sorted(named / p.relative_to(output_dir) for p in output_dir.rglob("*") if p.is_file())  # as named


def push_folder(
    folder: Path,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
) -> str:
    """Create the repository if needed and upload `folder`; returns the commit URL."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalTokenNotFoundError

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        if revision:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        commit = api.upload_folder(
            folder_path=folder,
            repo_id=repo_id,
            revision=revision,
            commit_message=commit_message or f"Upload {repo_id.split('/')[-1]} with aiayn",
        )
    except LocalTokenNotFoundError:
        raise AiaynError(
            "no Hugging Face token: pass {token}, set HF_TOKEN, or run `hf auth login`", mentions=("token",)
        ) from None
    except HFValidationError as err:
        raise AiaynError(f"{repo_id!r}: {_scrub(first_line(err), token)}", key="repo_id") from None
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        hint = {
            401: "the token is invalid or expired",
            403: f"the token may not write to {repo_id}",
            404: f"{repo_id} or revision {revision!r} not found",
        }.get(status, "the Hub refused the upload")
        raise AiaynError(f"push to {repo_id} failed ({status}): {hint}") from None
    except (OSError, ConnectionError) as err:  # DNS, refused connection, timeouts, offline mode
        raise AiaynError(f"cannot reach the Hugging Face Hub: {_scrub(first_line(err), token)}") from None
    except Exception as err:  # httpx transport errors and the like: one line, never the token
        raise AiaynError(
            f"push to {repo_id} failed: {_scrub(f'{type(err).__name__}: {first_line(err)}', token)}"
        ) from None
    return str(getattr(commit, "commit_url", commit))


def _scrub(message: str, token: str | None) -> str:
    return message.replace(token, "***") if token else message


__all__ = ["CardInfo", "model_card", "public_recipe", "push_folder", "stage_folder", "without_local_paths"]
