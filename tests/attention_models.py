"""A small aiayn model with a subword tokenizer, for the attention tests: built once per process.

The tokenizer is a real BPE (aiayn's `train_tokenizer`) on the quickstart's generated corpus, so
that words split into pieces; the model is a random `tiny` one unless `trained_quickstart_model`
is asked for (slow: it trains).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

SENTENCES = [
    "The small dog sees a red ball.",
    "Two old women play with the tired horses behind the house.",
    "I sleep.",
]
REFERENCES = [
    "Der kleine Hund sieht einen roten Ball.",
    "Zwei alte Frauen spielen mit den müden Pferden hinter dem Haus.",
    "Ich schlafe.",
]


def _temporary_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="aiayn-attention-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


@functools.cache
def subword_model_dir() -> Path:
    """A random `tiny` model (max_position_embeddings 64) and a 400-token BPE of generated pairs."""
    import torch

    from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration
    from aiayn_cli.data.tokenization import train_tokenizer
    from aiayn_cli.quickstart.synthetic import generate_corpus

    folder = _temporary_folder() / "model"
    pairs = generate_corpus(400, seed=1)
    tokenizer = train_tokenizer(
        [s for pair in pairs for s in pair], vocab_size=400, output_dir=folder, show_progress=False
    )
    torch.manual_seed(0)
    config = AiaynConfig.from_preset("tiny", vocab_size=len(tokenizer), max_position_embeddings=64)
    model = AiaynForConditionalGeneration(config)
    model.generation_config.max_len_b = 8  # a random model's translations stay short
    model.save_pretrained(folder)
    return folder


def load(folder: Path):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    return AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
