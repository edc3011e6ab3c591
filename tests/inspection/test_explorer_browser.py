"""The attention explorer in a real browser: headless Chromium, the page opened from file://, network off.

Needs playwright (Python) and a Chromium: Debian's `chromium` (/usr/bin/chromium, or set
AIAYN_CHROMIUM) or playwright's own. Skips, saying why, where neither can be had.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest
from attention_models import REFERENCES, SENTENCES, load, subword_model_dir

from aiayn_cli.inspection import explain
from aiayn_cli.inspection.explorer import explorer_html

SCREENSHOT_DIR = Path(os.environ.get("AIAYN_SCREENSHOTS", Path(__file__).resolve().parents[1] / "screenshots"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def _chromium() -> str | None:
    for candidate in (os.environ.get("AIAYN_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    model, tokenizer = load(subword_model_dir())
    explanations = explain(model, tokenizer, SENTENCES) + explain(model, tokenizer, SENTENCES[:1], REFERENCES[:1])
    html = tmp_path_factory.mktemp("explorer") / "explorer.html"
    html.write_text(explorer_html(explanations), encoding="utf-8")
    with playwright_api.sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        except Exception as err:  # no browser here: say which and why
            pytest.skip(f"no Chromium can be launched ({str(err).splitlines()[0]}); install Debian's chromium")
        context = browser.new_context(offline=True, user_agent="aiayn-test", viewport={"width": 1500, "height": 1000})
        tab = context.new_page()
        events = {"console_errors": [], "requests": []}
        tab.on("console", lambda m: events["console_errors"].append(m.text) if m.type == "error" else None)
        tab.on("pageerror", lambda e: events["console_errors"].append(str(e)))
        tab.on("request", lambda r: events["requests"].append(r.url))
        tab.goto(html.as_uri())
        tab.wait_for_selector("svg text.token.query")
        yield tab, events, explanations, tokenizer, html
        browser.close()


def _drawn_row(tab) -> list[float]:
    return tab.eval_on_selector_all("svg text.token.key", "els => els.map(e => Number(e.dataset.weight))")


def _select(tab, **choices) -> None:
    """Choose by index from 0 (the page's options count from 1), or a kind by name."""
    for name, value in choices.items():
        tab.select_option(f"#{name}", value=value if isinstance(value, str) else str(value + 1))


def test_the_page_is_offline_and_draws_every_token(page):
    tab, events, explanations, tokenizer, html = page
    assert events["console_errors"] == []
    assert [u for u in events["requests"] if not u.startswith("file://")] == []
    assert events["requests"] == [html.as_uri()]  # nothing but the page itself
    for s, source in enumerate(SENTENCES):
        _select(tab, sentence=s, kind="encoder")
        count = tab.eval_on_selector_all("svg text.token.query", "els => els.length")
        assert count == len(tokenizer(source)["input_ids"])
        _select(tab, kind="cross")
        assert tab.eval_on_selector_all("svg text.token.query", "els => els.length") == len(explanations[s].target_ids)
    assert events["console_errors"] == []


def test_choosing_another_layer_or_head_changes_the_drawn_weights(page):
    tab, events, explanations, tokenizer, html = page
    _select(tab, sentence=1, kind="cross", layer=0, head=0)
    first = _drawn_row(tab)
    ex = explanations[1]
    assert first == pytest.approx(ex.cross_attentions[0][0, 0, 0].tolist(), abs=1e-5)
    _select(tab, head=2)
    other_head = _drawn_row(tab)
    assert other_head == pytest.approx(ex.cross_attentions[0][0, 2, 0].tolist(), abs=1e-5)
    _select(tab, layer=1)
    other_layer = _drawn_row(tab)
    assert other_layer == pytest.approx(ex.cross_attentions[1][0, 2, 0].tolist(), abs=1e-5)
    assert max(abs(a - b) for a, b in zip(first, other_head)) > 1e-3
    assert max(abs(a - b) for a, b in zip(other_head, other_layer)) > 1e-3
    tab.click("div.thumb[data-head='1']")  # a thumbnail selects its head
    assert _drawn_row(tab) == pytest.approx(ex.cross_attentions[1][0, 1, 0].tolist(), abs=1e-5)


@pytest.mark.parametrize("kind", ["encoder", "decoder", "cross"])
def test_the_walk_through_softmax_is_the_drawn_row(page, kind):
    tab, events, explanations, tokenizer, html = page
    _select(tab, sentence=3, kind=kind, layer=1, head=3)
    tab.click("svg text.token.query[data-index='2']")
    rows = tab.eval_on_selector_all(
        "#walk-table tr[data-softmax]", "els => els.map(e => [Number(e.dataset.softmax), Number(e.dataset.drawn)])"
    )
    drawn = _drawn_row(tab)
    assert len(rows) == len(drawn) > 2
    for (softmax, row_drawn), weight in zip(rows, drawn):
        assert softmax == row_drawn == weight  # one path from the scores shown to the weights drawn
    printed = tab.eval_on_selector_all(
        "#walk-table tr[data-softmax]", "els => els.map(e => [e.cells[3].innerText, e.cells[4].innerText])"
    )
    assert all(softmax == shown for softmax, shown in printed), printed  # the numbers printed are those drawn
    if kind == "decoder":  # keys after the query are masked, and shown so
        masked = tab.eval_on_selector_all("#walk-table td.masked", "els => els.length")
        assert masked == 3 * (len(drawn) - 3) and all(w == 0 for w in drawn[3:])
    assert not any(math.isnan(s) for s, _ in rows)
    assert events["console_errors"] == []


def test_screenshot(page):
    tab, events, explanations, tokenizer, html = page
    _select(tab, sentence=1, kind="cross", layer=1, head=0)
    tab.click("svg text.token.query[data-index='3']")
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOT_DIR / "explorer.png"
    tab.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
