"""Checkpoints: atomic Hub-format folders with the training state; rotation; averaging (§6.1)."""

import json
import shutil

import pytest
import torch
from accelerate import Accelerator
from helpers import StubTokenizer
from transformers import AutoModelForSeq2SeqLM, GenerationConfig

from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration
from aiayn_cli.errors import AiaynError
from aiayn_cli.training.checkpoint import (
    average_checkpoints,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_weights,
    read_trainer_state,
    remove_incomplete,
    rotate_checkpoints,
    save_checkpoint,
    write_averaged_checkpoint,
)


def _model(seed):
    torch.manual_seed(seed)
    return AiaynForConditionalGeneration(AiaynConfig.from_preset("tiny", vocab_size=40))


def _saved(tmp_path, seed):
    folder = tmp_path / f"m{seed}"
    _model(seed).save_pretrained(folder)
    return folder


def test_average_is_the_elementwise_mean(tmp_path):
    folders = [_saved(tmp_path, seed) for seed in (1, 2, 3)]
    weights = [load_weights(f) for f in folders]
    averaged = average_checkpoints(folders)
    assert set(averaged) == set(weights[0])
    for name, tensor in averaged.items():
        expected = (weights[0][name].double() + weights[1][name].double() + weights[2][name].double()) / 3
        assert tensor.dtype == weights[0][name].dtype
        assert torch.allclose(tensor.double(), expected, atol=1e-7)
    out = write_averaged_checkpoint(folders, tmp_path / "averaged")
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    assert isinstance(model, AiaynForConditionalGeneration)
    assert torch.equal(model.model.shared.weight, averaged["model.shared.weight"])
    assert model.lm_head.weight.data_ptr() == model.model.shared.weight.data_ptr()  # still tied
    assert GenerationConfig.from_pretrained(out).num_beams == 4
    assert not (tmp_path / "averaged.tmp").exists()


def test_average_rejects_mismatched_models(tmp_path):
    small = _saved(tmp_path, 1)
    other = tmp_path / "other"
    AiaynForConditionalGeneration(AiaynConfig.from_preset("tiny", vocab_size=41)).save_pretrained(other)
    with pytest.raises(AiaynError, match="has shape"):
        average_checkpoints([small, other])
    with pytest.raises(AiaynError, match="no model.safetensors"):
        average_checkpoints([tmp_path])


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_average_refuses_a_checkpoint_holding_nan_and_writes_nothing(tmp_path, bad):
    """The issue's row 8: a NaN checkpoint made a NaN model, exit 0 (refused only by translate later)."""
    good, diverged = _saved(tmp_path, 1), tmp_path / "diverged"
    model = _model(2)
    with torch.no_grad():
        model.model.encoder.layers[0].feed_forward.w_1.weight[0, 0] = bad
    model.save_pretrained(diverged)
    with pytest.raises(AiaynError, match=r"average: .*diverged: '.*w_1.weight' holds NaN or infinity"):
        write_averaged_checkpoint([good, diverged], tmp_path / "averaged")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diverged", "m1"]


def _fake_checkpoint(folder, step, complete=True):
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if complete:
        (path / "trainer_state.json").write_text(json.dumps({"step": step}))
    return path


def test_average_refuses_checkpoints_of_other_models_or_tokenizers(tmp_path):
    first, second = _saved(tmp_path, 0), _saved(tmp_path, 1)
    for folder in (first, second):
        (folder / "tokenizer.json").write_text('{"vocab": 1}')
    (second / "tokenizer.json").write_text('{"vocab": 2}')
    with pytest.raises(AiaynError, match="share their tokenizer"):
        write_averaged_checkpoint([first, second], tmp_path / "avg")
    (second / "tokenizer.json").write_text('{"vocab": 1}')
    config = json.loads((second / "config.json").read_text())
    (second / "config.json").write_text(json.dumps({**config, "dropout": 0.3}))  # no bearing on the weights
    write_averaged_checkpoint([first, second], tmp_path / "avg")
    (second / "config.json").write_text(json.dumps({**config, "num_heads": 1}))
    with pytest.raises(AiaynError, match="different models \\(num_heads"):
        write_averaged_checkpoint([first, second], tmp_path / "avg2")
    (second / "config.json").write_text(json.dumps({**config, "d_model": 2 * config["d_model"]}))
    with pytest.raises(AiaynError, match="does not match its weights"):
        write_averaged_checkpoint([second], tmp_path / "avg3")
    assert not (tmp_path / "avg2").exists() and not (tmp_path / "avg3").exists()


def test_listing_ignores_incomplete_and_rotation_keeps_the_best(tmp_path):
    for step in (10, 20, 30, 40):
        _fake_checkpoint(tmp_path, step)
    _fake_checkpoint(tmp_path, 50, complete=False)  # killed before trainer_state.json
    (tmp_path / "checkpoint-60.tmp").mkdir()  # killed before the rename
    assert [p.name for p in list_checkpoints(tmp_path)] == [f"checkpoint-{s}" for s in (10, 20, 30, 40)]
    assert latest_checkpoint(tmp_path).name == "checkpoint-40"
    removed = rotate_checkpoints(tmp_path, keep_last=2, keep=tmp_path / "checkpoint-10")
    assert [p.name for p in removed] == ["checkpoint-20"]
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-10", "checkpoint-30", "checkpoint-40"]
    assert [p.name for p in remove_incomplete(tmp_path)] == ["checkpoint-60.tmp"]


