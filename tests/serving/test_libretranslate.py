"""LibreTranslate's API on `aiayn serve`: the clients that speak it (`libretranslatepy`, deep-translator's
`LibreTranslator`) get what `aiayn translate` prints, and bad requests get LibreTranslate's one-line
400. Precision: fp32."""

from __future__ import annotations

import urllib.parse
import urllib.request

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from helpers import (
    run_cli,  # noqa: E402
    sentences,  # noqa: E402
)
from helpers import save_varied_model as saved_model  # noqa: E402
from live_server import get, post, serve_in_thread  # noqa: E402

from aiayn_cli.decoding.translator import Translator  # noqa: E402
from aiayn_cli.serving.app import create_app  # noqa: E402
from aiayn_cli.serving.limits import Limits  # noqa: E402

LIMITS = Limits(max_body_bytes=4000, max_sentences=8, max_chars=200)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("libretranslate") / "model")  # translations of varied lengths


@pytest.fixture(scope="module")
def server(model_dir):
    translator = Translator.from_pretrained(str(model_dir), device="cpu", dtype="fp32")
    info = {"source_lang": "en", "target_lang": "de"}
    with serve_in_thread(create_app(translator, LIMITS, info)) as url:
        yield url


def aiayn_translate(monkeypatch, capsys, model_dir, inputs: list[str]) -> list[str]:
    code, out, err = run_cli("translate", "-m", model_dir, "--precision", "fp32", *inputs, capsys=capsys)
    assert code == 0, err
    return out.splitlines()


def test_libretranslate_clients_get_what_aiayn_translate_prints(server, model_dir, monkeypatch, capsys):
    libretranslatepy = pytest.importorskip("libretranslatepy")
    deep_translator = pytest.importorskip("deep_translator")
    inputs = sentences(6, seed=11)
    want = aiayn_translate(monkeypatch, capsys, model_dir, inputs)

    api = libretranslatepy.LibreTranslateAPI(server)  # a form body
    assert [api.translate(text, "en", "de") for text in inputs] == want
    assert api.languages() == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []},
    ]
    client = deep_translator.LibreTranslator(source="en", target="de", custom_url=f"{server}/", api_key="unused")
    assert [client.translate(text) for text in inputs] == want  # query parameters
    assert client.translate_batch(inputs[:2]) == want[:2]


def test_a_list_and_alternatives_as_json(server, model_dir):
    inputs = sentences(3, seed=12)
    translator = Translator.from_pretrained(str(model_dir), device="cpu", dtype="fp32")
    nbest = [[text for text, _ in hyps] for hyps in translator.translate_nbest(inputs, nbest=3)]
    status, answer = post(f"{server}/translate", {"q": inputs, "source": "en", "target": "de", "alternatives": 2})
    assert status == 200
    assert answer == {"translatedText": [n[0] for n in nbest], "alternatives": [n[1:] for n in nbest]}
    status, answer = post(f"{server}/translate", {"q": inputs[0], "source": "auto", "target": "de", "format": "text"})
    assert (status, answer) == (200, {"translatedText": nbest[0][0]})


@pytest.mark.parametrize(
    "body, line",
    [
        ({"source": "en", "target": "de"}, "Invalid request: missing q parameter"),
        ({"q": "", "source": "en", "target": "de"}, "Invalid request: missing q parameter"),
        ({"q": "w1", "target": "de"}, "Invalid request: missing source parameter"),
        ({"q": "w1", "source": "fr", "target": "de"}, "fr is not supported: this model translates en to de"),
        ({"q": "w1", "source": "en", "target": "es"}, "es is not supported: this model translates en to de"),
        ({"q": 5, "source": "en", "target": "de"}, "Invalid request: q must be a string or a list of strings"),
        (
            {"q": "w1", "source": "en", "target": "de", "format": "html"},
            "html format is not supported by this server: send plain text (format text)",
        ),  # fmt: skip
        (
            {"q": "w1", "source": "en", "target": "de", "alternatives": "x"},
            "Invalid request: alternatives parameter is not a number",
        ),  # fmt: skip
        (
            {"q": "w1", "source": "en", "target": "de", "alternatives": 4},
            "Invalid request: alternatives parameter must be <= 3 (the beam holds 4)",
        ),  # fmt: skip
        (
            {"q": ["w1"] * 9, "source": "en", "target": "de"},
            "Invalid request: q: 9 sentences, more than the limit of 8",
        ),  # fmt: skip
        (
            {"q": ["w1", "w2 " * 101], "source": "en", "target": "de"},
            "Invalid request: q item 1: 303 characters, more than the limit of 200",
        ),  # fmt: skip
        (
            {"q": "\ud800", "source": "en", "target": "de"},
            "Invalid request: q item 0: not valid Unicode (a lone surrogate escape)",
        ),  # fmt: skip
    ],
)
def test_bad_requests_get_libretranslates_400(server, body, line):
    assert post(f"{server}/translate", body) == (400, {"error": line})


