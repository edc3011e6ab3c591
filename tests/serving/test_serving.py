"""`aiayn serve`: the API answers what `aiayn translate` prints, batches requests without changing
their answers, refuses bad requests with one line of JSON and keeps serving, and stops gracefully."""

from __future__ import annotations

import concurrent.futures
import json
import re
import signal
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from helpers import run_cli, save_tiny_model  # noqa: E402
from live_server import get, post, random_sentences, serve_in_subprocess, serve_in_thread  # noqa: E402

from aiayn_cli.decoding.translator import Translator  # noqa: E402
from aiayn_cli.serving.app import create_app  # noqa: E402
from aiayn_cli.serving.limits import Limits  # noqa: E402

SHORT = {"max_len_a": 0.0, "max_len_b": 6}  # a random model runs to its maximum length: keep it short
LIMITS = Limits(max_body_bytes=4000, max_sentences=8, max_chars=200)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("serve") / "model")


@pytest.fixture(scope="module")
def translator(model_dir):
    return Translator.from_pretrained(str(model_dir))


@pytest.fixture(scope="module")
def server(translator):
    with serve_in_thread(create_app(translator, LIMITS)) as url:
        yield url


def expected(translator, sentences, **options):
    """What `aiayn translate` gives, each sentence decoded on its own."""
    return [translator.translate_nbest([s], **options)[0] for s in sentences]


def as_pairs(answer: dict) -> list[list[tuple[str, float]]]:
    return [[(h["text"], h["score"]) for h in t["hypotheses"]] for t in answer["translations"]]


def assert_same(got: list[list[tuple[str, float]]], want: list[list[tuple[str, float]]]) -> None:
    """The same hypotheses in the same order; scores equal up to float rounding (a batch pads and
    shapes its matrix products differently, as in tests/decoding/test_translate.py)."""
    assert [[text for text, _ in hyps] for hyps in got] == [[text for text, _ in hyps] for hyps in want]
    for got_hyps, want_hyps in zip(got, want):
        assert [score for _, score in got_hyps] == pytest.approx([score for _, score in want_hyps], abs=1e-4)


def test_the_decoder_is_batch_invariant(translator):
    """Each sentence gets the same hypotheses alone or in any batch (scores up to float rounding)."""
    sentences = random_sentences(12, seed=1)
    together = translator.translate_nbest(sentences, nbest=2, **SHORT)
    assert_same(together, expected(translator, sentences, nbest=2, **SHORT))
    pairs = translator.translate_nbest(sentences[:2], num_beams=1, **SHORT)
    assert_same(pairs, expected(translator, sentences[:2], num_beams=1, **SHORT))


def test_translate_returns_translations_and_scores(server, translator):
    sentences = ["w1 w2 w3", "", "w5 w6 w7 w8 w9"]
    status, answer = post(f"{server}/v1/translate", {"text": sentences, "nbest": 3, **SHORT})
    assert status == 200
    assert_same(as_pairs(answer), expected(translator, sentences, nbest=3, **SHORT))
    assert answer["translations"][1] == {"text": "", "score": None, "hypotheses": []}
    best = answer["translations"][0]
    assert (best["text"], best["score"]) == (best["hypotheses"][0]["text"], best["hypotheses"][0]["score"])
    status, answer = post(f"{server}/v1/translate", {"text": "w4 w4", "beam": 1, "length_penalty_style": "hf"})
    assert status == 200
    assert_same(as_pairs(answer), expected(translator, ["w4 w4"], num_beams=1, length_penalty_style="hf"))


def test_sampling_with_a_seed_gives_aiayn_translates_samples(server, translator):
    body = {"text": ["w3 w9", "w2"], "sample": True, "seed": 7, "nbest": 2, **SHORT}
    status, answer = post(f"{server}/v1/translate", body)
    assert status == 200
    options = dict(num_beams=1, do_sample=True, seed=7, nbest=2, **SHORT)
    assert_same(as_pairs(answer), translator.translate_nbest(["w3 w9", "w2"], **options))


