"""`aiayn serve` under load: dynamic batching against one request at a time, at 1, 4 and 16 clients.

    python benchmarks/bench_serve.py                       # a random `small` model, 2 threads
    python benchmarks/bench_serve.py --model runs/quickstart/averaged --input data/test.en

Two `aiayn serve` processes on 127.0.0.1 hold the same model: one batches the requests that arrive
while it is busy (the default `--token-budget`), the other decodes one request at a time
(`--token-budget 1`). For each number of clients, each server gets the same `--requests` requests
(one sentence each, beam 4), the two servers taking turns within each repetition; each client sends
its next request when the last is answered. Reported: requests per second of wall-clock time and per
second of the server's CPU time (steadier where other jobs share the CPU), the ratios batched / one
at a time, and the p50 / p99 latencies.

Without `--model`, the model is a random `small` one (d_model 256, 3 + 3 layers, a word-level
vocabulary of 8,000) and the sentences are 8 to 20 random words; every request asks for
`max_len_a 0, max_len_b --new-tokens`, so that a random model, which rarely ends by itself, does the
same work under both servers.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common

REPO = Path(__file__).resolve().parents[1]


def random_small_model(folder: Path, vocab_size: int = 8000) -> list[str]:
    """A random `small` model with a word-level tokenizer (w0 .. w7995) saved in `folder`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration

    torch.manual_seed(0)
    AiaynForConditionalGeneration(AiaynConfig.from_preset("small", vocab_size=vocab_size)).save_pretrained(folder)
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{f"w{i}": i + 4 for i in range(vocab_size - 4)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(folder)
    rng = random.Random(0)
    return [" ".join(f"w{rng.randrange(vocab_size - 4)}" for _ in range(rng.randint(8, 20))) for _ in range(2000)]


def start_server(model: Path, threads: int, *args: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "aiayn_cli", "serve", "--model", str(model), "--port", "0"]
    process = subprocess.Popen([*command, "--threads", str(threads), *args], stderr=subprocess.PIPE, text=True, env=env)
    for line in process.stderr:
        match = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
        if match:
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, match.group(1)
    raise RuntimeError("aiayn serve did not start")


def post(url: str, body: dict) -> float:
    """Seconds until the answer (which must be 200)."""
    start = time.perf_counter()
    request = urllib.request.Request(
        f"{url}/v1/translate", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        assert response.status == 200
        response.read()
    return time.perf_counter() - start


def load(url: str, bodies: list[dict], clients: int) -> tuple[float, list[float]]:
    """Send `bodies` from `clients` concurrent clients; returns (seconds in all, latencies)."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        latencies = list(pool.map(lambda body: post(url, body), bodies))
    return time.perf_counter() - start, latencies


def cpu_seconds(process: subprocess.Popen) -> float:
    """User + system CPU time of a server process so far (Linux: /proc/PID/stat)."""
    fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="a model folder (default: a random small model)")
    parser.add_argument("--input", type=Path, default=None, help="sentences, one per line (with --model)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--requests", type=int, default=48, help="requests per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="each server's CPU threads")
    parser.add_argument("--new-tokens", type=int, default=20, help="max_len_b of the random model's requests")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        options: dict = {}
        if args.model is None:
            args.model = Path(tmp) / "small"
            sentences = random_small_model(args.model)
            options = {"max_len_a": 0, "max_len_b": args.new_tokens}
        else:
            sentences = [s for s in args.input.read_text(encoding="utf-8").splitlines() if s.strip()]
        servers = {
            "batched": start_server(args.model, args.threads),
            "one at a time": start_server(args.model, args.threads, "--token-budget", "1"),
        }
        try:
            for _, url in servers.values():  # warm up: the first requests prepare the decoder
                load(url, [{"text": sentences[i], **options} for i in range(8)], 4)
            rows = measure(args, servers, sentences, options)
        finally:
            for process, _ in servers.values():
                process.terminate()
                process.wait(timeout=120)
    print(
        f"\n{common.machine_line()}; each server {args.threads} threads; model {args.model.name if args.model else 'small'}"
    )
    print(f"{args.requests} requests of one sentence per measurement, beam 4, medians of {args.repeats} repetitions")
    print("req/s: per wall-clock second; req/CPU-s: per second of the server's CPU time (steadier on a busy machine)")
    print(
        "\n| clients | batched req/s | one at a time req/s | ratio | batched req/CPU-s | one at a time req/CPU-s "
        "| ratio | batched p50 / p99 (s) | one at a time p50 / p99 (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['clients']} | {r['batched']:.2f} | {r['single']:.2f} | {r['batched'] / r['single']:.2f}x | "
            f"{r['batched_cpu']:.2f} | {r['single_cpu']:.2f} | {r['batched_cpu'] / r['single_cpu']:.2f}x | "
            f"{r['p50']:.2f} / {r['p99']:.2f} | {r['single_p50']:.2f} / {r['single_p99']:.2f} |"
        )


def measure(args, servers, sentences, options) -> list[dict]:
    rng = random.Random(1)
    rows = []
    for clients in args.clients:
        rates: dict[str, list[float]] = {name: [] for name in servers}
        cpu_rates: dict[str, list[float]] = {name: [] for name in servers}
        latencies: dict[str, list[float]] = {name: [] for name in servers}
        for _ in range(args.repeats):
            bodies = [{"text": rng.choice(sentences), **options} for _ in range(args.requests)]
            for name, (process, url) in servers.items():
                cpu = cpu_seconds(process)
                seconds, times = load(url, bodies, clients)
                cpu = cpu_seconds(process) - cpu
                rates[name].append(args.requests / seconds)
                cpu_rates[name].append(args.requests / cpu)
                latencies[name] += times
                print(
                    f"{clients} clients, {name}: {args.requests / seconds:.2f} req/s, {args.requests / cpu:.2f} req/CPU-s",
                    file=sys.stderr,
                    flush=True,
                )
        rows.append(
            {
                "clients": clients,
                "batched": statistics.median(rates["batched"]),
                "single": statistics.median(rates["one at a time"]),
                "batched_cpu": statistics.median(cpu_rates["batched"]),
                "single_cpu": statistics.median(cpu_rates["one at a time"]),
                "p50": percentile(latencies["batched"], 50),
                "p99": percentile(latencies["batched"], 99),
                "single_p50": percentile(latencies["one at a time"], 50),
                "single_p99": percentile(latencies["one at a time"], 99),
            }
        )
    return rows


if __name__ == "__main__":
    main()
