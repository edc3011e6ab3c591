"""Beam-4 decoding throughput: aiayn's decoder against Hugging Face `MarianMTModel.generate` and CTranslate2.

    python benchmarks/bench_decode.py                     # small and base dimensions, 2 threads
    python benchmarks/bench_decode.py --dims base --batch 8 32 --repeats 7

How the comparison is made fair:

* The same dimensions in all systems: `small` (d_model 256, d_ff 1024, h 4, 3 + 3 layers) and
  `base` (512, 2048, 8, 6 + 6), post-LayerNorm, ReLU, sinusoidal positions, shared and tied
  embeddings scaled by sqrt(d_model), the same vocabulary size; random weights in float32.
* The same work: every system decodes the same batch of source sentences (random token ids, lengths
  drawn once) with beam size 4, and is made to decode exactly `--new-tokens` (T) steps for every
  sentence: `</s>` is suppressed before the last step and forced at it (aiayn: min_len = T - 1
  and max length T - 1 tokens before `</s>`; Hugging Face: min_new_tokens = T - 1,
  max_new_tokens = T, forced_eos_token_id; CTranslate2: min and max decoding length T). Random
  weights would otherwise give arbitrary lengths; this way each system computes T decoder steps
  for B sentences x 4 beams, and throughput is B * T / seconds, encoder included.
* The same threads: `torch.set_num_threads(n)` for both PyTorch systems and `intra_threads=n`,
  `inter_threads=1` for CTranslate2.
* Measured in one run, alternating the systems within each repetition; the median of the
  repetitions is reported (other processes on the machine make single timings noisy).

CTranslate2 (`pip install ctranslate2`) converts the saved `MarianMTModel` with
`TransformersConverter` (float32, no quantization); it is skipped with a message where it is absent.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration  # noqa: E402
from aiayn_cli.decoding.incremental import PreparedModel  # noqa: E402
from aiayn_cli.decoding.search import DecodingOptions, decode  # noqa: E402
from aiayn_cli.model.configuration_aiayn import PRESETS  # noqa: E402

DEFAULT_VOCAB = {"small": 10000, "base": 37000}


def make_batch(
    batch: int, vocab: int, min_len: int, max_len: int, seed: int, eos: int, pad: int, low: int
) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """Random source sentences (ids in [low, vocab - 1), ending with `eos`), padded on the right."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (batch,), generator=generator).tolist()
    sentences = [torch.randint(low, vocab - 1, (n - 1,), generator=generator).tolist() + [eos] for n in lengths]
    width = max(lengths)
    ids = torch.full((batch, width), pad, dtype=torch.long)
    mask = torch.zeros(batch, width, dtype=torch.long)
    for i, s in enumerate(sentences):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask, sentences


def build_aiayn(dims: str, vocab: int) -> AiaynForConditionalGeneration:
    torch.manual_seed(0)
    config = AiaynConfig.from_preset(dims, vocab_size=vocab, max_position_embeddings=512)
    return AiaynForConditionalGeneration(config).eval()


def build_marian(dims: str, vocab: int, folder: Path):
    """A MarianMTModel of the same dimensions, saved to `folder` (for CTranslate2's converter).

    Marian's conventions: `</s>` = 0, `<unk>` = 1, `<pad>` = the last id, which is also the decoder
    start token (its embedding is zero)."""
    from transformers import MarianConfig, MarianMTModel

    p = PRESETS[dims]
    config = MarianConfig(
        vocab_size=vocab,
        d_model=p["d_model"],
        encoder_ffn_dim=p["d_ff"],
        decoder_ffn_dim=p["d_ff"],
        encoder_attention_heads=p["num_heads"],
        decoder_attention_heads=p["num_heads"],
        encoder_layers=p["num_encoder_layers"],
        decoder_layers=p["num_decoder_layers"],
        activation_function="relu",
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        max_position_embeddings=512,
        pad_token_id=vocab - 1,
        decoder_start_token_id=vocab - 1,
        eos_token_id=0,
        forced_eos_token_id=0,
        dropout=0.1,
    )
    torch.manual_seed(0)
    model = MarianMTModel(config).eval()
    model.save_pretrained(folder)
    return model


