"""The paper's base model at WMT scale: training throughput of `aiayn train` against `Seq2SeqTrainer` +
`MarianMTModel`, in non-pad tokens per second and as model FLOPs utilization (MFU).

    python benchmarks/bench_train_wmt.py --device cuda                        # base, bf16, 25,000 tokens
    python benchmarks/bench_train_wmt.py --device cpu --preset tiny --max-tokens 1000 --pairs 400 \
        --warmup-steps 2 --steps 2 --vocab 500                                # a smoke run

The data is made here, with WMT14 en-de's shape in subword tokens: source lengths log-normal (median
23 tokens, sigma 0.6: mean ~28, at most 250), the target 1.08 times as long (log-normal ratio, sigma
0.15, within the recipe's max_ratio of 1.5), words of a 37,000-word vocabulary (Zipf-distributed;
the word-level tokenizer has the BPE vocabulary's size, so the embedding and pre-softmax matrices
are the paper's).

- aiayn: `aiayn_cli.training.trainer.train` with `recipes/wmt14_en_de_base.yaml` (max_tokens per
  batch, bf16, its fused Adam, the fused attention kernel on GPUs), no validation or checkpoints
  during the measured steps; throughput from its metrics log, the first `--warmup-steps` left out.
- HF: `MarianMTModel` of the same dimensions (ReLU, post-LN, sinusoidal positions, scaled and tied
  embeddings, P_drop 0.1) with `Seq2SeqTrainer`, as a user who knows it would configure it: batches
  grouped by length (on source + target length), our batches' mean number of sentences per update,
  bf16, label smoothing 0.1, its default fused AdamW and SDPA attention. Where that batch does not fit
  in the GPU's memory, it is split into 2, 4, 8 ... micro-batches with gradient accumulation (the
  same sentences per update: equal work per update), each try in a process of its own; the results
  say which fitted and which ran out of memory.

Each side runs in a process of its own: one side's failure (out of memory, a crash) is recorded as that
side's, and the other's figures are kept.

Figures: non-pad source + target tokens per second; MFU = the model's FLOPs per second (forward and
backward, 3x the forward: every matrix product of the layers, attention scores counted in full for
the causal decoder too, and the pre-softmax projection; no recomputation) over the GPU's bf16
matrix-product rate measured in the same run (8192 x 8192 products); the hours 100,000 paper steps
of 25,000 source + 25,000 target tokens would take; one profiled step of ours (`--profile DIR`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common

REPO = Path(__file__).resolve().parents[1]

PAPER_STEP_TOKENS = 50_000  # §5.1: ~25,000 source + ~25,000 target tokens a step
PAPER_STEPS = 100_000  # §5.2: base


# ---------------------------------------------------------------------------------------------
# The data
# ---------------------------------------------------------------------------------------------


def make_corpus(folder: Path, pairs: int, vocab: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Write train.en / train.de of WMT-like lengths and a word-level tokenizer (`folder/tokenizer`);
    the token counts per pair, `</s>` included, as the model sees them."""
    import numpy as np

    rng = np.random.default_rng(seed)
    src = np.clip(np.round(np.exp(rng.normal(math.log(23), 0.6, pairs))), 1, 250).astype(int)
    ratio = np.clip(np.exp(rng.normal(math.log(1.08), 0.15, pairs)), 1 / 1.45, 1.45)
    tgt = np.clip(np.round(src * ratio), 1, 250).astype(int)
    ranks = np.arange(1, vocab + 1)
    zipf = (1 / ranks**1.1) / (1 / ranks**1.1).sum()
    folder.mkdir(parents=True, exist_ok=True)
    for lang, lengths in (("en", src), ("de", tgt)):
        words = rng.choice(vocab, size=int(lengths.sum()), p=zipf)
        lines, start = [], 0
        for n in lengths:
            lines.append(" ".join(f"w{w}" for w in words[start : start + n]))
            start += n
        (folder / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    word_level_tokenizer(vocab).save_pretrained(folder / "tokenizer")
    return (src + 1).tolist(), (tgt + 1).tolist()


def word_level_tokenizer(words: int):
    """aiayn's special ids (<pad>=0, <s>=1, </s>=2, <unk>=3), then words w0 w1 ...; `</s>` appended."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{f"w{i}": i + 4 for i in range(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


# ---------------------------------------------------------------------------------------------
# FLOPs and the hardware's rate
# ---------------------------------------------------------------------------------------------


def training_flops(src: list[int], tgt: list[int], dims: dict, vocab: int) -> float:
    """FLOPs of a forward and backward pass (3x the forward) over pairs of these lengths.

    Per layer and pair (S source, T target tokens; d = d_model, f = d_ff; 2 FLOPs a multiply-add):
    encoder 8 S d^2 (Q, K, V, O) + 4 S d f (feed-forward) + 4 S^2 d (scores and weighted values);
    decoder T (12 d^2 + 4 d f) + 4 S d^2 (cross-attention K, V) + 4 T^2 d + 4 T S d; then the
    pre-softmax projection, 2 T d V."""
    d, f = dims["d_model"], dims["d_ff"]
    n_enc, n_dec = dims["num_encoder_layers"], dims["num_decoder_layers"]
    forward = 0.0
    for s, t in zip(src, tgt):
        forward += n_enc * (8 * s * d * d + 4 * s * d * f + 4 * s * s * d)
        forward += n_dec * (t * (12 * d * d + 4 * d * f) + 4 * s * d * d + 4 * t * t * d + 4 * t * s * d)
        forward += 2 * t * d * vocab
    return 3 * forward


def matmul_rate(device: str, dtype_name: str, n: int = 8192, repeats: int = 20) -> float:
    """Measured FLOP/s of n x n matrix products in `dtype_name` on `device` (the best of 3 timings)."""
    import torch

    dtype = getattr(torch, dtype_name)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = math.inf
    for _ in range(4):  # the first is a warm-up
        _synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        _synchronize(device)
        best = min(best, time.perf_counter() - start)
    del a, b
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return 2 * n**3 * repeats / best


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------
# aiayn
# ---------------------------------------------------------------------------------------------


def run_ours(args) -> dict:
    """`train()` as `aiayn train recipes/wmt14_en_de_base.yaml` runs it; tokens/s of the windows after warm-up."""
    import torch

    from aiayn_cli.training import loop
    from aiayn_cli.training.recipe import load_recipe
    from aiayn_cli.training.trainer import quiet_libraries, train

    quiet_libraries()
    out = args.work / "ours"
    overrides = {
        "output_dir": str(out),
        "tokenizer": str(args.work / "corpus" / "tokenizer"),
        "tokenizer_training": None,
        "data.data_dir": str(args.work / "corpus"),
        "model.preset": args.preset,
        "max_tokens": args.max_tokens,
        "max_steps": args.warmup_steps + args.steps + (1 if args.profile else 0),  # the profiled step: after
        "log_every_steps": args.warmup_steps,
        "valid_split": None,
        "best_metric": "loss",
        "average_last": None,
        "checkpoint_every_minutes": None,
        "checkpoint_every_steps": None,
        "valid_every_steps": None,
        "trackers": [],
        "mixed_precision": args.precision,
        "compile": args.compile,
        "attention_kernels": args.attention_kernels.split(",") if args.attention_kernels else None,
    }
    recipe = load_recipe(REPO / "recipes" / "wmt14_en_de_base.yaml", overrides)
    if args.steps % args.warmup_steps:
        raise SystemExit("error: --steps must be a multiple of --warmup-steps (the metrics log's windows)")
    profile = {}
    if args.profile:
        profile_step(loop, args.warmup_steps + args.steps + 1, args.device, args.profile, profile)
    result = train(recipe, show_progress=False)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if "tokens_per_s" in r]
    # the windows after the warm-up: tokens over seconds (each window's rate times its length)
    windows = [
        (r["tokens_per_s"] * (r["elapsed_s"] - p["elapsed_s"]), r["elapsed_s"] - p["elapsed_s"])
        for p, r in zip(logged, logged[1:])
    ]
    tokens_per_s = sum(t for t, _ in windows) / sum(s for _, s in windows)
    memory = torch.cuda.max_memory_allocated() / 2**30 if args.device.startswith("cuda") else None
    shutil.rmtree(out, ignore_errors=True)
    return {
        "tokens_per_s": tokens_per_s,
        "windows_tokens_per_s": [r["tokens_per_s"] for r in logged[1:]],
        "steps": result.step,
        "measured_steps": args.steps,
        "max_memory_gib": memory,
        "profile": profile,
    }


def profile_step(loop, step: int, device: str, folder: Path, summary: dict) -> None:
    """Wrap the loop's `train_step` so that optimizer step `step` runs under `torch.profiler`: its table (by device
    time), its trace (gzipped) into `folder`, and a summary (the step's wall time, the device's busy
    time, the share of matrix products) into `summary`."""
    from torch.profiler import ProfilerActivity, profile

    original = loop.train_step

    def train_step(ctx, *args, **kwargs):  # whatever the loop's step takes
        if ctx.state.step + 1 != step:
            return original(ctx, *args, **kwargs)
        cuda = device.startswith("cuda")
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        _synchronize(device)
        start = time.perf_counter()
        with profile(activities=activities, record_shapes=False) as prof:
            out = original(ctx, *args, **kwargs)
            _synchronize(device)
        wall = time.perf_counter() - start
        folder.mkdir(parents=True, exist_ok=True)
        key = "self_device_time_total" if cuda else "self_cpu_time_total"
        events = prof.key_averages()
        (folder / "profile_step.txt").write_text(events.table(sort_by=key, row_limit=30))
        trace = folder / "profile_step.json"
        prof.export_chrome_trace(str(trace))
        with open(trace, "rb") as raw, gzip.open(f"{trace}.gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)
        trace.unlink()
        # the device's kernels (each counted once: not the operators that launched them), or on a CPU
        # the operators' own time
        from torch.autograd import DeviceType

        timed = [e for e in events if getattr(e, "device_type", None) == DeviceType.CUDA] if cuda else list(events)
        timed = timed or list(events)
        busy = sum(getattr(e, key) for e in timed) / 1e6
        gemm = sum(getattr(e, key) for e in timed if _is_matmul(e.key)) / 1e6
        attention = sum(getattr(e, key) for e in timed if _is_attention(e.key))
        summary.update(
            {
                "step": step,
                "wall_s": wall,
                "busy_s": busy,  # device kernels (GPU) or operators' own CPU time
                "busy_fraction": busy / wall,
                "matmul_fraction_of_busy": gemm / busy if busy else None,
                "attention_fraction_of_busy": attention / 1e6 / busy if busy else None,
                "top": [
                    {"name": e.key, "seconds": getattr(e, key) / 1e6, "calls": e.count}
                    for e in sorted(timed, key=lambda e: -getattr(e, key))[:12]
                ],
                # which fused attention ran (cuDNN's plans per batch shape: see the recipe's attention_kernels)
                "attention_operators": sorted({e.key for e in events if "scaled_dot_product" in e.key}),
                "note": "under the profiler, which slows the host side",
            }
        )
        return out

    loop.train_step = train_step  # the loop looks it up in its module at every step


def _is_attention(name: str) -> bool:
    name = name.lower()
    return any(word in name for word in ("attention", "fmha", "flash", "sdpa"))


def _is_matmul(name: str) -> bool:
    name = name.lower()
    return any(word in name for word in ("gemm", "matmul", "aten::mm", "aten::addmm", "aten::bmm", "cutlass", "nvjet"))


# ---------------------------------------------------------------------------------------------
# Seq2SeqTrainer + MarianMTModel
# ---------------------------------------------------------------------------------------------


def run_hf(args) -> dict:
    import dataclasses

    import torch
    from transformers import (
        AutoTokenizer,
        DataCollatorForSeq2Seq,
        MarianMTModel,
        Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
        TrainerCallback,
    )

    from aiayn_cli.data.corpus import load_split
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.data.tokenization import tokenize_split

    tokenizer = AutoTokenizer.from_pretrained(args.work / "corpus" / "tokenizer")
    config = common.marian_config(
        args.preset,
        len(tokenizer),
        decoder_vocab_size=len(tokenizer),
        dropout=0.1,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=1,
        decoder_start_token_id=1,
        forced_eos_token_id=None,
    )
    torch.manual_seed(1)
    model = MarianMTModel(config)
    spec = DataSpec(data_dir=str(args.work / "corpus"), source_lang="en", target_lang="de")
    data = tokenize_split(load_split(spec), tokenizer, max_length=256)
    lengths = [s + t for s, t in zip(data["src_len"], data["tgt_len"])]  # what the grouped sampler sorts by
    data = data.remove_columns(["src_len", "tgt_len"])
    counted = {"tokens": torch.zeros((), dtype=torch.long, device=args.device)}
    timing = {}
    warmup, last = args.warmup_steps, args.warmup_steps + args.steps

    class CountingTrainer(Seq2SeqTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            if self.state.global_step >= warmup:  # device sums: no host sync in the step
                counted["tokens"] += inputs["attention_mask"].sum() + (inputs["labels"] != -100).sum()
            return super().training_step(model, inputs, num_items_in_batch)

        def _get_train_sampler(self, *a, **k):
            from transformers.trainer_pt_utils import LengthGroupedSampler

            return LengthGroupedSampler(self.args.train_batch_size, lengths=lengths)

    class Clock(TrainerCallback):
        def on_step_begin(self, _args, state, control, **k):
            if state.global_step == warmup:
                _synchronize(args.device)
                timing["start"] = time.perf_counter()

        def on_step_end(self, _args, state, control, **k):
            if state.global_step == last:
                _synchronize(args.device)
                timing["seconds"] = time.perf_counter() - timing["start"]

    fields = {f.name for f in dataclasses.fields(Seq2SeqTrainingArguments)}
    grouping = (
        {"train_sampling_strategy": "group_by_length"}
        if "train_sampling_strategy" in fields
        else {"group_by_length": True}
    )
    bf16 = args.precision == "bf16"
    per_device = math.ceil(args.batch_size / args.accumulation)  # the update's sentences in micro-batches
    with tempfile.TemporaryDirectory() as tmp:
        training_args = Seq2SeqTrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=per_device,
            gradient_accumulation_steps=args.accumulation,
            **common.PEER_TRAINING,
            warmup_steps=4000,
            max_steps=last,
            logging_steps=100_000,
            use_cpu=not args.device.startswith("cuda"),
            bf16=bf16,
            **grouping,
        )
        trainer = CountingTrainer(
            model=model,
            args=training_args,
            train_dataset=data,
            data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        )
        trainer.add_callback(Clock())
        trainer.train()
    memory = torch.cuda.max_memory_allocated() / 2**30 if args.device.startswith("cuda") else None
    return {
        "tokens_per_s": int(counted["tokens"]) / timing["seconds"],
        "steps": last,
        "measured_steps": args.steps,
        "batch_size": per_device * args.accumulation,
        "per_device_batch": per_device,
        "accumulation": args.accumulation,
        "max_memory_gib": memory,
    }


def mean_batch_sentences(args) -> int:
    """Sentences per batch of our sampler on this data (the HF side's batch size)."""
    from transformers import AutoTokenizer

    from aiayn_cli.data.batching import TokenBatchSampler
    from aiayn_cli.data.corpus import load_split
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.data.tokenization import tokenize_split

    tokenizer = AutoTokenizer.from_pretrained(args.work / "corpus" / "tokenizer")
    spec = DataSpec(data_dir=str(args.work / "corpus"), source_lang="en", target_lang="de")
    train = tokenize_split(load_split(spec), tokenizer, max_length=256)
    sampler = TokenBatchSampler.from_dataset(train, args.max_tokens, seed=1)
    return max(1, round(len(train) / len(sampler.batches)))


# ---------------------------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------------------------

SIDE_ARGS = ("device", "preset", "max_tokens", "warmup_steps", "steps", "precision", "work", "batch_size")
ACCUMULATIONS = (1, 2, 4, 8, 16, 32)  # HF's tries: the batch in this many micro-batches


class SideFailed(Exception):
    """A side's process failed: `out_of_memory` where it ran out of (GPU) memory."""

    def __init__(self, message: str, out_of_memory: bool) -> None:
        super().__init__(message)
        self.out_of_memory = out_of_memory


def _side(args, side: str, accumulation: int = 1) -> dict:
    """One side in a process of its own (its own CUDA context, memory and accelerate state): its figures,
    or SideFailed with the last line of its error."""
    out = args.work / f"{side}.json"
    out.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--side", side, "--json", str(out)]
    for name in SIDE_ARGS:
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    command += ["--accumulation", str(accumulation)]
    if args.compile:
        command.append("--compile")
    if args.attention_kernels:
        command += ["--attention-kernels", args.attention_kernels]
    if args.profile and side == "aiayn":
        command += ["--profile", str(args.profile)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env["HF_DATASETS_CACHE"] = str(args.work / "cache")
    lines = []
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as side_run:
        for line in side_run.stdout:  # into our stderr as it comes (a log that outlives a kill)
            sys.stderr.write(f"[{side}] {line}")
            lines.append(line)
    if side_run.returncode == 0 and out.is_file():
        return json.loads(out.read_text())
    text, lines = "".join(lines), [line for line in lines if line.strip()]
    error = next((line for line in reversed(lines) if "Error" in line or "error" in line), lines[-1] if lines else "")
    out_of_memory = "OutOfMemoryError" in text or "out of memory" in text
    raise SideFailed(f"exit code {side_run.returncode}: {error.strip()[:300]}", out_of_memory)


def measure_sides(args, run_side=_side, on_side=lambda sides: None) -> dict:
    """aiayn's side, then HF's at the fewest micro-batches that fit (`ACCUMULATIONS`); each side's figures,
    or `ok: false` and its error, so that one side's failure never loses the other's figures. `on_side`
    gets the sides so far after each one (to write them before the next starts)."""
    sides: dict = {}
    try:
        sides["aiayn"] = {"ok": True, **run_side(args, "aiayn")}
    except SideFailed as err:
        sides["aiayn"] = {"ok": False, "error": str(err), "out_of_memory": err.out_of_memory}
    on_side(sides)
    tries = []
    for accumulation in ACCUMULATIONS:
        per_device = math.ceil(args.batch_size / accumulation)
        try:
            result = run_side(args, "hf", accumulation)
        except SideFailed as err:
            tries.append({"accumulation": accumulation, "per_device_batch": per_device, "error": str(err)})
            if err.out_of_memory and per_device > 1:
                continue  # halve the micro-batch
            sides["hf"] = {"ok": False, "error": str(err), "out_of_memory": err.out_of_memory, "tries": tries}
            break
        tries.append({"accumulation": accumulation, "per_device_batch": per_device, "fitted": True})
        sides["hf"] = {"ok": True, **result, "tries": tries}
        break
    else:
        sides["hf"] = {"ok": False, "error": "out of memory at every micro-batch size", "tries": tries}
    on_side(sides)
    return sides


def compare(args) -> dict:
    """Both sides on the same data; the figures of the results file (written to `--json` after each side,
    so that a run stopped during the second keeps the first's)."""
    from aiayn_cli.model.configuration_aiayn import PRESETS

    src, tgt = make_corpus(args.work / "corpus", args.pairs, args.vocab)
    flops_per_token = training_flops(src, tgt, PRESETS[args.preset], args.vocab + 4) / (sum(src) + sum(tgt))
    rate_dtype = "bfloat16" if args.precision == "bf16" else "float32"
    peak = matmul_rate(args.device, rate_dtype, n=args.matmul_size)
    if args.batch_size is None:
        args.batch_size = mean_batch_sentences(args)
    figures = {
        "device": args.device,
        "preset": args.preset,
        "precision": args.precision,
        "max_tokens": args.max_tokens,
        "sentences_per_update": args.batch_size,
        "attention_kernels": args.attention_kernels,
        "pairs": args.pairs,
        "mean_source_tokens": sum(src) / len(src),
        "mean_target_tokens": sum(tgt) / len(tgt),
        "flops_per_token": flops_per_token,
        "matmul_flops_per_s": peak,
        "matmul_dtype": rate_dtype,
    }

    def with_sides(sides: dict) -> None:
        for result in sides.values():
            if result["ok"] and "mfu" not in result:
                result["model_flops_per_s"] = result["tokens_per_s"] * flops_per_token
                result["mfu"] = result["model_flops_per_s"] / peak
                result["hours_for_100k_paper_steps"] = PAPER_STEPS * PAPER_STEP_TOKENS / result["tokens_per_s"] / 3600
        ours, hf = sides.get("aiayn", {}), sides.get("hf", {})
        figures.update(sides=sides, hours_for_100k_paper_steps=ours.get("hours_for_100k_paper_steps"))
        both = ours.get("ok") and hf.get("ok")
        figures["ratio_to_hf"] = ours["tokens_per_s"] / hf["tokens_per_s"] if both else None
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))

    measure_sides(args, on_side=with_sides)
    return figures


