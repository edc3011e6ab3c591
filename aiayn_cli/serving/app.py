"""The HTTP API of `aiayn serve`, on FastAPI: translate, health, model information, and a page.

    from aiayn_cli.decoding import Translator
    from aiayn_cli.serving.app import create_app
    from aiayn_cli.serving.limits import Limits

    app = create_app(Translator.from_pretrained("runs/base"), Limits(max_sentences=64))
    # uvicorn.run(app, host="127.0.0.1", port=8000), or `aiayn serve --model runs/base`

`POST /v1/attention` answers one sentence's attention as the explorer draws it (`serving/attention.py`),
and the page at `/` has the explorer's "look inside" view of it.

`POST /v1/translate` takes the options of `aiayn translate` (same names without dashes, same
defaults: the model's generation_config) and answers what `aiayn translate` prints for the same
sentences. Every error is one JSON object `{"error": "one line"}` with its status: 400 for a body
that is not JSON, not UTF-8 or nested too deeply, and for a request that is not HTTP (`server.py`),
413 for a body over the size limit, 422 for a request that breaks the schema (its types strict:
`"beam": "4"` is refused) or a limit (sentences per request, characters per sentence) or asks for what
this version cannot do (word alignments).

LibreTranslate's API is answered too (`libretranslate.py`: `POST /translate`, `GET /languages`),
through the same checks and the same batcher, with LibreTranslate's statuses.
"""

from __future__ import annotations

import contextlib
import importlib.resources
from dataclasses import asdict

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException

from ..decoding.translator import Translator
from ..errors import AiaynError
from ..inspection.explorer import with_explorer
from .api_page import install_api_page
from .attention import install_attention
from .batcher import DynamicBatcher
from .libretranslate import add_libretranslate_routes
from .limits import Limits
from .requests import NESTED_TOO_DEEPLY, JsonDepth, TranslateRequest, error, translate_request

# ---------------------------------------------------------------------------------------------
# The answers (the request is `requests.py`'s; both are in the OpenAPI schema at /openapi.json and
# the docs at /docs)
# ---------------------------------------------------------------------------------------------


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="log p(y | x) / lp(|y|), |y| counting </s>.")


class Translation(BaseModel):
    text: str = Field(description="The best translation ('' for an empty or skipped sentence).")
    score: float | None = Field(description="Its score (null for an empty or skipped sentence).")
    hypotheses: list[Hypothesis] = Field(description="The nbest hypotheses, best first.")


class TranslateResponse(BaseModel):
    translations: list[Translation]


class ErrorResponse(BaseModel):
    error: str


ERRORS = {status: {"model": ErrorResponse} for status in (400, 413, 422)}


# ---------------------------------------------------------------------------------------------
# The application
# ---------------------------------------------------------------------------------------------


def create_app(translator: Translator, limits: Limits | None = None, info: dict | None = None) -> FastAPI:
    """The FastAPI application that serves `translator`; `info` is added to `GET /v1/model`."""
    limits = limits or Limits()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher = DynamicBatcher(translator, limits.token_budget, limits.max_tokens, limits.batch_size)
        batcher.start()
        app.state.batcher = batcher
        yield
        await batcher.stop()  # uvicorn has answered every request by now

    app = FastAPI(
        title="aiayn",
        summary="Translation with the Transformer of 'Attention Is All You Need'.",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc load from a CDN: /docs is drawn here, offline
        redoc_url=None,
    )
    install_api_page(app)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    install_error_handlers(app)
    page = with_explorer(importlib.resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8"))

    @app.post("/v1/translate", response_model=TranslateResponse, responses=ERRORS)
    async def translate(body: TranslateRequest, request: Request) -> TranslateResponse:
        """Translate one sentence or a list: what `aiayn translate` prints for the same sentences and options."""
        results = await translate_request(body, request, translator, limits)
        return TranslateResponse(translations=[as_translation(hyps) for hyps in results])

    @app.get("/v1/health")
    async def health(request: Request) -> dict:
        """`ok` while the server takes requests; requests waiting and being decoded; rounds decoded so far."""
        batcher = request.app.state.batcher
        return {"status": "ok", "waiting": len(batcher.waiting), "decoding": batcher.decoding, "rounds": batcher.rounds}

    @app.get("/v1/model")
    async def model() -> dict:
        """The model's languages and sizes, the decoding defaults and the server's limits."""
        return model_info(translator, limits, info or {})

    install_attention(app, translator, limits, ERRORS)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page)

    add_libretranslate_routes(app, translator, limits, info or {})
    return app


