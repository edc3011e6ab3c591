"""`aiayn evaluate` and the shipped metric modules: the same numbers as sacrebleu, offline."""

from __future__ import annotations

import json
import math
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
from helpers import REPO_ROOT, cli_env, run_cli, split_corpus

from aiayn_cli.errors import AiaynError
from aiayn_cli.evaluation.inputs import read_lines, read_parallel
from aiayn_cli.evaluation.metrics import METRIC_MODULES, METRICS_DIR, paper_bleu_tokenize, split_compounds
from aiayn_cli.evaluation.scoring import format_table, load_metric, score, write_json

# Made-up sentences: punctuation, case, numbers, hyphenated compounds, one empty hypothesis.
HYPS = [
    "Ein Mann mit einem roten Hut fährt Fahrrad.",
    "Zwei Kinder spielen im Park",
    "Eine gut-aussehende Frau liest ein Buch auf der Bank.",
    "Der Hund rennt über die grüne Wiese!",
    "",
    "Drei Männer arbeiten an einem Auto-Motor.",
    "Eine Gruppe von Menschen steht vor dem Gebäude.",
    "Das Mädchen isst am 3. Mai ein Eis, sagt sie.",
]
REFS = [
    "Ein Mann mit rotem Hut fährt Fahrrad.",
    "Zwei Kinder spielen in einem Park.",
    "Eine gutaussehende Frau liest auf einer Bank ein Buch.",
    "Ein Hund rennt über eine grüne Wiese.",
    "Ein leerer Satz.",
    "Drei Männer reparieren einen Automotor.",
    "Eine Gruppe Menschen steht vor einem Gebäude.",
    "Das Mädchen isst am 3. Mai ein Eis.",
]
REFS2 = [
    "Ein Mann mit einem roten Hut fährt Rad.",
    "Zwei Kinder spielen im Park.",
    "Eine hübsche Frau liest ein Buch auf der Bank.",
    "Der Hund läuft über die grüne Wiese.",
    "Nichts.",
    "Drei Männer arbeiten an einem Automotor.",
    "Menschen stehen vor dem Gebäude.",
    "Ein Mädchen isst ein Eis am 3. Mai.",
]


