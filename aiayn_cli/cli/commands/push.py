"""`aiayn push`: a trained model on the Hugging Face Hub, loadable with `from_pretrained`."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from ...errors import AiaynError
from ...files import node_kind
from .. import options


def push(
    model: Annotated[
        str | None, options.model_option("The model folder to upload, written by aiayn train or aiayn average.")
    ] = None,
    repo_id: Annotated[
        str, typer.Option("--repo-id", metavar="USER/NAME", help="The Hub repository to create or update.")
    ] = ...,
    private: Annotated[bool, typer.Option("--private", help="Create the repository as private.")] = False,
    revision: Annotated[
        str | None,
        typer.Option(
            "--revision", metavar="BRANCH", help="Upload to this branch (created if needed).", show_default=False
        ),
    ] = None,
    commit_message: Annotated[
        str | None, typer.Option("--commit-message", metavar="TEXT", help="The commit message.", show_default=False)
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            metavar="TOKEN",
            help="A write token (default: $HF_TOKEN or the saved login). Never printed, but a token on the "
            "command line is visible to other users in process listings (ps) and in the shell's history: prefer "
            "HF_TOKEN or `hf auth login`.",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Write the exact folder and list what would be uploaded; upload nothing.")
    ] = False,
    output_dir: Annotated[
        Path | None,
        options.output_dir_option(
            "Where the folder to upload is written (default: MODEL-hub with --dry-run, a temporary folder otherwise)."
        ),
    ] = None,
    eval_json: Annotated[
        Path | None,
        typer.Option(
            "--eval-json",
            metavar="FILE",
            help="Results written by `aiayn evaluate --json`, for the model card.",
            show_default=False,
        ),
    ] = None,
    eval_split: Annotated[
        str | None,
        typer.Option(
            "--eval-split", metavar="NAME", help="The split those results are on (e.g. test2016).", show_default=False
        ),
    ] = None,
    source_lang: Annotated[
        str | None,
        typer.Option(
            "--source-lang",
            "-s",
            metavar="LANG",
            help="Source language (default: from the recipe).",
            show_default=False,
        ),
    ] = None,
    target_lang: Annotated[
        str | None,
        typer.Option(
            "--target-lang",
            "-t",
            metavar="LANG",
            help="Target language (default: from the recipe).",
            show_default=False,
        ),
    ] = None,
    license: Annotated[
        str, typer.Option("--license", metavar="ID", help="License of the model card's metadata.")
    ] = "apache-2.0",
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            "--dataset",
            metavar="NAME",
            help="Dataset name(s) for the card (default: from the recipe).",
            show_default=False,
        ),
    ] = None,
    legacy_model: Annotated[str | None, typer.Argument(hidden=True, show_default=False)] = None,
) -> None:
    """Upload a model folder, with its tokenizer, code and model card, to the Hugging Face Hub."""
    model_dir = Path(options.model_from_argument(model, legacy_model, "push"))
    _check_repo_id(repo_id)
    evaluation = _read_json(eval_json) if eval_json else None
    from ...hub.publish import CardInfo, push_folder, stage_folder

    info = CardInfo(
        repo_id=repo_id,
        source_lang=source_lang,
        target_lang=target_lang,
        license=license,
        datasets=list(dataset or []),
        evaluation=evaluation,
        evaluation_split=eval_split,
    )
    if dry_run:
        target = output_dir or model_dir.with_name(model_dir.name + "-hub")
        files = stage_folder(model_dir, target, info)
        typer.echo(
            f"dry run: would upload {len(files)} files from {target} to {repo_id}"
            + (f" (branch {revision})" if revision else "")
        )
        for path in files:
            typer.echo(f"  {path.relative_to(target)}  ({path.stat().st_size:,} bytes)")
        return
    with tempfile.TemporaryDirectory(prefix="aiayn-push-") as tmp:
        target = output_dir or Path(tmp) / "upload"
        stage_folder(model_dir, target, info)
        url = push_folder(
            target, repo_id, token=token, private=private, revision=revision, commit_message=commit_message
        )
    typer.echo(f"pushed {model_dir} to https://huggingface.co/{repo_id}  ({url})")


def _check_repo_id(repo_id: str) -> None:
    """USER/NAME as the Hub names repositories (letters, digits, '-', '_', '.'; not starting or ending with
    '-' or '.'; no '--' or '..'; at most 96 characters), checked before anything is written."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    user, sep, name = repo_id.partition("/")
    if not sep or not user or not name or "/" in name:
        raise AiaynError(f"{repo_id!r}: expected USER/NAME", key="repo_id")
    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise AiaynError(
            f"{repo_id!r}: not a Hub repository name (USER/NAME of letters, digits, '-', '_' and '.', not starting "
            "or ending with '-' or '.', no '--' or '..', at most 96 characters)",
            key="repo_id",
        ) from None


# `aiayn evaluate --json` writes scores and signatures: kilobytes
MAX_EVAL_JSON_BYTES = 1 << 24


def _read_json(path: Path) -> dict:
    """The results `aiayn evaluate --json` wrote: an object whose "scores" map each metric to an
    object with a numeric "score" (those the model card reports)."""
    kind = node_kind(path)
    if kind not in ("file", "missing"):  # a device such as /dev/full would be read until memory runs out
        raise AiaynError(f"--eval-json {path}: is a {kind}, not a file")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_EVAL_JSON_BYTES + 1)
        if len(raw) > MAX_EVAL_JSON_BYTES:
            raise AiaynError(
                f"--eval-json {path}: larger than {MAX_EVAL_JSON_BYTES >> 20} MiB, not the output of aiayn evaluate --json"
            )
        results = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise AiaynError(f"--eval-json {path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise AiaynError(f"--eval-json {path}: not valid JSON ({err})") from None
    scores = results.get("scores") if isinstance(results, dict) else None
    if not isinstance(scores, dict):
        raise AiaynError(f'--eval-json {path}: not the output of aiayn evaluate --json (no "scores" object)')
    for metric, result in scores.items():
        score = result.get("score") if isinstance(result, dict) else None
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise AiaynError(f'--eval-json {path}: scores.{metric} has no numeric "score"')
    return results
