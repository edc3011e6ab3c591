"""The host's cost of aiayn's training step: `aiayn train`'s loop against a minimal loop, same batches.

    python benchmarks/bench_train_host.py [--d-model 64] [--sentences 16] [--length 24] [--steps 30]
                                          [--rounds 3] [--threads 1] [--device cpu] [--precision auto]

Both sides train the same model (the `base` preset with d_model = d_ff = `--d-model`: layers, heads
and the 37,000-token vocabulary kept) on the same pre-collated batches, from the same weights:

- aiayn: the loop of `aiayn train` (`training.loop.train_loop`: the token counts agreed on, the dropout
  seeds, the shared `batch_loss`, the non-finite guard, clipping, the schedule, the log lines), with
  the optimizer and accelerator `train()` makes;
- minimal: the few lines a strong engineer writes first (`minimal_step`): autocast in the run's
  precision, the model's forward, `F.cross_entropy(label_smoothing=0.1)`, `backward`, fused Adam
  where the device has it, no read of the device by the host.

At width 64 the products are small and what remains is what a GPU waits for: the host's work per
step. The sides take turns for `--rounds` rounds; the figure is each side's median seconds a step
and the ratio aiayn / minimal (the goal on a CPU at width 64: at most 1.3; on a GPU at full width,
`gpu_check.py`'s `host` part: the minimal loop's speed at most 1 / 0.95 of aiayn's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common, results

REPO = Path(__file__).resolve().parents[1]

PAD, BOS, EOS = 0, 1, 2


def make_batches(count: int, sentences: int, length: int, vocab: int, seed: int = 0) -> list[dict]:
    """`count` collated batches of `sentences` pairs, source and target lengths varying up to `length`
    (padding as the collator writes it: pad ids, mask 0)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        lengths = torch.randint(length // 2, length + 1, (2, sentences), generator=generator)
        source = torch.full((sentences, length), PAD)
        labels = torch.full((sentences, length), PAD)
        for i in range(sentences):
            n, m = int(lengths[0, i]), int(lengths[1, i])
            source[i, :n] = torch.randint(3, vocab, (n,), generator=generator)
            labels[i, :m] = torch.randint(3, vocab, (m,), generator=generator)
            source[i, n - 1] = labels[i, m - 1] = EOS
        batches.append({"input_ids": source, "attention_mask": (source != PAD).long(), "labels": labels})
    return batches


def build_model(args):
    import torch

    from aiayn_cli.model.configuration_aiayn import AiaynConfig
    from aiayn_cli.model.modeling_aiayn import AiaynForConditionalGeneration

    torch.manual_seed(0)
    width = {"d_model": args.d_model, "d_ff": args.d_model} if args.d_model else {}
    config = AiaynConfig.from_preset(args.preset, vocab_size=args.vocab, **width)
    return AiaynForConditionalGeneration(config)


def recipe_for(args, output: Path, steps: int):
    from aiayn_cli.training.recipe import load_recipe

    return load_recipe(
        REPO / "recipes" / "wmt14_en_de_base.yaml",
        {
            "output_dir": str(output),
            "tokenizer_training": None,
            "max_steps": steps,
            "log_every_steps": steps,  # one log line a round, as a real run logs every few hundred steps
            **common.STEPS_ONLY,
            "mixed_precision": args.precision,
        },
    )


class _Sampler:
    """What the loop asks of `TokenBatchSampler`: the batches of an epoch, from a position."""

    def __init__(self, count: int):
        self.num_batches, self.start = count, 0

    def set_epoch(self, epoch: int) -> None:
        pass

    def set_start(self, start: int) -> None:
        self.start = start

    def __len__(self) -> int:
        return self.num_batches - self.start


class _TimedBatches:
    """The batches, each yielded with the time: the seconds from batch `skip` to the last one cover
    the steps in between, each whole (data, step, the checks after it), and not the run's end."""

    def __init__(self, batches: list[dict], sampler: _Sampler, skip: int):
        self.batches, self.sampler, self.skip, self.times = batches, sampler, skip, []

    def __iter__(self):
        for batch in self.batches[self.sampler.start :]:
            self.times.append(time.perf_counter())
            yield batch

    def seconds_a_step(self) -> float:
        timed = self.times[self.skip :]
        return (timed[-1] - timed[0]) / (len(timed) - 1)


def aiayn_round(args, model_state: dict, batches: list[dict]) -> float:
    """Seconds a step of `aiayn train`'s loop over `batches` (the first `--warmup` untimed)."""
    from types import SimpleNamespace

    from aiayn_cli.training.accelerator import make_accelerator
    from aiayn_cli.training.loop import RunContext, train_loop
    from aiayn_cli.training.run_folder import MetricsLog, TrainState
    from aiayn_cli.training.schedule import build_scheduler
    from aiayn_cli.training.trainer import make_optimizer

    with tempfile.TemporaryDirectory() as tmp:
        recipe = recipe_for(args, Path(tmp), len(batches))
        accelerator = make_accelerator(recipe)
        model = build_model(args)
        model.load_state_dict(model_state)
        optimizer = make_optimizer(recipe, model, accelerator.device)
        scheduler = build_scheduler(optimizer, recipe.lr_schedule, model.config.d_model, recipe.warmup_steps)
        model, optimizer = accelerator.prepare(model, optimizer)
        accelerator.unwrap_model(model, keep_fp32_wrapper=False)
        sampler = _Sampler(len(batches))
        timed = _TimedBatches(batches, sampler, args.warmup)
        data = SimpleNamespace(train_loader=timed, train_sampler=sampler, valid_loader=None, bleu_sources=[])
        tokenizer = SimpleNamespace(save_pretrained=lambda folder: None)  # the run's last checkpoint: untimed
        run = RunContext(
            recipe,
            accelerator,
            model,
            model,
            optimizer,
            scheduler,
            tokenizer,
            data,
            TrainState(),
            MetricsLog(Path(tmp), None),
        )
        train_loop(run, show_progress=False)
        return timed.seconds_a_step()


def minimal_step(model, optimizer, batch: dict, autocast, label_smoothing: float = 0.1) -> None:
    """One step of the minimal loop: forward, label-smoothed cross-entropy over the non-pad targets,
    backward, Adam. The host reads nothing from the device."""
    import torch
    import torch.nn.functional as F

    labels = batch["labels"]
    decoder_input_ids = torch.cat([labels.new_full((labels.size(0), 1), BOS), labels[:, :-1]], dim=1)
    with autocast:
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=decoder_input_ids
        ).logits
    loss = F.cross_entropy(
        logits.float().flatten(0, 1), labels.flatten(), ignore_index=PAD, label_smoothing=label_smoothing
    )
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def minimal_round(args, model_state: dict, batches: list[dict], dtype) -> float:
    """Seconds a step of the minimal loop over `batches` (the first `--warmup` untimed)."""
    from contextlib import nullcontext

    import torch

    device = torch.device(args.device)
    model = build_model(args).to(device).train()
    model.load_state_dict(model_state)
    fused = device.type in ("cpu", "cuda")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=fused or None)
    autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext()
    times = []
    for batch in batches:
        times.append(time.perf_counter())
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        minimal_step(model, optimizer, batch, autocast)
    if device.type == "cuda":
        torch.cuda.synchronize()
    times.append(time.perf_counter())
    timed = times[args.warmup :]
    return (timed[-1] - timed[0]) / (len(timed) - 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base", help="the model's layers and heads (default: base)")
    parser.add_argument("--d-model", type=int, default=64, help="d_model = d_ff (0: the preset's own; default 64)")
    parser.add_argument("--vocab", type=int, default=37000, help="vocabulary size (default: WMT's 37,000)")
    parser.add_argument("--sentences", type=int, default=16, help="pairs a batch (default 16)")
    parser.add_argument("--length", type=int, default=24, help="the longest sentence, in tokens (default 24)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps a round (default 30)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before them (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="turns of each side (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--precision", default="auto", choices=["auto", "no", "bf16"], help="as the recipe's key")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    results.add_argument(parser, "bench_train_host")
    args = parser.parse_args(argv)
    for name in ("sentences", "length", "steps", "warmup", "rounds", "threads", "vocab"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.steps < 2:
        parser.error("--steps must be at least 2")
    if args.d_model < 0 or args.d_model % 8:
        parser.error("--d-model must be 0 or a multiple of 8 (the heads)")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    command = [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]
    recorder = results.Recorder("bench_train_host", command, source=results.git_commit())  # the tree as it starts
    import torch

    from aiayn_cli.precision import choose_precision

    torch.set_num_threads(args.threads)
    precision = choose_precision(args.precision, args.device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision.precision)
    print(f"machine: {results.describe(results.machine())}")
    print(f"{precision.describe()}; threads {args.threads}; device {args.device}")
    model = build_model(args)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    config = model.config
    print(
        f"model: {args.preset}, d_model {config.d_model}, d_ff {config.d_ff}, layers {config.num_encoder_layers}, "
        f"heads {config.num_heads}, vocabulary {config.vocab_size}; batches of {args.sentences} x <= {args.length}"
    )
    batches = make_batches(args.warmup + args.steps + 1, args.sentences, args.length, args.vocab)
    args.precision = precision.precision
    times: dict[str, list[float]] = {"aiayn": [], "minimal": []}
    for round_ in range(args.rounds):
        for side in ("aiayn", "minimal") if round_ % 2 == 0 else ("minimal", "aiayn"):
            seconds = (
                aiayn_round(args, state, batches) if side == "aiayn" else minimal_round(args, state, batches, dtype)
            )
            times[side].append(seconds)
            print(f"round {round_ + 1}: {side:8s} {seconds * 1e3:8.2f} ms a step", flush=True)
    medians = {side: statistics.median(values) for side, values in times.items()}
    ratio = medians["aiayn"] / medians["minimal"]
    print(f"median ms a step: aiayn {medians['aiayn'] * 1e3:.2f}, minimal {medians['minimal'] * 1e3:.2f}")
    print(f"aiayn / minimal: {ratio:.3f}x (goal at width 64 on a CPU: <= 1.3x)")
    figures = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "precision": precision.precision,
        "seconds_a_step": times,
        "median_ms_a_step": {side: round(value * 1e3, 3) for side, value in medians.items()},
        "ratio_aiayn_over_minimal": round(ratio, 4),
    }
    path = recorder.write(figures, args.results)
    print(f"results: {path}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    main()
