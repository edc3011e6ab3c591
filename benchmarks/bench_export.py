"""`aiayn export --to ctranslate2` on a trained model: same translations, BLEU of int8, speed.

    aiayn quickstart --minutes 15                                # writes aiayn-quickstart/
    python benchmarks/bench_export.py --model aiayn-quickstart/run/averaged \\
        --input aiayn-quickstart/data/test.en --references aiayn-quickstart/data/test.de  # its 500 test sentences

What it measures, in one run:

* agreement: CTranslate2 float32 (beam 4, alpha from the model's generation_config, |Y|^alpha) against
  `aiayn translate --length-penalty-style hf` (the same beam and alpha): the share of sentences with
  the same translation; for the others, both hypotheses scored by the float32 model
  (log p / |Y|^alpha, |Y| counting `</s>`) to show whether they are near-ties;
* BLEU (sacreBLEU) of aiayn (GNMT penalty, the paper's), aiayn (hf), CTranslate2 float32 and int8;
* sentences per second of each, the systems taking turns within each repetition, same threads.

`aiayn translate` allows |x| + 50 output tokens per sentence; CTranslate2 takes one maximum for all
(`--max-decoding-length`, 256): a trained model ends long before either.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli.decoding.ctranslate2_convert import export_ctranslate2
from aiayn_cli.decoding.translator import Translator
from benchmarks import common


def ct2_translate(model, translator: Translator, sentences: list[str], beam: int, alpha: float, max_len: int):
    """(text, score) of CTranslate2's best hypothesis for each sentence."""
    tokenizer = translator.tokenizer
    source = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(sentences)["input_ids"]]
    results = model.translate_batch(
        source,
        beam_size=beam,
        length_penalty=alpha,
        min_decoding_length=0,
        max_decoding_length=max_len,
        return_scores=True,
        max_batch_size=64,
    )
    return [(translator.detokenize(tokenizer.convert_tokens_to_ids(r.hypotheses[0])), r.scores[0]) for r in results]


def hf_score(model, translator: Translator, source: str, hypothesis: str, alpha: float) -> float:
    """log p(hypothesis </s> | source) / |Y|^alpha under the (float32) CTranslate2 model."""
    tokenizer = translator.tokenizer
    src = tokenizer.convert_ids_to_tokens(tokenizer(source)["input_ids"])
    tgt = tokenizer.convert_ids_to_tokens(tokenizer(hypothesis, add_special_tokens=False)["input_ids"])
    result = model.score_batch([src], [tgt])[0]  # log-probabilities of tgt and </s>
    return sum(result.log_probs) / len(result.log_probs) ** alpha


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", type=Path, required=True)
    parser.add_argument("--references", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=500, help="the first N sentences")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-decoding-length", type=int, default=256)
    args = parser.parse_args()

    import ctranslate2
    import sacrebleu

    torch.set_num_threads(args.threads)
    sentences = args.input.read_text(encoding="utf-8").splitlines()[: args.limit]
    references = args.references.read_text(encoding="utf-8").splitlines()[: args.limit]
    translator = Translator.from_pretrained(args.model, device="cpu")
    options = translator.decoding_options()
    beam, alpha = options.num_beams, options.length_penalty
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for quantization in ("float32", "int8"):
            folder = export_ctranslate2(args.model, Path(tmp) / quantization, quantization=quantization)
            models[quantization] = ctranslate2.Translator(
                str(folder), device="cpu", compute_type=quantization, intra_threads=args.threads, inter_threads=1
            )
        systems = {
            "aiayn (gnmt)": lambda: [h[0] for h in translator.translate_nbest(sentences)],
            "aiayn (hf)": lambda: [h[0] for h in translator.translate_nbest(sentences, length_penalty_style="hf")],
            "CTranslate2 float32": lambda: ct2_translate(
                models["float32"], translator, sentences, beam, alpha, args.max_decoding_length
            ),
            "CTranslate2 int8": lambda: ct2_translate(
                models["int8"], translator, sentences, beam, alpha, args.max_decoding_length
            ),
        }
        outputs, seconds = {}, {name: [] for name in systems}
        for _ in range(args.repeats):
            for name, run in systems.items():
                start = time.perf_counter()
                outputs[name] = run()
                seconds[name].append(time.perf_counter() - start)
        report(args, sentences, references, outputs, seconds, models["float32"], translator, alpha, beam, sacrebleu)


def report(args, sentences, references, outputs, seconds, ct2_float32, translator, alpha, beam, sacrebleu) -> None:
    print(f"{len(sentences)} sentences of {args.input}; beam {beam}, alpha {alpha}; {common.machine_line()}")
    print(f"medians of {args.repeats} repetitions, the systems taking turns\n")
    print("| system | sacreBLEU | sentences/s | vs aiayn (hf) |")
    print("|---|---|---|---|")
    base = statistics.median(seconds["aiayn (hf)"])
    for name, hyps in outputs.items():
        bleu = sacrebleu.corpus_bleu([text for text, _ in hyps], [references]).score
        median = statistics.median(seconds[name])
        print(f"| {name} | {bleu:.2f} | {len(sentences) / median:.1f} | {base / median:.2f}x |")
    ours, theirs = outputs["aiayn (hf)"], outputs["CTranslate2 float32"]
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a[0] != b[0]]
    same = len(sentences) - len(differ)
    print(f"\nCTranslate2 float32 = aiayn translate --length-penalty-style hf: {same}/{len(sentences)} ")
    print(f"({100 * same / len(sentences):.1f}%); the others, both hypotheses scored by the float32 model:")
    for i in differ:
        a, b = (hf_score(ct2_float32, translator, sentences[i], h[0], alpha) for h in (ours[i], theirs[i]))
        print(
            f"  line {i + 1}: aiayn {a:.5f} {ours[i][0]!r}\n  {'':>{len(str(i + 1)) + 6}} CT2   {b:.5f} {theirs[i][0]!r}"
        )


if __name__ == "__main__":
    main()
