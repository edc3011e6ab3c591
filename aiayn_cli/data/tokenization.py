"""The paper's shared source-target vocabulary (§5.1: byte-pair encoding, about 37,000 tokens).

`train_tokenizer` trains ONE subword vocabulary on both languages with `tokenizers` and returns a
`transformers` fast tokenizer that `AutoTokenizer.from_pretrained` loads back:

- model: BPE (the paper's choice) or unigram; NFKC normalization;
- a reversible Metaspace pre-tokenizer (spaces become `▁`, decoding puts them back) and byte
  fallback: a character outside the vocabulary becomes its UTF-8 bytes (`<0x00>` .. `<0xFF>`),
  never `<unk>`; `decode(encode(x)) == x` for any NFKC-normalized text that does not start with
  a space;
- fixed special tokens: `<pad>`=0, `<s>`=1, `</s>`=2, `<unk>`=3 (the ids `AiaynConfig` expects),
  then the 256 byte tokens (4..259), then the learned subwords;
- a post-processor that appends `</s>`: `tokenizer("a sentence")` and
  `tokenizer(text_target="a sentence")` both end in 2. The decoder's `<s>` comes from the model,
  which shifts labels right itself.

`load_tokenizer` loads it back (a folder, or a Hub id) for training, with one line where it cannot.

`tokenize_split` tokenizes a cleaned split with it: `datasets.map(batched=True, num_proc=...)` over a
`source`/`target` dataset, giving `input_ids`, `labels` (both ending in `</s>`), `src_len` and
`tgt_len`, written to an Arrow cache file keyed on the dataset's fingerprint and the tokenizer, and
reused on a second run.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from ..errors import AiaynError, first_line
from ..files import check_output_folder, staging_dir
from .corpus import clean_chunks, load_split, new_report, open_pairs, split_files
from .spec import DataSpec
from .vocabulary import SPECIAL_TOKENS

PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)
BYTE_TOKENS = tuple(f"<0x{byte:02X}>" for byte in range(256))  # ids 4 .. 259
MODELS = ("bpe", "unigram")
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(BYTE_TOKENS) + 40
MAX_VOCAB_SIZE = 1_000_000
TOKENIZER_FILES = frozenset(
    {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja"}
)


def train_tokenizer(
    data: DataSpec | datasets.Dataset | Iterable[str],
    *,
    split: str = "train",
    vocab_size: int = 37000,
    model: str = "bpe",
    min_frequency: int = 2,
    max_sentences: int | None = None,
    seed: int = 0,
    output_dir: str | Path | None = None,
    overwrite: bool = False,
    model_max_length: int = 1024,
    show_progress: bool = True,
) -> PreTrainedTokenizerFast:
    """Train a joint vocabulary on both sides of a parallel corpus.

    Args:
        data: a `DataSpec` (its `split` is read in chunks and never held whole: memory stays
            bounded on corpora of any size; the `CleaningReport` is left in
            `tokenizer.cleaning_report`), a dataset with `source` and `target` columns (both are
            used), or sentences.
        vocab_size: size of the whole vocabulary, special and byte tokens included (paper: ~37,000).
            A small corpus may give fewer tokens: read `len(tokenizer)`.
        model: "bpe" (the paper's byte-pair encoding) or "unigram".
        min_frequency: BPE only: the fewest occurrences of a pair for it to be merged.
        max_sentences: take the BPE statistics from a uniform sample (seeded by `seed`) of this
            many sentence pairs (or sentences, for plain text), as SentencePiece's
            `input_sentence_size`: memory grows with the sample, not with the corpus.
        output_dir: where to save (`tokenizer.json` + `tokenizer_config.json`), written under a
            temporary name and renamed, so that a failure leaves nothing behind. It must not exist
            unless `overwrite`.
        model_max_length: the longest input, in tokens, that the tokenizer reports to `transformers`.
    """
    _check_options(vocab_size, model, min_frequency, max_sentences, model_max_length, seed)
    inputs = corpus_inputs(data, split) if isinstance(data, DataSpec) else ()
    if output_dir is not None:
        output_dir = check_output_dir(Path(output_dir), overwrite, inputs)
    report = None
    if isinstance(data, DataSpec) and data.dedup:  # repeats are found over the whole corpus
        data = load_split(data, split, show_progress=show_progress)
        report = data.cleaning_report
    if isinstance(data, DataSpec):
        report = new_report(data, "", split)
        sentences, count = _streamed_sentences(data, split, report, max_sentences, seed, show_progress), None
    else:
        sentences, count = _sentences(data, max_sentences, seed)

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>") if model == "bpe" else models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    trained_size = vocab_size - len(BYTE_TOKENS)  # the byte tokens are added after training
    if model == "bpe":
        trainer = trainers.BpeTrainer(
            vocab_size=trained_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            show_progress=show_progress,
        )
    else:
        trainer = trainers.UnigramTrainer(
            vocab_size=trained_size, special_tokens=list(SPECIAL_TOKENS), unk_token="<unk>", show_progress=show_progress
        )
    try:
        tokenizer.train_from_iterator(sentences, trainer, length=count)
    except Exception as err:
        if "not large enough to contain all chars" not in str(err):
            raise
        # the unigram trainer keeps every character of the text (BPE drops the rare ones: bytes serve them)
        raise AiaynError(
            f"{vocab_size} is too small for a unigram vocabulary of this text: besides its "
            f"{len(BYTE_TOKENS) + len(SPECIAL_TOKENS)} byte and special tokens it must hold every character "
            "the text uses (tokenizers: the vocabulary is not large enough to contain all chars); "
            "give a larger one, or {model} bpe",
            key="vocab_size",
            mentions=("model",),
        ) from None
    if tokenizer.get_vocab_size() <= len(SPECIAL_TOKENS):
        raise AiaynError("the training text has no characters to build a vocabulary from")

    tokenizer = _with_byte_fallback(tokenizer)
    tokenizer.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", EOS_ID)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=model_max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,  # decoding must give back "a , b" as it was
    )
    if output_dir is not None:
        save_atomically(fast, Path(output_dir), overwrite, inputs)
    fast.cleaning_report = report  # what reading a DataSpec found (None for other data)
    return fast


def _check_options(
    vocab_size: int, model: str, min_frequency: int, max_sentences: int | None, model_max_length: int, seed: int = 0
) -> None:
    if model not in MODELS:
        raise AiaynError(f"must be one of {', '.join(MODELS)}, got {model!r}", key="model")
    if vocab_size < MIN_VOCAB_SIZE:
        raise AiaynError(
            f"must be at least {MIN_VOCAB_SIZE} (4 special tokens, 256 byte tokens and an alphabet), got {vocab_size}",
            key="vocab_size",
        )
    if vocab_size > MAX_VOCAB_SIZE:  # the trainers abort (a Rust panic) from 2**31 on
        raise AiaynError(
            f"must be at most {MAX_VOCAB_SIZE:,} (the paper's is ~37,000), got {vocab_size}", key="vocab_size"
        )
    if min_frequency < 0:
        raise AiaynError(f"must be 0 or more, got {min_frequency}", key="min_frequency")
    if max_sentences is not None and max_sentences < 1:
        raise AiaynError(f"must be at least 1, got {max_sentences}", key="max_sentences")
    if model_max_length < 1:
        raise AiaynError(f"must be at least 1, got {model_max_length}", key="model_max_length")
    if seed < 0:
        raise AiaynError(f"must be 0 or more, got {seed}", key="seed")


def _sentences(data, max_sentences: int | None, seed: int) -> tuple[Iterator[list[str]], int]:
    """Batches of training sentences (both sides of each pair) and how many sentences in all."""
    rng = np.random.default_rng(seed)
    if isinstance(data, datasets.Dataset):
        missing = {"source", "target"} - set(data.column_names)
        if missing:
            raise AiaynError(
                f"the dataset has no column {', '.join(sorted(missing))} (columns: {', '.join(data.column_names)})"
            )
        if max_sentences is not None and max_sentences < len(data):
            data = data.select(np.sort(rng.choice(len(data), max_sentences, replace=False)))
        batches = (
            batch["source"] + batch["target"]
            for batch in data.select_columns(["source", "target"]).iter(batch_size=1000)
        )
        return batches, 2 * len(data)
    texts = data if isinstance(data, list) else list(data)
    if max_sentences is not None and max_sentences < len(texts):
        texts = [texts[i] for i in np.sort(rng.choice(len(texts), max_sentences, replace=False))]
    return (texts[i : i + 1000] for i in range(0, len(texts), 1000)), len(texts)


def _streamed_sentences(
    spec: DataSpec, split: str, report, max_sentences: int | None, seed: int, show_progress: bool
) -> Iterator[list[str]]:
    """Batches of sentences (both sides) of a split read chunk by chunk, or of a uniform sample of its pairs."""
    stream = open_pairs(spec, split)
    report.origin = stream.origin

    def counted(chunks):
        for table in chunks:
            report.stripped += pc.sum(pc.cast(table.column("changed"), pa.int64())).as_py() or 0
            yield table

    chunks = counted(clean_chunks(stream, spec, report, show_progress))
    for table in chunks if max_sentences is None else [_sample(chunks, max_sentences, seed)]:
        for batch in table.select(["source", "target"]).to_batches(max_chunksize=1000):
            yield batch.column(0).to_pylist() + batch.column(1).to_pylist()
    if report.kept == 0:
        raise AiaynError(f"{report.origin}: no sentence pairs left in {split} after cleaning ({report})")


def _sample(chunks: Iterator[pa.Table], size: int, seed: int) -> pa.Table:
    """A uniform sample of `size` rows, in corpus order: the rows with the `size` smallest random keys."""
    rng, kept, offset = np.random.default_rng(seed), None, 0
    for table in chunks:
        rows = table.num_rows
        table = table.append_column("key", pa.array(rng.random(rows)))
        table = table.append_column("row", pa.array(np.arange(offset, offset + rows)))
        offset += rows
        kept = table if kept is None else pa.concat_tables([kept, table])
        if kept.num_rows > size:
            keys = kept.column("key").to_numpy()
            kept = kept.take(np.argpartition(keys, size)[:size]).combine_chunks()
    if kept is None:
        return pa.table({"source": [], "target": [], "changed": pa.array([], pa.bool_())})
    return kept.take(np.argsort(kept.column("row").to_numpy()))


def _with_byte_fallback(tokenizer: Tokenizer) -> Tokenizer:
    """The trained tokenizer with the 256 byte tokens at ids 4..259 and byte fallback on."""
    state = json.loads(tokenizer.to_str())
    model = state["model"]
    if model["type"] == "BPE":
        learned = sorted(model["vocab"].items(), key=lambda item: item[1])
        tokens = [token for token, _ in learned[: len(SPECIAL_TOKENS)]] + list(BYTE_TOKENS)
        tokens += [token for token, _ in learned[len(SPECIAL_TOKENS) :] if token not in BYTE_TOKENS]
        model["vocab"] = {token: index for index, token in enumerate(tokens)}
    else:  # Unigram: a list of [piece, log-probability]; byte pieces get 0.0, as sentencepiece does
        pieces = model["vocab"]
        learned = [piece for piece in pieces[len(SPECIAL_TOKENS) :] if piece[0] not in BYTE_TOKENS]
        model["vocab"] = pieces[: len(SPECIAL_TOKENS)] + [[token, 0.0] for token in BYTE_TOKENS] + learned
        model["unk_id"] = UNK_ID
    model["byte_fallback"] = True
    rebuilt = Tokenizer.from_str(json.dumps(state))
    assert [rebuilt.id_to_token(i) for i in range(len(SPECIAL_TOKENS))] == list(SPECIAL_TOKENS)
    return rebuilt


# ---------------------------------------------------------------------------------------------
# Tokenizing a split with a trained tokenizer
# ---------------------------------------------------------------------------------------------

_TOKENIZE_VERSION = "1"

TOKENIZED_FEATURES = datasets.Features(
    {
        "input_ids": datasets.List(datasets.Value("int32")),
        "labels": datasets.List(datasets.Value("int32")),
        "src_len": datasets.Value("int32"),
        "tgt_len": datasets.Value("int32"),
    }
)


# ---------------------------------------------------------------------------------------------
# Tokenization, cached
# ---------------------------------------------------------------------------------------------


def load_tokenizer(path: str):
    """The tokenizer that `train_tokenizer` saved (a folder, or a Hub id), or an `AiaynError` naming it."""
    from transformers import AutoTokenizer

    from ..lookup import check_local

    check_local(path, key=None, what="tokenizer")  # a missing folder is not a Hub id to look up
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, KeyError, TypeError) as err:  # TypeError: a config.json that is no object
        raise AiaynError(f"cannot load the tokenizer {path}: {first_line(err)}") from None


def default_cache_dir() -> Path:
    """Where tokenized splits are cached by default: under the `datasets` cache."""
    return Path(datasets.config.HF_DATASETS_CACHE) / "aiayn" / "tokenized"


def tokenize_split(
    dataset: datasets.Dataset,
    tokenizer,
    max_length: int | None = None,
    num_proc: int | None = None,
    cache_dir: str | Path | None = None,
) -> datasets.Dataset:
    """Tokenize a `source`/`target` dataset into `input_ids`, `labels`, `src_len`, `tgt_len`.

    Args:
        dataset: the output of `load_split` (or any dataset with string columns `source`, `target`).
        tokenizer: the tokenizer of `train_tokenizer` (a `transformers` fast tokenizer whose
            post-processor appends `</s>`), or a `tokenizers.Tokenizer`.
        max_length: drop pairs with a side longer than this many tokens, `</s>` included. The number
            dropped is attached as `result.num_too_long` (0 without `max_length`).
        num_proc: processes for `datasets.map`.
        cache_dir: folder of the Arrow cache files (default: `default_cache_dir()`). The file is
            named after the dataset's fingerprint, the tokenizer and `max_length`, so that the same
            call on the same data loads it instead of tokenizing again; `result.cache_files` names it.
    """
    missing = {"source", "target"} - set(dataset.column_names)
    if missing:
        raise AiaynError(
            f"cannot tokenize: the dataset has no column {', '.join(sorted(missing))} "
            f"(columns: {', '.join(dataset.column_names)})"
        )
    if max_length is not None and max_length < 2:
        raise AiaynError(f"must be at least 2 tokens (one and </s>), got {max_length}", key="max_length")
    backend = _with_large_cache(getattr(tokenizer, "backend_tokenizer", tokenizer))
    key = xxhash.xxh3_128_hexdigest(
        "|".join([_TOKENIZE_VERSION, dataset._fingerprint, backend.to_str(), str(max_length)]).encode()
    )
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Arrow in, Arrow out: a third faster than Python lists on Multi30k.
    tokenized = (
        dataset.select_columns(["source", "target"])
        .with_format("arrow")
        .map(
            _encode_pairs,
            batched=True,
            batch_size=1000,
            num_proc=num_proc,
            remove_columns=["source", "target"],
            features=TOKENIZED_FEATURES,
            fn_kwargs={"tokenizer": backend, "max_length": max_length},
            cache_file_name=str(cache_dir / f"tokenized-{key}.arrow"),
            new_fingerprint=key,
            desc="Tokenizing",
        )
        .with_format(None)
    )
    tokenized.num_too_long = len(dataset) - len(tokenized)
    return tokenized


def _with_large_cache(tokenizer: Tokenizer, words: int = 1 << 18) -> Tokenizer:
    """A copy of a BPE tokenizer that remembers the merges of up to `words` words (the default, 10,000,
    is too few for a corpus' vocabulary: a third faster on Multi30k). Other models are returned as they are."""
    state = json.loads(tokenizer.to_str())
    model = state["model"]
    if model.get("type") != "BPE" or model.get("dropout"):
        return tokenizer
    copy = Tokenizer.from_str(tokenizer.to_str())
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    options = (
        "unk_token",
        "continuing_subword_prefix",
        "end_of_word_suffix",
        "fuse_unk",
        "byte_fallback",
        "ignore_merges",
    )
    copy.model = models.BPE(
        vocab=model["vocab"],
        merges=merges,
        cache_capacity=words,
        **{name: model[name] for name in options if model.get(name) is not None},
    )
    return copy


def _encode_pairs(batch: pa.Table, tokenizer: Tokenizer, max_length: int | None) -> pa.Table:
    columns = {}
    for ids_name, length_name, text_name in (("input_ids", "src_len", "source"), ("labels", "tgt_len", "target")):
        ids = [encoding.ids for encoding in tokenizer.encode_batch_fast(batch.column(text_name).to_pylist())]
        columns[ids_name], columns[length_name] = _list_array(ids)
    table = pa.table(columns)
    if max_length is not None:
        fits = pc.and_(pc.less_equal(table["src_len"], max_length), pc.less_equal(table["tgt_len"], max_length))
        table = table.filter(fits)
    return table


def _list_array(rows: list[list[int]]) -> tuple[pa.ListArray, pa.Int32Array]:
    """`rows` as an Arrow list<int32> array, and their lengths, without a Python-level loop per id."""
    lengths = np.fromiter(map(len, rows), dtype=np.int32, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat)), pa.array(lengths)


# ---------------------------------------------------------------------------------------------
# Batches of about max_tokens tokens, grouped by length
# ---------------------------------------------------------------------------------------------


def check_output_dir(output_dir: Path, overwrite: bool, inputs=()) -> Path:
    """Raise `AiaynError` unless `output_dir` may be written (`files.check_output_folder`): absent, empty,
    or with `overwrite` a folder holding only a tokenizer's files; never one of `inputs` (the corpus'
    files and folders) or a folder holding one."""
    return check_output_folder(
        output_dir, own=is_tokenizer_file, what="a tokenizer", overwrite=overwrite, inputs=inputs, key="output"
    )


def corpus_inputs(spec: DataSpec, split: str) -> list[Path]:
    """The files and folders a split of local data is read from, which no output may replace."""
    named = [spec.data_dir, spec.source_file, spec.target_file, spec.data_file]
    return [Path(p) for p in named if p is not None and "{split}" not in str(p)] + split_files(spec, split)


def is_tokenizer_file(path: Path) -> bool:
    """A file `save_pretrained` writes for a tokenizer (a tokenizer folder holds nothing else)."""
    return path.name in TOKENIZER_FILES and path.is_file() and not path.is_symlink()


def save_atomically(tokenizer: PreTrainedTokenizerFast, output_dir: Path, overwrite: bool = False, inputs=()) -> None:
    """`save_pretrained` into a temporary sibling folder, then rename it to `output_dir`."""
    output_dir = check_output_dir(output_dir, overwrite, inputs)
    with staging_dir(output_dir) as staging:  # fsynced, renamed; removed on any error
        tokenizer.save_pretrained(staging)


__all__ = [
    "BOS_ID",
    "BYTE_TOKENS",
    "EOS_ID",
    "MODELS",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "UNK_ID",
    "TOKENIZED_FEATURES",
    "TOKENIZER_FILES",
    "check_output_dir",
    "default_cache_dir",
    "is_tokenizer_file",
    "load_tokenizer",
    "save_atomically",
    "tokenize_split",
    "train_tokenizer",
]
