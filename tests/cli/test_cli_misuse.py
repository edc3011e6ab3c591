"""What a careless user (or an attacker) does to the CLI: each gets one `error:` line and exit 2, and
nothing is lost or half-written (the training rows aside: `test_training_safety.py`).

Bad options and inputs across commands (the second part): one line naming the flag, exit code 2, before
any work (nothing written, no model loaded: the model paths there do not exist, so an error about them
would mean the option was checked too late). A progress bar never reaches a log file."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from helpers import (
    REPO_ROOT,
    cli_command,
    cli_env,
    fill_disk,
    one_error_line,
    run_cli,
    save_tiny_model,
    snapshot,
    split_corpus,
)

TINY = REPO_ROOT / "recipes" / "tiny.yaml"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def damaged(tmp_path: Path, tiny: Path, how: str) -> Path:
    model = tmp_path / f"{how}-model"
    shutil.copytree(tiny, model)
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if how == "truncated" else os.urandom(len(data)))
    return model


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_a_damaged_model_is_one_line_everywhere(capsys, tmp_path, tiny, how):
    model = damaged(tmp_path, tiny, how)
    line = one_error_line(*run_cli("translate", "-m", model, "w5 w6", capsys=capsys)[::2])
    assert str(model) in line and "damaged or truncated" in line
    line = one_error_line(*run_cli("average", tiny, model, "-o", tmp_path / "avg", capsys=capsys)[::2])
    assert str(model / "model.safetensors") in line and "damaged or truncated" in line
    hub = tmp_path / "hub"
    line = one_error_line(
        *run_cli("push", "-m", model, "--repo-id", "u/m", "--dry-run", "--output-dir", hub, capsys=capsys)[::2]
    )
    assert str(model) in line and "damaged or truncated" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == [model.name]  # no avg, no hub, no temporary


def _edited(tmp_path: Path, tiny: Path, name: str, file: str, edit) -> Path:
    model = tmp_path / name
    shutil.copytree(tiny, model)
    path = model / file
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    return model


def _json_edit(**changes):
    return lambda text: json.dumps({**json.loads(text), **changes})


def test_a_model_folder_that_does_not_hold_together_is_one_line_everywhere(capsys, tmp_path, tiny):
    """A config.json of another size than the weights, a generation_config.json that is not JSON or that
    cannot be decoded with, a tokenizer file that is not JSON: each is named, by every command that loads
    a model, and nothing is written."""
    d_model = json.loads((tiny / "config.json").read_text())["d_model"]
    cases = {
        "config.json does not match model.safetensors": _edited(
            tmp_path, tiny, "sizes", "config.json", _json_edit(d_model=2 * d_model)
        ),
        "generation_config.json: cannot be read": _edited(
            tmp_path, tiny, "gen", "generation_config.json", lambda text: "{oops"
        ),
        "generation_config.json: num_beams must be >= 1, got -3": _edited(
            tmp_path, tiny, "beams", "generation_config.json", _json_edit(num_beams=-3)
        ),
        "tokenizer.json: cannot load its tokenizer": _edited(
            tmp_path, tiny, "tok", "tokenizer.json", lambda text: text[: len(text) // 2]
        ),
    }
    made = sorted(p.name for p in tmp_path.iterdir())
    for expected, model in cases.items():
        commands = {
            "translate": ["translate", "-m", model, "w5 w6"],
            "push": ["push", "-m", model, "--repo-id", "u/m", "--dry-run", "--output-dir", tmp_path / "hub"],
            "paper": ["paper", "scaling", "-m", model, "-o", tmp_path / "figures"],
        }
        for command, args in commands.items():
            line = one_error_line(*run_cli(*args, capsys=capsys)[::2])
            assert expected in line and str(model) in line, (command, line)
            assert "--beam" not in line  # a saved value is not an option the user gave
    assert sorted(p.name for p in tmp_path.iterdir()) == made  # no hub folder, no figures


def _fake_run(run: Path, tiny: Path) -> Path:
    for step in (10, 20, 30):
        shutil.copytree(tiny, run / f"checkpoint-{step}")
        (run / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"step": step}))
    (run / "recipe.yaml").write_text("output_dir: run\n")
    (run / "metrics.jsonl").write_text('{"step": 10}\n')
    return run


def test_a_run_folder_given_as_the_model_names_the_models_it_holds(capsys, tmp_path, tiny):
    """Every command that takes --model: a training run's folder is not a model, and the line names the
    models in it (RUN/averaged, the last checkpoint), not transformers' "Unrecognized model"."""
    from aiayn_cli.cli.reference import command_options

    run = _fake_run(tmp_path / "run", tiny)
    data, _, _ = split_corpus(tmp_path)
    split = ["--data-dir", data, "-s", "en", "-t", "de", "--split", "test"]
    commands = {
        "translate": ["w5 w6"],
        "evaluate": split,
        "push": ["--repo-id", "u/m", "--dry-run", "--output-dir", tmp_path / "hub"],
        "serve": ["--port", "0"],
        "export": ["-o", tmp_path / "exported"],
        "attention": ["w5 w6"],
        "heads": [*split, "-o", tmp_path / "heads"],
        "layers": ["w5 w6", "-o", tmp_path / "layers"],
        "paper": ["scaling", "-o", tmp_path / "figures"],
    }
    assert set(commands) == {name for name, rows in command_options().items() if any(r.long == "--model" for r in rows)}
    made = sorted(p.name for p in tmp_path.iterdir())
    for averaged in (False, True):
        if averaged:
            shutil.copytree(tiny, run / "averaged")
        named = f"{run / 'averaged'} (the averaged model) or " if averaged else ""
        for command, args in commands.items():
            line = one_error_line(*run_cli(command, "-m", run, *args, capsys=capsys)[::2])
            assert f"{run}: is a training run's folder, not a model; use {named}" in line, (command, line)
            assert f"{run / 'checkpoint-30'} (the last checkpoint)" in line, (command, line)
    assert sorted(p.name for p in tmp_path.iterdir()) == made  # nothing written


