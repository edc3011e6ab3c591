"""The page at `/` of `aiayn serve`, in headless Chromium: type a sentence, press Translate, read
the translation, which is the API's."""

from __future__ import annotations

import shutil
import tempfile

import pytest

pytest.importorskip("fastapi")
playwright = pytest.importorskip("playwright.sync_api")

from helpers import save_tiny_model  # noqa: E402
from live_server import post, serve_in_thread  # noqa: E402

from aiayn_cli.decoding.translator import Translator  # noqa: E402
from aiayn_cli.serving.app import create_app  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)")
def test_the_page_translates_what_is_typed_as_the_api_does(tmp_path):
    translator = Translator.from_pretrained(str(save_tiny_model(tmp_path / "model")))
    sentence = "w5 w17 w3 w40"
    with serve_in_thread(create_app(translator)) as url:
        status, answer = post(f"{url}/v1/translate", {"text": sentence})
        assert status == 200
        with playwright.sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
            browser = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=ARGS, headless=True)
            try:
                page = browser.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda err: errors.append(str(err)))
                page.goto(f"{url}/")
                assert page.title() == "aiayn: translate"
                page.wait_for_function("document.getElementById('about').textContent.includes('parameters')")
                assert "d_model 64" in page.text_content("#about")
                page.fill("#source", sentence)
                page.click("#translate")
                page.wait_for_function("document.getElementById('translation').textContent.length > 0", timeout=60000)
                shown = page.text_content("#translation")
                # A mistake is shown, not thrown: the server's one-line message appears.
                page.fill("#beam", "33")
                page.click("#translate")
                page.wait_for_function("document.getElementById('status').className === 'error'", timeout=60000)
                message = page.text_content("#status")
            finally:
                browser.close()
    assert shown == answer["translations"][0]["text"] != ""
    assert "beam" in message and "32" in message
    assert errors == []
