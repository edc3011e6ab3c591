"""What every benchmark does the same way: the machine's line, timing, option checks, the results file.

    from benchmarks import common

    print(common.machine_line())                       # CPU, ATen's kernels, bf16, threads, ISA variables
    times = common.alternate({"a": run_a, "b": run_b}, repeats=7)   # warm-up, then in turn
    common.at_least(parser, args, 1, "repeats", "threads")          # one line naming the option
    common.write_results(recorder, {"rows": rows}, args.results)    # the results file, and its path

The results file itself (what it holds, where it goes) is `benchmarks/results.py`'s.

Scripts of this folder are run as `python benchmarks/x.py`, which puts `benchmarks/` first on the path
and not the repository. Each one that imports the repository's packages puts it there, right after its
other imports, and then imports `aiayn_cli` and `benchmarks.*` (never a sibling by its bare name):

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

    from aiayn_cli.decoding.incremental import PreparedModel
    from benchmarks import common, results

so that the same imports serve `python benchmarks/x.py` and the tests' `from benchmarks.x import ...`
(ruff's E402 allows a `sys.path` change before imports: no `noqa`).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks import results

REPO = results.REPO

# OpenMP runtimes keep their threads spinning after a parallel region (up to 200 ms with KMP_BLOCKTIME's
# default), on the cores the next run needs: each timed run starts this long after the last one.
PAUSE = 0.3


def machine_line() -> str:
    """One line for a benchmark's header: `machine_summary()` (the CPU, ATen's kernels, whether bf16 is
    native, the threads) and the variables that hold the CPU to fewer instructions, where set."""
    from aiayn_cli.precision import machine_summary

    limits = [f"{name}={os.environ[name]}" for name in results.ISA_VARIABLES if name in os.environ]
    return machine_summary() + (f"; {' '.join(limits)}" if limits else "")


def synchronize(device: str) -> None:
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str = "cpu") -> tuple[float, Any]:
    """(seconds, what `fn` returned) of one call; a GPU's queued work is waited for on both sides. Where
    `fn` returns `(seconds, value)` (a system in another process times itself), that is returned."""
    synchronize(device)
    start = time.perf_counter()
    value = fn()
    synchronize(device)
    seconds = time.perf_counter() - start
    return value if isinstance(value, tuple) else (seconds, value)


def alternate(
    systems: dict[str, Callable[[], Any]],
    repeats: int,
    *,
    device: str = "cpu",
    pause: float = PAUSE,
    warm_up: bool = True,
    turn: bool = True,
) -> dict[str, list[float]]:
    """Each system's seconds over `repeats` repetitions, in which every system runs once, `pause` seconds
    after the last run; the order is turned every other repetition (`turn`), so that no system always
    runs first. A warm-up call of each first (first calls allocate, pack and compile)."""
    if warm_up:
        for fn in systems.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in systems}
    for repeat in range(repeats):
        order = list(systems) if not turn or repeat % 2 == 0 else list(reversed(systems))
        for name in order:
            time.sleep(pause)
            times[name].append(timed(systems[name], device)[0])
    return times


def median_ms(seconds: list[float]) -> float:
    return 1000 * statistics.median(seconds)


def ratio(a: list[float], b: list[float]) -> float:
    """The median over repetitions of b's time / a's within each (above 1: a is faster); the two ran one
    after the other there, under the same load."""
    return statistics.median(tb / ta for ta, tb in zip(a, b))


def at_least(parser, args, minimum: int, *names: str) -> None:
    """argparse's one-line error for the first option of `names` below `minimum` (a list: its least)."""
    for name in names:
        value = getattr(args, name)
        least = min(value) if isinstance(value, list) else value
        if least is not None and least < minimum:
            parser.error(f"--{name.replace('_', '-')} must be >= {minimum}, got {least}")


def write_results(recorder: results.Recorder, figures: dict[str, Any], path: Path | None) -> Path:
    """The results file (`path`, or the default of `recorder`'s name and the machine); says where."""
    written = recorder.write(figures, path=path)
    print(f"\nwrote {written}")
    return written