@pytest.fixture
def no_network(monkeypatch):
    """Every attempt to open a connection or resolve a name fails, and is recorded."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args[1:] or kwargs)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield attempts
    assert attempts == [], f"network access attempted: {attempts}"


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def direct(hyps, ref_streams, width):
    """sacrebleu called directly: {key: (score, formatted line)}."""
    out = {}
    for key, metric in (("sacrebleu", sacrebleu.BLEU()), ("chrf", sacrebleu.CHRF()), ("ter", sacrebleu.TER())):
        result = metric.corpus_score(hyps, ref_streams)
        out[key] = (result.score, result.format(width=width, signature=str(metric.get_signature())))
    return out


# Scores equal sacrebleu called directly, to every printed digit, with the network off


@pytest.mark.parametrize("streams", [[REFS], [REFS, REFS2]], ids=["1ref", "2refs"])
@pytest.mark.parametrize("width", [1, 2, 4])
def test_scores_equal_sacrebleu_directly(no_network, streams, width):
    load_metric.cache_clear()  # load the modules from their folders with the network off
    per_segment = [list(refs) for refs in zip(*streams)]
    results = score(HYPS, per_segment, width=width)
    expected = direct(HYPS, streams, width)
    assert list(results["scores"]) == ["sacrebleu", "chrf", "ter"]
    for key, (value, formatted) in expected.items():
        got = results["scores"][key]
        assert got["score"] == value
        assert got["formatted"] == formatted
        assert f"{got['score']:.{width}f}" == f"{value:.{width}f}"
    bleu = results["scores"]["sacrebleu"]
    assert (
        bleu["signature"]
        == f"nrefs:{len(streams)}|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"
    )
    assert 0 < bleu["score"] < 100 and 0 < results["scores"]["ter"]["score"]
    assert results["num_segments"] == len(HYPS) and results["num_references"] == len(streams)


def test_single_reference_strings_equal_lists():
    assert list(score(HYPS, REFS, metrics="chrf")["scores"]) == ["chrf"]
    as_strings = score(HYPS, REFS, metrics=["sacrebleu", "chrf"])
    as_lists = score(HYPS, [[ref] for ref in REFS], metrics=["sacrebleu", "chrf"])
    assert as_strings["scores"] == as_lists["scores"]


def test_printed_table_has_sacrebleu_digits_and_signatures(tmp_path, capsys):
    hyp, ref, ref2 = (
        write(tmp_path / "hyp.de", HYPS),
        write(tmp_path / "ref.de", REFS),
        write(tmp_path / "r2.de", REFS2),
    )
    code, out, err = run_cli("evaluate", "-i", hyp, "-r", ref, "-r", ref2, "--width", 3, capsys=capsys)
    assert code == 0, err
    rows = {}
    for line in out.splitlines():
        if line.split()[:1] in (["BLEU"], ["chrF2"], ["TER"]):
            rows.setdefault(line.split()[0], line.split())  # the score row comes before the details
    for _key, (value, formatted) in direct(HYPS, [REFS, REFS2], 3).items():
        name, rest = formatted.split("|", 1)
        signature, printed = rest.split(" = ", 1)
        assert rows[name][1] == printed.split()[0] == f"{value:.3f}"
        assert signature in rows[name]
    assert "tokenized BLEU" not in out  # the paper's, only with --paper-bleu


def _wrapped_cli(args: list[str]) -> list[str]:
    """`python -c` that disables sockets, then runs the aiayn entry point with `args`."""
    code = (
        "import socket, sys\n"
        "def refuse(*a, **k):\n"
        "    sys.stderr.write('NETWORK ATTEMPT\\n'); raise OSError('network disabled')\n"
        "socket.socket.connect = socket.socket.connect_ex = refuse\n"
        "socket.create_connection = socket.getaddrinfo = refuse\n"
        f"sys.argv = ['aiayn'] + {args!r}\n"
        "from aiayn_cli.cli import main\n"
        "main()\n"
    )
    return [sys.executable, "-c", code]


def test_cli_offline_equals_sacrebleu_command_and_writes_only_json_and_cache(tmp_path):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(), home.mkdir()
    write(work / "hyp.de", HYPS), write(work / "ref.de", REFS), write(work / "ref2.de", REFS2)
    before = {p for p in tmp_path.rglob("*")}
    env = cli_env(HOME=str(home))
    # No offline switches either: loading the shipped modules by path needs no network at all.
    for var in (
        "HF_HOME",
        "XDG_CACHE_HOME",
        "HF_MODULES_CACHE",
        "HF_METRICS_CACHE",
        "HF_EVALUATE_CACHE",
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
    ):
        env.pop(var, None)
    args = ["evaluate", "-i", "hyp.de", "-r", "ref.de", "-r", "ref2.de", "--paper-bleu", "--json", "out.json"]
    ours = subprocess.run(_wrapped_cli(args), cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert ours.returncode == 0, ours.stderr
    assert "NETWORK ATTEMPT" not in ours.stderr

    # The sacrebleu command line on the same files reads them and scores them the same way.
    theirs = subprocess.run(
        [
            sys.executable,
            "-m",
            "sacrebleu",
            "ref.de",
            "ref2.de",
            "-i",
            "hyp.de",
            "-m",
            "bleu",
            "chrf",
            "ter",
            "-f",
            "text",
            "-w",
            "2",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert theirs.returncode == 0, theirs.stderr
    results = json.loads((work / "out.json").read_text(encoding="utf-8"))
    assert [line.strip() for line in theirs.stdout.splitlines()] == [
        results["scores"][key]["formatted"] for key in ("sacrebleu", "chrf", "ter")
    ]
    assert results["inputs"] == {"hypotheses": "hyp.de", "references": ["ref.de", "ref2.de"]}
    paper = results["scores"]["paper_bleu"]
    assert paper["name"] == "tokenized BLEU" and paper["lang"] == "de" and "NOT comparable" in paper["note"]
    assert "NOT comparable with sacreBLEU" in ours.stdout

    # Nothing written but the JSON and the Hugging Face cache (under $HOME/.cache/huggingface).
    cache = home / ".cache" / "huggingface"
    new = {p for p in tmp_path.rglob("*")} - before
    outside = [
        p for p in new if p != work / "out.json" and not (p == cache or cache in p.parents or p in cache.parents)
    ]
    assert outside == []
    assert list((cache / "modules").rglob("aiayn_sacrebleu.py")), "evaluate did not use its module cache"


# Reading files as the sacrebleu command does


def test_read_lines_splits_like_sacrebleu(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes("eins  \r\nzwei\u2028drei\n\nvier\tfünf \t\nlast line without newline".encode("utf-8"))
    with open(path, encoding="utf-8", newline="\n") as f:
        expected = [line.rstrip() for line in f]
    assert read_lines(path) == expected == ["eins", "zwei\u2028drei", "", "vier\tfünf", "last line without newline"]
    (tmp_path / "empty.txt").write_bytes(b"")
    assert read_lines(tmp_path / "empty.txt") == []


def test_read_parallel_gives_references_per_segment(tmp_path):
    hyps, refs = read_parallel(
        write(tmp_path / "h", ["a", "b"]), [write(tmp_path / "r1", ["A", "B"]), write(tmp_path / "r2", ["x", "y"])]
    )
    assert hyps == ["a", "b"] and refs == [["A", "x"], ["B", "y"]]


# Bad inputs: one line, exit code 2


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list, list[str]]]:
    hyp = write(tmp_path / "hyp.de", HYPS)
    ref = write(tmp_path / "ref.de", REFS)
    short = write(tmp_path / "short.de", REFS[:5])
    bad = tmp_path / "bad.de"
    bad.write_bytes(b"gut\nauch gut\nschlecht \xff\xfe hier\n" + b"x\n" * 5)
    write(tmp_path / "refs.txt", REFS)
    (tmp_path / "empty.de").write_bytes(b"")
    return {
        "missing file": (["-i", tmp_path / "nope.de", "-r", ref], ["--hypotheses", "nope.de: no such file"]),
        "missing reference": (["-i", hyp, "-r", tmp_path / "gone.de"], ["--references", "gone.de: no such file"]),
        "folder": (["-i", tmp_path, "-r", ref], [str(tmp_path), "folder"]),
        "line counts": (["-i", hyp, "-r", short], ["hyp.de", "8", "short.de", "5"]),
        "invalid utf-8": (["-i", hyp, "-r", bad], ["bad.de:3", "UTF-8", "0xff"]),
        "empty": (["-i", tmp_path / "empty.de", "-r", ref], ["empty.de", "empty"]),
        "no references": (["-i", hyp], ["--references"]),
        "no hypotheses": (["-r", ref], ["--hypotheses"]),
        "unknown metric": (["-i", hyp, "-r", ref, "--metrics", "sacrebleu,meteor"], ["meteor"]),
        "no language": (["-i", hyp, "-r", tmp_path / "refs.txt", "--paper-bleu"], ["--lang", "refs.txt"]),
        "unknown language": (["-i", hyp, "-r", ref, "--paper-bleu", "--lang", "xx"], ["'xx'"]),
        "json folder missing": (["-i", hyp, "-r", ref, "--json", tmp_path / "no" / "out.json"], ["out.json", "exist"]),
        "json over the hypotheses": (["-i", hyp, "-r", ref, "--json", hyp], ["--json", "is the input file"]),
        "json over the references": (["-i", hyp, "-r", ref, "--json", ref], ["--json", "is the input file"]),
        "output without a model": (["-i", hyp, "-r", ref, "-o", tmp_path / "out.txt"], ["--output", "--model"]),
        "output and json the same": (
            ["-i", hyp, "-r", ref, "-o", tmp_path / "o.txt", "--json", tmp_path / "o.txt"],
            ["--output", "--json", "same file"],
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing file",
        "missing reference",
        "folder",
        "line counts",
        "invalid utf-8",
        "empty",
        "no references",
        "no hypotheses",
        "unknown metric",
        "no language",
        "unknown language",
        "json folder missing",
        "json over the hypotheses",
        "json over the references",
        "output without a model",
        "output and json the same",
    ],
)
def test_bad_inputs_give_one_line_and_exit_2(tmp_path, capsys, case):
    args, must_mention = _bad_inputs(tmp_path)[case]
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    code, out, err = run_cli("evaluate", *args, capsys=capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for text in must_mention:
        assert text in err
    assert not (tmp_path / "no").exists()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before  # nothing replaced or added
    if case == "json folder missing":
        assert out == ""  # refused before any work


def test_bad_input_through_the_console_entry_point(tmp_path):
    """The same in a subprocess: exit code 2 and one line, as a shell sees it."""
    result = run_cli("evaluate", "-i", write(tmp_path / "h.de", ["a", "b"]), "-r", write(tmp_path / "r.de", ["a"]))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'h.de'} has 2 lines but "
        f"{tmp_path / 'r.de'} has 1; hypotheses and references "
        "must be line-aligned"
    ]


def test_ragged_references_are_rejected():
    with pytest.raises(AiaynError, match="same number of references"):
        score(["a b", "c d"], [["a b"], ["c d", "c e"]])
    with pytest.raises(AiaynError, match="2 hypotheses but 1 references"):
        score(["a b", "c d"], ["a b"])


# JSON output


def test_json_output_and_atomic_write(tmp_path, capsys):
    hyp, ref = write(tmp_path / "hyp.de", HYPS), write(tmp_path / "ref.de", REFS)
    out_json = tmp_path / "scores.json"
    code, out, err = run_cli("evaluate", "-i", hyp, "-r", ref, "--metrics", "chrf", "--json", out_json, capsys=capsys)
    assert code == 0, err
    data = json.loads(out_json.read_text(encoding="utf-8"))
    assert list(data["scores"]) == ["chrf"]
    assert data["scores"]["chrf"]["score"] == sacrebleu.corpus_chrf(HYPS, [REFS]).score
    assert data["num_segments"] == len(HYPS)

    # A failure while writing leaves the previous file as it was, and no temporary file.
    previous = out_json.read_bytes()
    with pytest.raises(TypeError):
        write_json({"scores": {"bad": object()}}, out_json)
    assert out_json.read_bytes() == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hyp.de", "ref.de", "scores.json"]


# The paper's BLEU: Moses tokenization, compound splitting, multi-bleu


def test_compound_splitting_examples():
    assert split_compounds("rich-text format") == "rich ##AT##-##AT## text format"
    assert split_compounds("Paris - London") == "Paris - London"
    assert split_compounds("-Anfang und Ende-") == "-Anfang und Ende-"
    # Non-overlapping, left to right, as Perl's s///g: the 'b' of 'a-b' is consumed.
    assert split_compounds("a-b-c-d") == "a ##AT##-##AT## b-c ##AT##-##AT## d"
    assert split_compounds("Größe-Übermaß") == "Größe ##AT##-##AT## Übermaß"


@pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not installed")
def test_compound_splitting_equals_the_perl_one_liner():
    lines = [
        "a-b-c-d",
        "state-of-the-art",
        "Größe-Übermaß",
        "x - y",
        "ü-ö",
        "\u00a0-a a-\u00a0",
        "--",
        "a--b",
        "E-Mail-Adresse",
        "3-4 Tage",
        "-",
        "Ende-",
    ]
    perl = subprocess.run(
        ["perl", "-ple", r"s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g"],
        input="\n".join(lines).encode("utf-8") + b"\n",
        capture_output=True,
        check=True,
    )
    assert [split_compounds(line) for line in lines] == perl.stdout.decode("utf-8").splitlines()


@pytest.mark.parametrize(
    "text, lang, expected",
    [
        ("Sie ist eine gut-aussehende Frau.", "de", "Sie ist eine gut ##AT##-##AT## aussehende Frau ."),
        ('Er sagte "ja".', "de", "Er sagte &quot; ja &quot; ."),  # tokenizer.perl escapes by default
        ("Er sagte “ja”.", "de", "Er sagte &quot; ja &quot; ."),  # replace-unicode-punctuation first
        ("Wirklich？", "de", "Wirklich ?"),
        ("Das ist z.B. gut, oder?", "de", "Das ist z.B. gut , oder ?"),
        ("Am 3. Mai kam er.", "de", "Am 3. Mai kam er ."),  # German ordinal stays one token
        ("Am 3. Mai kam er.", "en", "Am 3 . Mai kam er ."),
        (
            "a state-of-the-art model & more",
            "en",
            "a state ##AT##-##AT## of ##AT##-##AT## the ##AT##-##AT## art model &amp; more",
        ),
    ],
)
def test_paper_bleu_tokenization(text, lang, expected):
    assert paper_bleu_tokenize(text, lang) == expected


def test_paper_bleu_by_hand_and_not_comparable_with_sacrebleu():
    hyp = ["Ein gut-aussehender Hund läuft."]
    ref = ["Ein gut-aussehender Mann läuft."]
    # Tokens: Ein gut ##AT##-##AT## aussehender {Hund|Mann} läuft .  -> 7 each, one word differs.
    result = score(hyp, ref, metrics=["sacrebleu"], paper_bleu=True, lang="de")["scores"]
    paper = result["paper_bleu"]
    assert paper["counts"] == [6, 4, 2, 1] and paper["totals"] == [7, 6, 5, 4]
    assert paper["bp"] == 1.0
    assert math.isclose(paper["score"], 100 * (6 / 7 * 4 / 6 * 2 / 5 * 1 / 4) ** 0.25, rel_tol=1e-12)
    assert "tok:moses-de+atat" in paper["signature"] and "smooth:none" in paper["signature"]
    # sacreBLEU keeps `gut-aussehender` as one token: another number.
    assert result["sacrebleu"]["totals"] == [5, 4, 3, 2]  # Ein gut-aussehender Hund läuft .
    assert result["sacrebleu"]["score"] != paper["score"]


def test_paper_bleu_has_no_smoothing():
    # No matching 4-gram: multi-bleu gives 0, sacreBLEU's default smoothing does not.
    result = score(
        ["der Hund bellt laut"], ["der Hund bellt leise"], metrics=["sacrebleu"], paper_bleu=True, lang="de"
    )["scores"]
    assert result["paper_bleu"]["counts"][3] == 0 and result["paper_bleu"]["score"] == 0.0
    assert result["sacrebleu"]["score"] > 0


def test_paper_bleu_in_table_is_labelled():
    table = format_table(score(HYPS, REFS, metrics=[], paper_bleu=True, lang="de"))
    rows = [line for line in table.splitlines() if line.startswith("tokenized BLEU *")]
    assert len(rows) == 2  # the score row and its details row
    assert table.splitlines()[-1].startswith("* tokenized BLEU with compound splitting")
    assert "NOT comparable with sacreBLEU" in table.splitlines()[-1]


# The metric modules ship inside the package and load by path


def test_package_data_covers_every_metric_module():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = pyproject["tool"]["setuptools"]["packages"]
    for folder in METRIC_MODULES.values():
        # `evaluate.load(folder)` needs the script named after its folder, shipped as a package of one module.
        assert (METRICS_DIR / folder / f"{folder}.py").is_file()
        assert f"aiayn_cli.evaluation.metrics.{folder}" in packages
    assert "sacremoses" in " ".join(pyproject["project"]["dependencies"])


def test_modules_load_with_evaluate_directly(no_network):
    import evaluate

    from aiayn_cli.evaluation.metrics import metric_path

    ter = evaluate.load(metric_path("ter"), keep_in_memory=True)
    result = ter.compute(predictions=HYPS, references=[[a, b] for a, b in zip(REFS, REFS2)])
    assert result["score"] == sacrebleu.corpus_ter(HYPS, [REFS, REFS2]).score


# The real corpus


@pytest.mark.multi30k
def test_multi30k_val_references(multi30k_dir, tmp_path, capsys):
    ref_path = multi30k_dir / "val.de"
    refs = read_lines(ref_path)
    assert len(refs) == 1014
    itself = score(refs, refs)["scores"]
    assert itself["sacrebleu"]["score"] == sacrebleu.corpus_bleu(refs, [refs]).score
    assert [f"{itself[key]['score']:.2f}" for key in ("sacrebleu", "chrf", "ter")] == ["100.00", "100.00", "0.00"]

    # A perturbed copy: every third line loses its last word, every fifth is lower-cased.
    perturbed = [
        " ".join(line.split()[:-1]) if i % 3 == 0 else line.lower() if i % 5 == 0 else line
        for i, line in enumerate(refs)
    ]
    hyp_path = write(tmp_path / "perturbed.de", perturbed)
    out_json = tmp_path / "val.json"
    code, out, err = run_cli(
        "evaluate", "-i", hyp_path, "-r", ref_path, "--json", out_json, "--paper-bleu", capsys=capsys
    )
    assert code == 0, err
    results = json.loads(out_json.read_text(encoding="utf-8"))
    for key, (value, formatted) in direct(perturbed, [refs], 2).items():
        assert results["scores"][key]["score"] == value
        assert results["scores"][key]["formatted"] == formatted
    assert results["scores"]["paper_bleu"]["lang"] == "de"  # from the file name
    assert 50 < results["scores"]["sacrebleu"]["score"] < 100


# -- a dataset split as references, and a model translating it ----------------------------------


def test_references_from_a_data_split(tmp_path, capsys):
    import sacrebleu

    data, _, targets = split_corpus(tmp_path)
    hyps = [t if i % 3 else "w5 w6" for i, t in enumerate(targets)]
    (tmp_path / "hyp.de").write_text("\n".join(hyps) + "\n")
    code, out, err = run_cli(
        "evaluate",
        "-i",
        tmp_path / "hyp.de",
        "--data-dir",
        data,
        "-s",
        "en",
        "-t",
        "de",
        "--split",
        "test",
        "--json",
        tmp_path / "out.json",
        capsys=capsys,
    )
    assert code == 0, err
    expected = sacrebleu.corpus_bleu(hyps, [targets])
    saved = json.loads((tmp_path / "out.json").read_text())
    assert saved["scores"]["sacrebleu"]["score"] == expected.score
    assert f"{expected.score:.2f}" in out


def test_model_translates_the_split_then_scores(tmp_path, capsys):
    import sacrebleu
    from helpers import save_tiny_model

    from aiayn_cli.decoding.translator import Translator

    data, sources, targets = split_corpus(tmp_path)
    model = save_tiny_model(tmp_path / "model")
    code, _, err = run_cli(
        "evaluate",
        "--model",
        model,
        "--precision",
        "fp32",  # what the check below translates in
        "--data-dir",
        data,
        "-s",
        "en",
        "-t",
        "de",
        "--split",
        "test",
        "-o",
        tmp_path / "hyp.de",
        "--json",
        tmp_path / "out.json",
        capsys=capsys,
    )
    assert code == 0, err
    hyps = (tmp_path / "hyp.de").read_text().splitlines()
    assert hyps == Translator.from_pretrained(str(model)).translate(sources)
    saved = json.loads((tmp_path / "out.json").read_text())
    assert saved["scores"]["sacrebleu"]["score"] == sacrebleu.corpus_bleu(hyps, [targets]).score
    assert saved["inputs"]["model"] == str(model)


def test_split_mode_bad_inputs(tmp_path, capsys):
    data, _, _ = split_corpus(tmp_path)
    (tmp_path / "short.de").write_text("w1\n")
    (tmp_path / "ref.de").write_text("w1\n")
    cases = [
        (["--model", tmp_path], "--model needs data options"),
        (
            ["-i", tmp_path / "short.de", "--data-dir", data, "-s", "en", "-t", "de"],
            "has 1 lines but the test split has 20",
        ),
        (
            ["-i", tmp_path / "short.de", "-r", tmp_path / "ref.de", "--data-dir", data, "-s", "en", "-t", "de"],
            "not both",
        ),
        (["--data-dir", data, "-s", "en", "-t", "de"], "either --hypotheses"),
    ]
    for args, phrase in cases:
        code, _, err = run_cli("evaluate", *args, capsys=capsys)
        assert code == 2 and phrase in err, (args, err)


def test_inputs_for_scoring_are_a_library_call(tmp_path):
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.evaluation.inputs import inputs_from_files, inputs_from_split

    (tmp_path / "test.en").write_text("a cat\na dog\n", encoding="utf-8")
    (tmp_path / "test.de").write_text("eine Katze\nein Hund\n", encoding="utf-8")
    (tmp_path / "hyp.de").write_text("eine Katze\nein Hunde\n", encoding="utf-8")
    from_files = inputs_from_files(tmp_path / "hyp.de", [tmp_path / "test.de"])
    spec = DataSpec(data_dir=str(tmp_path), source_lang="en", target_lang="de")
    from_split = inputs_from_split(spec, "test", hypotheses=tmp_path / "hyp.de")
    assert from_files.hypotheses == from_split.hypotheses == ["eine Katze", "ein Hunde"]
    assert from_files.references == from_split.references == [["eine Katze"], ["ein Hund"]]
    assert from_files.language == from_split.language == "de"
    with pytest.raises(AiaynError) as error:
        inputs_from_split(spec, "test")  # neither hypotheses nor a model
    assert str(error.value) == "with a data split give either hypotheses or model"


def test_the_models_recipe_names_the_languages_of_the_split(tmp_path, capsys):
    """`evaluate --model M --data-dir D --split test` without -s/-t: the recipe saved beside the model
    names them (as `serve` reads them); without a model, or without such a recipe, they are required."""
    from helpers import save_tiny_model

    data, _, _ = split_corpus(tmp_path)
    model = save_tiny_model(tmp_path / "model")
    args = ["--model", model, "--precision", "fp32", "--data-dir", data, "--split", "test"]
    code, _, err = run_cli("evaluate", *args, capsys=capsys)
    assert code == 2 and "--source-lang and --target-lang are required" in err
    (model / "recipe.yaml").write_text("data:\n  source_lang: en\n  target_lang: de\n")
    code, out, err = run_cli("evaluate", *args, "--json", tmp_path / "out.json", capsys=capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "out.json").read_text())["num_segments"] == 20
    (tmp_path / "hyp.de").write_text("w1\n" * 20)
    code, _, err = run_cli("evaluate", "-i", tmp_path / "hyp.de", "--data-dir", data, capsys=capsys)
    assert code == 2 and "--source-lang and --target-lang are required" in err


def test_an_evaluation_is_a_library_call(tmp_path):
    """`evaluate_translations`: what the command runs, mode by mode, with the command's checks."""
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.evaluation.run import evaluate_translations

    data, _, targets = split_corpus(tmp_path)
    hyps = write(tmp_path / "hyp.de", [t if i % 2 else "w1" for i, t in enumerate(targets)])
    spec = DataSpec(data_dir=str(data), source_lang="en", target_lang="de")
    lines = []
    from_split = evaluate_translations(hypotheses=hyps, data=spec, split="test", json_path=tmp_path / "r.json",
                                       log=lines.append)  # fmt: skip
    from_files = evaluate_translations(hypotheses=hyps, references=[data / "test.de"], metrics=["sacrebleu"])
    expected = sacrebleu.corpus_bleu(hyps.read_text().splitlines(), [targets]).score
    assert from_split["scores"]["sacrebleu"]["score"] == from_files["scores"]["sacrebleu"]["score"] == expected
    assert from_split["inputs"]["split"] == "test" and lines[-1] == f"wrote {tmp_path / 'r.json'}"
    with pytest.raises(AiaynError, match="either"):
        evaluate_translations(data=spec)
    with pytest.raises(AiaynError, match="not both"):
        evaluate_translations(hypotheses=hyps, references=[data / "test.de"], data=spec)


