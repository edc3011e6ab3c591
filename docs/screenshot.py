"""The docs' screenshots of the attention explorer: the offline page, or `aiayn serve`'s "look inside".

    python docs/screenshot.py explorer attention/explorer.html docs/attention_explorer.png \
        --sentence 5 --kind cross --layer 3 --head 4 --token 14
    python docs/screenshot.py serve aiayn-quickstart/run/averaged docs/serve_look_inside.png \
        --sentence "The small dog sees a red ball." --kind cross --layer 2 --head 2 --token 3

Opens the page in headless Chromium (Debian's `chromium`, driven by playwright) at 1600 x 900:
`explorer` the file written by `aiayn attention -f html`, with the network off, choosing the sentence
(from 1); `serve` serves the model on 127.0.0.1 (in this process, as `aiayn serve` does), types the
sentence and presses "Look inside". Then it chooses the kind of attention, the layer and the head
(from 1), clicks a target token (from 1) and saves the page.
"""

import argparse
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import sync_playwright

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


@contextmanager
def served(model: str):
    """The model behind `aiayn serve`'s app on 127.0.0.1; its page's URL."""
    import uvicorn

    from aiayn_cli.decoding.translator import Translator
    from aiayn_cli.serving.app import create_app

    app = create_app(Translator.from_pretrained(model, device="cpu", dtype="fp32"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/"
    finally:
        server.should_exit = True


def open_explorer(tab, args) -> None:
    tab.goto(Path(args.source).resolve().as_uri())
    tab.select_option("#sentence", value=args.sentence)


def open_look_inside(tab, args) -> None:
    tab.goto(args.url)
    tab.fill("#source", args.sentence)
    tab.click("#look-inside")
    tab.wait_for_selector("#inside svg text.token.query", timeout=120_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", choices=["explorer", "serve"])
    parser.add_argument("source", help="explorer: the explorer's HTML file; serve: a model folder")
    parser.add_argument("png")
    parser.add_argument("--sentence", help="explorer: its number (from 1, default 1); serve: the text to translate")
    parser.add_argument("--kind", default="cross", choices=["encoder", "decoder", "cross"])
    parser.add_argument("--layer", default="1")
    parser.add_argument("--head", default="1")
    parser.add_argument("--token", type=int, default=1, help="the query token to click (from 1)")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    if args.sentence is None:
        args.sentence = "1" if args.page == "explorer" else "The small dog sees a red ball."
    with served(args.source) if args.page == "serve" else _nothing() as url, sync_playwright() as p:
        args.url = url
        browser = p.chromium.launch(executable_path=args.chromium, args=ARGS)
        context = browser.new_context(offline=args.page == "explorer", viewport={"width": 1600, "height": 900})
        tab = context.new_page()
        (open_explorer if args.page == "explorer" else open_look_inside)(tab, args)
        for select, value in (("#kind", args.kind), ("#layer", args.layer), ("#head", args.head)):
            tab.select_option(select, value=value)
        tab.click(f"svg text.token.query[data-index='{args.token - 1}']")
        tab.screenshot(path=args.png, full_page=True)
        browser.close()


@contextmanager
def _nothing():
    yield None


if __name__ == "__main__":
    main()
