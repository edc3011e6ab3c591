"""`aiayn translate`: translate sentences from arguments, standard input or a file."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from ...decoding.defaults import BATCH_SIZE, MAX_TOKENS
from ...errors import AiaynError
from ...files import STDOUT, check_output_file, node_kind, open_output
from ...lookup import check_hub_model
from ...precision import inference_precision
from .. import options

BATCHING = "Batching and device"


@options.with_decoding_options()
def translate(
    sentences: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="SENTENCE...",
            help="Sentences to translate; without them (and without --input), standard input is read and each "
            "line is translated as soon as it arrives.",
            show_default=False,
        ),
    ] = None,
    model: options.ModelOpt = ...,
    input: Annotated[
        Path | None,
        typer.Option(
            "--input",
            "-i",
            metavar="FILE",
            help="Translate this file, one sentence per line ('-': standard input).",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        options.output_option(
            "Write the translations here (default, or '-': standard output); a device or FIFO is written into, a "
            "file replaced whole at the end."
        ),
    ] = None,
    on_long: Annotated[options.OnLong, options.on_long_option(BATCHING)] = "truncate",
    max_tokens: Annotated[int, options.max_tokens_option(BATCHING)] = MAX_TOKENS,
    batch_size: Annotated[int, options.batch_size_option(BATCHING)] = BATCH_SIZE,
    device: Annotated[str, options.device_option(BATCHING)] = "auto",
    precision: Annotated[options.Precision, options.precision_option(panel=BATCHING)] = options.PRECISION,
    quantization: Annotated[options.Quantization, options.quantization_option(BATCHING)] = "none",
    threads: Annotated[int | None, options.threads_option(BATCHING)] = None,
    alignment: Annotated[
        bool,
        typer.Option(
            "--alignment",
            help="Append ' ||| i-j ...' to each translation: source word i aligned to target word j (from 0), "
            "from the encoder-decoder attention (fairseq's --print-alignment); reads the whole input first.",
        ),
    ] = False,
    alignment_layer: Annotated[
        int | None,
        typer.Option(
            "--alignment-layer",
            metavar="N",
            help="The decoder layer whose averaged heads align (from 1; -1 the last) [default: the last, the best measured].",
            show_default=False,
        ),
    ] = None,
    engine: Annotated[str, options.engine_option(BATCHING)] = "torch",
    progress: Annotated[bool | None, options.progress_option(BATCHING)] = None,
    decoding: dict | None = None,
) -> None:
    """Translate sentences: N lines in, N lines out, in order (an empty line gives an empty line).

    With --nbest N, each input gives N lines 'INDEX ||| TRANSLATION ||| SCORE' (INDEX counts inputs from
    0; SCORE is log p / length penalty; an empty input gives N empty hypotheses of score 0).
    """
    _warnings_to_stderr()
    dtype = inference_precision(precision, quantization)
    options.check_engine(engine)
    if sentences and input is not None:
        raise AiaynError("give sentences as arguments or --input FILE, not both")
    check_hub_model(model)  # before the libraries load: a missing folder is one line at once
    from ...decoding.translator import Translator, decode_lines

    check_paths(input, output, model)
    if alignment and engine != "torch":
        raise AiaynError("reads aiayn's own attention: use it with {engine} torch", key="alignment",
                         mentions=("engine",))  # fmt: skip
    translator = None
    if engine == "ctranslate2":  # converted already: neither torch nor transformers is imported
        # CTranslate2's OpenMP threads sleep rather than spin between operations (unless the user's
        # environment says otherwise): on a busy machine spinning costs more than the decoding itself.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        translator = Translator.from_converted(model, device=device, dtype=dtype, threads=threads)
    if translator is None:
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        translator = Translator.from_pretrained(model, device=device, dtype=dtype, engine=engine)
    decoding = {**(decoding or {}), "on_long": on_long, "max_tokens": max_tokens, "batch_size": batch_size}
    nbest = decoding.get("nbest") or 1
    try:
        if alignment:
            _translate_aligned(translator, sentences, input, output, alignment_layer, decoding)
        elif sentences:
            results = translator.translate_nbest(list(sentences), source="argument", **decoding)
            _write(results, nbest, output)
        elif input is not None and str(input) != "-":
            with open(input, "rb") as raw:
                lines = list(decode_lines(raw, source=str(input)))
            results = translator.translate_nbest(
                lines, source=str(input), progress=options.show_progress(progress), **decoding
            )
            _write(results, nbest, output)
        else:
            stream = translator.translate_stream(
                decode_lines(sys.stdin.buffer, source="stdin"),
                source="stdin",
                with_scores=True,
                progress=bool(progress),  # a stream draws no bar unless asked: it may be typed
                **decoding,
            )
            _write(stream, nbest, output)
    except BrokenPipeError:  # the reader went away (e.g. `| head`): stop quietly
        sys.stderr.close()
        os._exit(0)


def check_paths(input: Path | None, output: Path | None, model=None) -> None:
    """Before the model is loaded: the input is a file, and the output is neither the input nor a file of
    the model's folder (through links too)."""
    if input is not None and str(input) != "-":
        kind = node_kind(input)
        if kind == "folder":
            raise AiaynError(f"--input {input}: is a folder; give a file with one sentence per line")
        if kind == "missing":
            raise AiaynError(f"--input {input}: no such file")
        if kind not in ("file", "character device", "FIFO"):  # /dev/stdin or a named pipe is read as it comes
            raise AiaynError(f"--input {input}: is a {kind}, not a file")
        from ...data.lines import refuse_binary_file

        refuse_binary_file(input, str(input))  # /dev/zero, a binary file: refused before the model loads
    if output is not None:
        check_output_file(output, [input, model], key="output")