# ---------------------------------------------------------------------------------------------
# Training runs that time steps only: no validation, checkpoints, averaging or trackers
# ---------------------------------------------------------------------------------------------

STEPS_ONLY = {
    "valid_split": None,
    "best_metric": "loss",
    "average_last": None,
    "length_penalty_grid": None,
    "checkpoint_every_minutes": None,
    "checkpoint_every_steps": None,
    "trackers": [],
}

# `Seq2SeqTrainingArguments` of the peer: the paper's Adam, inverse square root schedule and label
# smoothing (§5.3, §5.4), nothing saved or reported.
PEER_TRAINING = {
    "learning_rate": 5e-4,
    "lr_scheduler_type": "inverse_sqrt",
    "adam_beta1": 0.9,
    "adam_beta2": 0.98,
    "adam_epsilon": 1e-9,
    "weight_decay": 0.0,
    "label_smoothing_factor": 0.1,
    "save_strategy": "no",
    "report_to": [],
    "seed": 1,
    "disable_tqdm": True,
}


# ---------------------------------------------------------------------------------------------
# This checkout against another revision, each in processes of its own
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def baseline_tree(revision: str, folder: Path) -> Iterator[Path]:
    """`revision` checked out into a temporary git worktree under `folder` (removed after); exits with
    one line where it is not a revision of this repository, and says which two trees are compared."""
    found = subprocess.run(["git", "rev-parse", "--short", revision], cwd=REPO, capture_output=True, text=True)
    if found.returncode != 0:
        sys.exit(f"error: --baseline {revision}: not a revision of this repository")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    print(f"current: {REPO} (HEAD {head.strip()}, with its uncommitted changes); baseline: {found.stdout.strip()}")
    tree = folder / "baseline"
    subprocess.run(
        ["git", "worktree", "add", "--detach", "--quiet", str(tree), found.stdout.strip()], cwd=REPO, check=True
    )
    try:
        yield tree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)


class Worker:
    """One revision's worker process (`code`, run with `argv` in the revision's tree): a JSON request
    per line on its stdin, a JSON answer per line on its stdout; its first line says it is ready."""

    def __init__(self, tree: Path, code: str, argv: list[str], what: str):
        self.what = what
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, *argv],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if not self.process.stdout.readline():
            sys.exit(f"error: the {what} of {tree} did not start (its error is above)")

    def ask(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            sys.exit(f"error: a {self.what} stopped (its error is above)")
        return json.loads(answer)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


# ---------------------------------------------------------------------------------------------
# The peer: Hugging Face's Marian at the dimensions of an aiayn preset
# ---------------------------------------------------------------------------------------------


def marian_config(preset: str, vocab_size: int, d_model: int | None = None, d_ff: int | None = None, **fields):
    """A `MarianConfig` of preset `preset`'s dimensions (`d_model`, `d_ff`: set otherwise), as the paper's
    model is: ReLU, post-LayerNorm, sinusoidal positions, shared and tied embeddings scaled by
    sqrt(d_model), dropout on the residuals only; `fields`: the rest (special ids, positions, dropout)."""
    from transformers import MarianConfig

    from aiayn_cli.model.configuration_aiayn import PRESETS

    dims = PRESETS[preset]
    d_ff = d_ff or dims["d_ff"]
    return MarianConfig(
        **{
            "vocab_size": vocab_size,
            "d_model": d_model or dims["d_model"],
            "encoder_layers": dims["num_encoder_layers"],
            "decoder_layers": dims["num_decoder_layers"],
            "encoder_attention_heads": dims["num_heads"],
            "decoder_attention_heads": dims["num_heads"],
            "encoder_ffn_dim": d_ff,
            "decoder_ffn_dim": d_ff,
            "activation_function": "relu",
            "attention_dropout": 0.0,
            "activation_dropout": 0.0,
            "scale_embedding": True,
            "share_encoder_decoder_embeddings": True,
            "tie_word_embeddings": True,
            **fields,
        }
    )
