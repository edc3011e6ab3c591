"""One prepared check for a GPU machine had for minutes, without network: install from the bundle, run
the GPU tests, train Multi30k for 5 minutes and score test2016, measure the base model's training
throughput (MFU, against Seq2SeqTrainer) and decoding (against generate()), check that a lost GPU
process ends the run; one results JSON and one log, in the folder given.

    make gpu-bundle                                       # here, with network: .gpu-bundle/ (<= 64 MiB)
    python benchmarks/gpu_check.py OUT1 --parts environment,multi30k                            # there,
    python benchmarks/gpu_check.py OUT2 --parts environment,tests,throughput,host,decoding,lost # in two calls
    python benchmarks/gpu_check.py OUT --smoke            # every part on the CPU at tiny sizes (slow tier)

Parts, in this order, each in processes of its own with a time limit (its own, and what is left of
`--budget`); a part that fails or runs out of time is reported and the next one runs:

  environment  the GPU, driver, CUDA and library versions; the measured bf16 matrix-product rate
  tests        python -m pytest -m gpu, each test's outcome streamed into the log as it ends (so that a
               part killed at its limit still says which had passed)
  multi30k     aiayn train recipes/multi30k_en_de_gpu.yaml (5 minutes of training, then the average
               and alpha on val), then sacreBLEU of the averaged model on test2016 (aiayn evaluate)
  throughput   benchmarks/bench_train_wmt.py: base, bf16, 25,000-token batches, ours and Seq2SeqTrainer
               (each side in its own process: one side's failure is recorded as its own)
  host         benchmarks/bench_train_host.py at full width (base, bf16): aiayn's training step against a
               minimal loop over the same batches (the goal: the minimal loop at most 1 / 0.95 as fast)
  decoding     benchmarks/bench_decode.py --mode gpu: small and base, 1, 64 and 512 sentences, ours and generate();
               then ours with each of its two beam-cache paths (--cache-paths)
  lost         two machines' commands on one host, one GPU each (so it needs two), process 1 killed
               (kill -9; on CPUs stopped): the seconds until the other ends (lost_process_after: 10 s)

OUT gets gpu_check.json (benchmarks/results.py's format: the machine, versions, figures), gpu_check.log
(everything the parts printed) and the profile of one training step.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.local_data import MULTI30K
from benchmarks.results import Recorder, source_of

REPO = Path(__file__).resolve().parents[1]

PARTS = ("environment", "tests", "multi30k", "throughput", "host", "decoding", "lost")
# Each part's own limit in seconds (the budget may leave less). tests: three `aiayn train` processes of
# ~20 s each (12 tiny steps; CUDA's start included), one `accelerate launch`, translations, collection.
# multi30k: its training process took 353 s of 5 minutes' training on an H100 (the part 404 s).
LIMITS = {"environment": 60, "tests": 200, "multi30k": 480, "throughput": 240, "host": 150, "decoding": 150, "lost": 90}
GPU_TESTS = ("tests/training/test_gpu.py", "tests/decoding/test_decoding.py")
MODULES = ("datasets", "evaluate", "pydantic", "sacremoses", "xxhash", "pytest")  # what the bundle brings


class Check:
    """The run: the output folder, the log, the budget, the environment of every part's processes."""

    def __init__(self, args):
        self.args, self.out = args, args.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="aiayn-gpu-check-"))
        self.log = (self.out / "gpu_check.log").open("w", encoding="utf-8")
        self.deadline = time.monotonic() + args.budget
        self.device = "cpu" if args.smoke else "cuda"
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_DATASETS_CACHE": str(self.work / "cache"),
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
        }
        if args.smoke:
            self.env["OMP_NUM_THREADS"] = "1"

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def run(self, command: list[str], limit: float, env: dict | None = None) -> tuple[int, str]:
        """Run `command`, its output into the log as it comes; (exit code, output). A process past
        `limit` seconds is killed (exit code -9)."""
        self.say("$ " + " ".join(str(c) for c in command))
        process = subprocess.Popen(
            [str(c) for c in command],
            cwd=REPO,
            env=env or self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines: list[str] = []
        reader = _Reader(process, lines, self.log)
        try:
            process.wait(timeout=max(limit, 1))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            self.say(f"(killed after {limit:.0f} s)")
        reader.join()
        return process.returncode, "".join(lines)

    def left(self) -> float:
        return self.deadline - time.monotonic()


class _Reader:
    """A thread copying a process's output into `lines` and the log."""

    def __init__(self, process, lines, log):
        import threading

        def copy():
            for line in process.stdout:
                lines.append(line)
                log.write(line)
                log.flush()

        self.thread = threading.Thread(target=copy, daemon=True)
        self.thread.start()

    def join(self):
        self.thread.join(timeout=10)


# ---------------------------------------------------------------------------------------------
# Installing from the bundle
# ---------------------------------------------------------------------------------------------


def wheel_distribution(wheel: Path) -> str:
    return wheel.name.split("-")[0]


def install(bundle: Path, site: Path) -> dict:
    """Install the bundle's wheels whose distributions are not installed into `site` (pip with no index,
    no dependencies; unzipped where pip is missing); `site` goes first on every part's PYTHONPATH."""
    wheels = sorted((bundle / "wheels").glob("*.whl"))
    wanted = []
    for wheel in wheels:
        try:
            importlib.metadata.version(wheel_distribution(wheel))
        except importlib.metadata.PackageNotFoundError:
            wanted.append(wheel)
    report = {"bundle": str(bundle), "wheels": len(wheels), "installed": [w.name for w in wanted]}
    if wanted:
        site.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps"]
        done = subprocess.run([*command, "--target", str(site), *map(str, wanted)], capture_output=True, text=True)
        report["pip"] = done.returncode == 0
        if done.returncode != 0:  # no pip here: a wheel is a zip of what goes into site-packages
            report["pip_error"] = done.stderr.strip().splitlines()[-1:] or [""]
            for wheel in wanted:
                with zipfile.ZipFile(wheel) as archive:
                    archive.extractall(site)
    return report


def importable(env: dict) -> dict[str, str]:
    """Each module of `MODULES`: its version, or the error importing it gives."""
    code = (
        "import importlib, json, sys\n"
        "found = {}\n"
        f"for name in {list(MODULES)!r}:\n"
        "    try:\n"
        "        found[name] = getattr(importlib.import_module(name), '__version__', 'ok')\n"
        "    except Exception as err:\n"
        "        found[name] = f'error: {type(err).__name__}: {err}'\n"
        "print(json.dumps(found))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr.strip()[-500:]}


# ---------------------------------------------------------------------------------------------
# The parts
# ---------------------------------------------------------------------------------------------


def part_environment(check: Check, limit: float) -> dict:
    out = check.work / "environment.json"
    code, _ = check.run(
        [sys.executable, __file__, "--environment", out, *(["--smoke"] if check.args.smoke else [])], limit
    )
    figures = json.loads(out.read_text()) if code == 0 else {}
    return {"ok": code == 0, **figures}


def environment(smoke: bool) -> dict:
    """The device, driver, versions and the measured matrix-product rates (in this process)."""
    import torch

    from benchmarks.bench_train_wmt import matmul_rate

    found = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        found.update(gpu=props.name, gpus=torch.cuda.device_count(), memory_gib=round(props.total_memory / 2**30, 1))
        found["capability"] = f"{props.major}.{props.minor}"
        smi = shutil.which("nvidia-smi")
        if smi:
            query = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
            )
            found["driver"] = query.stdout.strip().splitlines()[0] if query.returncode == 0 else None
    device = "cuda" if torch.cuda.is_available() and not smoke else "cpu"
    size = 256 if smoke else 8192
    found["matmul_size"] = size
    found["bf16_matmul_flops_per_s"] = matmul_rate(device, "bfloat16", n=size, repeats=3 if smoke else 20)
    if device == "cuda":
        found["tf32_matmul_flops_per_s"] = _tf32_rate(size)
    return found


def _tf32_rate(size: int) -> float:
    import torch

    from benchmarks.bench_train_wmt import matmul_rate

    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        return matmul_rate("cuda", "float32", n=size)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


def part_tests(check: Check, limit: float, files: tuple[str, ...] = GPU_TESTS) -> dict:
    """`pytest -m gpu`, verbose: each test's outcome is a line of the log as it ends, so that a run killed
    at its limit still reports which tests passed, failed, and which was running."""
    report = check.work / "gpu-tests.xml"
    # addopts without its `-n auto`: the bundle brings pytest, not pytest-xdist, and one process runs them
    command = [sys.executable, "-m", "pytest", "-o", "addopts=--import-mode=importlib", "-m", "gpu", "-v"]
    command += ["-p", "no:cacheprovider", "--junitxml", report]
    code, output = check.run([*command, *files], limit)
    counts = _junit_counts(report) if code != -9 else {}
    summary = output.strip().splitlines()[-1] if output.strip() else ""
    result = {"ok": code == 0 or (code == 5 and check.args.smoke), "exit_code": code, **counts, "summary": summary}
    if code == -9:  # killed: no junit report; what the log says
        result.update(pytest_progress(output), killed_after_s=round(limit))
    return result


def _junit_counts(path: Path) -> dict:
    import xml.etree.ElementTree as ElementTree

    if not path.is_file():
        return {}
    suite = ElementTree.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    tests, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    failed = [
        c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None or c.find("error") is not None
    ]
    return {"tests": tests, "passed": tests - failures - errors - skipped, "failed": failed, "skipped": skipped}


def pytest_progress(output: str) -> dict:
    """From `pytest -v`'s lines: the tests that passed, failed (or errored) and were skipped, and the one
    that was running when the output ended."""
    done: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}
    running = None
    for line in output.splitlines():
        found = re.match(r"^(\S+::\S+)(?: (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b)?", line)
        if not found:
            continue
        test, outcome = found.groups()
        running = None if outcome else test
        if outcome:
            key = {"PASSED": "passed", "XPASS": "passed", "SKIPPED": "skipped", "XFAIL": "skipped"}.get(
                outcome, "failed"
            )
            done[key].append(test)
    return {**done, "running": running}


