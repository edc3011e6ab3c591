"""The screenshot of `aiayn serve`'s "look inside" view (docs/inspection.md).

    python docs/serve_screenshot.py aiayn-quickstart/run/averaged docs/serve_look_inside.png \
        --sentence "The small dog sees a red ball." --kind cross --layer 2 --head 2 --token 3

Serves the model on 127.0.0.1 (in this process, as `aiayn serve` does), opens its page in headless
Chromium (Debian's `chromium`, driven by playwright) at 1600 x 900, types the sentence, presses "Look
inside", chooses the kind of attention, the layer and the head (from 1), clicks a target token (from 1)
and saves the page.
"""

import argparse
import threading
import time

import uvicorn
from playwright.sync_api import sync_playwright

from aiayn_cli.decoding.translator import Translator
from aiayn_cli.serving.app import create_app

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("png")
    parser.add_argument("--sentence", default="The small dog sees a red ball.")
    parser.add_argument("--kind", default="cross", choices=["encoder", "decoder", "cross"])
    parser.add_argument("--layer", default="1")
    parser.add_argument("--head", default="1")
    parser.add_argument("--token", type=int, default=1, help="the query token to click (from 1)")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    app = create_app(Translator.from_pretrained(args.model, device="cpu", dtype="fp32"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=ARGS)
            tab = browser.new_context(viewport={"width": 1600, "height": 900}).new_page()
            tab.goto(url)
            tab.fill("#source", args.sentence)
            tab.click("#look-inside")
            tab.wait_for_selector("#inside svg text.token.query", timeout=120_000)
            for select, value in (("#kind", args.kind), ("#layer", args.layer), ("#head", args.head)):
                tab.select_option(select, value=value)
            tab.click(f"svg text.token.query[data-index='{args.token - 1}']")
            tab.screenshot(path=args.png, full_page=True)
            browser.close()
    finally:
        server.should_exit = True


if __name__ == "__main__":
    main()
