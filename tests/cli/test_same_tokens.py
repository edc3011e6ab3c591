"""One sentence, one answer: by default `aiayn translate`, `aiayn attention`, `aiayn serve`'s
`/v1/translate` and the Python `Translator` decode in the same precision (`DEFAULT_INFERENCE_PRECISION`,
fp32), so the same model gives the same tokens in each.

The sentences are ones whose translation by this random model moves between fp32 and bf16, so that a
command defaulting to bf16 where the CPU computes it natively (as `translate` once did) fails here on
such CPUs (AVX512-BF16, AMX); on others the check is the commands' agreement in fp32.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("fastapi")

from helpers import run_cli, save_varied_model, sentences  # noqa: E402
from live_server import post, serve_in_thread  # noqa: E402

SENTENCES = [sentences(40, seed=1)[i] for i in (3, 18, 28, 32)]


def test_translate_attention_serve_and_translator_give_the_same_tokens_by_default(tmp_path, monkeypatch, capsys):
    import uvicorn

    import aiayn_cli.serving.server as server
    from aiayn_cli.decoding.translator import Translator
    from aiayn_cli.precision import DEFAULT_INFERENCE_PRECISION

    model = str(save_varied_model(tmp_path / "m"))
    translator = Translator.from_pretrained(model)
    assert DEFAULT_INFERENCE_PRECISION == "fp32" and translator.precision == "float32"
    python_api = translator.translate(SENTENCES)

    code, out, err = run_cli("translate", "-m", model, *SENTENCES, capsys=capsys)
    assert code == 0, err
    translate = out.splitlines()

    code, out, err = run_cli("attention", "-m", model, *SENTENCES, capsys=capsys)
    assert code == 0, err
    attention = re.findall(r"^translation \(the model's beam search\): (.*)$", out, re.M)

    served = {}  # `aiayn serve` as the command builds it, its app served here on 127.0.0.1
    create_app = server.create_app
    with monkeypatch.context() as patched:
        patched.setattr(server, "create_app", lambda t, *a: served.setdefault("app", create_app(t, *a)))
        patched.setattr(uvicorn.Server, "run", lambda self: setattr(self, "started", True))  # listens below
        code, _, err = run_cli("serve", "-m", model, capsys=capsys)
    assert code == 0, err
    with serve_in_thread(served["app"]) as url:
        status, answer = post(f"{url}/v1/translate", {"text": SENTENCES})
    assert status == 200, answer
    serve = [translation["text"] for translation in answer["translations"]]

    assert translate == attention == serve == python_api and len(python_api) == len(SENTENCES)
    bf16 = Translator.from_pretrained(model, dtype="bf16").translate(SENTENCES)
    assert bf16 != python_api or not _native_bf16()  # the sentences tell the precisions apart here


def _native_bf16() -> bool:
    from aiayn_cli.precision import native_bf16

    return native_bf16("cpu")[0]