def _translate_aligned(translator, sentences, input, output, layer, decoding) -> None:
    """`--alignment`: 'TRANSLATION ||| i-j ...' per input line."""
    from ...decoding.translator import decode_lines
    from ...inspection.alignment import translate_aligned

    if decoding["nbest"] not in (None, 1) or decoding["do_sample"]:
        raise AiaynError("--alignment prints the best translation's alignment: use it without --nbest or --sample")
    if sentences:
        lines, source = list(sentences), "argument"
    elif input is not None and str(input) != "-":
        if not input.is_file():
            raise AiaynError(f"--input {input}: no such file")
        with open(input, "rb") as raw:
            lines, source = list(decode_lines(raw, source=str(input))), str(input)
    else:
        lines, source = list(decode_lines(sys.stdin.buffer, source="stdin")), "stdin"
    search = {k: v for k, v in decoding.items() if k not in ("max_tokens", "batch_size", "on_long", "nbest")}
    results = translate_aligned(translator, lines, layer, on_long=decoding["on_long"], source=source, **search)
    _write([[(f"{text} ||| {links}", 0.0)] for text, links in results], 1, output)


def _write(results: Iterable[list[tuple[str, float]]], nbest: int, output: Path | None) -> None:
    """Write each result as it comes: one line per input, or `nbest` 'INDEX ||| TEXT ||| SCORE' lines."""
    if output is None or str(output) == STDOUT:
        _write_to(sys.stdout.buffer, results, nbest, flush=True)
        return
    with open_output(output, "wb") as out:  # the output rule: a file whole at the end, a device or FIFO as it comes
        _write_to(out, results, nbest, flush=False)


def _write_to(out: BinaryIO, results: Iterable[list[tuple[str, float]]], nbest: int, flush: bool) -> None:
    for index, hyps in enumerate(results):
        if nbest == 1:
            lines = [hyps[0][0] if hyps else ""]
        else:
            hyps = hyps or [("", 0.0)] * nbest  # an empty (or skipped) input: empty hypotheses
            lines = [f"{index} ||| {text} ||| {score:.6f}" for text, score in hyps]
        out.write("".join(line + "\n" for line in lines).encode("utf-8"))
        if flush:
            out.flush()


class _StderrHandler(logging.Handler):
    """Writes to whatever `sys.stderr` is when a record comes (tests swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(self.format(record) + "\n")
        sys.stderr.flush()


def _warnings_to_stderr() -> None:
    """Library warnings (long lines, invalid bytes) as 'warning: ...' lines on stderr."""
    logger = logging.getLogger("aiayn_cli")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("warning: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
        logger.propagate = False