def test_average_never_replaces_its_inputs_or_a_run(capsys, tmp_path, tiny):
    run = _fake_run(tmp_path / "run", tiny)
    before = snapshot(run)
    other = tmp_path / "documents"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    refused = {
        "holds the input": [run, "--last", "2", "-o", run],  # the issue's command
        "is the input": [run / "checkpoint-20", run / "checkpoint-30", "-o", run / "checkpoint-30"],
        "holds the input ": [run, "--last", "2", "-o", tmp_path],
        "is a training run folder": [tmp_path / "run" / "checkpoint-10", "-o", _fake_run(tmp_path / "run2", tiny)],
        "holds files that are not part of a model folder (e.g. notes.txt)": [run, "--last", "2", "-o", other],
    }
    for expected, args in refused.items():
        line = one_error_line(*run_cli("average", *args, "--overwrite", capsys=capsys)[::2])
        assert expected in line, line
    assert snapshot(run) == before and (other / "notes.txt").read_text() == "mine\n"
    # a model folder is still replaced with --overwrite, and the inputs are named, not their paths
    code, _, err = run_cli("average", run, "--last", "2", "-o", run / "averaged", capsys=capsys)
    assert code == 0, err
    code, _, err = run_cli("average", run, "--last", "3", "-o", run / "averaged", "--overwrite", capsys=capsys)
    assert code == 0, err
    assert json.loads((run / "averaged" / "averaged_from.json").read_text())["checkpoints"] == [
        "checkpoint-10",
        "checkpoint-20",
        "checkpoint-30",
    ]


def test_translate_never_writes_over_its_input(capsys, tmp_path, tiny):
    source = tmp_path / "x.txt"
    source.write_text("w5 w6\n")
    symlink, hardlink = tmp_path / "link.txt", tmp_path / "hard.txt"
    symlink.symlink_to(source)
    os.link(source, hardlink)
    for output in (source, symlink, hardlink):
        line = one_error_line(*run_cli("translate", "-m", tiny, "-i", source, "-o", output, capsys=capsys)[::2])
        assert "is the input file" in line
    assert source.read_text() == "w5 w6\n" and symlink.is_symlink()
    # an output given as a link stays a link; the file it points to gets the translation
    target, output = tmp_path / "target.txt", tmp_path / "out.txt"
    target.write_text("")
    output.symlink_to(target)
    code, _, err = run_cli("translate", "-m", tiny, "-i", source, "-o", output, "--beam", "1", capsys=capsys)
    assert code == 0, err
    assert output.is_symlink() and len(target.read_text().splitlines()) == 1


