"""Bad options and inputs across commands: one line naming the flag, exit code 2, before any work
(nothing written, no model loaded: the model paths below do not exist, so an error about them would
mean the option was checked too late). A progress bar never reaches a log file."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading

import pytest
from helpers import REPO_ROOT, cli_env, cli_here, save_tiny_model


def one_line(code: int, out: str, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("error: "), (code, out, err)
    return lines[0]


def test_train_names_its_flags_not_set_keys(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    cases = {
        ("--max-time", "abc"): "error: --max-time must be minutes or a duration like",
        ("--max-steps", "0"): "error: --max-steps must be greater than 0, got 0",
        ("--max-epochs", "-1"): "error: --max-epochs must be greater than 0",
        ("-s", "en", "-t", "en"): "error: --source-lang and --target-lang are both en",
    }
    data = ("--data-dir", tmp_path / "no-data")
    for flags, expected in cases.items():
        line = one_line(*cli_here(monkeypatch, capsys, "train", "tiny", *data, "-o", run, *flags))
        assert line.startswith(expected) and "--set" not in line, line
        assert not run.exists()
    line = one_line(*cli_here(monkeypatch, capsys, "train", "tiny", "-o", run, "--set", "max_steps=0"))
    assert line.startswith("error: --set max_steps"), line  # a --set key is named as such


def test_train_tokenizer_sample_size_and_languages(tmp_path, monkeypatch, capsys):
    out = tmp_path / "tok"
    data = ("--source-file", REPO_ROOT / "pyproject.toml", "--target-file", REPO_ROOT / "pyproject.toml")
    line = one_line(*cli_here(monkeypatch, capsys, "train-tokenizer", *data, "-o", out, "--sample-size", "0"))
    assert line == "error: --sample-size must be at least 1, got 0"
    line = one_line(*cli_here(monkeypatch, capsys, "train-tokenizer", "--data-dir", tmp_path, "-s", "en",
                              "-t", "en", "-o", out))  # fmt: skip
    assert line == "error: --source-lang and --target-lang are both en: a translation has two languages"
    assert not out.exists()


def test_evaluate_refuses_one_language_and_the_hypotheses_as_references(tmp_path, monkeypatch, capsys):
    hyp = tmp_path / "hyp.de"
    hyp.write_text("ein Hund\n")
    line = one_line(*cli_here(monkeypatch, capsys, "evaluate", "-i", hyp, "-r", hyp))
    assert line == f"error: --references {hyp} is the --hypotheses file itself; score against other references"
    (tmp_path / "link.de").symlink_to(hyp)
    line = one_line(*cli_here(monkeypatch, capsys, "evaluate", "-i", hyp, "-r", tmp_path / "link.de"))
    assert "is the --hypotheses file itself" in line
    line = one_line(*cli_here(monkeypatch, capsys, "evaluate", "-i", hyp, "--data-dir", tmp_path, "-s", "de",
                              "-t", "de"))  # fmt: skip
    assert "--source-lang and --target-lang are both de" in line


def test_decoding_options_are_checked_before_the_model_loads(tmp_path, monkeypatch, capsys):
    """The model does not exist: the line must be about the option, checked first, as one line (not
    Typer's box); the same checks name the request's fields in `aiayn serve` (tests/test_serving.py)."""
    missing = tmp_path / "no-model"
    cases = {
        ("--beam", "0"): "error: --beam must be >= 1, got 0",
        ("-b", "0"): "error: --beam must be >= 1, got 0",
        ("--top-p", "1.5"): "error: --top-p must be <= 1, got 1.5",
        ("--temperature", "0"): "error: --temperature must be > 0, got 0.0",
        ("--length-penalty", "nan"): "error: --length-penalty must be a finite number, got nan",
        ("--max-len-b", "-1"): "error: --max-len-b must be >= 0, got -1",
        ("--length-penalty-style", "marian"): "error: --length-penalty-style: 'marian' is not one of 'gnmt', 'hf'",
        ("--beam", "two"): "error: --beam: ",
        ("--precision", "fp8"): "error: --precision: 'fp8' is not one of",
    }
    for command in ("translate", "evaluate", "attention"):
        extra = ("-i", tmp_path / "h", "-r", tmp_path / "r") if command == "evaluate" else ("x",)
        for flags, expected in cases.items():
            if command == "attention" and flags[0] == "--precision":
                continue
            line = one_line(*cli_here(monkeypatch, capsys, command, "-m", missing, *flags, *extra))
            assert line.startswith(expected), (command, line)


def test_a_progress_bar_never_reaches_a_log_file(tmp_path):
    """`aiayn translate -i in.txt -o out.txt 2> log`: stderr is a file, not a terminal, so no bar and no
    carriage return in the log (tests/test_translate.py checks that --progress still draws one)."""
    model = save_tiny_model(tmp_path / "model")
    source = tmp_path / "in.txt"
    source.write_text("".join(f"w{i % 60 + 4} w{i % 7 + 4}\n" for i in range(40)))
    log = tmp_path / "log"
    with open(log, "wb") as stderr:
        done = subprocess.run(
            [sys.executable, "-m", "aiayn_cli", "translate", "-m", model, "--precision", "fp32",
             "-i", source, "-o", tmp_path / "out.txt"],
            stderr=stderr, env=cli_env(), timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, log.read_text()
    assert b"\r" not in log.read_bytes(), log.read_bytes()[:300]
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 40


class FakeHub(http.server.BaseHTTPRequestHandler):
    """The Hub's model API on 127.0.0.1: `found/model` exists, anything else is not found."""

    def do_GET(self):
        if self.path.startswith("/api/models/found/model"):
            body = json.dumps({"id": "found/model", "sha": "0" * 40, "siblings": []}).encode()
            self.send_response(200)
        else:
            body = b'{"error": "Repository not found"}'
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_missing_folder_that_could_be_a_hub_id_is_one_line_at_once(tmp_path, monkeypatch):
    """`runs/x` before `runs/` exists: one metadata request to the Hub (no retries), one line naming the
    folder; the Hub here is a server on 127.0.0.1 (found, not found) or a closed port (unreachable)."""
    from huggingface_hub import constants

    from aiayn_cli.errors import AiaynError
    from aiayn_cli.hub.lookup import check_hub_model

    monkeypatch.chdir(tmp_path)  # where no runs/ folder exists
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        check_hub_model("found/model")  # on the Hub: loading goes on
        with pytest.raises(AiaynError, match=r" runs/x: no such model folder, and no model of that name on the Hub$"):
            check_hub_model("runs/x")
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = cli_env(HF_HUB_OFFLINE="0", HF_ENDPOINT=f"http://127.0.0.1:{port}")
    done = subprocess.run(
        [sys.executable, "-m", "aiayn_cli", "translate", "-m", "runs/x", "A dog."],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    line = one_line(done.returncode, done.stdout, done.stderr)
    assert line.startswith("error: --model runs/x: no such model folder, and the Hub could not be reached"), line
    with pytest.raises(AiaynError, match="no such model folder$"):  # a path that cannot be a Hub id: no request
        check_hub_model(str(tmp_path / "runs" / "x"))
