"""`aiayn serve`: the API of `app.py` on uvicorn, stopped gracefully by SIGTERM or SIGINT.

On SIGTERM or SIGINT uvicorn stops accepting connections, lets every request in flight get its
answer, then the batcher stops and the process exits 0 (a second SIGINT quits at once).
"""

from __future__ import annotations

import json
import signal

from ..errors import AiaynError
from ..hub.publish import recipe_languages
from .app import create_app
from .limits import Limits


def serve(
    model: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    device: str | None = None,
    dtype: str | None = None,
    threads: int | None = None,
    limits: Limits | None = None,
    log_level: str = "info",
    engine: str = "torch",
    decoding: dict | None = None,
    languages: dict | None = None,
) -> None:
    """Load `model` (a folder or a Hub id) and serve it until SIGTERM or SIGINT, decoding with `engine`;
    `decoding`: options that replace the model's generation_config ones for requests that do not set them;
    `languages`: `source_lang` and `target_lang` where the recipe beside the model does not say (or says otherwise)."""
    import torch
    import uvicorn

    from ..decoding.translator import Translator

    if threads is not None:
        torch.set_num_threads(threads)
    translator = Translator.from_pretrained(model, device=device, dtype=dtype, engine=engine)
    translator.defaults = {k: v for k, v in (decoding or {}).items() if v is not None}
    translator.decoding_options()  # the defaults can be decoded with (else one line, before listening)
    info = {"model": model, **recipe_languages(model), **{k: v for k, v in (languages or {}).items() if v}}
    app = create_app(translator, limits, info)
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="on", access_log=False, http=json_errors_protocol()
    )
    server = uvicorn.Server(config)
    # uvicorn re-raises the signal that stopped it once it is done; a handler that does nothing
    # turns that into a normal return, so a graceful stop exits 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: None)
    try:
        server.run()
    except SystemExit:  # uvicorn exits when it cannot listen; it has said why
        server.started = False
    if not server.started:
        raise AiaynError(
            f"{{host}} {host} {{port}} {port}: could not listen there (see the message above)",
            mentions=("host", "port"),
        )


def json_errors_protocol():
    """uvicorn's HTTP protocol (the one it would choose), answering a request that is not HTTP with the
    API's JSON error shape instead of its plain text."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class JsonErrors(AutoHTTPProtocol):
        def send_400_response(self, msg: str) -> None:
            body = json.dumps({"error": f"not a valid HTTP request ({msg.rstrip('.').lower()})"}).encode()
            head = f"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            self.transport.write(head.encode("ascii") + b"connection: close\r\n\r\n" + body)
            self.transport.close()

    return JsonErrors
