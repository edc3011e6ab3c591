"""Training throughput on Multi30k: `aiayn train` against `Seq2SeqTrainer` + `MarianMTModel`.

    python benchmarks/bench_train.py [--multi30k ../shared/data/multi30k] [--seconds 60] [--rounds 2]
                                     [--threads N] [--bf16] [--preset small]

Both sides train the same architecture on the same data with the same tokenizer, threads and
precision, for the same time budget, each in its own process:

- ours: `aiayn_cli.training.trainer.train` with `recipes/multi30k_en_de.yaml` (token-count batches of
  `--max-tokens` per side, sorted by length);
- reference: `MarianMTModel` of the same dimensions (ReLU, post-LN, sinusoidal positions, scaled
  and tied embeddings, P_drop), `DataCollatorForSeq2Seq` and `Seq2SeqTrainer`'s default random
  sampler, with a batch size of the mean number of sentences of our batches (so the same number of
  real tokens per step), label smoothing 0.1, Adam(0.9, 0.98, 1e-9), its default fused AdamW.

The measure is non-pad tokens (source + target) trained on per second of the training loop, and
per CPU-second of the training process (the steadier number on a shared machine). The sides take
turns for `--rounds` rounds, so that a change in the machine's load hits both. Prints one table
and the ratio ours / reference.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _recipe_overrides(args, output: Path) -> dict:
    return {
        "output_dir": str(output),
        "tokenizer": str(args.tokenizer),
        "data.data_dir": str(args.multi30k),
        "model.preset": args.preset,
        "model.dropout": args.dropout,
        "max_tokens": args.max_tokens,
        "max_steps": None,
        "max_epochs": None,
        "max_time": f"{args.seconds}s",
        "valid_split": None,
        "best_metric": "loss",
        "average_last": None,
        "checkpoint_every_minutes": None,
        "checkpoint_every_steps": None,
        "trackers": [],
        "mixed_precision": "bf16" if args.bf16 else "no",
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
    return {
        "tokens": state["source_tokens"] + state["target_tokens"],
        "wall": result.train_seconds,
        "cpu": result.cpu_seconds,
        "steps": result.step,
    }


def _mean_batch_sentences(args) -> int:
    """Sentences per batch of our sampler on the training split (the reference's batch size)."""
    from transformers import AutoTokenizer

    from aiayn_cli.data.batching import TokenBatchSampler, tokenize_split
    from aiayn_cli.data.corpus import DataSpec, load_split

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    train = tokenize_split(
        load_split(DataSpec(data_dir=str(args.multi30k), source_lang="en", target_lang="de")), tokenizer, max_length=128
    )
    sampler = TokenBatchSampler.from_dataset(train, args.max_tokens, seed=1)
    return round(len(train) / len(sampler.batches))


def run_reference(args) -> dict:
    """`Seq2SeqTrainer` + `MarianMTModel` + `DataCollatorForSeq2Seq`, default sampling, same time budget."""
    import torch
    from transformers import (
        AutoTokenizer,
        DataCollatorForSeq2Seq,
        MarianConfig,
        MarianMTModel,
        Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
        TrainerCallback,
    )

    from aiayn_cli.data.batching import tokenize_split
    from aiayn_cli.data.corpus import DataSpec, load_split
    from aiayn_cli.model.configuration_aiayn import PRESETS

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    dims = PRESETS[args.preset]
    config = MarianConfig(
        vocab_size=len(tokenizer),
        decoder_vocab_size=len(tokenizer),
        d_model=dims["d_model"],
        encoder_layers=dims["num_encoder_layers"],
        decoder_layers=dims["num_decoder_layers"],
        encoder_attention_heads=dims["num_heads"],
        decoder_attention_heads=dims["num_heads"],
        encoder_ffn_dim=dims["d_ff"],
        decoder_ffn_dim=dims["d_ff"],
        activation_function="relu",
        dropout=args.dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
        max_position_embeddings=256,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=1,
        decoder_start_token_id=1,
        forced_eos_token_id=None,
    )
    torch.manual_seed(1)
    model = MarianMTModel(config)
    data = tokenize_split(
        load_split(DataSpec(data_dir=str(args.multi30k), source_lang="en", target_lang="de")), tokenizer, max_length=128
    ).remove_columns(["src_len", "tgt_len"])
    counted = {"tokens": 0, "steps": 0}

    class CountingTrainer(Seq2SeqTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            counted["tokens"] += int(inputs["attention_mask"].sum()) + int((inputs["labels"] != -100).sum())
            counted["steps"] += 1
            return super().training_step(model, inputs, num_items_in_batch)

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
            learning_rate=5e-4,
            lr_scheduler_type="inverse_sqrt",
            warmup_steps=500,
            adam_beta1=0.9,
            adam_beta2=0.98,
            adam_epsilon=1e-9,
            weight_decay=0.0,
            label_smoothing_factor=0.1,
            max_steps=1_000_000,
            logging_steps=10_000,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            bf16=args.bf16,
            seed=1,
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        trainer = CountingTrainer(
            model=model,
            args=training_args,
            train_dataset=data,
            data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        )
        trainer.add_callback(budget)
        trainer.train()
    return {"tokens": counted["tokens"], "wall": budget.wall, "cpu": budget.cpu, "steps": counted["steps"]}


def _side(args, side: str) -> dict:
    """Run one side in a fresh process (each has its own accelerate state and allocator)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [
            sys.executable,
            __file__,
            "--side",
            side,
            "--json",
            out.name,
            "--multi30k",
            str(args.multi30k),
            "--tokenizer",
            str(args.tokenizer),
            "--seconds",
            str(args.seconds),
            "--threads",
            str(args.threads),
            "--preset",
            args.preset,
            "--dropout",
            str(args.dropout),
            "--max-tokens",
            str(args.max_tokens),
            "--batch-size",
            str(args.batch_size),
        ] + (["--bf16"] if args.bf16 else [])
        env = {
            **os.environ,
            "OMP_NUM_THREADS": str(args.threads),
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error",
        }
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
        return json.loads(Path(out.name).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--multi30k", type=Path, default=REPO.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--tokenizer", type=Path, default=None, help="default: train an 8,000-token BPE first")
    parser.add_argument("--seconds", type=float, default=60.0, help="training time of each side per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--preset", default="small")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=None, help="reference batch size (default: ours, mean)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast on both sides")
    parser.add_argument("--side", choices=("ours", "reference"), help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.side:  # a child process: one measurement
        import torch

        torch.set_num_threads(args.threads)
        result = run_ours(args) if args.side == "ours" else run_reference(args)
        args.json.write_text(json.dumps(result))
        return

    with tempfile.TemporaryDirectory() as tmp:
        if args.tokenizer is None:
            from aiayn_cli.data.corpus import DataSpec
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
        totals = {side: {"tokens": 0, "wall": 0.0, "cpu": 0.0, "steps": 0} for side in ("ours", "reference")}
        for round_ in range(args.rounds):
            for side in ("ours", "reference") if round_ % 2 == 0 else ("reference", "ours"):
                for key, value in _side(args, side).items():
                    totals[side][key] += value
                print(f"round {round_ + 1}: {side} done", file=sys.stderr, flush=True)

    print(
        f"Multi30k en-de, preset {args.preset}, {args.threads} threads, {'bf16' if args.bf16 else 'fp32'}, "
        f"{args.rounds} x {args.seconds:.0f} s per side; ours: max_tokens {args.max_tokens}, reference: batch "
        f"size {args.batch_size} (our mean)"
    )
    print(f"{'':<11}{'steps':>8}{'non-pad tokens':>16}{'tokens/s':>11}{'tokens/CPU-s':>14}")
    rates = {}
    for side, t in totals.items():
        rates[side] = (t["tokens"] / t["wall"], t["tokens"] / t["cpu"])
        print(f"{side:<11}{t['steps']:>8}{t['tokens']:>16,}{rates[side][0]:>11,.0f}{rates[side][1]:>14,.0f}")
    print(
        f"ratio ours/reference: {rates['ours'][0] / rates['reference'][0]:.2f}x tokens/s, "
        f"{rates['ours'][1] / rates['reference'][1]:.2f}x tokens/CPU-s"
    )


if __name__ == "__main__":
    main()
