"""The README's explorer screenshot: `python docs/explorer_screenshot.py attention/explorer.html docs/attention_explorer.png`.

Opens the explorer in headless Chromium (Debian's `chromium`, driven by playwright) at 1600 x 900,
chooses sentence 5, encoder-decoder attention, layer 2, head 2, clicks the 8th target token and
saves the page.
"""

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def main(html: str, png: str, chromium: str = "/usr/bin/chromium") -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        tab = browser.new_context(offline=True, viewport={"width": 1600, "height": 900}).new_page()
        tab.goto(Path(html).resolve().as_uri())
        for select, value in (("#sentence", "5"), ("#kind", "cross"), ("#layer", "2"), ("#head", "2")):
            tab.select_option(select, value=value)  # the page's options count from 1
        tab.click("svg text.token.query[data-index='7']")
        tab.screenshot(path=png, full_page=True)
        browser.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