def part_multi30k(check: Check, limit: float) -> dict:
    """The GPU recipe as shipped (5 minutes), then test2016 sacreBLEU of its averaged model."""
    run, data = check.work / "multi30k", check.data
    args = [sys.executable, "-m", "aiayn_cli", "train", REPO / "recipes" / "multi30k_en_de_gpu.yaml"]
    args += ["--data-dir", data, "--output-dir", run, "--tokenizer", check.work / "bpe8k", "--no-progress"]
    if check.args.smoke:  # the same commands at tiny sizes, in steps
        for key, value in SMOKE_MULTI30K.items():
            args += ["--set", f"{key}={value}"]
    start = time.monotonic()
    code, output = check.run(args, limit - 60)
    result: dict = {"ok": False, "train_exit_code": code, "wall_s": time.monotonic() - start}
    if code != 0:
        return result
    state = json.loads(max(run.glob("checkpoint-*/trainer_state.json"), key=lambda p: p.stat().st_mtime).read_text())
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    result.update(
        steps=state["step"],
        epochs=state["epoch"],
        train_seconds=state["train_seconds"],
        tokens_per_s=(state["source_tokens"] + state["target_tokens"]) / state["train_seconds"],
        precision=next((r["precision"] for r in records if "precision" in r), None),
        valid=[{k: v for k, v in r.items() if k.startswith(("valid/", "step"))} for r in records if "valid/bleu" in r],
        averaged_from=next((r["averaged_from"] for r in records if "averaged_from" in r), None),
        length_penalty=next((r["length_penalty"] for r in records if "length_penalty" in r), None),
    )
    scores = check.work / "test2016.json"
    evaluate = [sys.executable, "-m", "aiayn_cli", "evaluate", "--model", run / "averaged", "--data-dir", data]
    evaluate += ["-s", "en", "-t", "de", "--split", "test", "--json", scores]
    code, _ = check.run(evaluate, max(check.left(), 30))
    if code == 0:
        result["test2016"] = json.loads(scores.read_text()).get("scores")
        result["ok"] = True
    if check.args.keep:  # the model outlives the check's working folder
        shutil.copytree(run / "averaged", check.args.keep / "multi30k_en_de_gpu", dirs_exist_ok=True)
        shutil.copy(run / "metrics.jsonl", check.args.keep / "multi30k_en_de_gpu" / "metrics.jsonl")
    return result


