"""A translation request to `aiayn serve`, whichever API it comes by: the schema of `POST /v1/translate`
(`TranslateRequest`, one field per decoding option: `request_fields.py`), its checks against the
server's limits, its decoding by the app's batcher (`translate_request`), and its errors in the
request's own names (`request_names`), as one line of JSON (`error`).

`app.py` (`/v1/translate`), `libretranslate.py` (LibreTranslate's `/translate`) and `attention.py`
(`/v1/attention`, its errors) take them from here.
"""

from __future__ import annotations

from typing import Literal

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, create_model

from ..decoding.defaults import ON_LONG
from ..decoding.translator import Translator
from ..errors import AiaynError
from .limits import Limits
from .request_fields import REQUEST_FIELDS, request_fields
from .request_fields import decoding_overrides as request_decoding


def request_schema() -> type[BaseModel]:
    """`TranslateRequest`, generated from `DecodingOptions` (`request_fields`): one field per option."""
    fields: dict = {
        "text": (str | list[str], Field(description="A sentence, or a list of sentences (one translation each)."))
    }
    fields.update(request_fields())
    fields["alignment"] = (bool, Field(False, description="Word alignments (not available in this version: 422)."))
    fields["on_long"] = (Literal[ON_LONG], Field("truncate", description="An input longer than the model's limit."))
    return create_model(
        "TranslateRequest",
        __config__=ConfigDict(extra="forbid", strict=True),  # "beam": "4" or true is refused, not read as 4 or 1
        __doc__="The options of `aiayn translate`; those left out take the model's generation_config values "
        "(types strict: a number may be an integer, nothing else stands for another type).",
        **fields,
    )


TranslateRequest = request_schema()


def decoding_overrides(request: BaseModel) -> dict:
    """The `Translator.translate_nbest` options of a request, as `aiayn translate` builds them."""
    return {**request_decoding(request), "on_long": request.on_long}


async def translate_request(
    body: TranslateRequest, request: Request, translator: Translator, limits: Limits, field: str = "text"
) -> list[list[tuple[str, float]]]:
    """Each sentence's hypotheses for a checked request, decoded by the app's batcher; `AiaynError`
    (in the request's names: `field` holds the sentences) for a request that breaks a limit or asks
    for what cannot be decoded."""
    sentences = check_sentences(body, limits, field)
    try:
        options = decoding_overrides(body)
        on_long = options.pop("on_long")
        translator.decoding_options(**options)
        ids = translator.encode(sentences, on_long=on_long, source=f"{field} item", first_line=0)
    except AiaynError as err:  # in the request's own names
        raise AiaynError(request_names(err, field)) from None
    tokens = sum(len(x) for x in ids if x is not None)
    return await request.app.state.batcher.translate(sentences, tokens, {**options, "on_long": on_long})


def check_sentences(body: TranslateRequest, limits: Limits, field: str = "text") -> list[str]:
    """The request's sentences, or `AiaynError` (422) naming the limit it breaks (`field`: the request's
    name for the sentences)."""
    if body.alignment:
        raise AiaynError("alignment: word alignments are not available in this version")
    sentences = [body.text] if isinstance(body.text, str) else list(body.text)
    if len(sentences) > limits.max_sentences:
        raise AiaynError(f"{field}: {len(sentences)} sentences, more than the limit of {limits.max_sentences}")
    for i, sentence in enumerate(sentences):
        check_text(f"{field} item {i}", sentence, limits)
    return sentences


def check_text(name: str, text: str, limits: Limits) -> None:
    """`AiaynError` (422) naming `name` where `text` is longer than the limit or not valid Unicode."""
    if len(text) > limits.max_chars:
        raise AiaynError(f"{name}: {len(text)} characters, more than the limit of {limits.max_chars}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise AiaynError(f"{name}: not valid Unicode (a lone surrogate escape)") from None


def request_names(err: AiaynError, field: str = "text") -> str:
    """A library error in the names of the request's fields."""
    return err.render(lambda key: REQUEST_FIELDS.get(key, key)).replace(f"{field} item line ", f"{field} item ")


# Deeper than any request needs, and well under Python's recursion limit: the JSON parser's own limit
# (a RecursionError) moves with that limit, which other libraries in the process raise. Every route
# that takes JSON checks it before parsing: `app.BodyLimit` for /v1/, `libretranslate.read_fields`.
MAX_JSON_DEPTH = 100
NESTED_TOO_DEEPLY = f"the body's JSON is nested too deeply (more than {MAX_JSON_DEPTH} levels)"


class JsonDepth:
    """How deeply the arrays and objects of a JSON text nest, read as it arrives (`feed` each part; brackets
    inside strings not counted)."""

    def __init__(self) -> None:
        self.depth = self.deepest = 0
        self.in_string = self.escaped = False
        self.opened = 0  # brackets opened in the parts `too_deep` has been given
        self.unread: list[bytes] = []  # those parts, not yet scanned

    def feed(self, raw: bytes) -> int:
        """Read the next part of the text; the deepest nesting so far."""
        depth, deepest, in_string, escaped = self.depth, self.deepest, self.in_string, self.escaped
        for byte in raw:
            if in_string:
                if escaped:
                    escaped = False
                elif byte == 0x5C:  # backslash
                    escaped = True
                elif byte == 0x22:  # quote
                    in_string = False
            elif byte == 0x22:
                in_string = True
            elif byte in (0x5B, 0x7B):  # [ {
                depth += 1
                deepest = max(deepest, depth)
            elif byte in (0x5D, 0x7D):  # ] }
                depth -= 1
        self.depth, self.deepest, self.in_string, self.escaped = depth, deepest, in_string, escaped
        return deepest

    def too_deep(self, raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
        """Whether the text so far, with its next part `raw`, nests deeper than `limit`. A text cannot nest
        deeper than the brackets it opens (counted in C): the parts are scanned, byte by byte, only once
        more than `limit` have opened, which no request of this server's needs."""
        self.opened += raw.count(b"[") + raw.count(b"{")
        self.unread.append(raw)
        if self.opened <= limit:
            return False
        for part in self.unread:
            self.feed(part)
        self.unread.clear()
        return self.deepest > limit


def too_deep(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text `raw` nests deeper than `limit` (`JsonDepth.too_deep`)."""
    return JsonDepth().too_deep(raw, limit)


def json_depth(raw: bytes) -> int:
    """How deeply the arrays and objects of the JSON text `raw` nest (brackets inside strings not counted)."""
    return JsonDepth().feed(raw)


def error(status: int, message: str) -> JSONResponse:
    """The server's one shape of error, whichever API answers: `{"error": "one line"}` with `status`."""
    return JSONResponse({"error": " ".join(message.split())}, status_code=status)


__all__ = [
    "MAX_JSON_DEPTH",
    "NESTED_TOO_DEEPLY",
    "JsonDepth",
    "TranslateRequest",
    "check_sentences",
    "check_text",
    "decoding_overrides",
    "error",
    "json_depth",
    "too_deep",
    "request_names",
    "translate_request",
]