def test_bad_bodies_and_the_server_goes_on(server):
    assert post(f"{server}/translate", b"{not json", content_type="application/json")[0] == 400
    assert post(f"{server}/translate", b"[1]", content_type="application/json") == (
        400,
        {"error": "Invalid request: the body must be a JSON object"},
    )
    status, answer = post(f"{server}/translate", b"x" * 5000, content_type="application/json")
    assert status == 413 and "larger than the limit of 4000 bytes" in answer["error"]
    form = urllib.parse.urlencode({"q": "w1 w2", "source": "en", "target": "de"}).encode()
    request = urllib.request.Request(f"{server}/translate", data=form, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
    assert get(f"{server}/frontend/settings")[1]["charLimit"] == 200


@pytest.mark.parametrize(
    "alternatives, line",
    [
        ("Infinity", "Invalid request: alternatives parameter must be a whole number >= 0, not Infinity"),
        ("1e400", "Invalid request: alternatives parameter must be a whole number >= 0, not Infinity"),
        ("-Infinity", "Invalid request: alternatives parameter must be a whole number >= 0, not -Infinity"),
        ("NaN", "Invalid request: alternatives parameter must be a whole number >= 0, not NaN"),
        ("-1", "Invalid request: alternatives parameter must be a whole number >= 0, not -1"),
        ("1.9", "Invalid request: alternatives parameter must be a whole number >= 0, not 1.9"),
        ("true", "Invalid request: alternatives parameter must be a whole number >= 0, not true"),
        ('"-1"', 'Invalid request: alternatives parameter must be a whole number >= 0, not "-1"'),
        ("[1]", "Invalid request: alternatives parameter is not a number"),
        ("99999999999999999999999", "Invalid request: alternatives parameter must be <= 3 (the beam holds 4)"),
    ],
)
def test_alternatives_that_are_not_a_whole_number_get_400(server, alternatives, line):
    """The issue's row 4: Infinity and 1e400 answered 500 in plain text (int() overflowed); -1, 1.9 and
    true were taken silently."""
    body = f'{{"q": "w1", "source": "en", "target": "de", "alternatives": {alternatives}}}'.encode()
    assert post(f"{server}/translate", body) == (400, {"error": line})


def test_a_body_nested_too_deeply_gets_400(server):
    """The issue's row 4: a `q` nested past the parser's depth answered 500 in plain text."""
    body = b'{"source": "en", "target": "de", "q": ' + b"[" * 1500 + b"]" * 1500 + b"}"
    assert post(f"{server}/translate", body) == (
        400,
        {"error": "Invalid request: the body's JSON is nested too deeply (more than 100 levels)"},
    )
    assert post(f"{server}/translate", {"q": "w1", "source": "en", "target": "de", "alternatives": "1"})[0] == 200


def test_the_depth_limit_does_not_move_with_the_recursion_limit(server):
    """Other libraries in the process raise Python's recursion limit: the server's own limit holds."""
    import sys

    before = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        body = b'{"source": "en", "target": "de", "q": ' + b"[" * 1500 + b"]" * 1500 + b"}"
        assert post(f"{server}/translate", body) == (
            400,
            {"error": "Invalid request: the body's JSON is nested too deeply (more than 100 levels)"},
        )
    finally:
        sys.setrecursionlimit(before)


def test_json_depth_counts_brackets_outside_strings_only():
    from aiayn_cli.serving.requests import JsonDepth, json_depth

    assert json_depth(b'{"q": ["a", ["b"]]}') == 3
    assert json_depth(b'{"q": "[[[[\\"]]]"}') == 1
    assert json_depth(b'{"q": "\\"[[["}') == 1
    # read in parts, as a body arrives: a string or an escape cut between two parts, parts with no bracket
    text = b'{"q": "]]\\"[[", "r": [[1], [[2]]], "s": "[[[["}'
    for size in (1, 2, 3, 7):
        depth = JsonDepth()
        deepest = [depth.feed(text[i : i + size]) for i in range(0, len(text), size)][-1]
        assert deepest == json_depth(text) == 4, size


def test_too_deep_reads_parts_and_scans_only_past_the_limits_brackets():
    """Each request's body is checked: below `limit` opened brackets nothing is scanned byte by byte (bytes.count
    runs in C); past it the parts held so far are scanned, strings and escapes cut between parts included."""
    from aiayn_cli.serving.requests import JsonDepth, too_deep

    in_a_string = b'{"q": "' + b"[" * 150 + b'", "r": [[1]]}'
    deep = b'{"q": ' + b"[" * 101 + b"]" * 101 + b"}"
    assert not too_deep(in_a_string) and too_deep(deep) and not too_deep(deep, limit=102)  # 1 object + 101 arrays
    for text, expected in ((in_a_string, False), (deep, True)):
        for size in (1, 7, 64):
            checker = JsonDepth()
            found = any([checker.too_deep(text[i : i + size]) for i in range(0, len(text), size)])
            assert found == expected, (text[:20], size)
    shallow = JsonDepth()
    assert not shallow.too_deep(b'{"q": ["a", "b"]}') and shallow.deepest == 0  # under the limit: not scanned
