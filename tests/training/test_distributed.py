"""Two CPU processes under `accelerate launch` (gloo) train the same model as one process with the
same global batch (`--update-freq 2`).

Dropout stays on (P_drop 0.1): each batch's RNG is seeded from (seed, step, its index in the global
batch), and batch j of process r is batch j * W + r of the one-process run, so both runs draw the
same masks for the same sentences. The loss is normalized by the global token count, and DDP
averages gradients over the processes, so the updates agree up to float rounding. At the end both
runs choose their final model (the last checkpoint or an average: `training/selection.py`) on the same
validation losses, and the two-process run reports its choice once.

The test states its precision: it runs once in fp32 and once in bf16, never `auto` (bf16 on a CPU
with AVX512-BF16 or AMX, fp32 elsewhere), so that what it checks does not depend on the CPU. The
validation batches of one and two processes are cut differently (each process pads its own), and in
bf16 a matrix product of another shape may round a value to the neighbouring bf16 number: the
validation losses then agree to bf16's unit roundoff (2^-8 relative), in fp32 to 1e-4. The training
batches are the same in both runs, so the weights agree to 1e-5 in either precision.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import cli_env, run_cli
from training_task import TINY, max_difference, weights, write_dictionary_task

FLAGS = [
    "--max-steps",
    "8",
    "--no-progress",
    "--set",
    "checkpoint_every_steps=4",
    "--set",
    "valid_every_steps=8",
    "--set",
    "trackers=[]",
    "--set",
    "average_last=2",
    "--set",
    "average_choose=true",
    "--set",
    "valid_bleu_samples=8",
    "--set",
    "average_choose_by=beam",  # one process: by the beam; two: by the sample, said (see finish.py)
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LAUNCHER = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")


# The validation losses' tolerance in each precision (absolute in fp32, relative in bf16: the unit
# roundoff of an 8-bit significand).
VALID_LOSS_TOLERANCE = {"no": {"abs": 1e-4}, "bf16": {"rel": 2.0**-8}}


@pytest.mark.slow
@pytest.mark.skipif(LAUNCHER is None, reason="the accelerate launcher is not installed")
@pytest.mark.parametrize("precision", ["no", "bf16"], ids=["fp32", "bf16"])
def test_two_processes_equal_one_with_update_freq_2(tmp_path, precision):
    from aiayn_cli.data.batching import TokenBatchSampler
    from aiayn_cli.data.corpus import load_split
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.data.tokenization import tokenize_split, train_tokenizer

    data = write_dictionary_task(tmp_path / "data", n_train=600, n_valid=16)
    tokenizer = train_tokenizer(
        DataSpec(data_dir=str(data), source_lang="en", target_lang="de"),
        vocab_size=320,
        output_dir=tmp_path / "tok",
        show_progress=False,
    )
    env = cli_env(HF_DATASETS_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    # The precondition: 2 processes see the same batches as 1 (an even number, none halved).
    train = tokenize_split(
        load_split(DataSpec(data_dir=str(data), source_lang="en", target_lang="de")),
        tokenizer,
        max_length=256,
        cache_dir=tmp_path / "scratch",
    )
    one, two = (TokenBatchSampler.from_dataset(train, 512, seed=1, num_replicas=w) for w in (1, 2))
    assert [b.tolist() for b in one.batches] == [b.tolist() for b in two.batches]

    common = [str(TINY), "--data-dir", str(data), "--tokenizer", str(tmp_path / "tok"), *FLAGS]
    common += ["--set", f"mixed_precision={precision}"]
    single = run_cli("train", *common, "-o", tmp_path / "one", "--update-freq", "2", env=env)
    assert single.returncode == 0, single.stderr
    double = subprocess.run(
        [
            LAUNCHER,
            "launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            str(_free_port()),
            "-m",
            "aiayn_cli",
            "train",
            *common,
            "-o",
            str(tmp_path / "two"),
        ],
        env={**env, "ACCELERATE_USE_CPU": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert double.returncode == 0, double.stderr
    assert double.stdout.count("trained 8 steps") == 1  # one report, from the main process
    one_state, two_state = (
        json.loads((tmp_path / run / "checkpoint-8" / "trainer_state.json").read_text()) for run in ("one", "two")
    )
    assert (one_state["num_processes"], two_state["num_processes"]) == (1, 2)
    for run in (single, double):  # the precision asked for, whatever the CPU
        assert f"precision: {'fp32' if precision == 'no' else precision}" in run.stderr + run.stdout
    # the same tokens, and the same weights
    assert one_state["target_tokens"] == two_state["target_tokens"] > 0
    assert one_state["source_tokens"] == two_state["source_tokens"]
    assert (
        max_difference(weights(tmp_path / "one" / "checkpoint-8"), weights(tmp_path / "two" / "checkpoint-8")) <= 1e-5
    )
    # The end of the run: the last checkpoint or the average of the last 2 (no learning rate is logged in 8
    # steps: every checkpoint is a candidate), chosen on validation, once, on the whole validation split
    # in both runs (the two processes' losses gathered).
    assert double.stderr.count("final model: ") == 1, double.stderr
    assert double.stderr.count("average_choose_by: beam runs in one process") == 1, double.stderr
    choices = {}
    for run in ("one", "two"):
        records = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        (selection,) = [r["selection"] for r in records if "selection" in r]
        choices[run] = {name: scores["valid/loss"] for name, scores in selection["scores"].items()}
        assert sorted(choices[run]) == ["average of the last 2", "last"]
        assert (tmp_path / run / "averaged" / "model.safetensors").is_file()
    moved = max(abs(choices["two"][k] - choices["one"][k]) / choices["one"][k] for k in choices["one"])
    print(f"\n{precision}: validation losses, one process {choices['one']}, two {choices['two']}; {moved:.1e} relative")
    for k in choices["one"]:
        assert choices["two"][k] == pytest.approx(choices["one"][k], **VALID_LOSS_TOLERANCE[precision])