def test_health_model_schema_and_docs(server, translator):
    assert get(f"{server}/v1/health")[1]["status"] == "ok"
    status, info = get(f"{server}/v1/model")
    assert status == 200
    assert info["sizes"]["d_model"] == translator.model.config.d_model
    assert info["sizes"]["parameters"] == sum(p.numel() for p in translator.model.parameters())
    assert info["decoding"]["num_beams"] == 4 and info["decoding"]["length_penalty_style"] == "gnmt"
    assert info["limits"]["max_sentences"] == LIMITS.max_sentences
    schema = get(f"{server}/openapi.json")[1]
    assert set(schema["paths"]) >= {"/v1/translate", "/v1/health", "/v1/model"}
    import urllib.request

    with urllib.request.urlopen(f"{server}/docs", timeout=60) as page:
        html = page.read().decode()
    assert page.status == 200 and all(path in html for path in schema["paths"])
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "/docs loads something from elsewhere"


BAD_REQUESTS = [
    # (what, body, content type, status, words of the message)
    ("not JSON", b'{"text": "w1", ', "application/json", 400, "not valid JSON"),
    ("not UTF-8", b'{"text": "w1 \xff\xfe"}', "application/json", 400, "UTF-8"),
    ("nested", b'{"text": ' + b"[" * 101 + b"]" * 101 + b"}", "application/json", 400, "more than 100 levels"),
    ("nested 100", b'{"text": ' + b"[" * 99 + b"]" * 99 + b"}", "application/json", 422, "valid string"),
    ("too large", json.dumps({"text": "w1 " * 2000}).encode(), "application/json", 413, "4000 bytes"),
    ("too many sentences", json.dumps({"text": ["w1"] * 9}).encode(), "application/json", 422, "limit of 8"),
    ("sentence too long", json.dumps({"text": "w1 " * 100}).encode(), "application/json", 422, "limit of 200"),
    ("no text", b'{"beam": 2}', "application/json", 422, "text: Field required"),
    ("unknown option", b'{"text": "w1", "beams": 2}', "application/json", 422, "beams"),
    ("beam 0", b'{"text": "w1", "beam": 0}', "application/json", 422, "beam"),
    (
        "nbest over beam",
        b'{"text": "w1", "beam": 2, "nbest": 3}',
        "application/json",
        422,
        "between 1 and the beam size (2)",
    ),
    ("alignment", b'{"text": "w1", "alignment": true}', "application/json", 422, "not available"),
    ("lone surrogate", b'{"text": "w1 \\ud800"}', "application/json", 422, "not valid Unicode"),
    ("a list", b'["w1"]', "application/json", 422, "JSON object"),
    ("no content type", b'{"text": "w1"}', None, 422, "Content-Type"),
    ("too long", json.dumps({"text": ["w1", "w1 " * 60], "on_long": "error"}).encode(), None, 422, "text item 1: 61"),
]


@pytest.mark.parametrize("what, body, content_type, status, words", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_requests_get_their_status_and_one_line_of_json(
    server, translator, what, body, content_type, status, words
):
    if what == "too long":
        translator.max_source_tokens, saved = 20, translator.max_source_tokens
        content_type = "application/json"
    try:
        got, answer = post(f"{server}/v1/translate", body, content_type=content_type)
    finally:
        if what == "too long":
            translator.max_source_tokens = saved
    assert got == status, answer
    assert set(answer) == {"error"} and "\n" not in answer["error"] and answer["error"]
    assert words in answer["error"]
    # ... and the server keeps serving
    got, answer = post(f"{server}/v1/translate", {"text": "w2 w3", **SHORT})
    assert got == 200
    assert_same(as_pairs(answer), expected(translator, ["w2 w3"], **SHORT))


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(translator):
    """64 requests from 16 clients: fewer decoding rounds than requests, every answer its own."""
    sentences = random_sentences(64, seed=2)
    want = expected(translator, sentences, **SHORT)
    with serve_in_thread(create_app(translator)) as url:
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda s: post(f"{url}/v1/translate", {"text": s, **SHORT}), sentences))
        rounds = get(f"{url}/v1/health")[1]["rounds"]
    assert [status for status, _ in answers] == [200] * 64
    assert_same([as_pairs(answer)[0] for _, answer in answers], want)
    assert rounds < 64


