"""`aiayn attention` as one library call: sentences in, the asked-for files out.

    from aiayn_cli.inspection.report import AttentionRequest, attention_report

    attention_report(AttentionRequest(model="runs/quickstart/averaged", sentences=["A dog sleeps."],
                                      formats=("png", "html"), output=Path("attention")))

Everything is checked before anything is written, and the files are written into a temporary
folder beside the output and moved in at the end: a mistake leaves nothing half-written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import AiaynError
from ..files import check_output_files, node_kind, staging_files
from ..precision import DEFAULT_INFERENCE_PRECISION
from .alignment import align, format_alignment
from .explorer import explorer_html
from .extract import KINDS, Explanation, explain
from .formats import check_picture_size, heatmap_grid, sentence_header, text_table, to_json
from .views import check_layer_head, view

FORMATS = ("png", "html", "text", "json", "align")
FILE_FORMATS = ("png", "html", "json")
FILE_NAMES = {"text": "attention.txt", "align": "alignment.txt", "json": "attention.json", "html": "explorer.html"}


@dataclass
class AttentionRequest:
    model: str
    sentences: list[str] | None = None
    input: Path | None = None
    references: list[str] | None = None
    reference_file: Path | None = None
    output: Path | None = None
    formats: tuple[str, ...] = ("png", "html")
    kinds: tuple[str, ...] = KINDS
    layer: int | None = None
    head: int | None = None
    mean_heads: bool = False
    words: bool = False
    hide_eos: bool = False
    alignment_layer: int | None = None
    device: str = "auto"
    precision: str = DEFAULT_INFERENCE_PRECISION  # auto, fp32, bf16 or fp16: as every command
    decoding: dict = field(default_factory=dict)  # DecodingOptions overrides for the model's own translation
    overwrite: bool = False  # replace files in `output` that aiayn attention did not write (or that were edited)


def attention_report(request: AttentionRequest) -> tuple[list[Path], str]:
    """Explain the sentences and write the formats asked for. Returns the files written and the
    text for standard output (the `text` and `align` formats when there is no output folder)."""
    from ..decoding.translator import Translator

    sources, references = _inputs(request)
    _check_options(request)
    if request.output is not None:  # the output rule, before any work: files of other names stay
        names = _file_names(request, len(sources))
        check_output_files(request.output, names, overwrite=request.overwrite, key="output")
    translator = Translator.from_pretrained(request.model, device=request.device, dtype=request.precision)
    explanations = explain(translator, None, sources, references, **request.decoding)
    for ex in explanations[:1]:  # the same model for all: check the ranges once, before writing
        for kind in request.kinds:
            check_layer_head(ex, kind, request.layer, request.head)
    if "png" in request.formats and request.output is not None:  # every picture can be drawn, before any file
        for number, ex in enumerate(explanations, 1):
            for kind in request.kinds:
                check_picture_size(view(ex, kind, **_narrowing(request)), Path(_png_name(number, kind)))
    texts = {}
    if "text" in request.formats:
        texts[FILE_NAMES["text"]] = _text(explanations, request)
    if "align" in request.formats:
        texts[FILE_NAMES["align"]] = _alignments(explanations, request.alignment_layer)
    if request.output is None:
        return [], "".join(texts.values())
    return _write(explanations, request, texts), ""


def _inputs(request: AttentionRequest) -> tuple[list[str], list[str] | None]:
    if request.sentences and request.input is not None:
        raise AiaynError("give sentences as arguments or {input} FILE, not both", mentions=("input",))
    if request.references and request.reference_file is not None:
        raise AiaynError("give {reference} or {reference_file}, not both", mentions=("reference", "reference_file"))
    sources = list(request.sentences or [])
    if request.input is not None:
        sources = _read_lines(request.input, "--input")
    if not sources:
        raise AiaynError("no sentence: give sentences as arguments or {input} FILE", mentions=("input",))
    references = list(request.references) if request.references else None
    if request.reference_file is not None:
        references = _read_lines(request.reference_file, "--references")
    if references is not None and len(references) != len(sources):
        option = "--references" if request.reference_file is not None else "--reference"
        raise AiaynError(f"{option}: {len(references)} references for {len(sources)} sentences; give one per sentence")
    return sources, references


def _read_lines(path: Path, option: str) -> list[str]:
    kind = node_kind(Path(path))
    if kind == "missing":
        raise AiaynError(f"{option} {path}: no such file")
    if kind not in ("file", "character device", "FIFO"):  # /dev/stdin or a named pipe is read as it comes
        raise AiaynError(f"{option} {path}: is a {kind}, not a file with one sentence per line")
    from ..decoding.translator import decode_lines

    with open(path, "rb") as raw:
        return list(decode_lines(raw, source=str(path)))


def _check_options(request: AttentionRequest) -> None:
    unknown = [f for f in request.formats if f not in FORMATS]
    if unknown:
        raise AiaynError(f"{unknown[0]}: choose among {', '.join(FORMATS)}", key="formats")
    bad_kind = [k for k in request.kinds if k not in KINDS]
    if bad_kind:
        raise AiaynError(f"{bad_kind[0]}: choose among {', '.join(KINDS)}", key="kinds")
    needs_folder = [f for f in request.formats if f in FILE_FORMATS]
    if needs_folder and request.output is None:
        raise AiaynError(
            f"{{formats}} {needs_folder[0]} writes files: give an output folder with -o", mentions=("formats",)
        )


def _file_names(request: AttentionRequest, sentences: int) -> list[str]:
    """The files `_write` makes for these formats and sentences."""
    names = [name for fmt, name in FILE_NAMES.items() if fmt in request.formats]
    if "png" in request.formats:
        names += [_png_name(n, kind) for n in range(1, sentences + 1) for kind in request.kinds]
    return names


def _png_name(number: int, kind: str) -> str:
    return f"sentence{number}_{kind}.png"


def _text(explanations: list[Explanation], request: AttentionRequest) -> str:
    lines = []
    for number, ex in enumerate(explanations, 1):
        lines += sentence_header(number, ex)
        for kind in request.kinds:
            v = view(ex, kind, **_narrowing(request))
            log_probs = _row_log_probs(ex, v, request.words) if kind == "cross" else None
            for li in range(len(v.layers)):
                for hi in range(len(v.heads)):
                    lines += [""] + text_table(v, li, hi, log_probs)
        lines.append("")
    return "\n".join(lines) + "\n"


def _row_log_probs(ex: Explanation, v, words: bool) -> list[float]:
    """log p of each row's target token, or of each word (the sum over its pieces)."""
    values = ex.token_log_probs
    if words:
        values = [sum(lp for lp, w in zip(values, ex.target_words) if w == k) for k in range(max(ex.target_words) + 1)]
    return values[: len(v.rows)]  # `</s>`, if hidden, was the last


