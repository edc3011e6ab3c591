"""A tiny model served on 127.0.0.1 for the serving tests: in a thread of the test process, or as
`aiayn serve` in a subprocess (for signals)."""

from __future__ import annotations

import contextlib
import json
import random
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from helpers import cli_command, cli_env


def random_sentences(n: int, seed: int = 0, vocab_size: int = 72) -> list[str]:
    """Sentences of 1 to 12 words of the word-level test vocabulary (w0 .. w67)."""
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(vocab_size - 4)}" for _ in range(rng.randint(1, 12))) for _ in range(n)]


@contextlib.contextmanager
def serve_in_thread(app):
    """Run `app` on uvicorn in a background thread; yields its base URL (http://127.0.0.1:PORT)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)


@contextlib.contextmanager
def serve_in_subprocess(model: Path, *args: str):
    """`aiayn serve --model MODEL --port 0 ARGS...`; yields (process, base URL) once it listens."""
    process = subprocess.Popen(
        cli_command("serve", "--model", model, "--port", "0", *args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    try:
        url = None
        for line in process.stderr:  # uvicorn logs to stderr
            match = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
            if match:
                url = match.group(1)
                break
        if url is None:
            raise RuntimeError(f"aiayn serve did not start (exit code {process.wait(timeout=60)})")
        threading.Thread(target=process.stderr.read, daemon=True).start()  # keep the pipe drained
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=60)


def post(url: str, body, timeout: float = 120, content_type: str = "application/json") -> tuple[int, dict]:
    """POST `body` (bytes, or an object sent as JSON); returns (status, the JSON answer)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, method="POST")
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def get(url: str, timeout: float = 60) -> tuple[int, dict]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, json.loads(response.read())