class _Vocabulary:
    """The little a converter needs from a tokenizer: the token strings of the ids."""

    def __init__(self, vocab: int):
        self.tokens = ["</s>", "<unk>"] + [f"t{i}" for i in range(2, vocab - 1)] + ["<pad>"]
        self.eos_token, self.unk_token, self.pad_token = "</s>", "<unk>", "<pad>"
        self.special_tokens_map = {}

    def get_vocab(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tokens)}


def build_ctranslate2(folder: Path, vocab: int, threads: int):
    """CTranslate2's Translator for the saved Marian model, or a string saying why there is none."""
    try:
        import ctranslate2
        from ctranslate2.converters import TransformersConverter
    except ImportError as err:
        return f"ctranslate2 is not installed ({err}); pip install ctranslate2"

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return _Vocabulary(vocab)

    out = folder / "ct2"
    Converter(str(folder)).convert(str(out), quantization=None, force=True)
    return ctranslate2.Translator(
        str(out), device="cpu", compute_type="float32", intra_threads=threads, inter_threads=1
    )


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


_PREPARED: dict[int, PreparedModel] = {}


def run_aiayn(model, ids, mask, steps: int, beams: int) -> int:
    """As `aiayn translate` decodes: the projections prepared once per model (by its `Translator`)."""
    options = DecodingOptions(num_beams=beams, length_penalty=0.6, max_len_a=0, max_len_b=steps - 1, min_len=steps - 1)
    if id(model) not in _PREPARED:
        _PREPARED[id(model)] = PreparedModel(model)
    weights = _PREPARED[id(model)]
    hyps = decode(model, ids, mask, options, weights)
    lengths = {len(h[0].tokens) + 1 for h in hyps}  # + </s>
    assert lengths == {steps}, lengths
    return steps * ids.size(0)


def run_marian(model, ids, mask, steps: int, beams: int) -> int:
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            num_beams=beams,
            do_sample=False,
            min_new_tokens=steps - 1,
            max_new_tokens=steps,
            length_penalty=0.6,
            early_stopping=True,
        )
    assert out.size(1) == steps + 1, out.shape  # decoder start + T tokens
    return steps * ids.size(0)


def run_ctranslate2(translator, sentences: list[list[str]], steps: int, beams: int) -> int:
    results = translator.translate_batch(
        sentences,
        beam_size=beams,
        length_penalty=0.6,
        max_batch_size=0,
        min_decoding_length=steps,
        max_decoding_length=steps,
        max_input_length=0,
    )
    lengths = {len(r.hypotheses[0]) for r in results}
    assert lengths == {steps}, lengths
    return steps * len(sentences)


def timed(fn, device: str) -> tuple[float, int]:
    synchronize(device)
    start = time.perf_counter()
    tokens = fn()
    synchronize(device)
    return time.perf_counter() - start, tokens