def print_table(figures: dict) -> None:
    print(
        f"{figures['preset']} on {figures['device']}, {figures['precision']}, max_tokens {figures['max_tokens']}; "
        f"measured {figures['matmul_dtype']} matrix products: {figures['matmul_flops_per_s'] / 1e12:.1f} TFLOP/s"
    )
    print(f"{'':<8}{'non-pad tokens/s':>18}{'TFLOP/s':>10}{'MFU':>8}{'memory GiB':>12}{'100k steps':>12}")
    for name, side in figures["sides"].items():
        if not side["ok"]:
            print(f"{name:<8}failed: {side['error']}")
            continue
        memory = f"{side['max_memory_gib']:.1f}" if side.get("max_memory_gib") is not None else "-"
        print(
            f"{name:<8}{side['tokens_per_s']:>18,.0f}{side['model_flops_per_s'] / 1e12:>10.2f}"
            f"{side['mfu']:>8.1%}{memory:>12}{side['hours_for_100k_paper_steps']:>10.1f} h"
        )
    hf = figures["sides"]["hf"]
    if hf["ok"]:
        print(
            f"HF: {hf['batch_size']} sentences an update, as {hf['accumulation']} micro-batch(es) of "
            f"{hf['per_device_batch']} (gradient accumulation)"
        )
    if figures["ratio_to_hf"] is not None:
        print(f"aiayn / HF: {figures['ratio_to_hf']:.2f}x (100,000 paper steps: 50,000 tokens each)")


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--preset", default="base")
    parser.add_argument("--precision", choices=("bf16", "no"), default="bf16", help="both sides")
    parser.add_argument("--max-tokens", type=int, default=25_000, help="our batches (the larger side, padded)")
    parser.add_argument(
        "--batch-size", type=int, default=None, help="HF's sentences an update (default: our mean sentences a batch)"
    )
    parser.add_argument("--pairs", type=int, default=60_000, help="sentence pairs made")
    parser.add_argument("--vocab", type=int, default=37_000)
    parser.add_argument("--warmup-steps", type=int, default=10, help="left out of the measure")
    parser.add_argument("--steps", type=int, default=30, help="measured (a multiple of --warmup-steps)")
    parser.add_argument("--compile", action="store_true", help="our model through torch.compile")
    parser.add_argument("--matmul-size", type=int, default=8192)
    parser.add_argument(
        "--attention-kernels",
        default=None,
        help="ours: the recipe's attention_kernels, comma-separated (e.g. flash,efficient,math); default: all",
    )
    parser.add_argument("--profile", type=Path, default=None, help="profile one step of ours into this folder")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--side", choices=("aiayn", "hf"), help=argparse.SUPPRESS)
    parser.add_argument("--accumulation", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        args.batch_size = int(args.batch_size) if args.batch_size not in (None, "None") else None
        args.attention_kernels = args.attention_kernels if args.attention_kernels != "None" else None
        result = run_ours(args) if args.side == "aiayn" else run_hf(args)
        args.json.write_text(json.dumps(result))
        return None
    with tempfile.TemporaryDirectory() as tmp:
        args.work = Path(tmp)
        figures = compare(args)
    print_table(figures)
    return figures


if __name__ == "__main__":
    main()
