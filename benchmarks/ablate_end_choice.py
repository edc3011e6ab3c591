"""The end of a run, chosen two ways, on finished runs: the figures of the docs' end-choice table
(docs/train.md).

    python benchmarks/ablate_end_choice.py seed-1=runs/multi30k_en_de seed-2=runs/multi30k_seed2 --data-dir DIR

A run's end chooses its final model among the last checkpoint, the best one and the averages of the
last k of the decayed tail (`aiayn_cli/training/selection.py`). `average_choose_by: sample` compares
them as the run validated (BLEU on its fixed sample with its validation decoding, the loss breaking
ties) and then chooses alpha for the winner; `beam` translates the whole validation split with each
candidate's beam, re-ranked per alpha of the recipe's grid, and chooses the pair. For each run folder
this makes both choices from the folder alone (`aiayn average --choose --choose-by ...`'s code), each
timed, and records every candidate's scores: what the model a user gets scores on validation with
its beam and alpha, chosen each way. test2016 is never read.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common, results


def compare(run: Path, last: int | None, data_dir: str | None) -> dict:
    """Both choices for one run folder: the candidates' scores, what each way chose, and its seconds."""
    from aiayn_cli.training.checkpoint import checkpoint_step, list_checkpoints
    from aiayn_cli.training.recipe import load_recipe
    from aiayn_cli.training.run_folder import RECIPE_FILE
    from aiayn_cli.training.selection import select_in_run_folder

    overrides = {"trackers": []} | ({"data.data_dir": data_dir, "data.dataset": None} if data_dir else {})
    recipe = load_recipe(run / RECIPE_FILE, overrides)
    last = last or recipe.average_last or 1
    chosen, seconds = {}, {}
    for by in ("sample", "beam"):
        start = time.perf_counter()
        chosen[by] = select_in_run_folder(run, last, data_dir, by)
        seconds[by] = round(time.perf_counter() - start, 1)
    start = time.perf_counter()  # the sample's second step, as a run ends: alpha for the model it chose
    sample_alpha = choose_alpha(chosen["sample"].chosen.checkpoints, recipe)
    seconds["sample_alpha"] = round(time.perf_counter() - start, 1)
    beam = chosen["beam"]
    candidates = {
        c.name: {
            "checkpoints": [p.name for p in c.checkpoints],
            "sample_bleu": round(beam.scores[c.name]["valid/bleu"], 2),
            "loss": round(beam.scores[c.name]["valid/loss"], 4),
            "beam_bleu": round(beam.scores[c.name]["valid/beam_bleu"], 2),
            "alpha": beam.scores[c.name]["length_penalty"],
        }
        for c in beam.candidates
    }
    figures = {
        "run": str(run),
        "steps": checkpoint_step(list_checkpoints(run)[-1]),
        "seed": recipe.seed,
        "lr_scale": recipe.lr_scale,
        "valid_bleu_samples": recipe.valid_bleu_samples,
        "valid_beam_size": recipe.valid_beam_size,
        "length_penalty_grid": recipe.length_penalty_grid,
        "candidates": candidates,
        "chosen_by_sample": chosen["sample"].chosen.name,
        "chosen_by_beam": beam.chosen.name,
        "sample_alpha": sample_alpha,
        "seconds_sample": seconds["sample"],
        "seconds_sample_alpha": seconds["sample_alpha"],
        "seconds_beam": seconds["beam"],
    }
    if sample_alpha != candidates[figures["chosen_by_sample"]]["alpha"]:  # the same search: never, unless a tie
        print(f"warning: {run}: alpha {sample_alpha:g} chosen after the sample's choice, "
              f"{candidates[figures['chosen_by_sample']]['alpha']:g} for it by the beam", flush=True)  # fmt: skip
    for by in ("sample", "beam"):
        picked = candidates[figures[f"chosen_by_{by}"]]
        print(f"{run}: by {by}: {figures[f'chosen_by_{by}']}, validation BLEU {picked['beam_bleu']:.2f} with beam at "
              f"alpha {picked['alpha']:g} ({seconds[by]:.0f} s)", flush=True)  # fmt: skip
    return figures


def choose_alpha(checkpoints, recipe) -> float:
    """The alpha of the recipe's grid that a run's end gives the mean of `checkpoints` with
    `average_choose_by: sample` (`training/finish.py`: one beam search of the validation split, re-ranked
    per alpha)."""
    from aiayn_cli.data.corpus import load_split
    from aiayn_cli.data.tokenization import load_tokenizer
    from aiayn_cli.decoding.translator import Translator
    from aiayn_cli.evaluation.length_penalty import choose_length_penalty
    from aiayn_cli.model.modeling_aiayn import AiaynForConditionalGeneration
    from aiayn_cli.training.checkpoint import average_checkpoints

    model = AiaynForConditionalGeneration.from_pretrained(checkpoints[-1])
    model.load_state_dict(average_checkpoints(list(checkpoints)), strict=False)
    model.tie_weights()
    valid = load_split(recipe.data, recipe.valid_split)
    translator = Translator(model, load_tokenizer(str(checkpoints[-1])))
    grid = list(recipe.length_penalty_grid or [translator.decoding_options().length_penalty])
    max_tokens = recipe.valid_max_tokens or recipe.max_tokens
    return choose_length_penalty(translator, list(valid["source"]), list(valid["target"]), grid, max_tokens).alpha


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "runs", nargs="+", metavar="NAME=RUN", help="a label and a finished run folder of `aiayn train`"
    )
    parser.add_argument("--last", type=int, default=None, help="candidates of the last N (default: average_last)")
    parser.add_argument("--data-dir", default=None, help="the folder of the runs' validation files, if moved")
    results.add_argument(parser, "ablate_end_choice")
    args = parser.parse_args(argv)
    runs = {}
    for item in args.runs:
        name, _, folder = item.partition("=")
        if not name or not folder or not Path(folder).is_dir():
            parser.error(f"{item}: give NAME=RUN, RUN a run folder")
        runs[name] = Path(folder)
    if args.last is not None:
        common.at_least(parser, args, 1, "last")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # as the command line: no bars in a log
    import transformers

    transformers.utils.logging.disable_progress_bar()
    recorder = results.Recorder("ablate_end_choice", sys.argv if argv is None else [__file__, *argv])
    print(common.machine_line(), flush=True)
    figures = {"runs": {name: compare(folder, args.last, args.data_dir) for name, folder in runs.items()}}
    common.write_results(recorder, figures, args.results)
    return figures


if __name__ == "__main__":
    main()
