"""Translate text with a saved aiayn model: the library behind `aiayn translate`.

    from aiayn_cli.decoding.translator import Translator

    translator = Translator.from_pretrained("runs/base")          # a folder, or a Hub id
    translator.translate(["A man rides a bike.", ""])             # ['Ein Mann fährt Fahrrad.', '']
    translator.translate_nbest(["A dog runs."], nbest=4)          # [[('Ein Hund rennt.', -0.41), ...]]
    for line in translator.translate_stream(sys.stdin):           # one output per input, in order, at once
        print(line, flush=True)

One output per input, always: an empty or whitespace-only input gives an empty output; an input
longer than the model's limit is truncated (with a warning), skipped (an empty output, with a
warning) or an error, as `on_long` says. Inputs are grouped into batches of at most `max_tokens`
source tokens (padding included) and `batch_size` sentences over the inputs sorted by length, and
the outputs are put back in the input order. Decoding defaults come from the model's
generation_config (the paper's §6.1: beam 4, GNMT length penalty 0.6, at most input + 50 tokens);
the keyword options of `translate` override them. Warnings go to the `aiayn_cli.decoding.translator` logger.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

from ..data.lines import decode_lines
from ..errors import AiaynError
from .defaults import BATCH_SIZE, MAX_TOKENS, ON_LONG, DecodingOptions, Hypothesis, check_saved_options
from .engines import Engine, check_engine, make_engine

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..model.modeling_aiayn import AiaynForConditionalGeneration
    from .incremental import PreparedModel

# torch, transformers and the model are imported where a model is loaded or checked, not here:
# `from_converted` translates with a converted model without them.

logger = logging.getLogger(__name__)

DECODING_OPTIONS = {f.name for f in fields(DecodingOptions)}


class Translator:
    """A model and its tokenizer, ready to translate: text <-> token ids, batching and the order of the
    outputs here; the decoding itself by `engine` (`engines.make_engine`): `torch`, aiayn's own decoder
    on the model on `device` in `dtype` (the projections prepared from the weights once: make a new
    `Translator` after changing the weights, as validation during training does), or `ctranslate2`,
    the model converted once into `cache` and decoded by CTranslate2. `engine` may also be an engine
    object (`TorchEngine(model, device, dtype)`, `CTranslate2Engine(model_path, ...)`): then it decodes
    as it was made, and `device`, `dtype` and `cache` are not read.

    `head_masks` (the model's forward arguments `head_mask`, `decoder_head_mask`, `cross_attn_head_mask`,
    `(N, h)` each; None by default) remove heads from every translation: `aiayn heads` sets it.
    """

    def __init__(
        self,
        model: AiaynForConditionalGeneration,
        tokenizer,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        engine: str | Engine = "torch",
        cache: str | Path | None = None,
    ):
        if isinstance(engine, str):
            check_engine(engine)
            check_model(model, tokenizer)
            engine = make_engine(engine, model, tokenizer, device=device, dtype=dtype, cache=cache)
        self._hold(getattr(engine, "model", model), tokenizer, engine)  # the torch engine's: on its device

    def _hold(self, model, tokenizer, engine: Engine) -> None:
        self.model, self.tokenizer, self.engine = model, tokenizer, engine
        # Decoding options that replace the generation_config's for every call (a server's defaults).
        self.defaults: dict = {}
        self._set_limits()

    @property
    def device(self):
        return self.engine.device

    @property
    def precision(self) -> str:
        return self.engine.precision

    @property
    def prepared(self) -> PreparedModel:
        """The torch engine's projections, prepared from the weights (`incremental.PreparedModel`)."""
        return self.engine.prepared

    @property
    def head_masks(self) -> dict[str, torch.Tensor] | None:
        return getattr(self.engine, "head_masks", None)

    @head_masks.setter
    def head_masks(self, masks: dict[str, torch.Tensor] | None) -> None:
        if self.engine.name != "torch" and masks is not None:
            raise AiaynError(
                "head masks change aiayn's own decoder: use them with {engine} torch", mentions=("engine",)
            )
        self.engine.head_masks = masks

    def _set_limits(self) -> None:
        """The longest source the model reads, the longest line tokenized whole, the special ids."""
        model, tokenizer = self.model, self.tokenizer
        config = model.config
        limit = config.max_position_embeddings
        tokenizer_limit = getattr(tokenizer, "model_max_length", None)
        if isinstance(tokenizer_limit, int) and 0 < tokenizer_limit < limit:
            limit = tokenizer_limit
        self.max_source_tokens = limit
        # A line is cut to this many characters before it is tokenized (a 10 MB line would take GBs):
        # no token is longer than `longest` characters, so the cut keeps the tokens the model reads (unless
        # the line holds long runs of characters that make no token, such as spaces).
        longest = max((len(token) for token in tokenizer.get_vocab()), default=1)
        self.max_source_chars = max(limit * (longest + 1), 100_000)  # shorter lines: their exact token count
        self.pad_id, self.eos_id = config.pad_token_id, tokenizer.eos_token_id

    @classmethod
    def from_pretrained(
        cls,
        path_or_hub_id: str,
        device: str | None = None,
        dtype: str | None = None,
        revision: str | None = None,
        engine: str = "torch",
    ) -> Translator:
        """Load a model and its tokenizer from a local folder or a Hub id (`AutoModelForSeq2SeqLM`,
        `AutoTokenizer`), in `dtype` (`aiayn_cli.precision.inference_precision`: fp32 by default, as every command),
        to decode with `engine`: torch or ctranslate2 (`engines`; a local folder is converted under
        `ctranslate2_cache.files_key`, which `from_converted` finds without loading the model)."""
        from ..model.loading import load_pretrained

        check_engine(engine)  # a wrong name is refused before the model loads
        model, tokenizer = load_pretrained(path_or_hub_id, revision=revision, key="model")
        check_saved_options(model, path_or_hub_id)
        check_model(model, tokenizer)
        key = None
        if engine == "ctranslate2" and revision is None and Path(path_or_hub_id).is_dir():
            from .ctranslate2_cache import files_key

            key = files_key(path_or_hub_id)
        return cls(model, tokenizer, engine=make_engine(engine, model, tokenizer, device=device, dtype=dtype, key=key))

    @classmethod
    def from_converted(
        cls, model_dir: str | Path, device: str | None = None, dtype: str | None = None, threads: int | None = None
    ) -> Translator | None:
        """The ctranslate2 engine on the model folder `model_dir` where the cache holds its sound conversion
        (`ctranslate2_cache.cached_folder`), read without torch or transformers (`model_files`: the
        configuration, generation_config and tokenizer from their files); None where it does not
        (`from_pretrained` then loads the model and converts it). `threads`: default one per CPU."""
        from .ctranslate2_cache import cached_folder
        from .engines import ctranslate2_engine
        from .model_files import FilesTokenizer, ModelFiles

        if not Path(model_dir).is_dir():
            return None
        found = cached_folder(model_dir)
        if found is None:
            return None
        folder, generation = found
        model = ModelFiles(model_dir, generation)
        translator = cls.__new__(cls)
        tokenizer = FilesTokenizer(model_dir, eos_token_id=model.config.eos_token_id)
        translator._hold(model, tokenizer, ctranslate2_engine(folder, model, device, dtype, threads))
        return translator

    # -----------------------------------------------------------------------------------------
    # Options and inputs
    # -----------------------------------------------------------------------------------------

    def decoding_options(self, **overrides) -> DecodingOptions:
        """The model's generation_config, overridden by `defaults`, then by the options given (None keeps
        the value below it)."""
        unknown = (set(overrides) | set(self.defaults)) - DECODING_OPTIONS
        if unknown:
            raise TypeError(f"unknown decoding options: {', '.join(sorted(unknown))}")
        given = {**self.defaults, **{k: v for k, v in overrides.items() if v is not None}}
        options = DecodingOptions.from_generation_config(self.model.generation_config, **given)
        options.validate()
        return options

    def encode(
        self, sentences: list[str], on_long: str = "truncate", first_line: int = 1, source: str = "input"
    ) -> list[list[int] | None]:
        """Token ids of each sentence, or None for an empty output (an empty or whitespace-only line, or a
        long line skipped). Warnings and errors name the line: `first_line` is the number of the first."""
        if on_long not in ON_LONG:
            raise AiaynError(f"{on_long}: choose one of {', '.join(ON_LONG)}", key="on_long")
        texts = [(i, s) for i, s in enumerate(sentences) if s.strip()]
        ids: list[list[int] | None] = [None] * len(sentences)
        if not texts:
            return ids
        cut = self.max_source_chars
        encoded = self.tokenizer([s[:cut] for _, s in texts], add_special_tokens=True, truncation=False, verbose=False)
        limit = self.max_source_tokens
        for (i, text), tokens in zip(texts, encoded["input_ids"]):
            if len(tokens) > limit:
                where = f"{source} line {first_line + i}"
                count = f"{len(tokens)}" if len(text) <= cut else f"more than {len(tokens)}"
                if on_long == "error":
                    raise AiaynError(
                        f"{where}: {count} tokens, more than the model's limit of {limit} "
                        "({on_long}: truncate or skip)",
                        mentions=("on_long",),
                    )
                if on_long == "skip":
                    logger.warning(
                        "%s: %s tokens, more than the model's limit of %d: skipped (empty output)", where, count, limit
                    )
                    continue
                logger.warning("%s: %s tokens, more than the model's limit of %d: truncated", where, count, limit)
                tokens = tokens[: limit - 1] + [self.eos_id] if tokens[-1] == self.eos_id else tokens[:limit]
            ids[i] = tokens
        return ids

    # -----------------------------------------------------------------------------------------
    # Translation
    # -----------------------------------------------------------------------------------------

    def translate(
        self,
        sentences: list[str],
        *,
        on_long: str = "truncate",
        max_tokens: int = MAX_TOKENS,
        batch_size: int = BATCH_SIZE,
        progress: bool = False,
        first_line: int = 1,
        source: str = "input",
        **options,
    ) -> list[str]:
        """One translation per sentence (the best hypothesis); `options` are `DecodingOptions` fields."""
        results = self.translate_nbest(
            sentences,
            on_long=on_long,
            max_tokens=max_tokens,
            batch_size=batch_size,
            progress=progress,
            first_line=first_line,
            source=source,
            **options,
        )
        return [hyps[0][0] if hyps else "" for hyps in results]

    def translate_nbest(
        self,
        sentences: list[str],
        *,
        on_long: str = "truncate",
        max_tokens: int = MAX_TOKENS,
        batch_size: int = BATCH_SIZE,
        progress: bool = False,
        first_line: int = 1,
        source: str = "input",
        **options,
    ) -> list[list[tuple[str, float]]]:
        """Each sentence's hypotheses, best first, as (text, score): `nbest` of them (default 1), or none
        for an empty output. The score is log p(y | x) / lp(|y|), |y| counting `</s>`."""
        results = self.hypotheses(
            sentences,
            on_long=on_long,
            max_tokens=max_tokens,
            batch_size=batch_size,
            progress=progress,
            first_line=first_line,
            source=source,
            **options,
        )
        return [[(self.detokenize(h.tokens), h.score) for h in hyps] for hyps in results]

    def hypotheses(
        self,
        sentences: list[str],
        *,
        on_long: str = "truncate",
        max_tokens: int = MAX_TOKENS,
        batch_size: int = BATCH_SIZE,
        progress: bool = False,
        first_line: int = 1,
        source: str = "input",
        **options,
    ) -> list[list[Hypothesis]]:
        """`translate_nbest`'s hypotheses as the search returns them: token ids (`detokenize` gives the
        text), score and log-probability."""
        decoding = self.decoding_options(**options)
        ids = self.encode(list(sentences), on_long=on_long, first_line=first_line, source=source)
        results: list[list[Hypothesis]] = [[] for _ in ids]
        todo = [i for i, tokens in enumerate(ids) if tokens is not None]
        bar = _progress_bar(len(sentences), progress)
        bar.update(len(sentences) - len(todo))
        try:
            for batch in make_batches([len(ids[i]) for i in todo], max_tokens, batch_size):
                rows = [todo[j] for j in batch]
                for i, sentence_hyps in zip(rows, self._decode([ids[i] for i in rows], decoding)):
                    results[i] = sentence_hyps
                bar.update(len(rows))
        finally:
            bar.close()
        return results

    def translate_stream(
        self, lines: Iterable[str], *, group_size: int = BATCH_SIZE, with_scores: bool = False, **kwargs
    ) -> Iterator:
        """Translate lines as they arrive: yields one result per line, in order, as soon as it is ready.

        A background thread reads `lines`; each time the translator is free it takes the lines that
        have arrived (at least one, at most `group_size`) and translates them together, so that an
        interactive user gets each translation at once and a pipe gets batches. Yields strings, or
        lists of (text, score) with `with_scores=True`. `kwargs` are those of `translate_nbest`.
        """
        arrived: queue.Queue = queue.Queue()
        end = object()

        def read() -> None:
            try:
                for line in lines:
                    arrived.put(line)
            except BaseException as err:  # handed to the consumer, which raises it
                arrived.put(err)
            arrived.put(end)

        threading.Thread(target=read, name="aiayn-translate-reader", daemon=True).start()
        line_number, finished = kwargs.pop("first_line", 1), False
        while not finished:
            group = [arrived.get()]
            while len(group) < group_size:
                try:
                    group.append(arrived.get_nowait())
                except queue.Empty:
                    break
            if any(item is end for item in group):
                finished, group = True, group[: next(i for i, item in enumerate(group) if item is end)]
            errors = [item for item in group if isinstance(item, BaseException)]
            group = [item for item in group if not isinstance(item, BaseException)]
            if group:
                results = self.translate_nbest(group, first_line=line_number, **kwargs)
                line_number += len(group)
                for hyps in results:
                    yield hyps if with_scores else (hyps[0][0] if hyps else "")
            if errors:
                raise errors[0]

    def _decode(self, sources: list[list[int]], options: DecodingOptions) -> list[list[Hypothesis]]:
        return self.engine.decode(sources, options)

    def detokenize(self, tokens: list[int]) -> str:
        """The text of a hypothesis, on one line (line breaks that a vocabulary may hold become spaces)."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return " ".join(text.splitlines()).strip() if any(c in text for c in LINE_BREAKS) else text.strip()


LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def check_model(model, tokenizer) -> None:
    """An `AiaynError` unless `model` is an aiayn model whose vocabulary is `tokenizer`'s."""
    from ..data.vocabulary import check_tokenizer, model_vocabulary
    from ..model.modeling_aiayn import AiaynForConditionalGeneration

    if not isinstance(model, AiaynForConditionalGeneration):
        raise AiaynError(
            f"not an aiayn model ({type(model).__name__}): aiayn translate needs a model saved by aiayn train"
        )
    check_tokenizer(tokenizer, where="the tokenizer", **model_vocabulary(model.config))


def make_batches(lengths: list[int], max_tokens: int, batch_size: int) -> list[list[int]]:
    """Indices into `lengths`, longest first, grouped so that a batch holds at most `batch_size`
    sentences and at most `max_tokens` tokens once padded (a longer sentence is a batch of its own)."""
    if max_tokens < 1 or batch_size < 1:
        raise AiaynError(
            f"{{max_tokens}} and {{batch_size}} must be >= 1, got {max_tokens} and {batch_size}",
            mentions=("max_tokens", "batch_size"),
        )
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < batch_size and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= max_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _progress_bar(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="sent", disable=not enabled, desc="translating", dynamic_ncols=True)


__all__ = [
    "Translator",
    "decode_lines",
    "make_batches",
]
