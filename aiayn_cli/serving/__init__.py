"""Putting a trained model to work: `aiayn serve` (an HTTP API and a page).

* `app.py`: the FastAPI application (`create_app`): `POST /v1/translate`, `GET /v1/health`,
  `GET /v1/model`, the OpenAPI schema and docs, and the page at `/`.
* `requests.py`: a translation request (`TranslateRequest`), checked against the limits and decoded,
  whichever API it comes by (`/v1/translate`, LibreTranslate's `/translate` in `libretranslate.py`);
  its errors in its own names, as one line of JSON.
* `batcher.py`: `DynamicBatcher`, one worker that decodes together the requests that arrive while
  the model is busy, up to a token budget.
* `limits.py`: `Limits`, what one request may hold (413 / 422 above it) and the batching budget.
* `server.py`: `serve`, uvicorn on the app, with a graceful stop on SIGTERM / SIGINT.

Decoding is `aiayn_cli.decoding.Translator`'s: a request gets what `aiayn translate` prints for the
same sentences and options.
"""
