"""`aiayn quickstart`: the whole pipeline on a corpus the package generates, in minutes on a CPU.

train-tokenizer -> train -> average -> translate -> evaluate, each step the same library call
that its command makes, on English->German sentences written by `aiayn_cli.quickstart.synthetic` (a small
grammar with gender, case, number and adjective agreement; no dataset is downloaded).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import AiaynError
from ..files import atomic_write, check_output_folder

# The recipe: `recipes/quickstart.yaml` (a model a CPU trains in a few minutes; the paper's recipe otherwise).
RECIPE = "quickstart"
OWN = frozenset({"data", "tokenizer", "run", "test.hyp.de"})  # what it writes into its folder


@dataclass
class QuickstartResult:
    output_dir: Path
    model_dir: Path
    bleu: float
    signature: str
    examples: list[tuple[str, str, str]] = field(default_factory=list)  # source, hypothesis, reference
    seconds: dict[str, float] = field(default_factory=dict)
    steps: int = 0  # training steps done
    max_steps: int | None = None  # the budget
    stopped_by: str = ""  # max_steps, or max_time where the time cap came first

    def budget(self) -> str:
        """One line: the steps trained, and whether the time cap stopped them before the budget."""
        if self.stopped_by == "max_time":
            return (
                f"training: the time cap (--minutes) was reached at step {self.steps:,} of {self.max_steps:,}: "
                "a shorter run than the quickstart's, which may score lower; --minutes allows more time"
            )
        return f"training: {self.steps:,} steps, the budget (--steps)"


def run_quickstart(
    output_dir: str | Path,
    *,
    steps: int | None = None,
    minutes: float | None = None,
    train_pairs: int = 20000,
    test_pairs: int = 500,
    seed: int = 0,
    overwrite: bool = False,
    show_progress: bool = True,
    recipe_overrides: dict | None = None,
) -> QuickstartResult:
    """Generate the corpus, train the tokenizer and the model, average, translate the test set, score it.

    `steps`: the training budget (None: the recipe's `max_steps`); `minutes`: the time cap, which stops
    training before `steps` on a machine too slow for them (None: the recipe's `max_time`);
    `recipe_overrides`: recipe keys set on top of the quickstart's (as `aiayn train --set` does)."""
    from ..data.corpus import load_split
    from ..data.spec import DataSpec
    from ..data.tokenization import train_tokenizer
    from ..decoding.translator import Translator
    from ..evaluation.scoring import score
    from ..training.recipe import find_recipe, load_recipe
    from ..training.trainer import train
    from .synthetic import write_corpus

    output = check_output_folder(  # its own folder only: data/, tokenizer/, run/, test.hyp.de
        output_dir, own=lambda path: path.name in OWN, what="a quickstart", overwrite=overwrite, key="output_dir"
    )
    if minutes is not None and (not math.isfinite(minutes) or minutes <= 0):
        raise AiaynError(f"must be a positive number of minutes, got {minutes}", key="minutes")
    if steps is not None and steps < 1:
        raise AiaynError(f"must be a positive number of steps, got {steps}", key="steps")
    output.mkdir(parents=True, exist_ok=True)
    seconds, clock = {}, time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[name], clock = now - clock, now

    # 1. A parallel corpus, generated.
    data_dir = output / "data"
    write_corpus(data_dir, train=train_pairs, validation=test_pairs, test=test_pairs, seed=seed, overwrite=True)
    spec = DataSpec(data_dir=str(data_dir), source_lang="en", target_lang="de")
    lap("corpus")

    # 2. One joint subword vocabulary for both languages (§5.1).
    tokenizer_dir = output / "tokenizer"
    train_tokenizer(
        load_split(spec, "train"),
        vocab_size=2000,
        output_dir=tokenizer_dir,
        overwrite=True,
        show_progress=show_progress,
    )
    lap("tokenizer")

    # 3. Training for a number of steps (a time cap besides), then the final model: the last checkpoint,
    #    the best or an average of the last ones, chosen on validation (§6.1).
    recipe = load_recipe(
        find_recipe(RECIPE),
        {
            "data.data_dir": str(data_dir),
            "data.source_lang": "en",
            "data.target_lang": "de",
            "tokenizer": str(tokenizer_dir),
            "output_dir": str(output / "run"),
            "seed": seed,
            **({"max_steps": steps} if steps is not None else {}),
            **({"max_time": f"{minutes}m"} if minutes is not None else {}),
            **(recipe_overrides or {}),
        },
    )
    result = train(recipe, resume=None, show_progress=show_progress)
    model_dir = result.averaged or result.last_checkpoint
    if model_dir is None:
        raise AiaynError(
            "training wrote no checkpoint: give it more {steps} or {minutes}", mentions=("steps", "minutes")
        )
    lap("train")

    # 4. Translate the held-out test sentences with the paper's beam search (§6.1), and score them.
    test = load_split(spec, "test")
    translator = Translator.from_pretrained(str(model_dir))
    hypotheses = translator.translate(list(test["source"]), progress=show_progress)
    lap("translate")
    results = score(hypotheses, list(test["target"]), metrics=("sacrebleu",))
    atomic_write(output / "test.hyp.de", "\n".join(hypotheses) + "\n")
    lap("evaluate")
    sacrebleu = results["scores"]["sacrebleu"]
    examples = list(zip(test["source"][:5], hypotheses[:5], test["target"][:5]))
    return QuickstartResult(
        output,
        Path(model_dir),
        float(sacrebleu["score"]),
        sacrebleu["signature"],
        examples,
        seconds,
        steps=result.step,
        max_steps=recipe.max_steps,
        stopped_by=result.stopped_by,
    )


__all__ = ["RECIPE", "QuickstartResult", "run_quickstart"]