def test_bleu_on_lowercased_tokenized_text_as_papers_on_multi30k_report_it():
    """`bleu_lc`: multi-bleu -lc on Moses-tokenized text (tokenizer.perl -l de, no compound splitting),
    computed here with sacremoses and sacrebleu directly; a difference of case alone costs nothing."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    normalizer, tokenizer = MosesPunctNormalizer(lang="de"), MosesTokenizer(lang="de")

    def tokenized(lines):
        return [tokenizer.tokenize(normalizer.replace_unicode_punct(x), escape=True, return_str=True) for x in lines]

    expected = sacrebleu.BLEU(tokenize="none", smooth_method="none", lowercase=True, force=True)
    expected = expected.corpus_score(tokenized(HYPS), [tokenized(REFS)]).score
    result = score(HYPS, REFS, metrics=["sacrebleu"], lang="de", lowercase_bleu=True)["scores"]
    assert list(result) == ["sacrebleu", "bleu_lc"]
    assert result["bleu_lc"]["score"] == pytest.approx(expected, abs=1e-9)
    assert "case:lc" in result["bleu_lc"]["signature"] and "tok:moses-de|" in result["bleu_lc"]["signature"]
    lowered = score([r.lower() for r in REFS], REFS, metrics=["sacrebleu"], lang="de", lowercase_bleu=True)["scores"]
    assert lowered["bleu_lc"]["score"] == pytest.approx(100.0) and lowered["sacrebleu"]["score"] < 100


def test_evaluate_reports_the_lowercased_tokenized_bleu_labelled(tmp_path, capsys):
    hyp, ref = write(tmp_path / "hyp.de", HYPS), write(tmp_path / "ref.de", REFS)
    code, out, err = run_cli("evaluate", "-i", hyp, "-r", ref, "--json", tmp_path / "o.json", capsys=capsys)
    assert code == 0, err
    saved = json.loads((tmp_path / "o.json").read_text())["scores"]
    assert saved["bleu_lc"]["name"] == "BLEU lowercased, tokenized" and saved["bleu_lc"]["lang"] == "de"
    assert "NOT with sacreBLEU" in saved["bleu_lc"]["note"]
    assert saved["bleu_lc"]["score"] == score(HYPS, REFS, lang="de", lowercase_bleu=True)["scores"]["bleu_lc"]["score"]
    assert re.search(r"^BLEU lowercased, tokenized \+ +\d+\.\d\d  nrefs:1\|case:lc\|", out, re.M)
    assert "+ BLEU on lowercased, Moses-tokenized text (tokenizer -l de, multi-bleu -lc)" in out
    # The language unknown (no suffix it names): said on stderr, not guessed; --metrics without sacrebleu: none.
    hyp_txt, ref_txt = write(tmp_path / "hyp.txt", HYPS), write(tmp_path / "ref.txt", REFS)
    code, out, err = run_cli("evaluate", "-i", hyp_txt, "-r", ref_txt, capsys=capsys)
    assert code == 0 and "lowercased" not in out and "the references' language is unknown (give --lang" in err
    code, out, _ = run_cli("evaluate", "-i", hyp_txt, "-r", ref_txt, "--lang", "de", capsys=capsys)
    assert code == 0 and "BLEU lowercased, tokenized +" in out
    code, out, err = run_cli("evaluate", "-i", hyp, "-r", ref, "--metrics", "chrf", capsys=capsys)
    assert code == 0 and "lowercased" not in out + err
