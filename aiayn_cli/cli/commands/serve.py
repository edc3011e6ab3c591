"""`aiayn serve`: translate over HTTP (FastAPI + uvicorn), with a page for people at `/`."""

from __future__ import annotations

from typing import Annotated

import typer

from ...errors import AiaynError
from ...lookup import check_hub_model
from ...precision import inference_precision
from ...serving.limits import Limits
from .. import options

LIMITS = "Limits and batching"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's


def serve(
    model: options.ModelOpt = ...,
    host: Annotated[
        str,
        typer.Option(
            "--host", metavar="ADDRESS", help="Address to listen on (0.0.0.0: every interface; mind who can reach it)."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, metavar="N", help="Port to listen on.")] = 8000,
    device: Annotated[str, options.device_option()] = "auto",
    precision: Annotated[options.Precision, options.precision_option()] = options.PRECISION,
    quantization: Annotated[options.Quantization, options.quantization_option()] = "none",
    threads: Annotated[int | None, options.threads_option()] = None,
    engine: options.EngineOpt = "torch",
    source_lang: Annotated[
        str | None,
        typer.Option(
            "--source-lang",
            "-s",
            metavar="LANG",
            help="The language the model reads, for LibreTranslate's API (default: the recipe saved beside the model).",
            show_default=False,
        ),
    ] = None,
    target_lang: Annotated[
        str | None,
        typer.Option(
            "--target-lang", "-t", metavar="LANG", help="The language it writes (as --source-lang).", show_default=False
        ),
    ] = None,
    length_penalty_style: Annotated[
        str | None,
        typer.Option(
            "--length-penalty-style",
            metavar="gnmt|hf",
            help="The length penalty of requests that do not choose one: gnmt ((5 + |Y|) / 6)^alpha, the paper's; "
            "hf |Y|^alpha, as CTranslate2 (default: the model's generation_config).",
            show_default=False,
        ),
    ] = None,
    max_body_bytes: Annotated[
        int,
        typer.Option(
            "--max-body-bytes", min=1, metavar="N", rich_help_panel=LIMITS, help="Largest request body (413 above)."
        ),
    ] = Limits.max_body_bytes,
    max_sentences: Annotated[
        int,
        typer.Option(
            "--max-sentences", min=1, metavar="N", rich_help_panel=LIMITS, help="Sentences per request (422 above)."
        ),
    ] = Limits.max_sentences,
    max_chars: Annotated[
        int,
        typer.Option(
            "--max-chars", min=1, metavar="N", rich_help_panel=LIMITS, help="Characters per sentence (422 above)."
        ),
    ] = Limits.max_chars,
    token_budget: Annotated[
        int,
        typer.Option(
            "--token-budget",
            min=1,
            metavar="N",
            rich_help_panel=LIMITS,
            help="Source tokens of the waiting requests decoded together in one round.",
        ),
    ] = Limits.token_budget,
    max_tokens: Annotated[int, options.max_tokens_option(LIMITS)] = Limits.max_tokens,
    batch_size: Annotated[int, options.batch_size_option(LIMITS)] = Limits.batch_size,
    log_level: Annotated[
        str,
        typer.Option("--log-level", metavar="LEVEL", help="uvicorn's: critical, error, warning, info, debug, trace."),
    ] = "info",
) -> None:
    """Serve a model over HTTP: POST /v1/translate, GET /v1/health, GET /v1/model, docs at /docs, a page at /;
    and LibreTranslate's API (POST /translate, GET /languages) for the clients that speak it."""
    if log_level.lower() not in LOG_LEVELS:
        raise AiaynError(f"must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}", key="log_level")
    options.check_engine(engine)
    check_hub_model(model)  # before the libraries load: a missing folder is one line at once
    from ...serving.server import serve as run_server

    limits = Limits(
        max_body_bytes=max_body_bytes,
        max_sentences=max_sentences,
        max_chars=max_chars,
        token_budget=token_budget,
        max_tokens=max_tokens,
        batch_size=batch_size,
    )
    dtype = inference_precision(precision, quantization)
    run_server(
        model,
        host,
        port,
        device=device,
        dtype=dtype,
        threads=threads,
        limits=limits,
        log_level=log_level.lower(),
        engine=engine,
        decoding={"length_penalty_style": length_penalty_style},
        languages={"source_lang": source_lang, "target_lang": target_lang},
    )
