"""`benchmarks/gpu_check.py`, known to work before any GPU time is spent: its smoke run (every part on the
CPU at tiny sizes: the slow tier), its install from a bundle with no network, and what `make gpu-bundle`
puts in the bundle."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO_ROOT, cli_env

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
    assert throughput["sides"]["aiayn"]["profile"]["busy_s"] > 0 and (out / "profile" / "profile_step.txt").is_file()
    assert [row["batch"] for row in parts["decoding"]["rows"]] == [1, 4]
    lost = parts["lost"]  # SIGSTOP: the heartbeat (lost_process_after 10 s) ends the other
    assert lost["signal"] == "SIGSTOP" and 10 <= lost["seconds_to_stop"] < 60 and "gave no sign of life" in lost["line"]
    assert record["machine"]["cpu"]["model"] and (out / "gpu_check.log").stat().st_size > 1000
