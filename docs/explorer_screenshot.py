"""The README's explorer screenshot.

    python docs/explorer_screenshot.py attention/explorer.html docs/attention_explorer.png \
        --sentence 5 --kind cross --layer 3 --head 2 --token 8

Opens the explorer in headless Chromium (Debian's `chromium`, driven by playwright) at 1600 x 900
with the network off, chooses the sentence, the kind of attention, the layer and the head (the
page's options count from 1), clicks a target token (from 1) and saves the page.
"""

import argparse
from pathlib import Path

from playwright.sync_api import sync_playwright

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html")
    parser.add_argument("png")
    parser.add_argument("--sentence", default="1")
    parser.add_argument("--kind", default="cross", choices=["encoder", "decoder", "cross"])
    parser.add_argument("--layer", default="1")
    parser.add_argument("--head", default="1")
    parser.add_argument("--token", type=int, default=1, help="the query token to click (from 1)")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=ARGS)
        tab = browser.new_context(offline=True, viewport={"width": 1600, "height": 900}).new_page()
        tab.goto(Path(args.html).resolve().as_uri())
        for select, value in (
            ("#sentence", args.sentence),
            ("#kind", args.kind),
            ("#layer", args.layer),
            ("#head", args.head),
        ):
            tab.select_option(select, value=value)
        tab.click(f"svg text.token.query[data-index='{args.token - 1}']")
        tab.screenshot(path=args.png, full_page=True)
        browser.close()


if __name__ == "__main__":
    main()
