"""Results files (`benchmarks/results.py`): what every one holds, and that those in the repository do."""

from __future__ import annotations

import json
import os
import stat

import pytest
from helpers import REPO_ROOT

from benchmarks import results


def test_a_results_file_holds_the_command_commit_machine_versions_and_load(tmp_path):
    recorder = results.Recorder("bench_example", ["benchmarks/bench_example.py", "--repeats", "3"])
    path = recorder.write({"rows": [{"batch": 1, "tok_s": 12.5}]}, path=tmp_path / "out.json")
    record = results.read(path)
    assert record["name"] == "bench_example"
    assert record["command"] == "python benchmarks/bench_example.py --repeats 3"
    assert record["commit"] and len(record["commit"]) == 40 and isinstance(record["dirty"], bool)
    cpu = record["machine"]["cpu"]
    assert cpu["model"] and cpu["cores"] >= 1
    assert set(cpu["flags"]) == {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
    assert all(isinstance(v, bool) for v in cpu["flags"].values())
    assert record["versions"]["torch"] and record["versions"]["python"]
    assert record["threads"] >= 1
    assert len(record["load_average"]["before"]) == 3 and len(record["load_average"]["after"]) == 3
    assert record["figures"] == {"rows": [{"batch": 1, "tok_s": 12.5}]}
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left beside it
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # open's mode, not a temporary file's 0o600


def test_the_default_file_is_named_by_the_machine(monkeypatch, tmp_path):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    path = results.Recorder("quickstart", "aiayn quickstart").write({"bleu": 99.0})
    assert path.parent == tmp_path and path.name.startswith("quickstart.") and path.suffix == ".json"
    assert json.loads(path.read_text())["command"] == "aiayn quickstart"


def test_machines_are_named_by_model_and_features():
    xeon = {
        "cpu": {"model": "Intel(R) Xeon(R) Platinum 8488C", "cores": 2, "flags": dict.fromkeys(results.CPU_FLAGS, True)}
    }
    assert results.machine_slug(xeon) == "intel-xeon-platinum-8488c-amx"
    assert results.describe(xeon) == "Intel Xeon Platinum 8488C (2 cores; AVX2, AVX-512, AVX512-BF16, AMX)"
    epyc = {
        "cpu": {
            "model": "AMD EPYC 7R13 Processor",
            "cores": 2,
            "flags": {**dict.fromkeys(results.CPU_FLAGS, False), "avx2": True},
        }
    }
    assert results.machine_slug(epyc) == "amd-epyc-7r13-avx2"
    assert results.describe(epyc) == "AMD EPYC 7R13 (2 cores; AVX2)"
    held = {"cpu": {**xeon["cpu"], "isa_limits": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}}
    assert results.machine_slug(held) == "intel-xeon-platinum-8488c-amx-as-avx2"
    assert results.describe(held).endswith("AMX; held to ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2)")
    bf16 = {"cpu": {**xeon["cpu"], "isa_limits": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}}}
    assert results.machine_slug(bf16) == "intel-xeon-platinum-8488c-amx-as-avx512-bf16"
    above = {"cpu": {**epyc["cpu"], "isa_limits": {"MKL_ENABLE_INSTRUCTIONS": "AVX512"}}}
    assert results.machine_slug(above) == "amd-epyc-7r13-avx2"  # a limit above what the CPU has holds nothing
    gpu = {**epyc, "gpu": {"model": "NVIDIA H100 80GB HBM3", "count": 1}}
    assert results.machine_slug(gpu) == "nvidia-h100-80gb-hbm3" and results.describe(gpu) == "NVIDIA H100 80GB HBM3"


def test_a_file_without_its_hardware_is_refused(tmp_path):
    record = results.Recorder("x", "x").record({"a": 1})
    record["machine"] = {"cpu": {"model": "Some CPU", "flags": {"avx2": True}}, "gpu": None}
    path = tmp_path / "x.json"
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"x\.json: the machine names neither a GPU nor a CPU model with the flags"):
        results.read(path)
    del record["load_average"]
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"x\.json: no load_average"):
        results.read(path)


def test_every_results_file_in_the_repository_names_its_hardware():
    files = sorted((REPO_ROOT / "benchmarks" / "results").glob("*.json"))
    for path in files:
        record = results.read(path)  # raises, naming the file, where the machine is not named
        assert record["commit"], f"{path}: no commit"
