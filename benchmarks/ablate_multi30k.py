"""Recipe changes to multi30k_en_de_gpu (or any Multi30k recipe), each trained and scored on validation
only: the figures of the docs' ablation table (docs/recipes.md).

    python benchmarks/ablate_multi30k.py OUT --parallel 4                     # every variant, 4 at once
    python benchmarks/ablate_multi30k.py OUT --variants base,tiny --parallel 2
    python benchmarks/ablate_multi30k.py OUT --smoke                          # on the CPU, tiny sizes
    python benchmarks/ablate_multi30k.py OUT --recipe recipes/multi30k_en_de.yaml --variants gpu-choices \
        --limit 4500 --finished base=RUN      # the CPU recipe's hour; RUN: the recipe test's run folder

Each variant is the base recipe plus `--set` overrides (VARIANTS), trained by `aiayn train` in a process
of its own (its own tokenizer, built from the training split), `--parallel` of them at once. What a
variant scores is what its run chose at its end on the validation split: the best of the last checkpoint,
the best one and the averages of the decayed tail (`average_choose`), then the length penalty of the grid
with the best validation BLEU (beam 4, the whole split). test2016 is never read.

Variants that run at once share the machine: on one GPU their kernels take turns, so each makes fewer
steps in its minutes than it would alone (the results record every variant's steps, and `parallel`). A
ranking made this way is a guide; the recipe chosen is then measured alone (`gpu_check.py --parts
multi30k`). On a GPU machine without network, the wheels come from `make gpu-bundle`'s folder as in
gpu_check.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli import yaml_text
from benchmarks import results
from benchmarks.gpu_check import SMOKE_MULTI30K, _smoke_multi30k, install
from benchmarks.local_data import MULTI30K
from benchmarks.results import Recorder, source_of

REPO = Path(__file__).resolve().parents[1]

# name -> (what changes, in words; the --set overrides). "base" is the recipe as shipped.
LAYERS_4 = {"model.num_encoder_layers": 4, "model.num_decoder_layers": 4}
TINY = {"model.d_model": 128, "model.d_ff": 256, "model.num_encoder_layers": 4, "model.num_decoder_layers": 4}
VARIANTS: dict[str, tuple[str, dict]] = {
    "base": ("the recipe as shipped", {}),
    "layers-4": ("4+4 layers instead of 6+6", LAYERS_4),
    "tiny": ("4+4 layers of width 128, d_ff 256 (Transformer-tiny), lr_scale 1", {**TINY, "lr_scale": 1.0}),
    "tiny-lr2": ("Transformer-tiny, lr_scale 2 (peak 5.6e-3)", {**TINY, "lr_scale": 2.0}),
    "tiny-4096": ("Transformer-tiny, lr_scale 1, 4,096-token batches", {**TINY, "lr_scale": 1.0, "max_tokens": 4096}),
    "tiny-vocab10k": (
        "Transformer-tiny, lr_scale 1, a 10,000-token BPE",
        {**TINY, "lr_scale": 1.0, "tokenizer_training.vocab_size": 10000},
    ),
    "layers-3": ("3+3 layers instead of 6+6", {"model.num_encoder_layers": 3, "model.num_decoder_layers": 3}),
    "layers-4-vocab10k": ("4+4 layers, a 10,000-token BPE", {**LAYERS_4, "tokenizer_training.vocab_size": 10000}),
    "layers-4-no-extra-dropout": (
        "4+4 layers, no dropout on attention weights and after the ReLU",
        {**LAYERS_4, "model.attention_dropout": 0.0, "model.activation_dropout": 0.0},
    ),
    "layers-4-lr-0.75": ("4+4 layers, lr_scale 0.75 (peak 1.5e-3)", {**LAYERS_4, "lr_scale": 0.75}),
    "layers-4-smoothing-0": ("4+4 layers, no label smoothing", {**LAYERS_4, "label_smoothing": 0.0}),
    "layers-4-warmup-2000": ("4+4 layers, 2,000 warmup steps (peak 7.0e-4)", {**LAYERS_4, "warmup_steps": 2000}),
    "lr-1": ("lr_scale 1 (peak 2.0e-3 at step 1,000)", {"lr_scale": 1.0}),  # run when the GPU recipe had 0.5
    "no-attention-dropout": (
        "no dropout on attention weights and after the ReLU",
        {"model.attention_dropout": 0.0, "model.activation_dropout": 0.0},
    ),
    "dropout-0.1": ("P_drop 0.1 instead of 0.3", {"model.dropout": 0.1}),
    "smoothing-0": ("no label smoothing", {"label_smoothing": 0.0}),
    # For the CPU recipe (`--recipe recipes/multi30k_en_de.yaml`): the GPU recipe's model and optimiser.
    "gpu-choices": (
        "the GPU recipe's choices: 4+4 layers, 8,192-token batches, lr_scale 0.75, 1,000 warmup steps, "
        "attention and ReLU dropout 0.1",
        {
            **LAYERS_4,
            "max_tokens": 8192,
            "lr_scale": 0.75,
            "warmup_steps": 1000,
            "model.attention_dropout": 0.1,
            "model.activation_dropout": 0.1,
        },
    ),
    # For the CPU recipe where it trains in fp32 (half the steps of bf16): twice the updates for the same
    # tokens; at each token count the learning rate is 1/sqrt(2) of the 4,096-token run's (Noam's decay
    # with the warmup doubled in steps: the square-root rule for half the batch).
    "batch-2048": (
        "2,048-token batches, 1,000 warmup steps (peak 7.9e-4)",
        {"max_tokens": 2048, "warmup_steps": 1000},
    ),
    # For the CPU recipe in fp32, whose hour ends under-trained (validation BLEU still rising at its last
    # checkpoints): twice the rate, the 4,096-token run's rate at each step rather than at each token count.
    "lr-0.8": ("lr_scale 0.8 instead of 0.4 (fp32: peak 1.6e-3 at step 1,000)", {"lr_scale": 0.8}),
    # The next step up from lr-0.8 (chosen), its hour still rising at its last checkpoints.
    "lr-1.2": ("lr_scale 1.2 instead of 0.8 (fp32: peak 2.4e-3 at step 1,000)", {"lr_scale": 1.2}),
}


def train_command(base: Path, data: Path, folder: Path, overrides: dict, smoke: bool) -> list[str]:
    command = [sys.executable, "-m", "aiayn_cli", "train", str(base), "--data-dir", str(data)]
    command += ["--output-dir", str(folder / "run"), "--tokenizer", str(folder / "bpe"), "--no-progress"]
    settings = {**(SMOKE_MULTI30K if smoke else {}), **overrides}
    if smoke:  # tiny sizes whatever the variant asks
        settings.update({k: v for k, v in SMOKE_MULTI30K.items() if k.startswith("model.") or "vocab" in k})
        settings["model.d_model"], settings["model.d_ff"] = 64, 256
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    return command


# Keys of a run's recipe that say where it read and wrote, not what it trained: left out of `trained_with`.
LOCAL_KEYS = {"data.data_dir", "data.cache_dir", "tokenizer", "output_dir"}


def trained_with(run: Path, precision: str | None) -> dict:
    """The settings a run trained with, from its own recipe.yaml in its precision (`when_fp32`'s keys put
    in where that was fp32, as `TrainRecipe.in_precision` does): dotted key -> value, the keys left unset
    (the preset's) and local paths left out. A summary made after the recipe changed still says what
    this run was. (PyYAML only: the GPU machine's Python has no pydantic.)"""
    recipe = yaml_text.loads((run / "recipe.yaml").read_text(encoding="utf-8"))
    settings = yaml_text.leaves({key: value for key, value in recipe.items() if key != "when_fp32"})
    if precision == "no":
        settings.update(yaml_text.leaves(recipe.get("when_fp32") or {}))
    return {key: value for key, value in settings.items() if value is not None and key not in LOCAL_KEYS}


def summary(run: Path) -> dict:
    """What a finished run recorded: steps, speed, the validation curve, the final choice and its BLEU,
    and the settings it trained with."""
    state = json.loads(max(run.glob("checkpoint-*/trainer_state.json"), key=lambda p: p.stat().st_mtime).read_text())
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    choice = next((r for r in reversed(records) if "length_penalty_bleu" in r), {})
    selection = next((r["selection"] for r in reversed(records) if "selection" in r), {})
    bleu_by_alpha = choice.get("length_penalty_bleu", {})
    precision = next((r["precision"] for r in records if "precision" in r), None)
    return {
        "precision": {"no": "fp32"}.get(precision, precision),
        "trained_with": trained_with(run, precision),
        "steps": state["step"],
        "epochs": state.get("epoch"),
        "train_seconds": state["train_seconds"],
        "tokens_per_s": (state["source_tokens"] + state["target_tokens"]) / max(state["train_seconds"], 1e-9),
        "valid": [
            {"step": r["step"], "bleu": r.get("valid/bleu"), "loss": r.get("valid/loss")}
            for r in records
            if "valid/bleu" in r
        ],
        "chosen": selection.get("chosen"),
        "candidates": {name: score.get("valid/bleu") for name, score in selection.get("scores", {}).items()},
        "chosen_model": choice.get("length_penalty_model"),
        "length_penalty": choice.get("length_penalty"),
        "length_penalty_bleu": bleu_by_alpha,
        "valid_bleu": max(bleu_by_alpha.values()) if bleu_by_alpha else None,
    }


def run_variant(name: str, args, data: Path, work: Path, env: dict) -> dict:
    words, overrides = VARIANTS[name]
    folder = work / name
    folder.mkdir(parents=True)
    command = train_command(args.recipe, data, folder, overrides, args.smoke)
    start = time.monotonic()
    with (args.out / f"{name}.log").open("w", encoding="utf-8") as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        try:
            done = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.limit)
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    result = {"change": words, "overrides": overrides, "exit_code": code, "wall_s": round(time.monotonic() - start, 1)}
    if code == 0:
        result.update(summary(folder / "run"))
    print(f"{name}: exit {code}, valid BLEU {result.get('valid_bleu')}, {result.get('steps')} steps", flush=True)
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder for the results file and each variant's log")
    parser.add_argument("--recipe", type=Path, default=REPO / "recipes" / "multi30k_en_de_gpu.yaml")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    parser.add_argument("--parallel", type=int, default=1, help="variants trained at once")
    parser.add_argument("--limit", type=float, default=560.0, help="seconds a variant may take, its end included")
    parser.add_argument("--bundle", type=Path, default=REPO / ".gpu-bundle", help="make gpu-bundle's folder")
    parser.add_argument("--smoke", action="store_true", help="on the CPU, at tiny sizes, in steps")
    parser.add_argument(
        "--finished",
        action="append",
        default=[],
        metavar="NAME=RUN",
        help="a variant already trained with --recipe on this machine, alone: its run folder is summarised "
        "instead of training it again (base=the run folder of the recipe's hour)",
    )
    results.add_argument(parser, "ablate_multi30k")  # a new round beside earlier ones: --results ...round-N.json
    args = parser.parse_args(argv)
    names = [n for n in args.variants.split(",") if n]
    if malformed := [item for item in args.finished if "=" not in item]:
        parser.error(f"--finished: {', '.join(malformed)} is not NAME=RUN (base=runs/multi30k_en_de)")
    finished = dict(item.split("=", 1) for item in args.finished)
    if not names and not finished:
        parser.error("--variants names none and there is no --finished: nothing to train or summarise")
    if twice := [n for n in names if n in finished]:
        parser.error(f"--variants/--finished: {', '.join(twice)} is both to train and already finished")
    if unknown := [n for n in [*names, *finished] if n not in VARIANTS]:
        parser.error(f"--variants/--finished: unknown {', '.join(unknown)} (choose from {', '.join(VARIANTS)})")
    if missing := [
        f"{n}={r}" for n, r in finished.items() if not list(Path(r).glob("checkpoint-*/trainer_state.json"))
    ]:
        parser.error(
            f"--finished: {', '.join(missing)} is not a finished run folder (no checkpoint-*/trainer_state.json)"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    source = (
        source_of(REPO, json.loads((args.bundle / "source.json").read_text()))
        if (args.bundle / "source.json").is_file()
        else None
    )
    recorder = Recorder("ablate_multi30k", source=source)
    work = Path(tempfile.mkdtemp(prefix="aiayn-ablate-"))
    if names:  # kept: `aiayn evaluate --model WORK/NAME/run/averaged`, `--finished NAME=WORK/NAME/run`
        print(f"run folders: {work}/NAME/run", flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 2) // max(args.parallel, 1)))
    figures: dict = {"recipe": args.recipe.name, "parallel": args.parallel, "smoke": args.smoke}
    if (args.bundle / "wheels").is_dir():
        figures["install"] = install(args.bundle, work / "site")
        env["PYTHONPATH"] = os.pathsep.join([str(work / "site"), env["PYTHONPATH"]])
    bundled = args.bundle / "multi30k"
    data = bundled if (bundled / "train.en").is_file() else MULTI30K
    if args.smoke:
        data = _smoke_multi30k(work / "smoke-multi30k")
    figures["variants"] = {}
    for name, run in finished.items():
        words, overrides = VARIANTS[name]
        figures["variants"][name] = {"change": words, "overrides": overrides, "finished_run": run, **summary(Path(run))}
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        futures = {name: pool.submit(run_variant, name, args, data, work, env) for name in names}
        figures["variants"].update({name: future.result() for name, future in futures.items()})
    path = recorder.write(figures, path=args.out / "ablate_multi30k.json")
    if not args.smoke:
        path = recorder.write(figures, path=args.results)
    print(f"results: {path}")
    return figures


if __name__ == "__main__":
    main()
