"""The benchmarks still run: each one end to end at the smallest sizes, on data the test makes.

Nothing here is timed: the checks are that every system ran, did the work the benchmark says it
does, and that the table and ratios were printed. A change elsewhere (a recipe key, a renamed
function) that breaks a benchmark fails here instead of at the next measurement.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from corpora import make_pairs, write_text_split
from helpers import REPO_ROOT, cli_env

BENCHMARKS = REPO_ROOT / "benchmarks"


def _run(script: str, *args: str, timeout: float = 600) -> str:
    import subprocess

    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(),
    )
    assert result.returncode == 0, f"{script} failed:\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.slow  # every system of the benchmark, each loaded and run
def test_bench_decode_runs_every_system(tmp_path):
    out = tmp_path / "rows.json"
    stdout = _run(
        "bench_decode.py",
        *("--dims", "tiny", "--vocab", "120", "--batch", "1", "4", "--beams", "2", "--new-tokens", "5"),
        *("--min-src", "3", "--max-src", "7", "--threads", "1", "2", "--repeats", "1", "--dtype", "fp32", "int8"),
        *("--json", str(out), "--results", str(tmp_path / "results.json")),
    )
    assert "get_cpu_capability()" in stdout and "bf16 native" in stdout  # the header names the CPU
    from benchmarks import results

    record = results.read(tmp_path / "results.json")  # the results file names the CPU, the load, ...
    assert record["figures"]["rows"] == json.loads(out.read_text()) and record["load_average"]["after"]
    assert "fastest measured thread count" in stdout  # the second table, with --threads 1 2
    rows = json.loads(out.read_text())
    assert [(row["dims"], row["batch"], row["threads"]) for row in rows] == [
        ("tiny", 1, 1),
        ("tiny", 1, 2),
        ("tiny", 4, 1),
        ("tiny", 4, 2),
    ]
    systems = ["aiayn", "aiayn_int8", "hf_marian"]
    ct2 = importlib.util.find_spec("ctranslate2") is not None
    if ct2:
        systems += ["ctranslate2", "ctranslate2_int8", "aiayn_ct2", "aiayn_ct2_int8", "ct2_direct", "ct2_direct_int8"]
    for row in rows:
        for name in systems:
            # (each system's run asserts that it decoded exactly --new-tokens per sentence)
            assert row[f"{name}_tok_s"] > 0 and len(row[f"{name}_times"]) == 1, (name, row)
        assert row["aiayn/hf_marian"] > 0
        if ct2:
            assert row["aiayn/ctranslate2"] > 0 and row["aiayn_int8/ctranslate2_int8"] > 0
            assert row["aiayn_ct2/ct2_direct"] > 0 and row["aiayn_ct2_int8/ct2_direct_int8"] > 0
            assert 0 < row["aiayn_ct2_own_share"] < 1 and 0 < row["aiayn_ct2_int8_own_share"] < 1
            # CTranslate2 with one replica per thread, where aiayn splits the batch over threads
            split = row["batch"] >= 2 * row["threads"] and row["threads"] > 1
            assert ("aiayn/ctranslate2_inter" in row) == split and ("ctranslate2_int8_inter_tok_s" in row) == split
    if ct2:
        assert "ctranslate2_inter tok/s" in stdout


def test_bench_decode_split_gives_every_system_its_time_by_kind(tmp_path):
    stdout = _run(
        "bench_decode.py",
        *("--mode", "split", "--dims", "tiny", "--vocab", "120", "--batch", "2", "--beams", "2", "--new-tokens", "4"),
        *("--min-src", "3", "--max-src", "6", "--threads", "1", "--repeats", "1", "--dtype", "fp32", "int8"),
        *("--width", "32", "--results", str(tmp_path / "split.json")),
    )
    assert "get_cpu_capability()" in stdout and "bf16 native" in stdout
    from benchmarks import results
    from benchmarks.decoding.split import KIND_NAMES

    (row,) = results.read(tmp_path / "split.json")["figures"]["rows"]
    assert (row["dims"], row["batch"], row["new_tokens"], row["width"]) == ("tiny", 2, 4, 32)
    assert "tiny at width 32, batch 2, 1 threads" in stdout
    for name in ("aiayn", "aiayn_int8", "hf_marian"):
        system = row[name]
        assert system["seconds"] > 0 and len(system["times"]) == 1
        assert set(system["ms_per_step"]) == set(KIND_NAMES)
        assert system["ms_per_step"]["matrix products"] > 0 and system["ms_per_step"]["attention"] > 0
        assert system["operators_ms_per_step"] and all(ms >= 0 for _, ms in system["operators_ms_per_step"])
    assert re.search(r"^\| matrix products \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$", stdout, re.M), stdout
    assert re.search(r"^fastest: aiayn\S* [\d.]+ s, hf_marian", stdout, re.M), stdout


@pytest.mark.slow
def test_bench_decode_split_leaves_a_batch_split_over_threads_unprofiled(tmp_path):
    stdout = _run(
        "bench_decode.py",
        *("--mode", "split", "--dims", "tiny", "--vocab", "120", "--batch", "32", "--beams", "4", "--new-tokens", "3"),
        *("--min-src", "3", "--max-src", "6", "--threads", "2", "--repeats", "1", "--dtype", "fp32"),
        *("--results", str(tmp_path / "split.json")),
    )
    from benchmarks import results

    (row,) = results.read(tmp_path / "split.json")["figures"]["rows"]
    # 128 rows on 2 threads: aiayn decodes a part on each (`parallel_parts`), where the profiler does not look
    assert row["aiayn"]["seconds"] > 0 and set(row["aiayn"]["ms_per_step"].values()) == {None}
    assert row["hf_marian"]["ms_per_step"]["matrix products"] > 0
    assert re.search(r"^\| matrix products \| - \| [\d.]+ \|$", stdout, re.M), stdout
    assert "(not profiled: split over threads)" in stdout


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--mode", "split", "--batch", "0"), "--batch must be >= 1, got 0"),
        (
            ("--mode", "split", "--dims", "tiny", "--width", "30"),
            "--width must be a positive multiple of tiny's 4 heads, got 30",
        ),
        (("--mode", "compile", "--dtype", "int8"), "argument --dtype: invalid choice: 'int8'"),
        (("--mode", "compile", "--no-hf"), "unrecognized arguments: --no-hf"),  # the engines mode's option
        (
            ("--mode", "change", "--baseline", "HEAD", "--threads", "1", "2"),
            "--threads: --mode change takes one, got 1 2",
        ),
        (
            (
                "--mode",
                "change",
            ),
            "the following arguments are required: --baseline",
        ),
        (("--mode", "gpu", "--repeats", "0"), "--repeats must be >= 1, got 0"),
        (
            (
                "--mode",
                "nope",
            ),
            "argument --mode: invalid choice: 'nope'",
        ),
    ],
)
def test_bench_decode_refuses_bad_options_in_one_line(options, message, capsys, monkeypatch):
    """Each mode takes the shared options with its own limits and its own options only, and says what is
    wrong in one line, before anything is built or measured (its `main`, in this process: the command's
    own exit is the test below)."""
    from benchmarks import bench_decode

    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / "bench_decode.py")])  # argparse's program name
    with pytest.raises(SystemExit) as exited:
        bench_decode.main(list(options))
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == ""
    assert err.splitlines()[-1].startswith(f"bench_decode.py: error: {message}")


def test_bench_decode_as_a_command_refuses_bad_options_in_one_line():
    """The command itself: exit 2, nothing on stdout, the one line last on stderr."""
    import subprocess

    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_decode.py"), "--mode", "split", "--batch", "0"],
        capture_output=True,
        text=True,
        timeout=300,
        env=cli_env(),
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == "bench_decode.py: error: --batch must be >= 1, got 0"


@pytest.mark.slow  # compiles the decoder's step once
def test_bench_decode_compile_times_both_sides(tmp_path):
    stdout = _run(
        "bench_decode.py",
        *("--mode", "compile", "--dims", "tiny", "--vocab", "120", "--batch", "2", "--beams", "2", "--new-tokens", "3"),
        *("--min-src", "3", "--max-src", "6", "--threads", "1", "--repeats", "1", "--dtype", "fp32"),
        *("--results", str(tmp_path / "compile.json")),
    )
    assert "get_cpu_capability()" in stdout and "bf16 native" in stdout
    from benchmarks import results

    (row,) = results.read(tmp_path / "compile.json")["figures"]["rows"]
    assert (row["dims"], row["batch"], row["beams"], row["new_tokens"], row["dtype"]) == ("tiny", 2, 2, 3, "fp32")
    assert row["first_compiled_seconds"] > 0
    assert row["eager/compiled"] == pytest.approx(row["eager_times"][0] / row["compiled_times"][0], rel=0.01)
    for side in ("eager", "compiled"):
        assert row[f"{side}_ms_per_step"] > 0 and len(row[f"{side}_times"]) == 1
    # with inductor's freezing, or the line its failure gave (then compiled without it)
    assert row["freezing"] in (True, False) or re.match(r"failed: \w+(Error|Exception): ", row["freezing"])
    assert isinstance(row["same_tokens"], bool)
    assert re.search(r"^\| tiny \| 2 \| fp32 \| 1 \| [^|]+ \| [\d.]+ s \| [\d.]+ \| [\d.]+ \| [\d.]+x \|", stdout, re.M)


@pytest.mark.slow
def test_bench_model_compile_times_both_sides_of_both_steps(tmp_path):
    stdout = _run(
        "bench_model_compile.py",
        *("--dims", "tiny", "--vocab", "120", "--batch", "2", "--length", "4", "--threads", "1", "--repeats", "1"),
        *("--results", str(tmp_path / "compile.json")),
    )
    assert "get_cpu_capability()" in stdout and "bf16 native" in stdout
    from benchmarks import results

    rows = results.read(tmp_path / "compile.json")["figures"]["rows"]
    assert [(row["dims"], row["step"]) for row in rows] == [("tiny", "train"), ("tiny", "decode step")]
    for row in rows:
        assert row["first_compiled_seconds"] > 0 and row["eager_ms"] > 0 and row["compiled_ms"] > 0
        assert row["speedup"] == pytest.approx(row["eager_ms"] / row["compiled_ms"], rel=0.01)


def test_bench_decode_gpu_cache_paths_times_both_paths_side_by_side(tmp_path, monkeypatch, capsys):
    """`bench_decode.py --mode gpu --cache-paths` (run here on the CPU): at every batch, aiayn with the beams'
    cache kept in slots and moved by one gather, each forced whatever the device's choice, alternating,
    without generate(); a row per batch with both speeds, their times and gather's ratio to slots."""
    sys.path.insert(0, str(REPO_ROOT))
    from aiayn_cli.decoding.incremental import IncrementalDecoder
    from benchmarks import bench_decode
    from benchmarks.decoding import gpu

    paths = []
    init = IncrementalDecoder.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        paths.append("slots" if self.keep_slots else "gather")

    monkeypatch.setattr(IncrementalDecoder, "__init__", recording)
    monkeypatch.setattr(gpu, "build_marian", lambda *a: pytest.fail("generate() is not timed"))
    out = tmp_path / "paths.json"
    arguments = ["--mode", "gpu", "--device", "cpu", "--dims", "tiny", "--vocab", "120"]
    arguments += ["--batch", "1", "3", "--new-tokens", "3"]
    rows = bench_decode.main([*arguments, "--min-src", "3", "--max-src", "6", "--repeats", "2", "--cache-paths"])
    # a warm-up of each, then two repeats alternating the order, at each batch
    assert paths == ["slots", "gather", "slots", "gather", "gather", "slots"] * 2
    assert [row["batch"] for row in rows] == [1, 3]
    for row in rows:
        assert len(row["slots_times"]) == len(row["gather_times"]) == 2 and "hf_generate_times" not in row
        assert row["slots_sentences_per_s"] > 0 and row["gather_sentences_per_s"] > 0
    assert re.search(r"dims\s+batch\s+slots\s+gather\s+ratio", capsys.readouterr().out)
    bench_decode.main([*arguments, "--repeats", "1", "--cache-paths", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert [row["batch"] for row in rows] == [1, 3]
    for row in rows:  # one repeat: the ratio is gather's speed over slots'
        assert row["ratio"] == pytest.approx(row["gather_sentences_per_s"] / row["slots_sentences_per_s"])


@pytest.mark.slow
def test_bench_train_runs_every_side_on_a_small_corpus(tmp_path):
    corpus = tmp_path / "corpus"
    write_text_split(corpus, "train", make_pairs(300, seed=3))
    stdout = _run(
        "bench_train.py",
        *("--multi30k", str(corpus), "--seconds", "3", "--rounds", "1", "--preset", "tiny"),
        *("--precision", "fp32", "--max-tokens", "512", "--allocator", "system", "--threads", "1"),
        *("--results", str(tmp_path / "train.json")),  # not the repository's results folder
        timeout=900,
    )
    assert "get_cpu_capability()" in stdout and "bf16 native" in stdout
    for side in ("aiayn", "HF grouped", "HF default"):
        row = re.search(rf"^{re.escape(side)}\s+(\d+)\s+([\d,]+)", stdout, re.M)
        assert row, f"no row for {side}:\n{stdout}"
        steps, tokens = int(row[1]), int(row[2].replace(",", ""))
        assert steps > 0 and tokens > 0, side
    for peer in ("HF grouped", "HF default"):
        ratio = re.search(rf"aiayn / {peer}: non-pad tokens ([\d.]+)x", stdout)
        assert ratio and float(ratio[1]) > 0, stdout


def test_bench_gemm_prints_a_row_per_projection(monkeypatch, capsys):
    import runpy

    import torch

    args = ["--d-model", "16", "--d-ff", "32", "--vocab", "50", "--rows", "2", "4", "--repeats", "1", "--int8"]
    monkeypatch.setattr(sys, "argv", ["bench_gemm.py", *args])
    threads = torch.get_num_threads()
    try:  # in this process: the script sets the thread count
        runpy.run_path(str(BENCHMARKS / "bench_gemm.py"), run_name="__main__")
    finally:
        torch.set_num_threads(threads)
    stdout = capsys.readouterr().out
    assert "get_cpu_capability()" in stdout and "bf16 native" in stdout
    float_table, int8_table = stdout.split("\nint8: ")
    for name in ("qkv", "w_1", "w_2", "lm_head"):
        for table, cell in ((float_table, r"\d+ / \d+( / \d+)?"), (int8_table, r"\d+( / \d+( \*)?)?")):
            row = re.search(rf"^\| {name} \| \d+ x \d+ \| (.+) \|$", table, re.M)
            assert row, f"no row for {name}:\n{stdout}"
            cells = row[1].split(" | ")
            # GFLOP/s of F.linear / F.linear on W^T / oneDNN prepacked (the last where oneDNN runs);
            # int8: fbgemm / oneDNN on AMX (where the CPU has AMX)
            assert len(cells) == 2 and all(re.fullmatch(cell, c) for c in cells), cells
    assert re.search(r"^linear_map: BLAS on W\^T for at most \d+ rows", stdout, re.M), stdout
    assert re.search(r"^int8_linear_map: AMX \(\*\) from amx_int8_min_rows rows on", stdout, re.M), stdout


def _says_which_cpu(stdout: str) -> None:
    assert re.search(r"capability", stdout, re.I) and re.search(r"bf16", stdout), stdout[:2000]


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    write_text_split(folder, "train", make_pairs(400, seed=1))
    write_text_split(folder, "val", make_pairs(30, seed=2))
    write_text_split(folder, "test2016", make_pairs(30, seed=3))
    return folder


@pytest.mark.slow
def test_bench_data_and_bench_scale_run_on_a_small_corpus(corpus, tmp_path):
    out = tmp_path / "bench_data.json"
    stdout = _run(
        "bench_data.py", "--multi30k", str(corpus), "--vocab-size", "400", "--repeats", "1", "--results", str(out)
    )
    _says_which_cpu(stdout)
    for row in ("train joint BPE", "round trip, validation source", "tokenize_split", "token batches"):
        assert re.search(rf"^{re.escape(row)}", stdout, re.M), (row, stdout)
    from benchmarks.results import read

    assert {row["measured"] for row in read(out)["figures"]["rows"]} >= {
        "load train split",
        "random batches of 64 sentences",
    }
    stdout = _run("bench_scale.py", "--multi30k", str(corpus), "--sizes", "500", "--workdir", str(tmp_path / "w"))
    _says_which_cpu(stdout)
    row = [line for line in stdout.splitlines() if line.startswith("| 0.0005M |")]
    assert len(row) == 1 and row[0].count("|") == 8, stdout


@pytest.mark.slow
def test_bench_serve_runs_both_servers(tmp_path):
    stdout = _run("bench_serve.py", "--clients", "1", "2", "--requests", "4", "--repeats", "1", "--new-tokens", "3")
    _says_which_cpu(stdout)
    for clients in (1, 2):
        row = re.search(rf"^\| {clients} \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x", stdout, re.M)
        assert row and all(float(v) > 0 for v in row.groups()), stdout


@pytest.mark.slow
def test_bench_export_and_bench_model_run(corpus, tmp_path):
    from helpers import save_tiny_model

    model = save_tiny_model(tmp_path / "model")
    stdout = _run(
        "bench_export.py", "--model", str(model), "--input", str(corpus / "test2016.en"),
        "--references", str(corpus / "test2016.de"), "--limit", "6", "--repeats", "1",
    )  # fmt: skip
    _says_which_cpu(stdout)
    systems = re.findall(r"^\| (.+?) \| [\d.]+ \| [\d.]+ \| [\d.]+x \|$", stdout, re.M)
    assert len(systems) >= 2 and systems[0].startswith("aiayn"), stdout
    stdout = _run("bench_model.py", "--dims", "tiny", "--repeats", "1", "--threads", "1")
    _says_which_cpu(stdout)
    for measure in ("train (target tokens)", "beam-4 generate()"):
        row = re.search(rf"^tiny\s+{re.escape(measure)}\s+(\d+)\s+(\d+)\s+([\d.]+)x", stdout, re.M)
        assert row and all(float(v) > 0 for v in row.groups()), stdout


@pytest.mark.slow
@pytest.mark.skipif(not (REPO_ROOT / ".git").exists(), reason="compares against a git revision of this checkout")
def test_bench_decode_change_compares_two_revisions(tmp_path):
    stdout = _run(
        "bench_decode.py", "--mode", "change", "--baseline", "HEAD", "--dims", "small", "--batch", "1",
        "--repeats", "1", "--rounds", "1", "--new-tokens", "3", "--results", str(tmp_path / "change.json"),
    )  # fmt: skip
    _says_which_cpu(stdout)
    row = re.search(r"^\| small \| 1 \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) ", stdout, re.M)
    assert row and all(float(v) > 0 for v in row.groups()), stdout
    written = json.loads((tmp_path / "change.json").read_text())
    assert written["name"] == "bench_decode_change" and len(written["figures"]["baseline_commit"]) == 40
    assert written["figures"]["rows"][0]["baseline/current"] == pytest.approx(float(row.group(3)), abs=1e-3)


@pytest.mark.slow  # one variant trained at smoke sizes by `aiayn train` in a subprocess
def test_ablate_multi30k_summarises_a_finished_run_as_it_summarises_a_trained_one(tmp_path):
    """A variant trained at smoke sizes records its steps, the choice its end made on validation and the
    settings it trained with (its override, not the recipe's value), and says where its run folder is
    kept; that folder given back as `--finished base=RUN` gives the same figures without training again,
    named for the run it came from; a folder without checkpoints, nothing to do, a name both to train and
    finished, or a --finished without NAME= is refused in one line, with nothing written."""
    import subprocess

    def ablate(out: str, *args: str) -> subprocess.CompletedProcess:
        recipe = str(REPO_ROOT / "recipes" / "multi30k_en_de.yaml")
        command = [sys.executable, str(BENCHMARKS / "ablate_multi30k.py"), str(tmp_path / out), "--smoke"]
        return subprocess.run([*command, "--recipe", recipe, *args], capture_output=True, text=True,
                              env=cli_env(TMPDIR=str(tmp_path)), timeout=600)  # fmt: skip

    def variants(out: str) -> dict:
        return json.loads((tmp_path / out / "ablate_multi30k.json").read_text())["figures"]["variants"]

    trained = ablate("trained", "--variants", "dropout-0.1")
    assert trained.returncode == 0, trained.stderr[-3000:]
    variant = variants("trained")["dropout-0.1"]
    assert variant["exit_code"] == 0 and variant["steps"] == 12 and variant["valid_bleu"] is not None
    assert variant["chosen"] and variant["length_penalty"] in (0.6, 1.0)
    settings = variant["trained_with"]
    assert settings["model.dropout"] == 0.1 and settings["max_tokens"] == 512 and settings["max_steps"] == 12
    assert "output_dir" not in settings and not any(key.startswith("when_fp32") for key in settings)
    (said,) = [line for line in trained.stdout.splitlines() if line.startswith("run folders: ")]
    run = Path(said.removeprefix("run folders: ").replace("NAME", "dropout-0.1"))
    assert run.parent.parent.parent == tmp_path and (run / "averaged").is_dir()
    summarised = ablate("summarised", "--variants", "", "--finished", f"base={run}")
    assert summarised.returncode == 0, summarised.stderr[-3000:]
    base = variants("summarised")["base"]
    assert base["change"] == "the recipe as shipped" and base["finished_run"] == str(run)
    figures = ("steps", "train_seconds", "valid", "chosen", "candidates", "length_penalty", "valid_bleu")
    figures += ("trained_with",)
    assert {k: base[k] for k in figures} == {k: variant[k] for k in figures}
    refused = ablate("refused", "--variants", "", "--finished", f"base={tmp_path / 'trained'}")
    assert refused.returncode == 2
    assert "is not a finished run folder" in refused.stderr.strip().splitlines()[-1]
    for args, message in [
        (("--variants", ""), "nothing to train or summarise"),
        (("--variants", "base", "--finished", f"base={run}"), "is both to train and already finished"),
        (("--variants", "", "--finished", str(run)), "is not NAME=RUN"),
    ]:
        refused = ablate("refused", *args)
        assert refused.returncode == 2 and message in refused.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "refused").exists()


def test_ablate_decoding_scores_each_beam_at_each_alpha(tmp_path):
    """References that are the model's own beam-2 output at alpha 2: that cell scores 100; every beam is
    timed; the test split is refused (choices are made on validation)."""
    from helpers import save_tiny_model

    from aiayn_cli.decoding.translator import Translator

    model = save_tiny_model(tmp_path / "model")
    sources = [f"w{4 + i % 50} w{5 + i % 7} w{6 + i % 11} w{9 + i % 5}" for i in range(12)]
    references = Translator.from_pretrained(model).translate(sources, num_beams=2, length_penalty=2.0)
    assert any(references)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "validation.en").write_text("\n".join(sources) + "\n")
    (tmp_path / "data" / "validation.de").write_text("\n".join(references) + "\n")
    common = [str(model), "--data-dir", str(tmp_path / "data"), "-s", "en", "-t", "de"]
    stdout = _run("ablate_decoding.py", *common, "--beams", "1", "2", "--alphas", "0", "2",
                  "--results", str(tmp_path / "ablation.json"))  # fmt: skip
    _says_which_cpu(stdout)
    figures = json.loads((tmp_path / "ablation.json").read_text())["figures"]
    by_beam = {row["beam"]: row for row in figures["rows"]}
    assert set(by_beam) == {1, 2} and figures["sentences"] == 12 and figures["split"] == "validation"
    assert list(by_beam[1]["bleu_by_alpha"]) == ["0"]  # greedy: one alpha
    assert by_beam[2]["bleu_by_alpha"]["2"] == 100.0 and by_beam[2]["best_bleu"] == 100.0
    assert all(row["sentences_per_s"] > 0 for row in figures["rows"])
    import subprocess

    refused = subprocess.run([sys.executable, str(BENCHMARKS / "ablate_decoding.py"), *common, "--split", "test"],
                             capture_output=True, text=True, env=cli_env(), timeout=300)  # fmt: skip
    assert refused.returncode == 2 and "choices are made on validation" in refused.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--steps", "1"), "--steps must be at least 2"),
        (("--rounds", "0"), "--rounds must be at least 1"),
        (("--d-model", "60"), "--d-model must be 0 or a multiple of 8 (the heads)"),
    ],
)
def test_bench_train_host_refuses_bad_options_in_one_line(options, message, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench_train_host.py"])
    from benchmarks.bench_train_host import parse_args

    with pytest.raises(SystemExit) as exit_info:
        parse_args(list(options))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"bench_train_host.py: error: {message}"


def test_bench_train_host_times_both_loops_over_the_same_batches(tmp_path):
    # a tiny run in this process: both sides step through every batch and the ratio is written
    from benchmarks import results
    from benchmarks.bench_train_host import main

    out = tmp_path / "host.json"
    args = ["--preset", "tiny", "--vocab", "60", "--sentences", "2", "--length", "6", "--steps", "2", "--warmup", "1"]
    figures = main([*args, "--rounds", "1", "--precision", "no", "--results", str(out)])
    record = results.read(out)
    assert record["figures"] == json.loads(json.dumps(figures))
    assert [len(figures["seconds_a_step"][side]) for side in ("aiayn", "minimal")] == [1, 1]
    assert figures["ratio_aiayn_over_minimal"] > 0 and record["figures"]["precision"] == "no"


@pytest.mark.slow
def test_bench_allocator_runs_every_setting_and_samples_memory(corpus, tmp_path):
    out = tmp_path / "bench_allocator.json"
    stdout = _run(
        "bench_allocator.py", "--data-dir", str(corpus), "--recipe", "tiny", "--minutes", "0.1",
        "--conf", "system", "--conf", "dirty_decay_ms:1000,muzzy_decay_ms:1000",
        "--set", "tokenizer_training.vocab_size=400", "--results", str(out),
    )  # fmt: skip
    _says_which_cpu(stdout)
    for conf in ("system", "dirty_decay_ms:1000,muzzy_decay_ms:1000"):
        row = re.search(rf"^\| {re.escape(conf)} \| ([\d,]+) \| ([\d.]+) \| (\d+) \| ([\d,]+) \|", stdout, re.M)
        assert row and all(float(v.replace(",", "")) > 0 for v in row.groups()), stdout
    from benchmarks.results import read

    runs = read(out)["figures"]["runs"]
    assert [run["conf"] for run in runs] == ["system", "dirty_decay_ms:1000,muzzy_decay_ms:1000"]
    assert runs[0]["ratio_to_first"] == 1.0 and all(run["rss_mb_by_minute"] for run in runs)
