"""Fixtures of the training tests: the generated task (`training_task.py`) and an uninterrupted
run of it to compare resumed ones with."""

from __future__ import annotations

import pytest
from helpers import cli_env, run_cli
from training_task import RESUME_FLAGS, train_args, weights, write_dictionary_task


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """Generated data, its tokenizer, and a datasets cache of its own."""
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.data.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("task")
    data = write_dictionary_task(root / "data")
    train_tokenizer(
        DataSpec(data_dir=str(data), source_lang="en", target_lang="de"),
        vocab_size=400,
        output_dir=root / "tok",
        show_progress=False,
    )
    return {
        "root": root,
        "data": data,
        "tokenizer": root / "tok",
        "env": cli_env(HF_DATASETS_CACHE=str(root / "cache"), OMP_NUM_THREADS="1"),
    }


@pytest.fixture(scope="module")
def uninterrupted(task):
    out = task["root"] / "uninterrupted"
    result = run_cli(*train_args(task, out, *RESUME_FLAGS), env=task["env"])
    assert result.returncode == 0, result.stderr
    return weights(out / "checkpoint-60")
