"""`benchmarks/gpu_check.py`, known to work before any GPU time is spent: its smoke run (every part on the
CPU at tiny sizes: the slow tier), its install from a bundle with no network, and what `make gpu-bundle`
puts in the bundle."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import REPO_ROOT, cli_env

from benchmarks import gpu_bundle, gpu_check


def _wheel(folder: Path, name: str) -> Path:
    """A wheel of one module `name` that says `hello`."""
    path = folder / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}.py", "HELLO = 'hello'\n")
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return path


def test_install_puts_the_missing_wheels_first_on_the_path_with_no_index(tmp_path):
    (tmp_path / "bundle" / "wheels").mkdir(parents=True)
    _wheel(tmp_path / "bundle" / "wheels", "aiayn_bundle_probe")
    _wheel(tmp_path / "bundle" / "wheels", "pytest")  # installed here: left alone
    report = gpu_check.install(tmp_path / "bundle", tmp_path / "site")
    assert report["installed"] == ["aiayn_bundle_probe-1.0-py3-none-any.whl"] and report["wheels"] == 2
    env = cli_env(PYTHONPATH=str(tmp_path / "site"))
    done = subprocess.run(
        [sys.executable, "-c", "import aiayn_bundle_probe; print(aiayn_bundle_probe.HELLO)"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == "hello", done.stderr


def test_the_bundle_holds_what_the_gpu_machine_lacks_and_not_what_it_has():
    needed = gpu_bundle.needed()
    assert {"datasets", "evaluate", "pydantic", "pydantic-core", "sacremoses", "xxhash", "pytest"} <= set(needed)
    assert not {"torch", "transformers", "accelerate", "numpy", "tokenizers", "pyyaml", "aiayn-cli"} & set(needed)


@pytest.mark.slow
def test_the_smoke_run_passes_every_part(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "gpu_check.py"),
            str(out),
            "--smoke",
            "--bundle",
            str(tmp_path / "no-bundle"),
        ],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((out / "gpu_check.json").read_text())
    parts = record["figures"]["parts"]
    assert list(parts) == list(gpu_check.PARTS)
    assert {name: part["ok"] for name, part in parts.items()} == dict.fromkeys(gpu_check.PARTS, True), parts
    assert parts["multi30k"]["steps"] == 12 and "bleu" in json.dumps(parts["multi30k"]["test2016"]).lower()
    throughput = parts["throughput"]
    assert set(throughput["sides"]) == {"aiayn", "hf"} and throughput["sides"]["aiayn"]["mfu"] > 0
    assert throughput["ratio_to_hf"] > 0 and throughput["hours_for_100k_paper_steps"] > 0
    assert [(t["accumulation"], "fitted" in t) for t in throughput["sides"]["hf"]["tries"]] == [(1, True)]
    assert throughput["attention_kernels"] == "flash,efficient,math"
    assert throughput["sides"]["aiayn"]["profile"]["attention_operators"], throughput["sides"]["aiayn"]["profile"]
    assert throughput["sides"]["aiayn"]["profile"]["busy_s"] > 0 and (out / "profile" / "profile_step.txt").is_file()
    assert [row["batch"] for row in parts["decoding"]["rows"]] == [1, 4]
    assert [(row["batch"], "gather_times" in row) for row in parts["decoding"]["cache_paths"]] == [(1, True), (4, True)]
    lost = parts["lost"]  # SIGSTOP: the heartbeat (lost_process_after 10 s) ends the other
    assert lost["signal"] == "SIGSTOP" and 10 <= lost["seconds_to_stop"] < 60 and "gave no sign of life" in lost["line"]
    assert record["machine"]["cpu"]["model"] and (out / "gpu_check.log").stat().st_size > 1000


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def test_results_name_the_commit_the_bundle_recorded_not_the_copys_stale_git(tmp_path):
    from benchmarks import results

    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("A = 1\n")
    (repo / "b.txt").write_text("b\n")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "the tree that runs")
    recorded = results.source_record(repo)  # what make gpu-bundle writes
    assert recorded["commit"] == _git(repo, "rev-parse", "HEAD") and recorded["dirty"] is False
    assert recorded["files"]["a.py"] == _git(repo, "hash-object", "a.py")
    # the copy that travels: the same files, the git metadata of an older clone
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    _git(copy, "init", "-q")
    (copy / "old.txt").write_text("old\n")
    _git(copy, "add", "old.txt")
    _git(copy, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "older")
    assert results.git_commit(copy)["commit"] != recorded["commit"]
    found = results.source_of(copy, recorded)
    assert (found["commit"], found["dirty"]) == (recorded["commit"], False)
    (copy / "a.py").write_text("A = 2\n")  # a file changed after the bundle was made
    assert results.source_of(copy, recorded) | {"commit_from": None} == {
        "commit": recorded["commit"],
        "dirty": True,
        "changed": ["a.py"],
        "commit_from": None,
    }
    record = results.Recorder("x", "x", source=results.source_of(copy, recorded)).record({})
    assert record["commit"] == recorded["commit"] and record["dirty"] is True


def test_gpu_check_records_the_commit_of_the_bundles_source_json(tmp_path):
    (tmp_path / "bundle").mkdir()
    assert gpu_check.tree_source(tmp_path / "bundle") is None  # no bundle: git's own answer
    recorded = gpu_bundle.source_record(REPO_ROOT)
    (tmp_path / "bundle" / "source.json").write_text(json.dumps(recorded))
    found = gpu_check.tree_source(tmp_path / "bundle")
    assert found["commit"] == recorded["commit"] and found["dirty"] == recorded["dirty"]
    recorded["commit"], recorded["files"]["pyproject.toml"] = "0" * 40, "0" * 40
    (tmp_path / "bundle" / "source.json").write_text(json.dumps(recorded))
    found = gpu_check.tree_source(tmp_path / "bundle")
    assert found["commit"] == "0" * 40 and found["dirty"] and found["changed"] == ["pyproject.toml"]


def test_a_tests_part_killed_at_its_limit_says_which_tests_had_passed(tmp_path):
    tests = tmp_path / "test_probe.py"
    tests.write_text(
        "import time, pytest\n"
        "pytestmark = pytest.mark.gpu\n"
        "def test_one(): pass\n"
        "def test_two(): pytest.skip('no reason')\n"
        "def test_three(): assert False\n"
        "def test_slow(): time.sleep(300)\n"
        "def test_never(): pass\n"
    )
    check = gpu_check.Check(argparse.Namespace(out=tmp_path / "out", budget=60.0, smoke=True))
    try:
        result = gpu_check.part_tests(check, 8, files=(str(tests),))
    finally:
        check.log.close()
        shutil.rmtree(check.work)
    names = {k: [test.split("/")[-1] for test in result[k]] for k in ("passed", "skipped", "failed")}
    assert result["ok"] is False and result["exit_code"] == -9 and result["killed_after_s"] == 8
    assert names == {
        "passed": ["test_probe.py::test_one"],
        "skipped": ["test_probe.py::test_two"],
        "failed": ["test_probe.py::test_three"],
    }
    assert result["running"].endswith("test_probe.py::test_slow")
    assert "test_probe.py::test_one PASSED" in (tmp_path / "out" / "gpu_check.log").read_text()


def _sides_with(failures: dict):
    """A side runner: `failures[(side, accumulation)]` raised as SideFailed (out of memory where it says
    so), else figures."""
    from benchmarks import bench_train_wmt

    def run_side(args, side, accumulation=1):
        if (side, accumulation) in failures:
            raise bench_train_wmt.SideFailed(
                failures[side, accumulation], "out of memory" in failures[side, accumulation]
            )
        return {"tokens_per_s": 1000.0 * accumulation, "accumulation": accumulation}

    return run_side


def test_the_hf_side_out_of_memory_is_split_into_micro_batches_and_ours_is_kept():
    from benchmarks.bench_train_wmt import measure_sides

    args = argparse.Namespace(batch_size=755)
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 26.12 GiB"
    seen = []
    sides = measure_sides(args, _sides_with({("hf", 1): oom, ("hf", 2): oom}), lambda s: seen.append(sorted(s)))
    assert seen == [["aiayn"], ["aiayn", "hf"]]  # written after each side: a later kill keeps the first
    assert sides["aiayn"] == {"ok": True, "tokens_per_s": 1000.0, "accumulation": 1}
    assert sides["hf"]["ok"] and sides["hf"]["accumulation"] == 4
    assert [(t["accumulation"], t["per_device_batch"], "fitted" in t) for t in sides["hf"]["tries"]] == [
        (1, 755, False),
        (2, 378, False),
        (4, 189, True),
    ]


def test_one_sides_crash_is_its_own_and_the_others_figures_are_kept():
    from benchmarks.bench_train_wmt import measure_sides

    args = argparse.Namespace(batch_size=64)
    sides = measure_sides(args, _sides_with({("hf", 1): "exit code 1: RuntimeError: boom"}))
    assert sides["aiayn"]["ok"] and sides["aiayn"]["tokens_per_s"] == 1000.0
    assert sides["hf"]["ok"] is False and sides["hf"]["error"] == "exit code 1: RuntimeError: boom"
    assert len(sides["hf"]["tries"]) == 1  # a crash is not retried with smaller micro-batches
    sides = measure_sides(args, _sides_with({("aiayn", 1): "exit code -9: killed"}))
    assert sides["aiayn"]["ok"] is False and sides["hf"]["ok"] and sides["hf"]["tokens_per_s"] == 1000.0


def test_a_side_process_that_crashes_is_reported_with_its_error_line(tmp_path):
    from benchmarks import bench_train_wmt

    args = argparse.Namespace(
        device="cpu", preset="tiny", max_tokens=100, warmup_steps=1, steps=1, precision="no", work=tmp_path,
        batch_size=4, compile=False, attention_kernels=None, profile=None,
    )  # fmt: skip
    with pytest.raises(bench_train_wmt.SideFailed) as failed:  # no corpus in the work folder
        bench_train_wmt._side(args, "hf", 2)
    assert failed.value.out_of_memory is False and str(failed.value).startswith("exit code 1: ")
    assert "tokenizer" in str(failed.value).lower() or "corpus" in str(failed.value), str(failed.value)


def test_a_throughput_part_killed_during_the_peer_keeps_our_figures(tmp_path, monkeypatch):
    check = gpu_check.Check(argparse.Namespace(out=tmp_path / "out", budget=60.0, smoke=True))
    ours = {"ok": True, "tokens_per_s": 5.0, "mfu": 0.4, "hours_for_100k_paper_steps": 2.0}

    def killed(command, limit, env=None):  # the bench wrote its first side, then was killed
        path = Path(command[command.index("--json") + 1])
        path.write_text(json.dumps({"sides": {"aiayn": ours}, "ratio_to_hf": None}))
        return -9, ""

    monkeypatch.setattr(check, "run", killed)
    try:
        result = gpu_check.part_throughput(check, 100)
    finally:
        check.log.close()
        shutil.rmtree(check.work)
    assert result["ok"] is False and result["exit_code"] == -9 and result["sides"] == {"aiayn": ours}
