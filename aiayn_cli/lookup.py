"""Is a model name that is not a local folder a model on the Hub? Asked once, before loading.

transformers looks a missing folder up on the Hub file by file, retrying each request for half a
minute when the Hub cannot be reached, and then says it could not connect: for `runs/x` typed
before `runs/` exists, a user waits and reads a Hub error about a folder. One metadata request
(`HfApi.model_info`, no retries) answers at once whether the name is a Hub model, and the error
names the folder that does not exist.

The commands ask before the libraries load, the loader (`aiayn_cli.model.loading`) and training (a
tokenizer's folder) again: it imports nothing of the project but `errors`.
"""

from __future__ import annotations

import functools
from pathlib import Path

from .errors import AiaynError, first_line


@functools.cache  # translate asks before the libraries load, the loader again: one request
def check_hub_model(name: str, revision: str | None = None, key: str | None = "model", what: str = "model") -> None:
    """Return if `name` is a local folder, a model in the Hub's cache, or found on the Hub (offline mode:
    left to the cache); else an `AiaynError` saying there is no such folder, and what the Hub said."""
    check_local(name, key=key, what=what)
    if Path(name).expanduser().exists():
        return
    from huggingface_hub import HfApi, constants, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    if constants.HF_HUB_OFFLINE:
        return
    try:
        if isinstance(try_to_load_from_cache(name, "config.json", revision=revision), str):
            return
    except ValueError as err:  # HFValidationError: not a name the Hub gives (a tab, a space, too long)
        raise AiaynError(f"{name!r}: no such {what} folder, nor a Hub name ({first_line(err)})", key=key) from None
    try:
        HfApi().model_info(name, revision=revision, timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except GatedRepoError:
        return  # it exists; loading says what access it needs
    except RepositoryNotFoundError:
        raise AiaynError(f"{name}: no such {what} folder, and no {what} of that name on the Hub", key=key) from None
    except RevisionNotFoundError:
        raise AiaynError(f"{name}: the Hub has no revision {revision!r} of this {what}", key=key) from None
    except HfHubHTTPError as err:
        raise AiaynError(f"{name}: no such {what} folder; the Hub answered: {first_line(err)}", key=key) from None
    except Exception as err:  # the HTTP library's own errors: no route, no name resolution, a timeout
        raise AiaynError(
            f"{name}: no such {what} folder, and the Hub could not be reached to look for it ({first_line(err)}); "
            "for a model in the Hub's cache set HF_HUB_OFFLINE=1",
            key=key,
        ) from None


def check_local(path_or_hub_id: str, key: str | None = "model", what: str = "model") -> None:
    """A `what` given as a local path must be an existing folder (else the Hub would say "Repo id must be
    in the form ..."); a Hub id (`user/name`) passes."""
    path = Path(path_or_hub_id).expanduser()
    if path.exists():
        if not path.is_dir():
            raise AiaynError(f"{path_or_hub_id}: is a file; give the {what}'s folder", key=key)
        if what == "model":
            check_not_a_run_folder(path, key)
        return
    first = path_or_hub_id.split("/")[0]
    if (
        path_or_hub_id.startswith((".", "/", "~"))
        or path_or_hub_id.count("/") > 1
        or "\\" in path_or_hub_id
        or (first != path_or_hub_id and Path(first).is_dir())
        or not path_or_hub_id.strip()
    ):
        raise AiaynError(f"{path_or_hub_id}: no such {what} folder", key=key)


def check_not_a_run_folder(folder: Path, key: str | None = "model") -> None:
    """A training run's output folder (`aiayn train -o RUN`) is not a model: it holds models. One line
    naming those it holds (`RUN/averaged`, the last checkpoint), instead of transformers' "Unrecognized
    model ... model_type" about a config.json that is not there."""
    if (folder / "config.json").exists():
        return
    checkpoints = sorted(
        (int(step), child)
        for child in folder.glob("checkpoint-*")
        if (step := child.name.removeprefix("checkpoint-")).isdigit() and (child / "config.json").is_file()
    )
    models = [folder / "averaged"] if (folder / "averaged" / "config.json").is_file() else []
    models += [checkpoints[-1][1]] if checkpoints else []
    if models:
        names = " or ".join(f"{path} ({'the averaged model' if path.name == 'averaged' else 'the last checkpoint'})"
                            for path in models)  # fmt: skip
        raise AiaynError(f"{folder}: is a training run's folder, not a model; use {names}", key=key)
    elif (folder / "recipe.yaml").is_file() and (folder / "metrics.jsonl").exists():
        raise AiaynError(f"{folder}: is a training run's folder with no checkpoint yet, not a model", key=key)
