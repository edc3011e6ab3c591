"""On a CUDA GPU (`python -m pytest -m gpu`; without one every test here is skipped, with one reason line):
the model, training, resuming and translating give on the GPU what they give on the CPU, and the paths
written for CPUs (dropout from random bits, the written-out bf16 attention, the one-thread decoding rule)
are bypassed there by design. `benchmarks/gpu_check.py` runs these first.

Precision of each check: fp32 (TF32 off, PyTorch's default for matrix products) unless a test says bf16.
Two fp32 runs on a GPU may differ in the last bits (atomic additions in some backward kernels), so runs
are compared to 1e-5, not bit for bit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import REPO_ROOT, run_cli, save_tiny_model
from training_task import train_args, weights

from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
LAUNCHER = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")


def small_model(seed: int = 0, dropout: float = 0.0) -> AiaynForConditionalGeneration:
    torch.manual_seed(seed)
    config = AiaynConfig.from_preset("small", vocab_size=1000, dropout=dropout)
    return AiaynForConditionalGeneration(config).eval()


def batch(device) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 1000, (6, 21), generator=generator)
    mask = torch.ones_like(ids)
    for row, length in enumerate((21, 17, 9, 21, 3, 12)):  # padded rows, as batches have
        ids[row, length:], mask[row, length:] = 0, 0
    labels = torch.randint(4, 1000, (6, 15), generator=generator)
    labels[2, 7:] = 0
    return {k: v.to(device) for k, v in {"input_ids": ids, "attention_mask": mask, "labels": labels}.items()}


def test_fp32_logits_on_cuda_equal_the_cpu():
    cpu, gpu = small_model(), small_model().to(CUDA)
    with torch.no_grad():
        expected = cpu(**batch("cpu")).logits
        got = gpu(**batch(CUDA)).logits.cpu()
    assert (got - expected).abs().max().item() <= 1e-4  # logits of magnitude ~1-10


def test_a_bf16_training_step_on_cuda_is_finite_and_close_to_fp32():
    from aiayn_cli.training.loss import label_smoothed_cross_entropy

    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = small_model().to(CUDA).train()
        inputs = batch(CUDA)
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            logits = model(
                input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], labels=inputs["labels"]
            ).logits
        loss = label_smoothed_cross_entropy(logits, inputs["labels"], 0.1, 0).loss
        loss.backward()
        grads = torch.cat([p.grad.flatten().float() for p in model.parameters() if p.grad is not None])
        results[dtype] = (loss.item(), grads)
    (loss32, grad32), (loss16, grad16) = results[torch.float32], results[torch.bfloat16]
    assert torch.isfinite(grad16).all() and abs(loss16 - loss32) <= 0.01 * abs(loss32)
    assert F.cosine_similarity(grad16, grad32, dim=0).item() >= 0.99


RESUME = (
    "--max-steps",
    "12",
    "--set",
    "checkpoint_every_steps=6",
    "--set",
    "valid_every_steps=12",
    "--set",
    "average_last=null",
    "--set",
    "trackers=[]",
    "--set",
    "keep_last=5",
)


@pytest.fixture(scope="module")
def whole_run(task):
    """12 steps of the tiny recipe on the GPU, as `aiayn train` runs them (its allocator included)."""
    out = task["root"] / "gpu-whole"
    result = run_cli(*train_args(task, out, *RESUME), env=task["env"])
    assert result.returncode == 0, result.stderr
    assert "allocator: " in result.stderr  # jemalloc where installed: CUDA works under it
    return out


def test_resume_on_cuda_gives_the_uninterrupted_weights(task, whole_run, tmp_path):
    shutil.copytree(whole_run / "checkpoint-6", tmp_path / "run" / "checkpoint-6")  # as if stopped at step 6
    shutil.copy(whole_run / "recipe.yaml", tmp_path / "run" / "recipe.yaml")
    resumed = run_cli(*train_args(task, tmp_path / "run", *RESUME), env=task["env"])
    assert resumed.returncode == 0 and "resuming from" in resumed.stderr, resumed.stderr
    a, b = weights(whole_run / "checkpoint-12"), weights(tmp_path / "run" / "checkpoint-12")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-5


def test_fp16_with_dynamic_loss_scaling_trains_and_resumes_on_cuda(task, tmp_path):
    # what `mixed_precision: auto` takes on a GPU without bf16 (T4, V100), forced here: fp16 autocast,
    # accelerate's GradScaler, fused Adam given the scaler's flag; the scale saved and resumed exactly
    whole, part = tmp_path / "whole", tmp_path / "part"
    fp16 = ("--precision", "fp16")
    result = run_cli(*train_args(task, whole, *RESUME), *fp16, env=task["env"])
    assert result.returncode == 0 and "precision: fp16" in result.stderr, result.stderr
    assert (whole / "checkpoint-12" / "training_state" / "grad_scaler.json").is_file()
    final = weights(whole / "checkpoint-12")
    assert all(torch.isfinite(t).all() for t in final.values())
    shutil.copytree(whole / "checkpoint-6", part / "checkpoint-6")
    shutil.copy(whole / "recipe.yaml", part / "recipe.yaml")
    resumed = run_cli(*train_args(task, part, *RESUME), *fp16, env=task["env"])
    assert resumed.returncode == 0 and "resuming from" in resumed.stderr, resumed.stderr
    b = weights(part / "checkpoint-12")
    assert max(float((final[k] - b[k]).abs().max()) for k in final) <= 1e-3  # fp16 products


@pytest.mark.skipif(LAUNCHER is None, reason="the accelerate launcher is not installed")
def test_accelerate_launch_of_one_process_equals_a_plain_run(task, whole_run, tmp_path):
    launched = subprocess.run(
        [
            LAUNCHER,
            "launch",
            "--num_processes",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "-m",
            "aiayn_cli",
            *train_args(task, tmp_path / "launched", *RESUME),
        ],
        env=task["env"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert launched.returncode == 0, launched.stderr
    a, b = weights(whole_run / "checkpoint-12"), weights(tmp_path / "launched" / "checkpoint-12")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-5


def test_translate_on_cuda_equals_the_cpu_in_fp32(tmp_path, capsys):
    model = save_tiny_model(tmp_path / "model")
    source = tmp_path / "in.txt"
    source.write_text("".join(" ".join(f"w{(i * 7 + j) % 60}" for j in range(3 + i % 9)) + "\n" for i in range(40)))
    outputs = {}
    for device in ("cpu", "cuda"):
        target = tmp_path / f"out.{device}"
        code, _, err = run_cli(
            "translate",
            "--model",
            model,
            "--input",
            source,
            "--output",
            target,
            "--device",
            device,
            "--precision",
            "fp32",
            capsys=capsys,
        )
        assert code == 0, err
        outputs[device] = target.read_text().splitlines()
    assert outputs["cuda"] == outputs["cpu"] and len(outputs["cpu"]) == 40


def test_the_cpu_paths_are_bypassed_on_cuda():
    from aiayn_cli.decoding.defaults import DecodingOptions
    from aiayn_cli.decoding.parallel import cpu_threads_for, parallel_parts
    from aiayn_cli.model.modeling_aiayn import dropout_function, scaled_dot_product_attention

    # dropout: CUDA's own kernel (F.dropout), not the CPU's mask from random bits
    x = torch.randn(64, 256, device=CUDA)
    torch.manual_seed(5)
    ours = dropout_function(x, 0.3)
    torch.manual_seed(5)
    assert torch.equal(ours, F.dropout(x, 0.3))
    # attention in bf16 training: the fused kernel, not the written-out form taken on CPUs
    q, k, v = (torch.randn(2, 4, 9, 16, device=CUDA, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out, weights_ = scaled_dot_product_attention(q, k, v)
    assert weights_ is None and torch.equal(out, F.scaled_dot_product_attention(q, k, v))
    # decoding: no split over CPU threads, no change of PyTorch's thread count
    threads = torch.get_num_threads()
    assert parallel_parts(512, 4, DecodingOptions(num_beams=4), CUDA) == 1
    with cpu_threads_for(1, CUDA):
        assert torch.get_num_threads() == threads


def test_the_gpu_recipes_attention_kernels_leave_out_cudnn_and_compute_the_same():
    """bf16 forward and backward of a padded batch under `multi30k_en_de_gpu`'s attention_kernels: the
    memory-efficient kernel, no cuDNN attention (which plans per batch shape), logits within bf16's
    rounding of PyTorch's own choice."""
    from contextlib import nullcontext

    from torch.profiler import ProfilerActivity, profile

    from aiayn_cli.training.recipe import load_recipe
    from aiayn_cli.training.trainer import attention_kernels

    recipe = load_recipe(REPO_ROOT / "recipes" / "multi30k_en_de_gpu.yaml")
    found = {}
    for name, kernels in (("default", nullcontext()), ("recipe", attention_kernels(recipe))):
        model = small_model().to(CUDA).train()  # dropout 0: the same numbers each time
        with kernels, profile(activities=[ProfilerActivity.CPU]) as prof:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(**batch(CUDA)).logits.float()
            logits.sum().backward()
        found[name] = logits.detach(), {e.key for e in prof.key_averages() if "attention" in e.key}
    (default, _), (ours, operators) = found["default"], found["recipe"]
    assert "aten::_scaled_dot_product_efficient_attention" in operators, operators
    assert not any("cudnn" in op for op in operators), operators
    assert (ours - default).abs().max().item() <= 0.05 * default.abs().max().item()
