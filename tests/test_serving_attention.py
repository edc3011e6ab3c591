"""`POST /v1/attention` and the page's "look inside" view: the answer is the explorer's data for the
model's own translation (or a reference), bad requests get /v1/translate's statuses and one JSON line,
and in headless Chromium the drawn row equals the API's weights to 1e-4 for every kind, layer and head
chosen. A random `tiny` model with a word-level vocabulary, fp32."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")

from helpers import save_tiny_model  # noqa: E402
from live_server import post, serve_in_thread  # noqa: E402

from aiayn_cli.decoding.translator import Translator  # noqa: E402
from aiayn_cli.inspection import explain  # noqa: E402
from aiayn_cli.serving.app import create_app  # noqa: E402
from aiayn_cli.serving.limits import Limits  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
SCREENSHOT_DIR = Path(os.environ.get("AIAYN_SCREENSHOTS", Path(__file__).resolve().parent / "screenshots"))
SENTENCE = "w5 w17 w3 w40 w8"
LIMITS = Limits(max_chars=60, attention_max_tokens=12, max_body_bytes=4000)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    translator = Translator.from_pretrained(str(save_tiny_model(tmp_path_factory.mktemp("model") / "m")), dtype="fp32")
    with serve_in_thread(create_app(translator, LIMITS)) as url:
        yield url, translator


def test_the_answer_is_the_explorers_data_for_the_models_translation(served):
    url, translator = served
    status, answer = post(f"{url}/v1/attention", {"text": SENTENCE, "beam": 2})
    assert status == 200
    (ex,) = explain(translator, None, [SENTENCE], num_beams=2)
    (sentence,) = answer["sentences"]
    assert sentence["target"] == ex.target and sentence["target_tokens"] == ex.target_tokens
    assert answer["d_k"] == translator.model.config.d_k
    for kind in ("encoder", "decoder", "cross"):
        got = sentence["kinds"][kind]["attention"]  # [layer][head][query][key]
        for layer, weights in enumerate(ex.attentions(kind)):
            np.testing.assert_allclose(np.array(got[layer]), weights[0].numpy(), atol=1e-5, rtol=0)
    _, translated = post(f"{url}/v1/translate", {"text": SENTENCE, "beam": 2})
    assert translated["translations"][0]["text"] == ex.target  # the same translation as /v1/translate


def test_a_reference_is_explained_by_teacher_forcing(served):
    url, translator = served
    status, answer = post(f"{url}/v1/attention", {"text": SENTENCE, "reference": "w9 w10 w11"})
    assert status == 200
    (sentence,) = answer["sentences"]
    assert sentence["is_reference"] and sentence["target"] == "w9 w10 w11"
    assert sentence["target_tokens"] == ["w9", "w10", "w11", "</s>"]


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"text": ["w1", "w2"]}, 422, "text: Input should be a valid string"),
        ({"text": "   "}, 422, "text: empty"),
        ({"text": "w1 " * 30}, 422, "text: 90 characters, more than the limit of 60"),
        ({"text": "w1 " * 15}, 422, "text: 16 tokens, more than the limit of 12 for attention"),
        ({"text": "w1", "reference": "w2 " * 14}, 422, "reference: 15 tokens, more than the limit of 12"),
        ({"text": "w1", "beam": 33}, 422, "beam: Input should be less than or equal to 32"),
        ({"text": "w1", "colour": "red"}, 422, "colour: Extra inputs are not permitted"),
        ({"text": "w1", "length_penalty": "nan"}, 422, "length_penalty"),
        (b'{"text": "w1"', 400, "the body is not valid JSON"),
        (json.dumps({"text": "w1", "pad": "x" * 5000}).encode(), 413, "larger than the limit of 4000 bytes"),
    ],
)
def test_bad_requests_get_their_status_and_one_json_line(served, body, status, message):
    url, _ = served
    got, answer = post(f"{url}/v1/attention", body)
    assert got == status and list(answer) == ["error"]
    assert message in answer["error"] and "\n" not in answer["error"]


def _drawn_row(page) -> list[float]:
    return page.eval_on_selector_all("svg text.token.key", "els => els.map(e => Number(e.dataset.weight))")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)")
def test_look_inside_draws_the_apis_weights_in_chromium(served):
    playwright = pytest.importorskip("playwright.sync_api")
    url, translator = served
    _, answer = post(f"{url}/v1/attention", {"text": SENTENCE})
    kinds = answer["sentences"][0]["kinds"]
    with playwright.sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        browser = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=ARGS, headless=True,
                                                       viewport={"width": 1500, "height": 1100})  # fmt: skip
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.goto(f"{url}/")
            assert page.is_hidden("#inside")
            page.fill("#source", SENTENCE)
            page.click("#look-inside")
            page.wait_for_selector("#inside svg text.token.query", timeout=60000)
            assert page.text_content("#translation") == answer["sentences"][0]["target"]
            checked = 0
            for kind in ("encoder", "decoder", "cross"):
                page.select_option("#kind", kind)
                for layer in (1, 2):
                    page.select_option("#layer", str(layer))
                    for head in (1, 4):
                        page.select_option("#head", str(head))
                        for query in (0, 2):
                            page.click(f"svg text.token.query[data-index='{query}']")
                            expected = kinds[kind]["attention"][layer - 1][head - 1][query]
                            assert _drawn_row(page) == pytest.approx(expected, abs=1e-4)
                            checked += 1
            page.select_option("#kind", "cross")
            page.select_option("#layer", "2")
            page.select_option("#head", "3")
            page.click("svg text.token.query[data-index='1']")
            SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT_DIR / "serve_look_inside.png"), full_page=True)
            # a bad request: the server's one line is shown, the view stays
            page.fill("#source", "w1 " * 15)
            page.click("#look-inside")
            page.wait_for_function("document.getElementById('status').className === 'error'", timeout=60000)
            message = page.text_content("#status")
        finally:
            browser.close()
    assert checked == 24
    assert "16 tokens, more than the limit of 12" in message
    assert errors == []