SMOKE_MULTI30K = {
    "model.preset": "tiny",
    "model.num_encoder_layers": 2,
    "model.num_decoder_layers": 2,
    "tokenizer_training.vocab_size": 300,
    "max_tokens": 512,
    "max_time": "null",
    "max_steps": 12,
    "warmup_steps": 10,
    "valid_every_minutes": "null",
    "valid_every_steps": 6,
    "valid_bleu_samples": 8,
    "checkpoint_every_minutes": "null",
    "checkpoint_every_steps": 4,
    "length_penalty_grid": "[0.6, 1.0]",
    "trackers": "[]",
    "log_every_steps": 4,
}


def part_throughput(check: Check, limit: float) -> dict:
    out = check.work / "throughput.json"
    command = [sys.executable, REPO / "benchmarks" / "bench_train_wmt.py", "--device", check.device, "--json", out]
    command += ["--profile", check.out / "profile", "--attention-kernels", "flash,efficient,math"]
    if not check.args.smoke:  # 40,000 pairs hold the steps in one epoch; 5 warm-up steps, 20 measured
        command += ["--pairs", "40000", "--warmup-steps", "5", "--steps", "20"]
    if check.args.smoke:
        command += ["--preset", "tiny", "--max-tokens", "600", "--pairs", "200", "--vocab", "300"]
        command += ["--warmup-steps", "2", "--steps", "2", "--precision", "no", "--matmul-size", "256"]
    code, _ = check.run(command, limit)
    if not out.is_file():
        return {"ok": False, "exit_code": code}
    figures = json.loads(out.read_text())  # each side's figures or failure (the first alone where killed)
    sides_ok = set(figures["sides"]) == {"aiayn", "hf"} and all(side["ok"] for side in figures["sides"].values())
    return {"ok": code == 0 and sides_ok, **figures, **({} if code == 0 else {"exit_code": code})}


