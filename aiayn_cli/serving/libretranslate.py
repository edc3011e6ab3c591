"""LibreTranslate's API on `aiayn serve`, for the clients that speak it (`libretranslatepy`,
`deep-translator`'s `LibreTranslator`, LibreTranslate's browser extensions and apps).

    POST /translate            q (a string or a list of strings), source, target, format (text),
                               alternatives (0 .. beam - 1), api_key (accepted, not needed); as JSON,
                               a form, or query parameters (deep-translator sends those)
                               -> {"translatedText": "..."} or {"translatedText": [...]},
                                  with "alternatives" when asked for
    GET  /languages            [{"code": "en", "name": "English", "targets": ["de"]}, {"code": "de", ...}]
    GET  /frontend/settings    the character limit and the language pair, as LibreTranslate's page reads them

A request is translated as `POST /v1/translate` translates it (`requests.translate_request`): the same
limits (sentences per request, characters per sentence, body size), the same batcher, the decoding
defaults of the server. Errors have LibreTranslate's shape and status: `{"error": "one line"}`, 400
for a bad request (413 for a body over the size limit, as everywhere on the server).

The model reads one language and writes one (the recipe saved beside it, or `aiayn serve
--source-lang --target-lang`): `source` must be that language, or `auto` (taken as that language:
nothing is detected), and `target` the other; where the server does not know them, any codes pass.
"""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from ..decoding.translator import Translator
from ..errors import AiaynError
from .limits import Limits
from .requests import NESTED_TOO_DEEPLY, TranslateRequest, error, too_deep, translate_request

# The languages' English names, for GET /languages (a code not listed is its own name).
LANGUAGE_NAMES = {
    "ar": "Arabic",
    "cs": "Czech",
    "da": "Danish",
    "de": "German",
    "el": "Greek",
    "en": "English",
    "es": "Spanish",
    "et": "Estonian",
    "fi": "Finnish",
    "fr": "French",
    "hi": "Hindi",
    "hu": "Hungarian",
    "it": "Italian",
    "ja": "Japanese",
    "ko": "Korean",
    "lt": "Lithuanian",
    "lv": "Latvian",
    "nl": "Dutch",
    "pl": "Polish",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
    "sv": "Swedish",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "zh": "Chinese",
}


class BadRequest(Exception):
    """A request LibreTranslate would refuse with 400: the message is the error's one line."""


def add_libretranslate_routes(app: FastAPI, translator: Translator, limits: Limits, info: dict) -> None:
    """Add LibreTranslate's routes to `app` (made by `app.create_app`, whose batcher decodes them)."""
    source_lang, target_lang = info.get("source_lang"), info.get("target_lang")

    @app.post("/translate", tags=["LibreTranslate"])
    async def translate(request: Request) -> JSONResponse:
        """LibreTranslate's translate: `q` a string or a list, `source`, `target`, `format`, `alternatives`."""
        try:
            fields = await read_fields(request)
            body, alternatives = check_request(fields, translator, source_lang, target_lang)
            results = await translate_request(body, request, translator, limits, field="q")
        except BadRequest as err:
            return error(400, str(err))
        except AiaynError as err:  # a limit, or what the decoder cannot do: LibreTranslate's 400
            return error(400, f"Invalid request: {err}")
        texts = [hyps[0][0] if hyps else "" for hyps in results]
        others = [[text for text, _ in hyps[1:]] for hyps in results]
        single = isinstance(body.text, str)
        answer: dict = {"translatedText": texts[0] if single else texts}
        if alternatives:
            answer["alternatives"] = others[0] if single else others
        return JSONResponse(answer)

    @app.get("/languages", tags=["LibreTranslate"])
    async def languages() -> list[dict]:
        """LibreTranslate's languages: the model's source language, with its target as the one target."""
        if source_lang is None or target_lang is None:
            return []
        return [
            {"code": source_lang, "name": language_name(source_lang), "targets": [target_lang]},
            {"code": target_lang, "name": language_name(target_lang), "targets": []},
        ]

    @app.get("/frontend/settings", tags=["LibreTranslate"])
    async def settings() -> dict:
        """What LibreTranslate's own page and some clients read before translating."""
        pair = {}
        if source_lang is not None and target_lang is not None:
            pair = {
                "source": {"code": source_lang, "name": language_name(source_lang)},
                "target": {"code": target_lang, "name": language_name(target_lang)},
            }
        return {
            "charLimit": limits.max_chars,
            "frontendTimeout": 500,
            "apiKeys": False,
            "keyRequired": False,
            "suggestions": False,
            "filesTranslation": False,
            "supportedFilesFormat": [],
            "language": pair,
        }


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code.lower(), code)