def bench(dims: str, vocab: int, batch: int, args, workdir: Path) -> dict:
    aiayn = build_aiayn(dims, vocab).to(args.device)
    marian = build_marian(dims, vocab, workdir / f"marian-{dims}-{vocab}").to(args.device)
    ct2 = None
    if not args.no_ctranslate2 and args.device == "cpu":
        ct2 = build_ctranslate2(workdir / f"marian-{dims}-{vocab}", vocab, args.threads)
    ct2_reason = ct2 if isinstance(ct2, str) else None
    # The same source lengths and ids for all systems (each in its own special-id convention).
    ids, mask, _ = make_batch(batch, vocab, args.min_src, args.max_src, args.seed, eos=2, pad=0, low=4)
    m_ids, m_mask, m_sentences = make_batch(
        batch, vocab, args.min_src, args.max_src, args.seed, eos=0, pad=vocab - 1, low=4
    )
    ct2_sentences = [[f"t{i}" if i != 0 else "</s>" for i in s] for s in m_sentences]
    ids, mask, m_ids, m_mask = (t.to(args.device) for t in (ids, mask, m_ids, m_mask))
    systems = {
        "aiayn": lambda: run_aiayn(aiayn, ids, mask, args.new_tokens, args.beams),
        "hf_marian": lambda: run_marian(marian, m_ids, m_mask, args.new_tokens, args.beams),
    }
    if ct2 is not None and ct2_reason is None:
        systems["ctranslate2"] = lambda: run_ctranslate2(ct2, ct2_sentences, args.new_tokens, args.beams)
    for fn in systems.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {name: [] for name in systems}
    tokens = {}
    for _ in range(args.repeats):
        for name, fn in systems.items():
            seconds, tokens[name] = timed(fn, args.device)
            times[name].append(seconds)
    row = {
        "dims": dims,
        "vocab": vocab,
        "batch": batch,
        "beams": args.beams,
        "new_tokens": args.new_tokens,
        "threads": args.threads,
        "device": args.device,
    }
    for name in systems:
        median = statistics.median(times[name])
        row[f"{name}_tok_s"] = tokens[name] / median
        row[f"{name}_times"] = [round(t, 4) for t in times[name]]
    # Ratios of the medians, and the median of the ratios within each repetition (the systems ran
    # one after the other there, under the same load).
    row["ratio_vs_hf"] = row["aiayn_tok_s"] / row["hf_marian_tok_s"]
    row["paired_ratio_vs_hf"] = statistics.median(h / a for a, h in zip(times["aiayn"], times["hf_marian"]))
    if "ctranslate2_tok_s" in row:
        row["ratio_vs_ct2"] = row["aiayn_tok_s"] / row["ctranslate2_tok_s"]
        row["paired_ratio_vs_ct2"] = statistics.median(c / a for a, c in zip(times["aiayn"], times["ctranslate2"]))
    elif ct2_reason:
        row["ctranslate2"] = ct2_reason
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dims", nargs="+", default=["small", "base"], choices=sorted(PRESETS))
    parser.add_argument(
        "--vocab", type=int, default=None, help="vocabulary size for every dims (default: small 10000, base 37000)"
    )
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32], help="sentences per batch")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=30, help="decoder steps per sentence (T)")
    parser.add_argument("--min-src", type=int, default=15)
    parser.add_argument("--max-src", type=int, default=35)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-ctranslate2", action="store_true")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (CTranslate2 is then not measured)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dims in args.dims:
            vocab = args.vocab or DEFAULT_VOCAB.get(dims, 10000)
            for batch in args.batch:
                row = bench(dims, vocab, batch, args, Path(tmp))
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)

    print(f"""
Same work for every system: the same source batch, beam {args.beams}, exactly {args.new_tokens} decoder steps per
sentence (</s> suppressed before the last step and forced at it), the same dimensions and vocabulary,
random float32 weights, {args.threads} threads each, on {args.device}; systems alternate within each of
{args.repeats} repetitions.
tokens/s = sentences x steps / median seconds (encoder included); "paired" = median over repetitions
of the ratio within the repetition. torch {torch.__version__}.
""")
    header = (
        "| dims | vocab | batch | aiayn tok/s | HF Marian tok/s | CTranslate2 tok/s | aiayn / HF (paired) "
        "| aiayn / CT2 (paired) |"
    )
    print(header)
    print("|---" * 8 + "|")
    for r in rows:
        ct2 = f"{r['ctranslate2_tok_s']:.0f}" if "ctranslate2_tok_s" in r else "n/a"
        ratio_ct2 = f"{r['ratio_vs_ct2']:.2f}x ({r['paired_ratio_vs_ct2']:.2f}x)" if "ratio_vs_ct2" in r else "n/a"
        print(
            f"| {r['dims']} | {r['vocab']} | {r['batch']} | {r['aiayn_tok_s']:.0f} | {r['hf_marian_tok_s']:.0f} | "
            f"{ct2} | {r['ratio_vs_hf']:.2f}x ({r['paired_ratio_vs_hf']:.2f}x) | {ratio_ct2} |"
        )
    if any("ctranslate2" in r for r in rows):
        print(f"\nCTranslate2 not measured: {rows[0].get('ctranslate2')}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