def test_translate_names_a_folder_input_and_a_missing_model_folder(monkeypatch, capsys, tmp_path, tiny):
    line = one_error_line(*run_cli("translate", "-m", tiny, "-i", tmp_path, capsys=capsys)[::2])
    assert f"--input {tmp_path}: is a folder" in line
    missing = tmp_path / "runs" / "no-model"
    line = one_error_line(*run_cli("translate", "-m", missing, "w5", capsys=capsys)[::2])
    assert line == f"error: --model {missing}: no such model folder"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    line = one_error_line(*run_cli("translate", "-m", "runs/no-model", "w5", capsys=capsys)[::2])
    assert line == "error: --model runs/no-model: no such model folder"


@pytest.mark.slow
def test_translating_one_10_mb_line_stays_under_1_gb(tmp_path, tiny):
    """The line is cut before it is tokenized: memory is bounded by the model's limit, not the line."""
    source = tmp_path / "long.txt"
    source.write_text("w5 w6 w7 " * (10_000_000 // 9) + "\n")
    script = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
        "print(done.returncode, peak, repr(done.stderr[-300:]))\n"
    )
    command = cli_command("translate", "-m", tiny, "-i", source, "--beam", "1")
    command += ["-o", str(tmp_path / "out.txt"), "--no-progress", "--max-len-a", "0", "--max-len-b", "2"]
    result = subprocess.run([sys.executable, "-c", script, *command], capture_output=True, text=True, env=cli_env())
    code, peak, stderr = result.stdout.split(" ", 2)
    print(f"peak memory translating a 10 MB line: {int(peak) / 2**30:.2f} GiB")
    assert code == "0", stderr
    assert re.search(r"line 1: more than \d+ tokens, more than the model's limit of \d+: truncated", stderr), stderr
    assert int(peak) < 2**30
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 1


def test_train_into_a_file_is_refused_before_the_data_is_read(monkeypatch, capsys, tmp_path):
    import aiayn_cli.training.trainer as trainer

    monkeypatch.setattr(trainer, "load_data", lambda *a: pytest.fail("the data was loaded"))
    output = tmp_path / "file"
    output.write_text("mine\n")
    line = one_error_line(*run_cli("train", TINY, "--output-dir", output, capsys=capsys)[::2])
    assert line == f"error: --output-dir {output}: is a file, not a folder"
    assert output.read_text() == "mine\n"


def test_a_run_folder_in_use_is_refused_naming_the_process(capsys, tmp_path):
    from aiayn_cli.training.run_folder import LOCK_FILE, locked_run_folder

    output = tmp_path / "run"
    with locked_run_folder(output):
        line = one_error_line(*run_cli("train", TINY, "--output-dir", output, capsys=capsys)[::2])
    assert f"--output-dir {output}: in use by another run (aiayn train, process {os.getpid()} on " in line
    assert [p.name for p in output.iterdir()] == [LOCK_FILE]
    with locked_run_folder(output):  # released when the run ends
        pass
    new = tmp_path / "new-run"  # a run that fails before writing anything leaves no folder behind
    line = one_error_line(*run_cli("train", TINY, "--output-dir", new, "--tokenizer", new, capsys=capsys)[::2])
    assert "cannot load the tokenizer" in line and not new.exists()


def test_evaluate_drops_a_byte_order_mark(capsys, tmp_path):
    hypotheses, references = tmp_path / "hyp.de", tmp_path / "ref.de"
    hypotheses.write_bytes("\ufeffEin Hund rennt im Park.\n".encode())
    references.write_text("Ein Hund rennt im Park.\n")
    path = tmp_path / "scores.json"
    code, _, err = run_cli(
        "evaluate", "-i", hypotheses, "-r", references, "--metrics", "chrf", "--json", path, capsys=capsys
    )
    assert code == 0, err
    assert json.loads(path.read_text())["scores"]["chrf"]["score"] == 100.0


def test_push_publishes_no_local_path_and_warns_about_token(capsys, tmp_path, tiny):
    run = tmp_path / "run"
    model = run / "averaged"
    shutil.copytree(tiny, model)
    recipe = {
        "model": {"preset": "tiny"},
        "data": {"data_dir": str(tmp_path / "data"), "source_lang": "en", "target_lang": "de", "dataset": None},
        "tokenizer": str(tmp_path / "tok"),
        "output_dir": str(run),
    }
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    evaluation = {"inputs": {"hypotheses": str(tmp_path / "hyp.de"), "references": [str(tmp_path / "ref.de")]}}
    (tmp_path / "eval.json").write_text(json.dumps({**evaluation, "scores": {"chrf": {"score": 50.0}}}))
    hub = tmp_path / "hub"
    code, _, err = run_cli(
        "push", "-m", model, "--repo-id", "u/m", "--dry-run", "--output-dir", hub,
        "--eval-json", tmp_path / "eval.json",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    published = {name: data.decode("utf-8", "replace") for name, data in snapshot(hub).items()}
    assert "recipe.yaml" in published and "eval_results.json" in published
    assert [name for name, text in published.items() if str(tmp_path) in text] == []
    assert yaml.safe_load(published["recipe.yaml"])["data"]["data_dir"] == "data"
    code, out, _ = run_cli("push", "--help", capsys=capsys)
    assert "process listings" in " ".join(out.replace("│", " ").split())


FULL_DISK_COMMANDS = {
    "translate -o": lambda c: [
        "translate",
        "-m",
        c["tiny"],
        "-i",
        c["text"],
        "-o",
        c["dir"] / "hyp.txt",
        "--beam",
        "1",
    ],
    "evaluate --json": lambda c: ["evaluate", "-i", c["text"], "-r", c["copy"], "--json", c["dir"] / "s.json"],
    "train-tokenizer -o": lambda c: [
        *("train-tokenizer", "--source-file", c["text"], "--target-file", c["text"]),
        *("--vocab-size", "300", "-o", c["dir"] / "tok"),
    ],
    "average -o": lambda c: ["average", c["tiny"], c["tiny"], "-o", c["dir"] / "avg"],
    "push": lambda c: ["push", "-m", c["tiny"], "--repo-id", "u/m", "--dry-run", "--output-dir", c["dir"] / "hub"],
}


@pytest.mark.parametrize("command", list(FULL_DISK_COMMANDS))
def test_a_full_disk_is_one_line_and_leaves_nothing(capsys, tmp_path, tiny, small_tmpfs, command):
    text = tmp_path / "text.txt"
    text.write_text("".join(f"w{i % 60 + 4} w{i % 7 + 4}\n" for i in range(40)))
    (tmp_path / "copy.txt").write_text(text.read_text())
    fill_disk(small_tmpfs)
    ctx = {"tiny": tiny, "text": text, "copy": tmp_path / "copy.txt", "dir": small_tmpfs}
    code, _, err = run_cli(*FULL_DISK_COMMANDS[command](ctx), capsys=capsys)
    lines = err.strip().splitlines()  # train-tokenizer reports the data it read first
    assert code == 2 and "Traceback" not in err and [x for x in lines if x.startswith("error")] == lines[-1:], err
    line = lines[-1]
    assert line.endswith(": No space left on device") and str(small_tmpfs) in line, line
    assert [p.name for p in small_tmpfs.iterdir()] == ["filler"]


def test_a_read_only_folder_is_refused_before_translating(capsys, tmp_path, tiny, small_tmpfs):
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    source = tmp_path / "x.txt"
    source.write_text("w5 w6\n")
    args = ["translate", "-m", tiny, "-i", source, "-o", small_tmpfs / "hyp.txt", "--beam", "1"]
    line = one_error_line(*run_cli(*args, capsys=capsys)[::2])  # one line: no progress bar before it
    assert line == f"error: --output {small_tmpfs / 'hyp.txt'}: the folder {small_tmpfs} is not writable"


def test_debug_shows_the_traceback_of_a_full_disk(monkeypatch, capsys, tmp_path, tiny, small_tmpfs):
    source = tmp_path / "x.txt"
    source.write_text("w5 w6\n")
    fill_disk(small_tmpfs)
    monkeypatch.setenv("AIAYN_DEBUG", "0")  # --debug sets it; restored after the test
    args = ["translate", "-m", tiny, "-i", source, "-o", small_tmpfs / "hyp.txt", "--beam", "1"]
    with pytest.raises(OSError, match="No space left on device"):
        run_cli("--debug", *args, capsys=capsys)
    assert [p.name for p in small_tmpfs.iterdir()] == ["filler"]


# Bad options and inputs across commands: one line naming the flag, before any work


def one_line(code: int, out: str, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("error: "), (code, out, err)
    return lines[0]


def test_train_names_its_flags_not_set_keys(tmp_path, capsys):
    run = tmp_path / "run"
    cases = {
        ("--max-time", "abc"): "error: --max-time must be minutes or a duration like",
        ("--max-steps", "0"): "error: --max-steps must be greater than 0, got 0",
        ("--max-epochs", "-1"): "error: --max-epochs must be greater than 0",
        ("-s", "en", "-t", "en"): "error: --source-lang and --target-lang are both en",
    }
    data = ("--data-dir", tmp_path / "no-data")
    for flags, expected in cases.items():
        line = one_line(*run_cli("train", "tiny", *data, "-o", run, *flags, capsys=capsys))
        assert line.startswith(expected) and "--set" not in line, line
        assert not run.exists()
    line = one_line(*run_cli("train", "tiny", "-o", run, "--set", "max_steps=0", capsys=capsys))
    assert line.startswith("error: --set max_steps"), line  # a --set key is named as such


def test_train_tokenizer_sample_size_and_languages(tmp_path, capsys):
    out = tmp_path / "tok"
    data = ("--source-file", REPO_ROOT / "pyproject.toml", "--target-file", REPO_ROOT / "pyproject.toml")
    line = one_line(*run_cli("train-tokenizer", *data, "-o", out, "--sample-size", "0", capsys=capsys))
    assert line == "error: --sample-size must be at least 1, got 0"
    line = one_line(*run_cli("train-tokenizer", "--data-dir", tmp_path, "-s", "en",
                              "-t", "en", "-o", out, capsys=capsys))  # fmt: skip
    assert line == "error: --source-lang and --target-lang are both en: a translation has two languages"
    assert not out.exists()


def test_evaluate_refuses_one_language_and_the_hypotheses_as_references(tmp_path, capsys):
    hyp = tmp_path / "hyp.de"
    hyp.write_text("ein Hund\n")
    line = one_line(*run_cli("evaluate", "-i", hyp, "-r", hyp, capsys=capsys))
    assert line == f"error: --references {hyp} is the --hypotheses file itself; score against other references"
    (tmp_path / "link.de").symlink_to(hyp)
    line = one_line(*run_cli("evaluate", "-i", hyp, "-r", tmp_path / "link.de", capsys=capsys))
    assert "is the --hypotheses file itself" in line
    line = one_line(*run_cli("evaluate", "-i", hyp, "--data-dir", tmp_path, "-s", "de",
                              "-t", "de", capsys=capsys))  # fmt: skip
    assert "--source-lang and --target-lang are both de" in line


def test_decoding_options_are_checked_before_the_model_loads(tmp_path, capsys):
    """The model does not exist: the line must be about the option, checked first, as one line (not
    Typer's box); the same checks name the request's fields in `aiayn serve` (tests/serving/test_serving.py)."""
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
            line = one_line(*run_cli(command, "-m", missing, *flags, *extra, capsys=capsys))
            assert line.startswith(expected), (command, line)


def test_a_progress_bar_never_reaches_a_log_file(tmp_path):
    """`aiayn translate -i in.txt -o out.txt 2> log`: stderr is a file, not a terminal, so no bar and no
    carriage return in the log (tests/decoding/test_translate.py checks that --progress still draws one)."""
    model = save_tiny_model(tmp_path / "model")
    source = tmp_path / "in.txt"
    source.write_text("".join(f"w{i % 60 + 4} w{i % 7 + 4}\n" for i in range(40)))
    log = tmp_path / "log"
    with open(log, "wb") as stderr:
        done = subprocess.run(
            cli_command("translate", "-m", model, "--precision", "fp32", "-i", source, "-o", tmp_path / "out.txt",
                        "--max-len-a", "0", "--max-len-b", "8"),  # a random model writes to its length limit
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
    from aiayn_cli.lookup import check_hub_model

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
    done = run_cli("translate", "-m", "runs/x", "A dog.", cwd=tmp_path, env=env, timeout=120)
    line = one_line(done.returncode, done.stdout, done.stderr)
    assert line.startswith("error: --model runs/x: no such model folder, and the Hub could not be reached"), line
    with pytest.raises(AiaynError, match="no such model folder$"):  # a path that cannot be a Hub id: no request
        check_hub_model(str(tmp_path / "runs" / "x"))