@pytest.mark.slow  # 120 generated requests: about 30 s
def test_fuzzing_the_api_against_its_own_schema_gives_no_server_error(server):
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings

    schema = schemathesis.openapi.from_url(f"{server}/openapi.json")
    schema.config.update(base_url=server)
    failures = []
    for operation in schema.get_all_operations():
        operation = operation.ok()

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=operation.as_strategy())
        def check(case):
            response = case.call(timeout=60)
            if response.status_code >= 500:
                failures.append((json.dumps(case.body), response.status_code, response.text[:200]))

        check()
    assert failures == []


@pytest.mark.slow
def test_load_200_requests_from_16_clients_equal_aiayn_translate(model_dir, translator, tmp_path):
    """Bounded: 200 requests, 16 clients, at most 300 s; every answer 200 and equal to `aiayn translate`."""
    sentences = random_sentences(200, seed=3)
    (tmp_path / "in.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    # fp32 as the server's translator: `--precision auto` would be bf16 on a CPU with AVX512-BF16 or AMX
    short = ("--max-len-a", "0", "--max-len-b", "6")
    cli = run_cli("translate", "--model", model_dir, "--precision", "fp32", *short, "-i", tmp_path / "in.txt")
    assert cli.returncode == 0, cli.stderr
    want = cli.stdout.splitlines()
    with serve_in_thread(create_app(translator)) as url:
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(post, f"{url}/v1/translate", {"text": s, **SHORT}, 120) for s in sentences]
            done, not_done = concurrent.futures.wait(futures, timeout=300)
    assert not not_done, f"{len(not_done)} requests unanswered after 300 s"
    answers = [f.result() for f in futures]
    assert [status for status, _ in answers] == [200] * 200
    assert [answer["translations"][0]["text"] for _, answer in answers] == want


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_burst_answers_every_accepted_request_and_exits_0(model_dir, translator, sig):
    sentences = random_sentences(24, seed=4)
    long = {"max_len_a": 0.0, "max_len_b": 100}  # long enough that the burst is still decoding at the signal
    want = expected(translator, sentences, **long)
    with serve_in_subprocess(model_dir, "--threads", "1", "--precision", "fp32") as (process, url):
        assert post(f"{url}/v1/translate", {"text": "w1", **SHORT})[0] == 200
        results: dict[int, tuple] = {}

        def client(i: int) -> None:
            results[i] = post(f"{url}/v1/translate", {"text": sentences[i], **long}, 300)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(sentences))]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the server holds every request
            health = get(f"{url}/v1/health")[1]
            if health["waiting"] + health["decoding"] + len(results) >= len(sentences):
                break
            time.sleep(0.02)
        process.send_signal(sig)
        for thread in threads:
            thread.join(timeout=300)
        assert process.wait(timeout=120) == 0
    assert sorted(results) == list(range(len(sentences)))
    assert [results[i][0] for i in range(len(sentences))] == [200] * len(sentences)
    assert_same([as_pairs(results[i][1])[0] for i in range(len(sentences))], want)


@pytest.mark.slow
def test_serve_on_a_busy_port_is_one_line_and_exit_2(model_dir):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("serve", "--model", model_dir, "--port", str(port), "--log-level", "critical", timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: --host 127.0.0.1 --port")


def test_serve_refuses_an_unknown_log_level_before_loading(capsys, tmp_path):
    code, _, err = run_cli("serve", "--model", tmp_path / "none", "--log-level", "loud", capsys=capsys)
    assert code == 2 and err.startswith("error: --log-level must be one of") and err.count("\n") == 1, err
