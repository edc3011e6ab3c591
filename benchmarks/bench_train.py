"""Training throughput on Multi30k: `aiayn train` against `Seq2SeqTrainer` + `MarianMTModel`.

    python benchmarks/bench_train.py [--multi30k DIR] [--seconds 60] [--rounds 2]
                                     [--threads N] [--precision auto|fp32|bf16] [--preset small]
                                     [--allocator jemalloc|tcmalloc_minimal|system]

All sides train the same architecture on the same data with the same tokenizer, threads and
precision, for the same time budget, each in its own process:

- aiayn: `aiayn_cli.training.trainer.train` with `recipes/multi30k_en_de.yaml` as shipped
  (token-count batches of `--max-tokens` per side, sorted by length; its defaults for compile and
  the optimizer);
- HF grouped (the main comparison): `MarianMTModel` of the same dimensions (ReLU, post-LN,
  sinusoidal positions, scaled and tied embeddings, P_drop), `DataCollatorForSeq2Seq` and
  `Seq2SeqTrainer` configured as a user who knows it would: batches grouped by length
  (`train_sampling_strategy="group_by_length"`, HF's `LengthGroupedSampler`, on source + target
  length), with a batch size of the mean number of sentences of our batches (so about the same
  tokens per step), label smoothing 0.1, Adam(0.9, 0.98, 1e-9), its default fused AdamW, and the
  faster of its attention implementations for the precision (`--hf-attention auto`: "eager" in
  bf16, where PyTorch's fused CPU attention kernel is several times slower in the backward pass,
  "sdpa" in fp32);
- HF default: the same with the default random sampler (batches padded to their longest sentence).

Two measures: non-pad tokens (source + target) trained on per second of the training loop, and
tokens computed per second (padding included: the padded batch shapes); each also per CPU-second
of the training process (the steadier number on a shared machine). The sides take turns for
`--rounds` rounds (the order rotating), so that a change in the machine's load hits all of them.
The header says which CPU ran it; the table ends with the ratios aiayn / each peer. Every side runs
with the same allocator: jemalloc by default, as `aiayn train` does where it is installed
(`aiayn_cli/allocator.py`), and as PyTorch's CPU performance guide advises for any training.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common, results
from benchmarks.local_data import MULTI30K

REPO = Path(__file__).resolve().parents[1]


def _recipe_overrides(args, output: Path) -> dict:
    return {
        "output_dir": str(output),
        "tokenizer": str(args.tokenizer),
        "data.data_dir": str(args.multi30k),  # replaces the recipe's Hub dataset
        "model.preset": args.preset,
        "model.dropout": args.dropout,
        "max_tokens": args.max_tokens,
        "max_steps": None,
        "max_epochs": None,
        "max_time": f"{args.seconds}s",
        "valid_split": None,
        "best_metric": "loss",
        "average_last": None,
        "length_penalty_grid": None,  # no validation split to choose alpha on
        "checkpoint_every_minutes": None,
        "checkpoint_every_steps": None,
        "trackers": [],
        "mixed_precision": "bf16" if args.bf16 else "no",  # `auto` is resolved once, in main()
        "log_every_steps": 10_000,
    }


def run_ours(args) -> dict:
    """Our loop, as `aiayn train` runs it; the counts come from its final checkpoint."""
    from aiayn_cli.training.recipe import load_recipe
    from aiayn_cli.training.trainer import quiet_libraries, train

    quiet_libraries()
    with tempfile.TemporaryDirectory() as tmp:
        recipe = load_recipe(REPO / "recipes" / "multi30k_en_de.yaml", _recipe_overrides(args, Path(tmp) / "run"))
        result = train(recipe, show_progress=False)
        state = json.loads((result.last_checkpoint / "trainer_state.json").read_text())
        computed = _computed_tokens(recipe, result.step)
    return {
        "tokens": state["source_tokens"] + state["target_tokens"],
        "computed": computed,
        "wall": result.train_seconds,
        "cpu": result.cpu_seconds,
        "steps": result.step,
    }


def _computed_tokens(recipe, steps: int) -> int:
    """Tokens in the padded shapes of the first `steps` batches our loop trained on (it draws them
    from the same seeded sampler, epoch after epoch)."""
    from transformers import AutoTokenizer

    from aiayn_cli.data.batching import TokenBatchSampler
    from aiayn_cli.data.corpus import load_split
    from aiayn_cli.data.tokenization import tokenize_split

    tokenizer = AutoTokenizer.from_pretrained(recipe.tokenizer)
    data = tokenize_split(load_split(recipe.data, recipe.train_split), tokenizer, max_length=recipe.max_length)
    src, tgt = data["src_len"], data["tgt_len"]
    sampler = TokenBatchSampler.from_dataset(data, recipe.max_tokens, shuffle=True, seed=recipe.seed)
    computed, epoch = 0, 0
    while steps > 0:
        sampler.set_epoch(epoch)
        for batch in sampler:
            computed += len(batch) * (max(src[i] for i in batch) + max(tgt[i] for i in batch))
            steps -= 1
            if steps == 0:
                break
        epoch += 1
    return computed


def _mean_batch_sentences(args) -> int:
    """Sentences per batch of our sampler on the training split (the reference's batch size)."""
    from transformers import AutoTokenizer

    from aiayn_cli.data.batching import TokenBatchSampler
    from aiayn_cli.data.corpus import load_split
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.data.tokenization import tokenize_split

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    train = tokenize_split(
        load_split(DataSpec(data_dir=str(args.multi30k), source_lang="en", target_lang="de")), tokenizer, max_length=128
    )
    sampler = TokenBatchSampler.from_dataset(train, args.max_tokens, seed=1)
    return round(len(train) / len(sampler.batches))


def run_reference(args) -> dict:
    """`Seq2SeqTrainer` + `MarianMTModel` + `DataCollatorForSeq2Seq`, grouped by length (`--side grouped`)
    or randomly sampled (`--side default`), same time budget."""
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

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    config = common.marian_config(
        args.preset,
        len(tokenizer),
        decoder_vocab_size=len(tokenizer),
        dropout=args.dropout,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=1,
        decoder_start_token_id=1,
        forced_eos_token_id=None,
        attn_implementation=args.hf_attention,
    )
    torch.manual_seed(1)
    model = MarianMTModel(config)
    data = tokenize_split(
        load_split(DataSpec(data_dir=str(args.multi30k), source_lang="en", target_lang="de")), tokenizer, max_length=128
    )
    lengths = [s + t for s, t in zip(data["src_len"], data["tgt_len"])]  # what the grouped sampler sorts by
    data = data.remove_columns(["src_len", "tgt_len"])
    counted = {"tokens": 0, "computed": 0, "steps": 0}

    class CountingTrainer(Seq2SeqTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            counted["tokens"] += int(inputs["attention_mask"].sum()) + int((inputs["labels"] != -100).sum())
            counted["computed"] += inputs["input_ids"].numel() + inputs["labels"].numel()
            counted["steps"] += 1
            return super().training_step(model, inputs, num_items_in_batch)

        def _get_train_sampler(self, train_dataset=None):
            if self.args.train_sampling_strategy != "group_by_length":
                return super()._get_train_sampler(train_dataset)
            from transformers.trainer_pt_utils import LengthGroupedSampler

            return LengthGroupedSampler(self.args.train_batch_size, lengths=lengths)

    class TimeBudget(TrainerCallback):
        def on_train_begin(self, *a, **k):
            self.wall, self.cpu = time.monotonic(), time.process_time()

        def on_step_end(self, _args, state, control, **k):
            if time.monotonic() - self.wall >= args.seconds:
                control.should_training_stop = True
                self.wall, self.cpu = time.monotonic() - self.wall, time.process_time() - self.cpu

    budget = TimeBudget()
    with tempfile.TemporaryDirectory() as tmp:
        training_args = Seq2SeqTrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=args.batch_size,
            **common.PEER_TRAINING,
            warmup_steps=500,
            max_steps=1_000_000,
            logging_steps=10_000,
            use_cpu=True,
            bf16=args.bf16,
            dataloader_num_workers=0,
            train_sampling_strategy="group_by_length" if args.side == "grouped" else "random",
        )
        trainer = CountingTrainer(
            model=model,
            args=training_args,
            train_dataset=data,
            data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        )
        trainer.add_callback(budget)
        trainer.train()
    return {**counted, "wall": budget.wall, "cpu": budget.cpu}


SIDES = {"aiayn": "aiayn", "grouped": "HF grouped", "default": "HF default"}


def _side(args, side: str) -> dict:
    """Run one side in a fresh process (each has its own accelerate state and allocator)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, __file__, "--side", side, "--json", out.name]
        for name in (
            "multi30k",
            "tokenizer",
            "seconds",
            "threads",
            "preset",
            "dropout",
            "max_tokens",
            "batch_size",
            "hf_attention",
        ):
            command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        command += ["--precision", "bf16" if args.bf16 else "fp32"]
        env = {
            **os.environ,
            **_allocator_environment(args.allocator),
            "OMP_NUM_THREADS": str(args.threads),
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error",
        }
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
        return json.loads(Path(out.name).read_text())


def _allocator_environment(allocator: str) -> dict[str, str]:
    """LD_PRELOAD for every side (`aiayn train` preloads jemalloc itself where it is installed; a peer
    configured as PyTorch's CPU performance guide advises does too), with the same settings as
    `aiayn train` gives it (jemalloc: `MALLOC_CONF`, pages kept), or glibc's malloc for all."""
    if allocator == "system":
        return {"AIAYN_ALLOCATOR": "system", "LD_PRELOAD": ""}
    import ctypes.util

    library = ctypes.util.find_library(allocator)
    if not library:
        raise SystemExit(f"error: --allocator {allocator}: lib{allocator} is not installed")
    from aiayn_cli.allocator import allocator_environment

    return {"LD_PRELOAD": library, **allocator_environment(library, os.environ)}


def _table(args, totals: dict) -> None:
    import torch

    torch.set_num_threads(args.threads)
    print(common.machine_line())
    settings = _allocator_environment(args.allocator).get("MALLOC_CONF")
    print(
        f"allocator of every side: {'glibc malloc' if args.allocator == 'system' else args.allocator}"
        + (f" (MALLOC_CONF={settings})" if settings is not None else "")
    )
    print(
        f"Multi30k en-de, preset {args.preset}, {args.threads} threads, {'bf16' if args.bf16 else 'fp32'}, "
        f"{args.rounds} x {args.seconds:.0f} s per side; aiayn: max_tokens {args.max_tokens}, HF: batch "
        f"size {args.batch_size} (our mean), attn_implementation {args.hf_attention}"
    )
    print(
        f"{'':<12}{'steps':>7}{'non-pad tok':>13}{'padding':>9}{'non-pad/s':>11}{'/CPU-s':>9}"
        f"{'computed/s':>12}{'/CPU-s':>9}"
    )
    rates = {}
    for side, t in totals.items():
        rates[side] = [
            t["tokens"] / t["wall"],
            t["tokens"] / t["cpu"],
            t["computed"] / t["wall"],
            t["computed"] / t["cpu"],
        ]
        padding = 1 - t["tokens"] / max(t["computed"], 1)
        print(
            f"{SIDES[side]:<12}{t['steps']:>7}{t['tokens']:>13,}{padding:>9.1%}{rates[side][0]:>11,.0f}"
            f"{rates[side][1]:>9,.0f}{rates[side][2]:>12,.0f}{rates[side][3]:>9,.0f}"
        )
    for peer in [side for side in ("grouped", "default") if side in totals and "aiayn" in totals]:
        r = [a / b for a, b in zip(rates["aiayn"], rates[peer])]
        print(
            f"aiayn / {SIDES[peer]}: non-pad tokens {r[0]:.2f}x per second, {r[1]:.2f}x per CPU-second; "
            f"computed tokens {r[2]:.2f}x per second, {r[3]:.2f}x per CPU-second"
        )
    rows = [
        {
            "side": SIDES[side],
            "steps": t["steps"],
            "padding": f"{1 - t['tokens'] / max(t['computed'], 1):.1%}",
            "non-pad tokens/s": round(rates[side][0]),
            "per CPU-second": round(rates[side][1]),
            "aiayn / this": f"{rates['aiayn'][0] / rates[side][0]:.2f}x" if "aiayn" in rates else "-",
        }
        for side, t in totals.items()
    ]
    settings = {"preset": args.preset, "precision": "bf16" if args.bf16 else "fp32", "seconds": args.seconds,
                "rounds": args.rounds, "max_tokens": args.max_tokens, "hf_batch_size": args.batch_size}  # fmt: skip
    common.write_results(results.Recorder("bench_train"), {"rows": rows, "settings": settings}, args.results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--multi30k", type=Path, default=MULTI30K, help="a folder of train.en, train.de, ... (default: $AIAYN_MULTI30K)"
    )
    parser.add_argument("--tokenizer", type=Path, default=None, help="default: train an 8,000-token BPE first")
    parser.add_argument("--seconds", type=float, default=60.0, help="training time of each side per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--preset", default="small")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=None, help="HF batch size (default: ours, mean)")
    parser.add_argument(
        "--precision", choices=("auto", "fp32", "bf16"), default="auto", help="all sides; auto: bf16 where native"
    )
    parser.add_argument("--sides", default="aiayn,grouped,default", help="which sides, comma-separated")
    parser.add_argument(
        "--hf-attention",
        choices=("auto", "sdpa", "eager"),
        default="auto",
        help="the HF sides' attn_implementation; auto: eager in bf16, sdpa in fp32 (the faster on CPUs)",
    )
    parser.add_argument(
        "--allocator",
        choices=("jemalloc", "tcmalloc_minimal", "system"),
        default="jemalloc",
        help="preloaded for every side (system: glibc's malloc for all)",
    )
    parser.add_argument("--side", choices=tuple(SIDES), help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    results.add_argument(parser, "bench_train")
    args = parser.parse_args()
    if args.precision == "auto":
        from aiayn_cli.precision import native_bf16

        args.precision = "bf16" if native_bf16("cpu")[0] else "fp32"
    args.bf16 = args.precision == "bf16"
    if args.hf_attention == "auto":
        args.hf_attention = "eager" if args.bf16 else "sdpa"

    if args.side:  # a child process: one measurement
        import torch

        torch.set_num_threads(args.threads)
        result = run_ours(args) if args.side == "aiayn" else run_reference(args)
        args.json.write_text(json.dumps(result))
        return

    with tempfile.TemporaryDirectory() as tmp:
        if args.tokenizer is None:
            from aiayn_cli.data.spec import DataSpec
            from aiayn_cli.data.tokenization import train_tokenizer

            args.tokenizer = Path(tmp) / "bpe8k"
            train_tokenizer(
                DataSpec(data_dir=str(args.multi30k), source_lang="en", target_lang="de"),
                vocab_size=8000,
                output_dir=args.tokenizer,
                show_progress=False,
            )
        if args.batch_size is None:
            args.batch_size = _mean_batch_sentences(args)
        sides = args.sides.split(",")
        totals = {side: {"tokens": 0, "computed": 0, "wall": 0.0, "cpu": 0.0, "steps": 0} for side in sides}
        for round_ in range(args.rounds):
            order = sides[round_ % len(sides) :] + sides[: round_ % len(sides)]  # who goes first rotates
            for side in order:
                for key, value in _side(args, side).items():
                    totals[side][key] += value
                print(f"round {round_ + 1}: {SIDES[side]} done", file=sys.stderr, flush=True)
    _table(args, totals)


if __name__ == "__main__":
    main()
