"""Beam size and length penalty of a trained model, on the validation split only: the figures of the
docs' decoding ablation table (docs/train.md).

    python benchmarks/ablate_decoding.py runs/multi30k_en_de/averaged --data-dir DIR -s en -t de
    python benchmarks/ablate_decoding.py MODEL --dataset bentrevett/multi30k -s en -t de --beams 1 4 8

For each beam size the split is decoded once, keeping every finished hypothesis (`nbest` = beam); each
alpha of the grid then re-ranks them (GNMT's length penalty, as `aiayn evaluate --length-penalty-grid`
chooses alpha: the same search for every alpha, exactly what a search with that alpha returns), and
the grid goes on past its edge while the best alpha is there. A beam of 1 is greedy search: alpha
changes nothing. Each beam's decoding is timed (sentences per second, on this machine, the model's
precision `auto`). test2016 is never read.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common, results

ALPHAS = [0.0, 0.6, 1.0, 1.5, 2.0, 2.5, 3.0]
BEAMS = [1, 2, 4, 6, 8]


def run(model: str, spec, split: str, beams: list[int], alphas: list[float], max_tokens: int) -> dict:
    from aiayn_cli.data.corpus import load_split
    from aiayn_cli.decoding.translator import Translator
    from aiayn_cli.evaluation.length_penalty import score_alphas

    data = load_split(spec, split)
    sources, references = list(data["source"]), list(data["target"])
    translator = Translator.from_pretrained(model)
    style = translator.decoding_options().length_penalty_style
    print(f"{model}: {len(sources):,} {split} sentences, precision {translator.precision}, {style} length penalty")
    rows = []
    for beam in beams:
        start = time.perf_counter()
        candidates = translator.hypotheses(sources, max_tokens=max_tokens, num_beams=beam, nbest=beam)
        seconds = time.perf_counter() - start
        bleu, _ = score_alphas(translator, candidates, references, alphas if beam > 1 else alphas[:1], style)
        best = max(bleu, key=lambda a: bleu[a])
        rows.append(
            {
                "beam": beam,
                "bleu_by_alpha": {f"{a:g}": round(b, 2) for a, b in sorted(bleu.items())},
                "best_alpha": best,
                "best_bleu": round(bleu[best], 2),
                "seconds": round(seconds, 2),
                "sentences_per_s": round(len(sources) / seconds, 1),
            }
        )
        tried = ", ".join(f"{a:g}: {b:.2f}" for a, b in sorted(bleu.items()))
        print(f"beam {beam}: {len(sources) / seconds:,.1f} sentences/s; sacreBLEU by alpha {tried}", flush=True)
    return {
        "model": model,
        "split": split,
        "sentences": len(sources),
        "precision": translator.precision,
        "length_penalty_style": style,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> dict:
    from aiayn_cli.data.spec import DataSpec

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a model folder (or Hub name) that `aiayn translate -m` takes")
    parser.add_argument("--data-dir", type=Path, default=None, help="a folder of SPLIT.SRC / SPLIT.TGT files")
    parser.add_argument("--dataset", default=None, help="a Hub dataset in the translation format")
    parser.add_argument("-s", "--source-lang", required=True)
    parser.add_argument("-t", "--target-lang", required=True)
    parser.add_argument("--split", default="validation", help="the split scored (default: validation)")
    parser.add_argument("--beams", type=int, nargs="+", default=BEAMS)
    parser.add_argument("--alphas", type=float, nargs="+", default=ALPHAS, help="the grid (extended past its edge)")
    parser.add_argument("--max-tokens", type=int, default=4096, help="source tokens a batch")
    results.add_argument(parser, "ablate_decoding")
    args = parser.parse_args(argv)
    if (args.data_dir is None) == (args.dataset is None):
        parser.error("give --data-dir or --dataset")
    if args.split.startswith("test"):
        parser.error(f"--split {args.split}: choices are made on validation; the test split is scored once, elsewhere")
    common.at_least(parser, args, 1, "beams", "max_tokens")
    if any(a < 0 for a in args.alphas):
        parser.error("--alphas must be 0 or more")
    recorder = results.Recorder("ablate_decoding", sys.argv if argv is None else [__file__, *argv])
    print(common.machine_line(), flush=True)
    spec = DataSpec(
        dataset=args.dataset, data_dir=args.data_dir, source_lang=args.source_lang, target_lang=args.target_lang
    )
    figures = run(args.model, spec, args.split, args.beams, args.alphas, args.max_tokens)
    common.write_results(recorder, figures, args.results)
    return figures


if __name__ == "__main__":
    main()