def part_host(check: Check, limit: float) -> dict:
    """aiayn's training step against the minimal loop (`bench_train_host.py`), base at full width."""
    out = check.work / "host.json"
    command = [sys.executable, REPO / "benchmarks" / "bench_train_host.py", "--device", check.device, "--json", out]
    command += ["--results", check.work / "host-results.json"]
    if check.args.smoke:
        command += ["--preset", "tiny", "--vocab", "300", "--sentences", "2", "--length", "6", "--steps", "2"]
        command += ["--warmup", "1", "--rounds", "1", "--precision", "no"]
    else:  # base as the paper has it; 256 pairs of up to 33 tokens a step
        command += ["--d-model", "0", "--sentences", "256", "--length", "33", "--steps", "20", "--rounds", "3"]
    code, _ = check.run(command, limit)
    if not out.is_file():
        return {"ok": False, "exit_code": code}
    figures = json.loads(out.read_text())
    speed = 1 / figures["ratio_aiayn_over_minimal"]  # aiayn's steps a second over the minimal loop's
    return {"ok": code == 0, "aiayn_speed_over_minimal": round(speed, 4), "goal_met": speed >= 0.95, **figures}


def part_decoding(check: Check, limit: float) -> dict:
    """Ours against generate(), then ours with each of its two cache paths (`--cache-paths`: the
    device's choice between them is measured where it applies)."""
    result, deadline = {}, time.monotonic() + limit
    for name, extra in (("rows", []), ("cache_paths", ["--cache-paths"])):
        out = check.work / f"decoding-{name}.json"
        command = [sys.executable, REPO / "benchmarks" / "bench_decode.py", "--mode", "gpu", "--device", check.device]
        command += ["--json", out, *extra]
        if check.args.smoke:
            command += ["--dims", "tiny", "--vocab", "300", "--batch", "1", "4", "--new-tokens", "4", "--repeats", "1"]
        code, _ = check.run(command, max(deadline - time.monotonic(), 1))
        result[name] = json.loads(out.read_text()) if code == 0 else []
        if code != 0:
            return {"ok": False, **result, "exit_code": code}
    return {"ok": True, **result}