def as_translation(hyps: list[tuple[str, float]]) -> Translation:
    hypotheses = [Hypothesis(text=text, score=score) for text, score in hyps]
    if not hypotheses:
        return Translation(text="", score=None, hypotheses=[])
    return Translation(text=hypotheses[0].text, score=hypotheses[0].score, hypotheses=hypotheses)


def model_info(translator: Translator, limits: Limits, info: dict) -> dict:
    config = translator.model.config
    decoding = asdict(translator.decoding_options())
    return {
        **info,
        "sizes": {
            "vocab_size": config.vocab_size,
            "d_model": config.d_model,
            "d_ff": config.d_ff,
            "num_heads": config.num_heads,
            "num_encoder_layers": config.num_encoder_layers,
            "num_decoder_layers": config.num_decoder_layers,
            "parameters": sum(p.numel() for p in translator.model.parameters()),
            "max_source_tokens": translator.max_source_tokens,
        },
        "decoding": {k: v for k, v in decoding.items() if k != "seed"},
        "device": str(translator.device),
        "engine": translator.engine.name,
        "dtype": translator.precision,
        "limits": asdict(limits),
    }


# ---------------------------------------------------------------------------------------------
# Errors: one line of JSON, the right status
# ---------------------------------------------------------------------------------------------


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AiaynError)
    async def user_error(request: Request, err: AiaynError) -> JSONResponse:
        return error(422, str(err))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0]
        if first.get("type") == "json_invalid":
            position = first.get("loc", ("body", 0))[-1]
            reason = first.get("ctx", {}).get("error", "JSON decode error")
            return error(400, f"the body is not valid JSON: {reason} at character {position}")
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "body"
        if where == "body" and first.get("type") == "model_attributes_type":
            return error(422, "the body must be a JSON object, sent with Content-Type: application/json")
        return error(422, f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        message = str(err.detail)
        if err.status_code == 400 and message == "There was an error parsing the body":
            nested = isinstance(err.__cause__, RecursionError)
            message = NESTED_TOO_DEEPLY if nested else "the body is not valid JSON in UTF-8"
        return error(err.status_code, message)


class BodyTooLarge(HTTPException):
    def __init__(self, max_bytes: int):
        super().__init__(413, f"the body is larger than the limit of {max_bytes} bytes")


class NestedTooDeeply(HTTPException):
    def __init__(self):
        super().__init__(400, NESTED_TOO_DEEPLY)


class BodyLimit:
    """ASGI middleware: 413 for a body over `max_bytes`, by its Content-Length or as it arrives; and for
    the JSON body of a /v1/ route, 400 where it nests deeper than `MAX_JSON_DEPTH`, read as it arrives,
    before FastAPI parses it (whose parser's own limit moves with Python's recursion limit). LibreTranslate's
    routes read their bodies themselves and check them with the same limit, in their own words."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            await error(413, BodyTooLarge(self.max_bytes).detail)(scope, receive, send)
            return
        received = 0
        kind = Headers(scope=scope).get("content-type", "").split(";")[0].strip().lower()
        as_json = kind == "application/json" or kind.endswith("+json")  # what FastAPI parses as JSON
        depth = JsonDepth() if as_json and scope["path"].startswith("/v1/") else None

        async def counting_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                body = message.get("body", b"")
                received += len(body)
                # FastAPI hands these to the HTTPException handler
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
                if depth is not None and depth.too_deep(body):
                    raise NestedTooDeeply()
            return message

        await self.app(scope, counting_receive, send)
