"""One line for every failure, nothing lost, nothing left behind, command by command: interrupted
writes, full disks, broken inputs and services, each test named by the failure it makes (the output
rule itself is walked by `test_outputs.py`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import REPO_ROOT, StubTokenizer, fill_disk, one_error_line, run_cli, save_tiny_model, snapshot, tiny_model

from aiayn_cli.errors import AiaynError

TINY = REPO_ROOT / "recipes" / "tiny.yaml"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("failures") / "model")


def _copy(tiny: Path, folder: Path) -> Path:
    shutil.copytree(tiny, folder)
    return folder


def _data(folder: Path, lines: int = 12) -> Path:
    folder.mkdir()
    text = "".join(f"w{4 + i % 50} w{5 + i % 7}\n" for i in range(lines))
    for split in ("train", "val", "test"):
        for lang in ("en", "de"):
            (folder / f"{split}.{lang}").write_text(text)
    return folder


def _line(monkeypatch, capsys, *args) -> str:
    return one_error_line(*run_cli(*args, capsys=capsys)[::2])


# ---------------------------------------------------------------------------------------------
# Rows 2, 3, 4: train-tokenizer and evaluate never replace their inputs; a vocabulary size in range
# ---------------------------------------------------------------------------------------------


def test_train_tokenizer_never_deletes_a_corpus_or_a_model(monkeypatch, capsys, tmp_path, tiny):
    data, model = _data(tmp_path / "D"), _copy(tiny, tmp_path / "model")
    before = snapshot(tmp_path)
    common = ["train-tokenizer", "--data-dir", data, "-s", "en", "-t", "de", "--vocab-size", "300", "--overwrite"]
    assert "is the input" in _line(monkeypatch, capsys, *common, "-o", data)
    assert "holds files that are not part of a tokenizer (e.g. config.json)" in _line(
        monkeypatch, capsys, *common, "-o", model
    )
    assert snapshot(tmp_path) == before


def test_evaluate_never_writes_over_the_references(monkeypatch, capsys, tmp_path, tiny):
    data = _data(tmp_path / "D")
    before = (data / "test.de").read_bytes()
    args = ["evaluate", "--model", tiny, "--data-dir", data, "-s", "en", "-t", "de", "--split", "test"]
    line = _line(monkeypatch, capsys, *args, "-o", data / "test.de")
    assert line.startswith(f"error: --output {data / 'test.de'}: is the input file"), line
    assert (data / "test.de").read_bytes() == before


def test_a_vocabulary_size_out_of_range_is_one_line_not_an_abort(monkeypatch, capsys, tmp_path):
    data = _data(tmp_path / "D")
    args = ["train-tokenizer", "--data-dir", data, "-s", "en", "-t", "de", "-o", tmp_path / "tok"]
    line = _line(monkeypatch, capsys, *args, "--vocab-size", "99999999999")
    assert line == "error: --vocab-size must be at most 1,000,000 (the paper's is ~37,000), got 99999999999"
    line = _line(monkeypatch, capsys, *args, "--seed", "-1")
    assert line == "error: --seed must be 0 or more, got -1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["D"]


# ---------------------------------------------------------------------------------------------
# Rows 5, 6, 13: the one load check of a model folder
# ---------------------------------------------------------------------------------------------


def _edited_weights(tiny: Path, folder: Path, edit) -> Path:
    from safetensors.torch import load_file, save_file

    _copy(tiny, folder)
    weights = load_file(folder / "model.safetensors")
    edit(weights)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_weights_holding_nan_are_named_at_load(monkeypatch, capsys, tmp_path, tiny):
    name = "model.encoder.layers.0.feed_forward.w_1.weight"

    def poison(weights):
        assert name in weights, sorted(weights)[:8]
        weights[name][0, 0] = float("nan")

    model = _edited_weights(tiny, tmp_path / "nan-model", poison)
    for beam in (["--beam", "1"], []):  # greedy search gave a traceback, beam search an empty line
        line = _line(monkeypatch, capsys, "translate", "-m", model, "w5 w6", *beam)
        assert line == (
            f"error: --model {model}: the weight {name} holds 1 NaN or infinite value(s) of "
            f"{torch.Size(load_shape(model, name)).numel()}; the model cannot translate (a diverged run? use an "
            "earlier checkpoint)"
        )


def load_shape(model: Path, name: str) -> tuple[int, ...]:
    from safetensors import safe_open

    with safe_open(model / "model.safetensors", "pt") as weights:
        return tuple(weights.get_slice(name).get_shape())


def test_pickled_weights_are_never_loaded_and_said_so_in_one_line(monkeypatch, capsys, tmp_path, tiny):
    from safetensors.torch import load_file

    model = _copy(tiny, tmp_path / "pickled")
    torch.save(load_file(model / "model.safetensors"), model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    commands = {
        "translate": ["translate", "-m", model, "w5"],
        "attention": ["attention", "-m", model, "w5"],
        "push": ["push", "-m", model, "--repo-id", "u/m", "--dry-run", "--output-dir", tmp_path / "hub"],
        "export": ["export", "-m", model, "-o", tmp_path / "ct2"],
        "serve": ["serve", "-m", model, "--port", "0"],
    }
    loaded = []
    monkeypatch.setattr("torch.load", lambda *a, **k: loaded.append(a) or pytest.fail("a pickle was loaded"))
    for command, args in commands.items():
        line = _line(monkeypatch, capsys, *args)
        assert f"{model}: its weights are pickled (pytorch_model.bin), and pickles are not loaded" in line, command
    assert loaded == [] and sorted(p.name for p in tmp_path.iterdir()) == ["pickled"]


def test_weights_the_config_does_not_use_are_refused(monkeypatch, capsys, tmp_path, tiny):
    model = _copy(tiny, tmp_path / "fewer-layers")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "num_decoder_layers": 1}))
    line = _line(monkeypatch, capsys, "translate", "-m", model, "w5 w6")
    assert f"--model {model}: model.safetensors holds" in line and "that config.json does not use (e.g. " in line
    assert "model.decoder.layers.1." in line


# ---------------------------------------------------------------------------------------------
# Rows 7, 8, 15, 18a: training runs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", ["-1", "1180591620717411303424"])
def test_a_seed_out_of_range_is_one_line(monkeypatch, capsys, tmp_path, tiny, seed):
    line = _line(monkeypatch, capsys, "train", TINY, "--tokenizer", tiny, "-o", tmp_path / "run", "--seed", seed)
    assert line.startswith("error: --seed must be ") and line.endswith(f", got {seed}"), line
    assert not (tmp_path / "run").exists()


def _run_with_a_checkpoint(tmp_path: Path, tiny: Path, state: dict) -> tuple[list[str], Path]:
    from aiayn_cli.training.recipe import load_recipe, save_recipe

    data, run = _data(tmp_path / "data"), tmp_path / "run"
    flags = ["--data-dir", data, "-s", "en", "-t", "de", "--tokenizer", tiny, "-o", run]
    overrides = {"data.data_dir": str(data), "data.source_lang": "en", "data.target_lang": "de"}
    save_recipe(load_recipe(TINY, {**overrides, "tokenizer": str(tiny), "output_dir": str(run)}), run / "recipe.yaml")
    checkpoint = _copy(tiny, run / "checkpoint-60")
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    return ["train", TINY, *flags], checkpoint


def test_a_damaged_trainer_state_is_named_before_the_data_is_read(monkeypatch, capsys, tmp_path, tiny):
    import aiayn_cli.training.trainer as trainer

    monkeypatch.setattr(trainer, "load_data", lambda *a: pytest.fail("the data was loaded"))
    args, checkpoint = _run_with_a_checkpoint(tmp_path, tiny, {"step": "sixty"})
    line = _line(monkeypatch, capsys, *args)
    state = checkpoint / "trainer_state.json"
    assert line == f"error: {state}: step: input should be a valid integer, got 'sixty'; resume from another checkpoint"
    state.write_text('{"step": 6')  # truncated
    assert f"{state}: not a readable checkpoint state" in _line(monkeypatch, capsys, *args)
    assert not (checkpoint.parent / ".aiayn-run.lock").exists()


@pytest.mark.parametrize("damage", ["truncated", "other shape"])
def test_a_damaged_optimizer_json_is_named(tmp_path, damage):
    from accelerate import Accelerator

    from aiayn_cli.training.training_state import load_training_state, save_training_state

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    accelerator = Accelerator(cpu=True)
    save_training_state(accelerator, optimizer, tmp_path)
    path = tmp_path / "optimizer.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2] if damage == "truncated" else json.dumps({"param_groups": 3}))
    with pytest.raises(AiaynError) as raised:
        load_training_state(accelerator, torch.optim.Adam(model.parameters()), tmp_path)
    assert str(raised.value).startswith(f"{path}: ") and "\n" not in str(raised.value)
    assert ("damaged or truncated" if damage == "truncated" else "not the state aiayn saved") in str(raised.value)


def test_a_data_folder_spelled_relative_or_absolute_is_the_same_run(monkeypatch, tmp_path):
    from aiayn_cli.training.recipe import load_recipe, recipe_differences

    _data(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    base = {"tokenizer": "tok", "output_dir": "run", "data.source_lang": "en", "data.target_lang": "de"}
    spelled = [load_recipe(TINY, {**base, "data.data_dir": d}) for d in ("data", "./data", str(tmp_path / "data"))]
    assert [recipe_differences(spelled[0], other) for other in spelled[1:]] == [[], []]
    (tmp_path / "other").mkdir()
    other = load_recipe(TINY, {**base, "data.data_dir": "other"})
    assert recipe_differences(spelled[0], other) == ["data.data_dir: 'data' -> 'other'"]


def test_a_refused_run_leaves_no_lock_file(monkeypatch, capsys, tmp_path, tiny):
    folder = tmp_path / "documents"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    line = _line(monkeypatch, capsys, "train", TINY, "--tokenizer", tiny, "-o", folder)
    assert "is not empty and holds no aiayn run" in line
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


# ---------------------------------------------------------------------------------------------
# Rows 9, 10: a full disk names the output, never an input; nothing is left
# ---------------------------------------------------------------------------------------------


def _fill_leaving(folder: Path, free: int) -> None:
    """Fill a tmpfs but for about `free` bytes (then the small files fit, the weights do not)."""
    fill_disk(folder)
    filler = folder / "filler"
    os.truncate(filler, max(filler.stat().st_size - free, 0))


@pytest.mark.parametrize("command", ["average", "push", "export"])
def test_a_disk_that_fills_while_the_weights_are_written(monkeypatch, capsys, tmp_path, tiny, small_tmpfs, command):
    _fill_leaving(small_tmpfs, 96 * 1024)  # the configs and tokenizer fit, model.safetensors (~1 MB) does not
    out = small_tmpfs / "out"
    args = {
        "average": ["average", tiny, tiny, "-o", out],
        "push": ["push", "-m", tiny, "--repo-id", "u/m", "--dry-run", "--output-dir", out],
        "export": ["export", "-m", tiny, "-o", out],
    }[command]
    line = _line(monkeypatch, capsys, *args)
    assert line == f"error: {out}: No space left on device", line
    assert "damaged" not in line and [p.name for p in small_tmpfs.iterdir()] == ["filler"]


def test_a_checkpoint_on_a_full_disk_names_the_checkpoint(monkeypatch, tmp_path):
    """safetensors reports a full disk as its own error ('os error 28'): the line names the checkpoint
    being written, not a damaged input, and nothing half-written stays."""
    from accelerate import Accelerator
    from safetensors import SafetensorError

    import aiayn_cli.training.training_state as training_state
    from aiayn_cli.cli.app import error_line
    from aiayn_cli.training.checkpoint import save_checkpoint

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "
                              '"No space left on device" }) (os error 28)')  # fmt: skip

    monkeypatch.setattr(training_state, "save_file", full)
    model = tiny_model(40, seed=0).train()
    optimizer = torch.optim.Adam(model.parameters())
    with pytest.raises(OSError) as raised:
        save_checkpoint(Accelerator(cpu=True), model, StubTokenizer(), {"step": 3}, tmp_path, optimizer=optimizer)
    assert error_line(raised.value) == (f"error: {tmp_path / 'checkpoint-3'}: No space left on device", 2)
    assert list(tmp_path.iterdir()) == []


def test_train_tokenizer_onto_a_full_disk(capsys, tmp_path, small_tmpfs):
    data = _data(tmp_path / "D", lines=200)
    _fill_leaving(small_tmpfs, 4 * 1024)
    args = ["train-tokenizer", "--data-dir", data, "-s", "en", "-t", "de", "--vocab-size", "300"]
    code, _, err = run_cli(*args, "-o", small_tmpfs / "tok", capsys=capsys)
    assert code == 2 and err.strip().splitlines()[-1] == f"error: {small_tmpfs / 'tok'}: No space left on device", err
    assert "Traceback" not in err and [p.name for p in small_tmpfs.iterdir()] == ["filler"]


# ---------------------------------------------------------------------------------------------
# Rows 11, 12, 14, 16, 18b-d
# ---------------------------------------------------------------------------------------------


def test_a_missing_local_folder_is_said_so_not_looked_up_on_the_hub(monkeypatch, capsys, tmp_path, tiny):
    """(A recipe with `tokenizer_training` builds a missing tokenizer folder instead: not this case.)"""
    missing = tmp_path / "no-such-folder"
    data = _data(tmp_path / "D")
    flags = ["--data-dir", data, "-s", "en", "-t", "de", "--tokenizer", missing, "--set", "tokenizer_training=null"]
    assert _line(monkeypatch, capsys, "train", TINY, *flags, "-o", tmp_path / "run") == (
        f"error: {missing}: no such tokenizer folder"
    )
    assert _line(monkeypatch, capsys, "prepare", TINY, *flags) == f"error: {missing}: no such tokenizer folder"
    assert _line(monkeypatch, capsys, "export", "-m", missing, "-o", tmp_path / "ct2") == (
        f"error: --model {missing}: no such model folder"  # checked before the libraries load, named by its option
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["D"]


def test_average_copies_no_pickle_and_no_foreign_code(capsys, tmp_path, tiny):
    first, second = _copy(tiny, tmp_path / "a"), _copy(tiny, tmp_path / "b")
    torch.save({"x": torch.ones(1)}, second / "pytorch_model.bin")
    (second / "modeling_aiayn.py").write_text("import os  # planted\n")
    code, _, err = run_cli("average", first, second, "-o", tmp_path / "avg", capsys=capsys)
    assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "avg").iterdir())
    assert "pytorch_model.bin" not in names and "model.safetensors" in names and "tokenizer.json" in names
    assert "planted" not in (tmp_path / "avg" / "modeling_aiayn.py").read_text()


def test_utf16_without_a_byte_order_mark_is_refused_not_misread(monkeypatch, capsys, tmp_path, tiny):
    source = tmp_path / "utf16.txt"
    source.write_bytes("w5 w6\nw7 w8\nw9\n".encode("utf-16-le"))  # 3 lines; once read as 4
    line = _line(monkeypatch, capsys, "translate", "-m", tiny, "-i", source, "-o", tmp_path / "out.txt")
    assert (
        line
        == f"error: {source}: is UTF-16LE text without a byte-order mark (NUL between its characters); convert it to UTF-8"
    )
    source.write_bytes(b"w5 w6\nw7 \x00w8\n")
    assert _line(monkeypatch, capsys, "translate", "-m", tiny, "-i", source) == (
        f"error: {source}:2: a NUL byte (byte 4 of the line): text holds none; is it a binary file?"
    )
    assert not (tmp_path / "out.txt").exists()


def test_attention_replaces_its_own_files_never_the_users(monkeypatch, capsys, tmp_path, tiny):
    out = tmp_path / "att"
    args = ["attention", "-m", tiny, "w5 w6", "-o", out, "-f", "html", "-f", "json"]
    for _ in range(2):  # a second run replaces what the first wrote
        code, _, err = run_cli(*args, capsys=capsys)
        assert code == 0, err
    (out / "explorer.html").write_text("my notes\n")  # the user edits it, or wrote it
    line = _line(monkeypatch, capsys, *args)
    assert line.startswith(f"error: --output-dir {out / 'explorer.html'}: exists and was not written by this command")
    assert line.endswith("pass --overwrite to replace it, or choose another folder")
    assert (out / "explorer.html").read_text() == "my notes\n"
    code, _, err = run_cli(*args, "--overwrite", capsys=capsys)
    assert code == 0 and (out / "explorer.html").read_text() != "my notes\n", err


def test_push_checks_the_repo_id_before_writing(monkeypatch, capsys, tmp_path, tiny):
    for repo_id in ("/m", "u/", "a/b/c", "u/m.", "a--b/c", "u/ m"):
        args = ["push", "-m", tiny, "--repo-id", repo_id, "--dry-run", "--output-dir", tmp_path / "hub"]
        assert _line(monkeypatch, capsys, *args).startswith(f"error: --repo-id {repo_id!r}: "), repo_id
    assert not (tmp_path / "hub").exists()


def test_the_pickle_check_looks_through_links(tmp_path):
    from aiayn_cli.training.training_state import check_no_pickles

    checkpoint, elsewhere = tmp_path / "checkpoint-10", tmp_path / "elsewhere"
    checkpoint.mkdir()
    elsewhere.mkdir()
    (checkpoint / "trainer_state.json").write_text("{}")
    torch.save({"x": 1}, elsewhere / "state.pt")
    (checkpoint / "training_state").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(AiaynError, match="state.pt: a pickle in a checkpoint"):
        check_no_pickles(checkpoint)
    (elsewhere / "state.pt").unlink()
    (elsewhere / "loop").symlink_to(checkpoint, target_is_directory=True)  # a loop is walked once
    os.mkfifo(elsewhere / "fifo.json")  # never opened (it would block)
    with pytest.raises(AiaynError, match="fifo.json: not a regular file in a checkpoint"):
        check_no_pickles(checkpoint)


def test_a_second_signal_removes_the_checkpoint_being_written(monkeypatch, tmp_path):
    from aiayn_cli.training.loop import remove_partial_checkpoint
    from aiayn_cli.training.signals import StopSignals

    (tmp_path / "checkpoint-100").mkdir()
    (tmp_path / "checkpoint-200.tmp" / "training_state").mkdir(parents=True)
    run = SimpleNamespace(output=tmp_path, accelerator=SimpleNamespace(is_main_process=True))
    killed = []
    monkeypatch.setattr(os, "kill", lambda pid, number: killed.append(number))
    with StopSignals(on_abort=lambda: remove_partial_checkpoint(run)) as signals:
        signals._handle(signal.SIGINT, None)  # the first: finish the step, save
        assert (tmp_path / "checkpoint-200.tmp").exists()
        signals._handle(signal.SIGINT, None)  # the second: stop now, leaving nothing half-written
    assert killed == [signal.SIGINT] and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-100"]


# ---------------------------------------------------------------------------------------------
# serve answers in its JSON error shape, with strict types
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tiny):
    from fastapi.testclient import TestClient

    from aiayn_cli.decoding.translator import Translator
    from aiayn_cli.serving.app import create_app

    with TestClient(create_app(Translator.from_pretrained(str(tiny)))) as client:
        yield client


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("beam", "4", "beam: Input should be a valid integer"),
        ("beam", True, "beam: Input should be a valid integer"),
        ("beam", 4.0, "beam: Input should be a valid integer"),
        ("sample", 1, "sample: Input should be a valid boolean"),
        ("length_penalty", "0.6", "length_penalty: Input should be a valid number"),
    ],
)
def test_request_types_are_strict(client, field, value, said):
    answer = client.post("/v1/translate", json={"text": "w5 w6", field: value})
    assert answer.status_code == 422 and answer.json() == {"error": said}, answer.text


def test_numbers_still_pass_as_numbers(client):
    answer = client.post("/v1/translate", json={"text": "w5 w6", "beam": 2, "length_penalty": 1})
    assert answer.status_code == 200, answer.text


def test_deeply_nested_json_is_said_so(client):
    body = "[" * 100_000 + "]" * 100_000
    answer = client.post("/v1/translate", content=body, headers={"content-type": "application/json"})
    assert answer.status_code in (400, 413) and set(answer.json()) == {"error"}, answer.text
    if answer.status_code == 400:
        assert answer.json() == {"error": "the body's JSON is nested too deeply (more than 100 levels)"}


def test_a_request_that_is_not_http_gets_the_json_error_shape(tiny):
    import uvicorn

    from aiayn_cli.decoding.translator import Translator
    from aiayn_cli.serving.app import create_app
    from aiayn_cli.serving.server import json_errors_protocol

    app = create_app(Translator.from_pretrained(str(tiny)))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="critical", http=json_errors_protocol())
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        with contextlib.closing(socket.create_connection(("127.0.0.1", port), timeout=30)) as connection:
            connection.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            answer = b""
            while chunk := connection.recv(4096):
                answer += chunk
    finally:
        server.should_exit = True
        thread.join(timeout=60)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"content-type: application/json" in head.lower(), answer
    assert set(json.loads(body)) == {"error"} and json.loads(body)["error"].startswith("not a valid HTTP request")


# ---------------------------------------------------------------------------------------------
# Found by the bad-input sweep (issue 34's note): each was a traceback or a line that misled
# ---------------------------------------------------------------------------------------------


def test_sweep_a_link_loop_is_named_not_a_traceback(monkeypatch, capsys, tmp_path):
    loop, good = tmp_path / "loop", tmp_path / "ref.txt"
    loop.symlink_to(loop)
    good.write_text("w5 w6\n")
    for args in (["-i", loop, "-r", good], ["-i", good, "-r", loop]):
        line = _line(monkeypatch, capsys, "evaluate", *args, "--metrics", "chrf")
        assert str(loop) in line, line
    line = _line(monkeypatch, capsys, "evaluate", "-i", good, "-r", good.with_name("x"), "--json", loop)
    assert line == f"error: --json {loop}: is a link loop, not a file; give a file name"


def test_sweep_average_of_a_config_that_is_not_an_object(monkeypatch, capsys, tmp_path, tiny):
    model = _copy(tiny, tmp_path / "array-config")
    (model / "config.json").write_text("[1, 2]")
    line = _line(monkeypatch, capsys, "average", model, tiny, "-o", tmp_path / "avg")
    assert line == f"error: {model / 'config.json'}: not a JSON object (a model's configuration is one)"


def test_sweep_recipes_of_a_file_that_is_not_text(monkeypatch, capsys, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes("model: {}\n".encode("utf-16"))
    assert _line(monkeypatch, capsys, "recipes", recipe) == (
        f"error: {recipe}: not a UTF-8 text file (byte 1); a recipe is YAML text"
    )


def test_sweep_an_empty_model_path_is_not_the_current_folder(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    for command in (["push", "-m", "", "--repo-id", "u/m", "--dry-run"], ["export", "-m", "", "-o", "ct2"]):
        assert _line(monkeypatch, capsys, *command) == "error: --model is empty: give a model folder or a Hub id"
    for last in ([], ["--last", "2"]):  # average's CHECKPOINT... too (it was reported as '.')
        line = _line(monkeypatch, capsys, "average", "", *last, "-o", "avg")
        assert line == "error: an empty CHECKPOINT: give checkpoint folders, or with --last a run folder"
    assert list(tmp_path.iterdir()) == []


def test_sweep_translate_reads_a_device_or_fifo_and_names_other_nodes(monkeypatch, capsys, tmp_path, tiny):
    code, out, err = run_cli("translate", "-m", tiny, "-i", "/dev/null", "--beam", "1", capsys=capsys)
    assert code == 0 and out == "", err  # no lines in, no lines out
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    server.close()
    line = _line(monkeypatch, capsys, "translate", "-m", tiny, "-i", tmp_path / "sock")
    assert line == f"error: --input {tmp_path / 'sock'}: is a socket, not a file"


def test_sweep_a_cache_dir_that_is_a_file_is_named(monkeypatch, capsys, tmp_path, tiny):
    data, cache = _data(tmp_path / "D"), tmp_path / "cache"
    cache.write_text("mine\n")
    args = ["prepare", TINY, "--data-dir", data, "-s", "en", "-t", "de", "--tokenizer", tiny, "--cache-dir", cache]
    assert _line(monkeypatch, capsys, *args) == f"error: --cache-dir {cache}: is a file, not a folder"
    assert cache.read_text() == "mine\n"


def test_sweep_a_tokenizer_folder_whose_config_is_not_an_object(monkeypatch, capsys, tmp_path, tiny):
    folder = _copy(tiny, tmp_path / "tok")
    (folder / "config.json").write_text("[1, 2]")
    args = ["train", TINY, "--tokenizer", folder, "--set", "tokenizer_training=null", "-o", tmp_path / "run"]
    assert f"cannot load the tokenizer {folder}: " in _line(monkeypatch, capsys, *args)