def part_lost(check: Check, limit: float) -> dict:
    """Two machines' commands (one process each; on GPUs one GPU each); machine 1's process killed (-9)
    on GPUs, stopped (SIGSTOP) on CPUs, where gloo would see a killed peer at once and NCCL's case is a
    peer whose connections stay open."""
    import torch

    from benchmarks.two_machines import stop_one_in_the_middle

    gpus = torch.cuda.device_count() if not check.args.smoke else 0
    if not check.args.smoke and gpus < 2:
        reason = f"{gpus} GPU: NCCL takes one process per GPU, so two processes need two GPUs"
        check.say(f"lost: not run ({reason}); tests/training/test_multi_machine.py checks it on CPUs")
        return {"ok": None, "not_run": reason}
    data, tokenizer = check.data, check.work / "bpe8k"  # the multi30k part's tokenizer, where it ran
    if not (tokenizer / "tokenizer.json").is_file():
        tokenizer = check.work / "lost-tok"
        command = [sys.executable, "-m", "aiayn_cli", "train-tokenizer", "--data-dir", data, "-s", "en", "-t", "de"]
        code, _ = check.run([*command, "--vocab-size", "300", "--output", tokenizer], 120)
        if code != 0:
            return {"ok": False, "error": "train-tokenizer failed"}
    output, steps = check.work / "lost-run", 2000
    arguments = ["train", REPO / "recipes" / "tiny.yaml", "--data-dir", data, "--tokenizer", tokenizer]
    arguments += ["-o", output, "--no-progress", "--max-steps", steps, "--set", "checkpoint_every_steps=2"]
    arguments += ["--set", "valid_split=null", "--set", "best_metric=loss", "--set", "average_last=null"]
    arguments += ["--set", "trackers=[]", "--set", "lost_process_after=10s"]
    env = dict(check.env)
    per_machine = ({"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}) if gpus else ({}, {})
    if not gpus:
        env["ACCELERATE_USE_CPU"] = "1"
    how = signal.SIGKILL if gpus else signal.SIGSTOP
    check.say(f"lost: two machines' commands, machine 1's process sent {how.name} after checkpoint-4")
    arguments = [str(a) for a in arguments]
    stopped = stop_one_in_the_middle(arguments, env, output, "checkpoint-4", how, steps, per_machine)
    check.log.write(stopped["stderr"])
    line = next((x for x in stopped["stderr"].splitlines() if x.startswith("error: ")), None)
    half_written = sorted(p.name for p in output.glob("checkpoint-*.*"))
    result = {"signal": how.name, "seconds_to_stop": stopped["seconds"], "exit_code": stopped["code"], "line": line}
    result.update(half_written=half_written, backend="nccl" if gpus else "gloo", lost_process_after_s=10)
    result["ok"] = stopped["code"] != 0 and stopped["seconds"] < 60 and line is not None and not half_written
    check.say(f"lost: the other process ended {stopped['seconds']:.1f} s after {how.name}: {line}")
    return result


def _dictionary_task(folder: Path) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from training_task import write_dictionary_task

    return write_dictionary_task(folder, n_train=800, n_valid=16)


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="the folder for gpu_check.json, gpu_check.log, the profile")
    parser.add_argument("--bundle", type=Path, default=REPO / ".gpu-bundle", help="make gpu-bundle's folder")
    parser.add_argument("--smoke", action="store_true", help="every part on the CPU, at tiny sizes")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for everything (default: 9 minutes)")
    parser.add_argument("--parts", default=",".join(PARTS), help="which parts, comma-separated")
    parser.add_argument("--keep", type=Path, help="copy the Multi30k part's averaged model into this folder")
    parser.add_argument("--environment", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.environment:  # a part's own process
        args.environment.write_text(json.dumps(environment(args.smoke)))
        return None
    if args.out is None:
        parser.error("the output folder is required")
    unknown = set(args.parts.split(",")) - set(PARTS)
    if unknown:
        parser.error(f"--parts: unknown {', '.join(sorted(unknown))} (choose from {', '.join(PARTS)})")
    return run_check(args)


def run_check(args) -> dict:
    recorder = Recorder("gpu_check", source=tree_source(args.bundle))
    check = Check(args)
    figures: dict = {"smoke": args.smoke, "budget_s": args.budget, "parts": {}}
    try:
        check.say(f"gpu_check: {'smoke run on the CPU' if args.smoke else 'on the GPU'}; output {args.out}")
        if args.bundle.is_dir():
            figures["install"] = install(args.bundle, check.work / "site")
            check.env["PYTHONPATH"] = os.pathsep.join([str(check.work / "site"), check.env["PYTHONPATH"]])
            sys.path.insert(0, str(check.work / "site"))
        figures["modules"] = importable(check.env)
        check.say(f"modules: {json.dumps(figures['modules'])}")
        bundled = args.bundle / "multi30k"
        check.data = bundled if (bundled / "train.en").is_file() else MULTI30K
        if args.smoke:
            check.data = _smoke_multi30k(check.work / "smoke-multi30k")
        for name in args.parts.split(","):
            limit = min(LIMITS[name] * (3 if args.smoke else 1), check.left())
            if limit < 20:
                figures["parts"][name] = {"ok": None, "not_run": "no time left in the budget"}
                check.say(f"== {name}: not run, no time left")
                continue
            check.say(f"== {name} (at most {limit:.0f} s)")
            start = time.monotonic()
            try:
                figures["parts"][name] = PART_FUNCTIONS[name](check, limit)
            except Exception as err:  # one part's failure is reported; the next part runs
                figures["parts"][name] = {"ok": False, "error": f"{type(err).__name__}: {err}"}
            figures["parts"][name]["seconds"] = round(time.monotonic() - start, 1)
            check.say(f"== {name}: {_brief(figures['parts'][name])}")
        figures["seconds"] = round(args.budget - check.left(), 1)
        path = recorder.write(figures, path=args.out / "gpu_check.json")
        if not args.smoke:  # and beside the other results, where the repository is kept
            recorder.write(figures)
        check.say(f"results: {path}; log: {args.out / 'gpu_check.log'}")
    finally:
        check.log.close()
        shutil.rmtree(check.work, ignore_errors=True)
    return figures


def tree_source(bundle: Path) -> dict | None:
    """The commit of this tree as the bundle recorded it (`make gpu-bundle` in the same checkout), with
    `dirty` where a file differs from what it recorded; None (git's own answer) without a bundle. A
    copy of the tree may carry no git metadata, or an older clone's."""
    recorded = bundle / "source.json"
    return source_of(REPO, json.loads(recorded.read_text())) if recorded.is_file() else None


def _smoke_multi30k(folder: Path) -> Path:
    """Multi30k's file names over a generated task (train, val, test2016), for the smoke run."""
    data = _dictionary_task(folder)
    for lang in ("en", "de"):
        lines = (data / f"val.{lang}").read_text().splitlines()
        (data / f"test2016.{lang}").write_text("\n".join(lines[:8]) + "\n")
    return data


def _brief(result: dict) -> str:
    status = {True: "ok", False: "FAILED", None: "not run"}[result.get("ok")]
    shown = {k: v for k, v in result.items() if isinstance(v, (int, float, str)) and k not in ("ok",)}
    text = json.dumps(shown)
    return f"{status} {text[:300]}"


PART_FUNCTIONS = {
    "environment": part_environment,
    "multi30k": part_multi30k,
    "tests": part_tests,
    "throughput": part_throughput,
    "host": part_host,
    "decoding": part_decoding,
    "lost": part_lost,
}

if __name__ == "__main__":
    main()