def _narrowing(request: AttentionRequest) -> dict:
    return {
        "layer": request.layer,
        "head": request.head,
        "mean_heads": request.mean_heads,
        "words": request.words,
        "hide_eos": request.hide_eos,
    }


def _alignments(explanations: list[Explanation], layer: int | None) -> str:
    return "".join(format_alignment(align(ex, layer)) + "\n" for ex in explanations)


def _write(explanations: list[Explanation], request: AttentionRequest, texts: dict[str, str]) -> list[Path]:
    """Every file is made in a staging folder first and moved into the output folder at the end
    (`files.staging_files`): a failure leaves the output folder as it was."""
    with staging_files(request.output, overwrite=request.overwrite, key="output") as tmp:
        for name, text in texts.items():
            (tmp / name).write_text(text, encoding="utf-8")
        if "json" in request.formats:
            options = {**_narrowing(request), "kinds": list(request.kinds)}
            (tmp / FILE_NAMES["json"]).write_text(to_json(explanations, options), encoding="utf-8")
        if "html" in request.formats:
            notes = []
            if request.words or request.hide_eos:  # eq. (1) is per token: the explorer keeps them all
                notes.append("It shows subword tokens and </s>: --words and --hide-eos apply to png and text.")
            (tmp / FILE_NAMES["html"]).write_text(explorer_html(explanations, notes), encoding="utf-8")
        if "png" in request.formats:
            for number, ex in enumerate(explanations, 1):
                for kind in request.kinds:
                    v = view(ex, kind, **_narrowing(request))
                    title = f"{v.title}: sentence {number}, '{_short(ex.source)}'"
                    heatmap_grid(v, title, tmp / _png_name(number, kind))
        names = sorted(p.name for p in tmp.iterdir())
    return [Path(request.output) / name for name in names]


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["FORMATS", "AttentionRequest", "attention_report"]