async def read_fields(request: Request) -> dict:
    """The request's parameters: the query string's, then the body's (a JSON object or a form)."""
    fields: dict = dict(request.query_params)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        raw = await request.body()
        if too_deep(raw):
            raise BadRequest(f"Invalid request: {NESTED_TOO_DEEPLY}")
        try:
            body = json.loads(raw)
        except RecursionError:
            raise BadRequest(f"Invalid request: {NESTED_TOO_DEEPLY}") from None
        except (ValueError, UnicodeDecodeError) as err:
            raise BadRequest(f"Invalid request: the body is not valid JSON in UTF-8 ({err})") from None
        if not isinstance(body, dict):
            raise BadRequest("Invalid request: the body must be a JSON object")
        fields.update(body)
    elif kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.form()
        for key in form:
            values = form.getlist(key)
            if not all(isinstance(v, str) for v in values):
                raise BadRequest(f"Invalid request: {key} must be text, not a file")
            fields[key] = values if key == "q" and len(values) > 1 else values[0]
    return fields


def _alternatives(value) -> int:
    """`alternatives`: a whole number >= 0 (a JSON number, or the digits of a form's text); LibreTranslate
    truncates 1.9 and takes -1 and true as 0 and 1: here they are refused, as Infinity and 1e400 are."""
    if value is None or value == "":
        return 0
    if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if not isinstance(value, (int, float)) and not _is_number(value):
        raise BadRequest("Invalid request: alternatives parameter is not a number")
    raise BadRequest(
        f"Invalid request: alternatives parameter must be a whole number >= 0, not {json.dumps(value)[:40]}"
    )


def _is_number(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def check_request(fields: dict, translator: Translator, source_lang, target_lang) -> tuple[TranslateRequest, int]:
    """The `/v1/translate` request for LibreTranslate's parameters, and the alternatives asked for;
    `BadRequest` for parameters LibreTranslate would refuse, or that this model cannot honour."""
    for name in ("q", "source", "target"):
        if fields.get(name) in (None, "", []):
            raise BadRequest(f"Invalid request: missing {name} parameter")
    q, source, target = fields["q"], fields["source"], fields["target"]
    if not isinstance(q, str) and not (isinstance(q, list) and all(isinstance(s, str) for s in q)):
        raise BadRequest("Invalid request: q must be a string or a list of strings")
    for name, value in (("source", source), ("target", target)):
        if not isinstance(value, str):
            raise BadRequest(f"Invalid request: {name} must be a language code")
    text_format = fields.get("format") or "text"
    if text_format == "html":
        raise BadRequest("html format is not supported by this server: send plain text (format text)")
    if text_format != "text":
        raise BadRequest(f"{text_format} format is not supported")
    if source_lang is not None and source.lower() not in ("auto", source_lang.lower()):
        raise BadRequest(f"{source} is not supported: this model translates {source_lang} to {target_lang}")
    if target_lang is not None and target.lower() != target_lang.lower():
        raise BadRequest(f"{target} is not supported: this model translates {source_lang} to {target_lang}")
    alternatives = _alternatives(fields.get("alternatives"))
    beam = translator.decoding_options().num_beams
    if alternatives > beam - 1:
        raise BadRequest(f"Invalid request: alternatives parameter must be <= {beam - 1} (the beam holds {beam})")
    try:
        body = TranslateRequest(text=q, nbest=alternatives + 1)
    except ValidationError as err:
        raise BadRequest(f"Invalid request: {err.errors()[0].get('msg', 'invalid')}") from None
    return body, alternatives


__all__ = ["LANGUAGE_NAMES", "add_libretranslate_routes", "check_request", "read_fields"]