def test_save_checkpoint_round_trip(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = _model(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    batch = {"input_ids": torch.tensor([[5, 6, 2]]), "labels": torch.tensor([[7, 8, 2]])}
    accelerator.backward(model(**batch).logits.sum())
    optimizer.step()
    path = save_checkpoint(accelerator, model, StubTokenizer(), {"step": 1, "epoch": 0}, tmp_path, optimizer=optimizer)
    assert path.name == "checkpoint-1" and read_trainer_state(path) == {"step": 1, "epoch": 0}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in path.iterdir()
    }
    loaded = AutoModelForSeq2SeqLM.from_pretrained(path)
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name])
    # the training state (safetensors and JSON only) restores the model, the optimizer and the RNG
    assert {p.suffix for p in path.rglob("*") if p.is_file()} <= {".safetensors", ".json", ".py"}
    rng = torch.get_rng_state()
    expected = torch.rand(3)
    state = optimizer.state_dict()
    torch.manual_seed(123)
    fresh = accelerator.prepare(_model(5))
    fresh_optimizer = accelerator.prepare(torch.optim.Adam(fresh.parameters(), lr=1e-3))
    load_checkpoint(accelerator, fresh, fresh_optimizer, path)
    assert torch.equal(torch.get_rng_state(), rng) and torch.equal(torch.rand(3), expected)
    restored = fresh_optimizer.state_dict()
    assert list(restored["param_groups"][0]["betas"]) == [0.9, 0.999]
    for index, moments in state["state"].items():
        assert all(torch.equal(restored["state"][index][k], v) for k, v in moments.items())
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values()))
    # overwriting the same step replaces the folder atomically
    save_checkpoint(accelerator, model, StubTokenizer(), {"step": 1, "epoch": 5}, tmp_path, optimizer=optimizer)
    assert read_trainer_state(path)["epoch"] == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1"]
    shutil.rmtree(path)


def test_resuming_a_checkpoint_of_another_size_is_one_line(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = _model(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    path = save_checkpoint(accelerator, model, StubTokenizer(), {"step": 1, "epoch": 0}, tmp_path, optimizer=optimizer)
    wider = AiaynForConditionalGeneration(
        AiaynConfig.from_preset("tiny", vocab_size=40, d_model=2 * model.config.d_model)
    )
    before = [t.clone() for t in wider.state_dict().values()]
    with pytest.raises(AiaynError, match="do not fit the recipe's model") as raised:
        load_checkpoint(accelerator, wider, torch.optim.Adam(wider.parameters()), path)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)
    assert all(torch.equal(a, b) for a, b in zip(before, wider.state_dict().values()))  # nothing half-loaded


def test_a_truncated_optimizer_state_is_named(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = _model(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[5, 6, 2]]), labels=torch.tensor([[7, 8, 2]])).loss.backward()
    optimizer.step()  # moments to save
    path = save_checkpoint(accelerator, model, StubTokenizer(), {"step": 1, "epoch": 0}, tmp_path, optimizer=optimizer)
    state = next(path.rglob("optimizer.safetensors"))
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    with pytest.raises(AiaynError, match="optimizer.safetensors: damaged or truncated"):
        load_checkpoint(accelerator, _model(0), torch.optim.Adam(_model(0).parameters()), path)


def test_average_command_last_n_of_a_run(tmp_path, capsys):
    from helpers import run_cli

    run = tmp_path / "run"
    for step, seed in ((10, 1), (20, 2), (30, 3)):
        folder = run / f"checkpoint-{step}"
        _model(seed).save_pretrained(folder)
        (folder / "trainer_state.json").write_text(json.dumps({"step": step}))
    code, out, err = run_cli("average", run, "--last", "2", "-o", tmp_path / "avg", capsys=capsys)
    assert code == 0, err
    assert "checkpoint-20, checkpoint-30" in out
    expected = average_checkpoints([run / "checkpoint-20", run / "checkpoint-30"])
    got = load_weights(tmp_path / "avg")
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    w20, w30 = load_weights(run / "checkpoint-20"), load_weights(run / "checkpoint-30")
    name = "model.shared.weight"
    assert torch.allclose(got[name], (w20[name] + w30[name]) / 2, atol=1e-7)
    assert "not chosen on validation: --choose" in err  # a plain average says it did not choose
    code, _, err = run_cli("average", run, "--last", "2", "-o", tmp_path / "avg", capsys=capsys)
    assert code == 2 and "exists and holds a model folder; pass --overwrite" in err
    # --choose needs the run's recipe (its validation split) and --last; --data-dir and --choose-by are --choose's
    for args, message in (
        ((run, "--last", "2", "--choose"), f"{run} holds no recipe.yaml"),
        ((run / "checkpoint-20", run / "checkpoint-30", "--choose"), "--choose and --data-dir take a run folder"),
        ((run, "--last", "2", "--data-dir", tmp_path), "--data-dir is for --choose"),
        ((run, "--last", "2", "--choose-by", "beam"), "--choose-by is for --choose"),
        ((run, "--last", "2", "--choose", "--choose-by", "bleu"), "--choose-by: 'bleu' is not one of 'sample', 'beam'"),
    ):
        code, _, err = run_cli("average", *args, "-o", tmp_path / "chosen", capsys=capsys)
        assert code == 2 and message in err and err.count("\n") == 1, err
        assert not (tmp_path / "chosen").exists()
