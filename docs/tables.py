"""The tables of numbers in the README and the docs, generated from the results files.

A table sits between two markers in a Markdown file:

    <!-- table: quickstart -->
    | ... generated ... |
    <!-- /table -->

`NAME` is a table of `TABLES` (a renderer over the results files it names), or `rows:RESULT` for the
rows of the results files named RESULT (`benchmarks/results/RESULT.<machine>.json`, `figures.rows`),
one table row each, with the machine it ran on. `python docs/tables.py` (`make docs-tables`)
rewrites every table; `python docs/tables.py --check` (and `tests/project/test_docs.py`) names every table
that disagrees with its results files.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import results  # noqa: E402

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
TABLE = re.compile(r"^<!-- table: (?P<name>[\w:.-]+) -->\n(?P<body>.*?)^<!-- /table -->$", re.M | re.S)


@dataclass
class Row:
    text: str  # one Markdown line
    source: Path | None  # the results file it comes from (None: a header line)


def results_files(name: str) -> list[tuple[Path, dict]]:
    """The results files named `name` (every machine's), checked, in file-name order."""
    return [(path, results.read(path)) for path in sorted(results.RESULTS_DIR.glob(f"{name}.*.json"))]


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _hardware(record: dict) -> str:
    return results.describe(record["machine"])


def _load(record: dict) -> str:
    before, after = record["load_average"]["before"], record["load_average"]["after"]
    return f"{before[0]:.1f} / {after[0]:.1f}" if before and after else "-"


def _signature(signature: str) -> str:
    """A sacreBLEU signature for a table cell: its `|` escaped (GitHub and MkDocs split cells on them)."""
    return signature.replace("|", "\\|")


def _number(value) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {round(seconds % 60):02d} s" if seconds >= 60 else f"{seconds:.0f} s"


def _quality_runs() -> list[dict]:
    """Each run a user can repeat (the quickstart, the Multi30k recipes), from its results file: its
    name, sacreBLEU, training, wall time, hardware, signature and command; `budget`, what it was given
    (the same for every run of a recipe), and `note`, what set this run apart (a seed, a busy core)."""
    runs = []
    for path, r in results_files("quickstart"):
        f = r["figures"]
        capped = f" ({f['train_steps']:,} steps: its time cap)" if f.get("time_cap_reached") else ""
        runs.append({"path": path, "run": f"quickstart: generated en->de, {f['sentences']} held-out sentences",
                     "bleu": f["sacrebleu"], "training": f"{f['train_steps']:,} steps ({f['precision']})",
                     "wall": _minutes(f["seconds"]), "hardware": _hardware(r), "signature": f["signature"],
                     "command": r["command"], "budget": f"at most 1,000 steps ({f['precision']})",
                     "note": f"with one core busy{capped}" if f.get("busy_cores") else ""})  # fmt: skip
    for path, r in results_files("multi30k_en_de"):
        f = r["figures"]
        seed = f", seed {f['seed']}" if "seed" in f else ""  # recorded since the second seed's hour
        runs.append({"path": path, "run": "Multi30k en->de, test2016 (`multi30k_en_de`)", "bleu": f["sacrebleu"],
                     "training": f"{f['train_minutes']:.0f} min, {f['steps']:,} steps ({f['precision']}{seed})",
                     "wall": f"{f['wall_minutes']:.0f} min", "hardware": _hardware(r), "signature": f["signature"],
                     "command": f"aiayn train multi30k_en_de{seed.replace(', seed', ' --seed')}` at commit `{r['commit'][:7]}",
                     "budget": f"{f['train_minutes']:.0f} min ({f['precision']})", "note": f"({seed[2:]})" if seed else ""})  # fmt: skip
    for path, r in results_files("gpu_check"):
        run = r["figures"].get("parts", {}).get("multi30k", {})
        if not (run.get("ok") and "test2016" in run):
            continue
        bleu = run["test2016"]["sacrebleu"]
        runs.append({"path": path, "run": "Multi30k en->de, test2016 (`multi30k_en_de_gpu`)", "bleu": bleu["score"],
                     "training": f"{run['train_seconds'] / 60:.0f} min, {run['steps']:,} steps ({run['precision']})",
                     "wall": _minutes(run["wall_s"]), "hardware": _hardware(r), "signature": bleu["signature"],
                     "command": f"aiayn train multi30k_en_de_gpu` at commit `{r['commit'][:7]}",
                     "budget": f"{run['train_seconds'] / 60:.0f} min ({run['precision']})", "note": ""})  # fmt: skip
    return runs


def quality() -> list[Row]:
    """BLEU of the runs a user can repeat, one row each. The hardware, the sacreBLEU signature and the
    command stand in numbered notes under the table, which stays narrow."""
    runs = _quality_runs()
    rows = [Row("| run | sacreBLEU | training | end to end | run on |", None), Row("|---|---|---|---|---|", None)]
    rows += [Row(f"| {r['run']} | {r['bleu']:.2f} | {r['training']} | {r['wall']} | [{i}] |", r["path"])
             for i, r in enumerate(runs, 1)]  # fmt: skip
    if runs:
        rows.append(Row("", None))
    rows += [Row(f"[{i}] {r['hardware']}; `{r['command']}`; {_signature(r['signature'])}  ", r["path"])
             for i, r in enumerate(runs, 1)]  # fmt: skip
    return rows


def quality_summary() -> list[Row]:
    """The README's: one row for each run on each kind of hardware, with every score it has had (in the
    order of the results files); each run's steps, wall time, command and commit are in `quality`."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for run in _quality_runs():
        groups.setdefault((run["run"], run["hardware"], run["budget"]), []).append(run)
    rows = [Row("| run | run on | training | sacreBLEU |", None), Row("|---|---|---|---|", None)]
    for (name, hardware, budget), runs in groups.items():
        scores = ", ".join(f"{r['bleu']:.2f}" + (f" {r['note']}" if r["note"] else "") for r in runs)
        rows.append(Row(f"| {name} | {hardware} | {budget} | {scores} |", runs[0]["path"]))
    signatures = sorted({run["signature"] for runs in groups.values() for run in runs})
    if signatures:
        rows += [Row("", None), Row(f"sacreBLEU {' or '.join(f'`{s}`' for s in signatures)}.", None)]
    return rows


def measured_runs(name: str) -> Callable[[], list[Row]]:
    """Every results file named `name`: its command, machine, commit, date and load average."""

    def render() -> list[Row]:
        rows = [
            Row("| command | hardware | commit | date | load average before / after | threads |", None),
            Row("|---|---|---|---|---|---|", None),
        ]
        for path, r in results_files(name):
            commit = (r["commit"] or "?")[:10] + (" (modified)" if r.get("dirty") else "")
            text = f"| `{r['command']}` | {_hardware(r)} | {commit} | {r['date'][:10]} | {_load(r)} | {r['threads']} |"
            rows.append(Row(text, path))
        return rows

    return render


def result_rows(name: str) -> list[Row]:
    """`figures.rows` of every results file named `name`, one line each, with the machine."""
    found = results_files(name)
    keys = list(dict.fromkeys(k for _, r in found for row in r["figures"].get("rows", []) for k in row))
    rows = [Row("| " + " | ".join([*keys, "hardware"]) + " |", None), Row("|---" * (len(keys) + 1) + "|", None)]
    for path, r in found:
        for row in r["figures"].get("rows", []):
            cells = [_number(row[k]).replace("<", "&lt;").replace("|", "\\|") if k in row else "-" for k in keys]
            rows.append(Row("| " + " | ".join([*cells, _hardware(r)]) + " |", path))
    return rows


def result_rows_of(name: str) -> Callable[[], list[Row]]:
    return lambda: result_rows(name)


PRECISIONS = {"fp32": "", "bf16": "_bf16", "int8": "_int8"}


def _fastest(row: dict, system: str) -> tuple[str, float]:
    """(precision, tokens/s) of `system`'s fastest precision measured in `row`."""
    found = [(name, row[f"{system}{key}_tok_s"]) for name, key in PRECISIONS.items() if f"{system}{key}_tok_s" in row]
    return max(found, key=lambda pair: pair[1])


def decoding_against_generate() -> list[Row]:
    """bench_decode's rows: aiayn against `generate()` in float32, and each at its fastest precision."""
    rows = [
        Row(
            "| dims | batch | threads | aiayn fp32 | generate() fp32 | ratio | aiayn fastest | generate() fastest "
            "| ratio | commit | hardware |",
            None,
        ),
        Row("|---|---|---|---|---|---|---|---|---|---|---|", None),
    ]
    for path, r in results_files("bench_decode"):
        commit = (r["commit"] or "?")[:10] + (" (modified)" if r.get("dirty") else "")
        for row in r["figures"].get("rows", []):
            if "hf_marian_tok_s" not in row or "aiayn_tok_s" not in row:
                continue
            (ours, ours_rate), (peer, peer_rate) = _fastest(row, "aiayn"), _fastest(row, "hf_marian")
            text = (
                f"| {row['dims']} | {row['batch']} | {row['threads']} | {row['aiayn_tok_s']:,.0f} | "
                f"{row['hf_marian_tok_s']:,.0f} | {row['aiayn_tok_s'] / row['hf_marian_tok_s']:.2f}x | "
                f"{ours_rate:,.0f} ({ours}) | {peer_rate:,.0f} ({peer}) | {ours_rate / peer_rate:.2f}x | {commit} | "
                f"{_hardware(r)} |"
            )
            rows.append(Row(text, path))
    return rows


def decoding_speed() -> list[Row]:
    """The newest bench_decode run of each machine (`bench_decode.<machine>.json`): beam-4 tokens per
    second of aiayn, `generate()` and CTranslate2, each at its fastest precision, and aiayn's ratio to
    each; the machine, threads, commit and command in a note under the table, which stays narrow."""
    found = [(p, r) for p, r in results_files("bench_decode") if p.name.count(".") == 2]  # no named variants
    rows = [
        Row("| model, batch | aiayn | generate() | CTranslate2 | aiayn / generate() | aiayn / CTranslate2 |", None),
        Row("|---|---|---|---|---|---|", None),
    ]
    notes = []
    for i, (path, r) in enumerate(found, 1):
        threads = sorted({row["threads"] for row in r["figures"].get("rows", [])})
        for row in r["figures"].get("rows", []):
            if not all(f"{system}_tok_s" in row for system in ("aiayn", "hf_marian", "ctranslate2")):
                continue
            (ours, rate), (hf, hf_rate), (ct2, ct2_rate) = (
                _fastest(row, s) for s in ("aiayn", "hf_marian", "ctranslate2")
            )
            rows.append(Row(
                f"| {row['dims']}, {row['batch']} [{i}] | {rate:,.0f} {ours} | {hf_rate:,.0f} {hf} | {ct2_rate:,.0f} {ct2} | "
                f"{rate / hf_rate:.2f}x | {rate / ct2_rate:.2f}x |", path))  # fmt: skip
        commit = (r["commit"] or "?")[:10] + (" (modified)" if r.get("dirty") else "")
        notes.append(Row(f"[{i}] {_hardware(r)}, {'/'.join(map(str, threads))} threads; commit {commit}, "
                         f"{r['date'][:10]}, load {_load(r)}; `{r['command']}`  ", path))  # fmt: skip
    return rows + ([Row("", None)] if notes else []) + notes


def decoding_by_run() -> list[Row]:
    """One line per bench_decode run, oldest first: at each of its rows (dims and batch, the most threads it
    measured) the engine at its fastest precision over `generate()` at its fastest, and how many rows
    reach 2x (runs without `generate()` left out)."""
    found = results_files("bench_decode")

    def best_rows(record: dict) -> dict[tuple[str, int], dict]:
        rows = [row for row in record["figures"].get("rows", []) if "hf_marian_tok_s" in row and "aiayn_tok_s" in row]
        return {(row["dims"], row["batch"]): row for row in sorted(rows, key=lambda row: row["threads"])}

    runs = sorted(((path, r, best_rows(r)) for path, r in found if best_rows(r)), key=lambda run: run[1]["date"])
    dims_order = list(dict.fromkeys(dims for _, _, rows in runs for dims, _ in rows))
    columns = sorted({key for _, _, rows in runs for key in rows}, key=lambda key: (dims_order.index(key[0]), key[1]))
    header = " | ".join(f"{dims} {batch}" for dims, batch in columns)
    rows = [
        Row(f"| run | {header} | at 2x or above | commit | hardware |", None),
        Row("|---" * (len(columns) + 4) + "|", None),
    ]
    for path, r, measured in runs:
        cells, reached = [], 0
        for key in columns:
            if key not in measured:
                cells.append("-")
                continue
            ratio = _fastest(measured[key], "aiayn")[1] / _fastest(measured[key], "hf_marian")[1]
            reached += ratio >= 2
            cells.append(f"{ratio:.2f}x" if ratio >= 2 else f"**{ratio:.2f}x**")
        commit = (r["commit"] or "?")[:10] + (" (modified)" if r.get("dirty") else "")
        run = path.name.removeprefix("bench_decode.").removesuffix(".json")
        rows.append(
            Row(f"| {run} | {' | '.join(cells)} | {reached} of {len(measured)} | {commit} | {_hardware(r)} |", path)
        )
    return rows


def decoding_compile() -> list[Row]:
    """bench_decode_compile's rows: the engine's step eager against `torch.compile` of the model's step."""
    rows = [
        Row(
            "| dims | batch | dtype | threads | freezing | first compiled decode | eager ms/step | compiled ms/step "
            "| compiled speed-up | same tokens | commit | hardware |",
            None,
        ),
        Row("|---" * 12 + "|", None),
    ]
    for path, r in results_files("bench_decode_compile"):
        commit = (r["commit"] or "?")[:10] + (" (modified)" if r.get("dirty") else "")
        for row in r["figures"].get("rows", []):
            freezing = "yes" if row["freezing"] is True else "no" if row["freezing"] is False else "failed to compile"
            text = (
                f"| {row['dims']} | {row['batch']} | {row['dtype']} | {row['threads']} | {freezing} | "
                f"{row['first_compiled_seconds']:.1f} s | {row['eager_ms_per_step']:.2f} | "
                f"{row['compiled_ms_per_step']:.2f} | {row['eager/compiled']:.2f}x | {row['same_tokens']} | "
                f"{commit} | {_hardware(r)} |"
            )
            rows.append(Row(text, path))
    return rows


def decoding_split() -> list[Row]:
    """bench_decode_split's rows: each system's milliseconds per decoder step, by kind of operator (the
    kinds as the results files name them, in their order); a row measured with `--width` names it."""
    found = results_files("bench_decode_split")
    systems = [v for _, r in found for row in r["figures"].get("rows", []) for v in row.values() if isinstance(v, dict)]
    names = list(dict.fromkeys(kind for system in systems for kind in system["ms_per_step"]))
    rows = [
        Row("| dims | batch | threads | system | step | " + " | ".join(names) + " | commit | hardware |", None),
        Row("|---" * (len(names) + 7) + "|", None),
    ]
    for path, r in found:
        commit = (r["commit"] or "?")[:10] + (" (modified)" if r.get("dirty") else "")
        for row in r["figures"].get("rows", []):
            for system, figures in ((k, v) for k, v in row.items() if isinstance(v, dict)):
                kinds = figures["ms_per_step"]
                cells = ["-" if kinds.get(kind) is None else f"{kinds[kind]:.2f}" for kind in names]
                step = figures["seconds"] / row["new_tokens"] * 1e3
                dims = f"{row['dims']} at width {row['width']}" if "width" in row else row["dims"]
                text = (
                    f"| {dims} | {row['batch']} | {row['threads']} | {system} | **{step:.2f}** | "
                    + " | ".join(cells)
                    + f" | {commit} | {_hardware(r)} |"
                )
                rows.append(Row(text, path))
    return rows


def ablation() -> list[Row]:
    """ablate_multi30k's variants, best first within each results file: the change, its steps, the final
    model chosen on validation and its validation BLEU (beam 4, the length penalty chosen on val). Each
    results file's recipe, hardware and commit stand in a numbered note under the table."""
    rows = [
        Row("| change to the recipe | steps | tokens/s | final model (chosen on val) | alpha | val BLEU | run |", None),
        Row("|---|---|---|---|---|---|---|", None),
    ]
    found = results_files("ablate_multi30k")
    for i, (path, r) in enumerate(found, 1):
        variants = r["figures"]["variants"]
        done = sorted((v["valid_bleu"], n) for n, v in variants.items() if v.get("valid_bleu") is not None)
        for _, name in reversed(done):
            v = variants[name]
            rows.append(Row(
                f"| {v['change']} (`{name}`) | {v['steps']:,} | {v['tokens_per_s']:,.0f} | {v['chosen']} | "
                f"{v['length_penalty']:g} | {v['valid_bleu']:.2f} | [{i}] |", path))  # fmt: skip
        for name, v in variants.items():
            if v.get("valid_bleu") is None:
                rows.append(
                    Row(f"| {v['change']} (`{name}`) | - | - | failed: exit {v['exit_code']} | - | - | [{i}] |", path)
                )
    if found:
        rows.append(Row("", None))
    for i, (path, r) in enumerate(found, 1):
        f = r["figures"]
        at_once = f"{f['parallel']} variants at once" if f["parallel"] > 1 else "each variant alone"
        if any("finished_run" in v for v in f["variants"].values()):
            at_once += " (runs trained earlier, read by `--finished`)"
        precisions = sorted({v["precision"] for v in f["variants"].values() if v.get("precision")})
        hardware = ", ".join([_hardware(r), *precisions])
        note = f"[{i}] `{f['recipe']}`, {at_once}; {hardware}; commit {r['commit'][:7]}  "
        rows.append(Row(note, path))
    return rows


def ablation_choices() -> list[Row]:
    """Averaging and alpha in each ablate_multi30k variant: validation BLEU (greedy, the run's sample) of
    the last checkpoint and of the best average of the decayed tail, and BLEU (beam 4, whole split) of
    the final model at each length penalty of the grid. [n]: the ablation table's note on the run."""
    found = results_files("ablate_multi30k")
    alphas = sorted(
        {
            float(a)
            for _, r in found
            for v in r["figures"]["variants"].values()
            for a in v.get("length_penalty_bleu", {})
        }
    )
    header = "| variant | last | best average (k) | " + " | ".join(f"alpha {a:g}" for a in alphas) + " |"
    rows = [Row(header, None), Row("|---" * (3 + len(alphas)) + "|", None)]
    for i, (path, r) in enumerate(found, 1):
        for name, v in r["figures"]["variants"].items():
            if v.get("valid_bleu") is None:
                continue
            averages = {k: b for k, b in v["candidates"].items() if k.startswith("average")}
            best = max(averages, key=averages.get) if averages else None
            k = best.rsplit(" ", 1)[-1] if best else "-"
            by_alpha = {float(a): b for a, b in v["length_penalty_bleu"].items()}
            cells = [f"{by_alpha[a]:.2f}" if a in by_alpha else "-" for a in alphas]
            average = f"{averages[best]:.2f} ({k})" if best else "-"
            rows.append(
                Row(
                    f"| `{name}` [{i}] | {v['candidates'].get('last', float('nan')):.2f} | {average} | "
                    + " | ".join(cells)
                    + " |",
                    path,
                )
            )
    return rows


def ablation_decoding() -> list[Row]:
    """ablate_decoding's rows: validation BLEU of each beam size (a column) at each length penalty alpha (a
    row; one search a beam, re-ranked per alpha; each beam's best in bold), and each beam's decoding speed.
    A table a results file, its model, hardware and commit under it."""
    rows: list[Row] = []
    for path, r in results_files("ablate_decoding"):
        f = r["figures"]
        beams = f["rows"]
        by_alpha = [{float(a): b for a, b in row["bleu_by_alpha"].items()} for row in beams]
        alphas = sorted({a for scores in by_alpha for a in scores})
        rows += [
            Row("| alpha | " + " | ".join(f"beam {row['beam']}" for row in beams) + " |", None),
            Row("|---" * (len(beams) + 1) + "|", None),
        ]
        for alpha in alphas:
            cells = []
            for scores in by_alpha:
                bleu = scores.get(alpha)
                cells.append(
                    "-" if bleu is None else f"**{bleu:.2f}**" if bleu == max(scores.values()) else f"{bleu:.2f}"
                )
            rows.append(Row(f"| {alpha:g} | " + " | ".join(cells) + " |", path))
        speeds = " | ".join(f"{row['sentences_per_s']:,.1f}" for row in beams)
        rows.append(Row(f"| sentences/s | {speeds} |", path))
        rows += [
            Row("", None),
            Row(
                f"`{f['model']}`, {f['sentences']:,} {f['split']} sentences, {f['precision']}; {_hardware(r)}; "
                f"commit {r['commit'][:7]}",
                path,
            ),  # fmt: skip
            Row("", None),
        ]
    return rows[:-1]


def end_choice() -> list[Row]:
    """ablate_end_choice's runs: the final model chosen on the run's validation sample and chosen by the
    beam on the whole split, each with the validation BLEU it has as a user runs it (beam, its alpha),
    and the seconds each way took (by the sample: its choice, then alpha's search for the winner). The
    machine and commit under each results file's rows."""
    rows = [
        Row(
            "| run | steps | by the sample: chosen | BLEU (alpha) | by the beam: chosen | BLEU (alpha) | seconds: sample / beam |",
            None,
        ),
        Row("|---|---|---|---|---|---|---|", None),
    ]
    for path, r in results_files("ablate_end_choice"):
        for name, run in r["figures"]["runs"].items():
            cells = []
            for by in ("sample", "beam"):
                chosen = run[f"chosen_by_{by}"]
                scores = run["candidates"][chosen]
                cells += [chosen, f"{scores['beam_bleu']:.2f} ({scores['alpha']:g})"]
            seconds = f"{run['seconds_sample'] + run['seconds_sample_alpha']:.0f} / {run['seconds_beam']:.0f}"
            rows.append(Row(f"| `{name}` | {run['steps']:,} | " + " | ".join(cells) + f" | {seconds} |", path))
        rows += [Row("", None), Row(f"{_hardware(r)}; commit {r['commit'][:7]}", path), Row("", None)]
    return rows[:-1]


def gpu_check() -> list[Row]:
    """What each GPU check measured, part by part: one line a figure, with the GPU and the commit."""
    rows = [Row("| part | figure | GPU, commit |", None), Row("|---|---|---|", None)]
    for path, r in results_files("gpu_check"):
        where = f"{r['machine'].get('gpu', {}).get('model', '?')}, {r['commit'][:7]}"
        parts = r["figures"].get("parts", {})
        lines = []
        if (env := parts.get("environment", {})).get("ok"):
            lines.append(("environment", f"bf16 matrix products {env['bf16_matmul_flops_per_s'] / 1e12:,.0f} TFLOP/s; "
                          f"torch {env['torch']}, CUDA {env['cuda']}, driver {env['driver']}"))  # fmt: skip
        if (tests := parts.get("tests", {})).get("exit_code") is not None:
            lines.append(("tests", f"`pytest -m gpu`: {tests['passed']} of {tests['tests']} passed"))
        if (m := parts.get("multi30k", {})).get("ok"):
            lowercased = m["test2016"].get("bleu_lc")  # not reported by the older runs
            shown = f" (lowercased, tokenized {lowercased['score']:.2f})" if lowercased else ""
            lines.append(("multi30k", f"test2016 sacreBLEU {m['test2016']['sacrebleu']['score']:.2f}{shown}; "
                          f"{m['steps']:,} steps in {m['train_seconds']:.0f} s, {m['tokens_per_s']:,.0f} tokens/s"))  # fmt: skip
        if (t := parts.get("throughput", {})).get("ok"):
            ours, peer = t["sides"].get("aiayn", {}), t["sides"].get("hf", {})
            text = f"base, bf16: {ours.get('tokens_per_s', 0):,.0f} tokens/s, MFU {ours.get('mfu', 0):.1%}"
            if peer.get("ok"):
                text += f"; Seq2SeqTrainer {peer['tokens_per_s']:,.0f} tokens/s, MFU {peer['mfu']:.1%}: {t['ratio_to_hf']:.2f}x"
            lines.append(("throughput", text))
        if (h := parts.get("host", {})).get("ok"):
            lines.append(("host", f"aiayn's step at {h['aiayn_speed_over_minimal']:.2f}x a minimal loop's speed "
                          f"({h['median_ms_a_step']['aiayn']:.1f} against {h['median_ms_a_step']['minimal']:.1f} ms; goal 0.95)"))  # fmt: skip
        for row in parts.get("decoding", {}).get("rows", []):
            lines.append(("decoding", f"{row['dims']}, batch {row['batch']}, beam {row['beams']}: "
                          f"{row['aiayn_sentences_per_s']:,.1f} against generate()'s {row['hf_generate_sentences_per_s']:,.1f} "
                          f"sentences/s: {row['ratio']:.2f}x"))  # fmt: skip
        rows += [Row(f"| {part} | {text} | {where} |", path) for part, text in lines]
    return rows


TABLES: dict[str, Callable[[], list[Row]]] = {
    "decoding-against-generate": decoding_against_generate,
    "bench_decode-runs": measured_runs("bench_decode"),
    "decoding-split": decoding_split,
    "decoding-by-run": decoding_by_run,
    "decoding-compile": decoding_compile,
    "quality": quality,
    "quality-summary": quality_summary,
    "decoding-speed": decoding_speed,
    "training-against-seq2seqtrainer": result_rows_of("bench_train"),
    "quickstart-runs": measured_runs("quickstart"),
    "multi30k-runs": measured_runs("multi30k_en_de"),
    "bench_data-runs": measured_runs("bench_data"),
    "bench_startup-runs": measured_runs("bench_startup"),
    "ablation": ablation,
    "ablation-choices": ablation_choices,
    "ablation-decoding": ablation_decoding,
    "end-choice": end_choice,
    "gpu-check": gpu_check,
}


# The command that writes each results file, named where a table has none yet.
WRITERS = {
    "quickstart": "python benchmarks/bench_quickstart.py",
    "multi30k_en_de": "python -m pytest -m long tests/training/test_multi30k_recipe.py",
    "bench_train": "python benchmarks/bench_train.py",
    "ablate_multi30k": "python benchmarks/ablate_multi30k.py OUT --parallel 6",
    "ablate_decoding": "python benchmarks/ablate_decoding.py MODEL --data-dir DIR -s en -t de",
    "ablate_end_choice": "python benchmarks/ablate_end_choice.py NAME=RUN ...",
    "gpu_check": "python benchmarks/gpu_check.py OUT",
}


RESULTS_OF = {
    "quickstart-runs": "quickstart",
    "multi30k-runs": "multi30k_en_de",
    "training-against-seq2seqtrainer": "bench_train",
    "ablation": "ablate_multi30k",
    "ablation-choices": "ablate_multi30k",
    "ablation-decoding": "ablate_decoding",
    "end-choice": "ablate_end_choice",
    "gpu-check": "gpu_check",
}


def render(name: str) -> list[Row]:
    """The table's lines; without any results file, one line that says so and names the command that
    writes one (no row without hardware)."""
    if name.startswith("rows:"):
        rows = result_rows(name.removeprefix("rows:"))
    elif name in TABLES:
        rows = TABLES[name]()
    else:
        raise KeyError(f"no table {name!r} (tables: {', '.join(TABLES)}, or rows:RESULT)")
    if any(row.source for row in rows):
        return rows
    result = RESULTS_OF.get(name, name.removeprefix("rows:"))
    if result in WRITERS:
        return [
            Row(
                f"*No results file yet: `{WRITERS[result]}` writes `benchmarks/results/{result}.<machine>.json`.*", None
            )
        ]
    return [Row("*No results file yet.*", None)]


def tables_in(path: Path) -> list[tuple[str, str]]:
    """(name, body) of each table marker pair in a Markdown file."""
    return [(m["name"], m["body"]) for m in TABLE.finditer(path.read_text(encoding="utf-8"))]


def disagreements(pages: list[Path] = PAGES) -> list[str]:
    """One line for each table whose text is not what its results files give, naming both."""
    found = []
    for page in pages:
        for name, body in tables_in(page):
            expected, actual = render(name), body.rstrip("\n").split("\n") if body.strip() else []
            for i in range(max(len(expected), len(actual))):
                want = expected[i].text if i < len(expected) else None
                have = actual[i] if i < len(actual) else None
                if want != have:
                    source = expected[i].source if i < len(expected) else None
                    files = [_rel(source)] if source else sorted({_rel(r.source) for r in expected if r.source})
                    found.append(
                        f"{_rel(page)}: table '{name}' disagrees with {', '.join(files) or 'its results files (none)'} "
                        f"at its line {i + 1}: {have!r} where the results give {want!r}; run `make docs-tables`"
                    )
                    break
    return found


def write(pages: list[Path] = PAGES) -> list[Path]:
    """Rewrite every table from its results files; the pages changed."""
    changed = []
    for page in pages:
        text = page.read_text(encoding="utf-8")

        def fill(match: re.Match) -> str:
            lines = [row.text for row in render(match["name"])]
            return f"<!-- table: {match['name']} -->\n" + "\n".join(lines) + "\n<!-- /table -->"

        new = TABLE.sub(fill, text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only say which tables disagree (exit 1 if any)")
    args = parser.parse_args()
    if args.check:
        problems = disagreements()
        print("\n".join(problems) or "every table agrees with its results files")
        sys.exit(1 if problems else 0)
    for page in write():
        print(f"rewrote the tables of {_rel(page)}")


if __name__ == "__main__":
    main()
