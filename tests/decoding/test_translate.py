"""`aiayn translate` and its library (aiayn_cli/decoding/translator.py), on a tiny model with a tiny tokenizer."""

from __future__ import annotations

import os
import random
import select
import subprocess
import time
from pathlib import Path

import helpers
import pytest
import torch
from helpers import cli_command, cli_env, run_cli

from aiayn_cli import AiaynForConditionalGeneration
from aiayn_cli.decoding.translator import Translator, decode_lines, make_batches
from aiayn_cli.errors import AiaynError

WORDS = (
    "a man woman dog cat runs walks sits on the in park street red blue small big young old "
    "ball bike car house tree water near with under over"
).split()


def sentences(n: int, seed: int, low: int = 1, high: int = 12) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))) for _ in range(n)]


def tiny_tokenizer():
    """A BPE tokenizer trained on generated sentences: <pad>=0, <s>=1, </s>=2, <unk>=3, and `</s>`
    appended to every encoded sentence."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=90, special_tokens=["<pad>", "<s>", "</s>", "<unk>"])
    tokenizer.train_from_iterator(sentences(500, seed=0), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def tiny_model(vocab_size: int) -> AiaynForConditionalGeneration:
    """A random tiny model whose outputs end at varied lengths (`helpers.tiny_model`)."""
    return helpers.tiny_model(vocab_size, varied_lengths=True)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def translator(model_dir) -> Translator:
    return Translator.from_pretrained(str(model_dir), device="cpu", dtype="fp32")  # exact: batch-independent


# ---------------------------------------------------------------------------------------------
# The library
# ---------------------------------------------------------------------------------------------


def test_translates_with_the_paper_defaults(translator):
    options = translator.decoding_options()
    assert (options.num_beams, options.length_penalty, options.length_penalty_style) == (4, 0.6, "gnmt")
    assert (options.max_len_a, options.max_len_b) == (1.0, 50)
    inputs = sentences(6, seed=1)
    outputs = translator.translate(inputs)
    assert len(outputs) == 6 and all(isinstance(o, str) and "\n" not in o for o in outputs)
    # The same as decoding the batch directly, in the input order.
    from aiayn_cli.decoding.search import decode

    ids = translator.encode(inputs)
    for text, tokens in zip(outputs, ids):
        hyps = decode(translator.model, torch.tensor([tokens]), None, options)
        assert text == translator.detokenize(hyps[0][0].tokens)


def test_empty_and_whitespace_lines_give_empty_lines(translator):
    outputs = translator.translate(["", "   ", "\t", "a man runs", ""])
    assert outputs[:3] == ["", "", ""] and outputs[4] == ""
    assert len(outputs) == 5


def test_batch_size_1_and_64_give_the_same_translations(translator):
    """Point 3: outputs do not depend on how inputs are batched (sorted, padded, shrinking batches)."""
    inputs = sentences(70, seed=2, high=20)  # 64 and 6 in batches of 64
    one = translator.translate_nbest(inputs, batch_size=1, nbest=4)
    many = translator.translate_nbest(inputs, batch_size=64, nbest=4)
    by_tokens = translator.translate_nbest(inputs, batch_size=64, max_tokens=200, nbest=4)
    assert (
        [[t for t, _ in h] for h in one] == [[t for t, _ in h] for h in many] == [[t for t, _ in h] for h in by_tokens]
    )
    for a, b in zip(one, many):
        assert [s for _, s in a] == pytest.approx([s for _, s in b], abs=1e-4)
    assert len({h[0][0] for h in one}) > 10  # the translations differ from sentence to sentence


def test_long_inputs(translator, caplog):
    long = " ".join(["man"] * 300)
    with caplog.at_level("WARNING", logger="aiayn_cli"):
        out = translator.translate(["a dog", long], max_len_b=5)
    assert out[1] != "" and "input line 2: " in caplog.text and "truncated" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="aiayn_cli"):
        assert translator.translate([long, "a dog"], on_long="skip", first_line=10)[0] == ""
    assert "input line 10: " in caplog.text and "skipped" in caplog.text
    with pytest.raises(AiaynError, match="input line 2: .* tokens, more than the model's limit of 64"):
        translator.translate(["a dog", long], on_long="error")


def test_make_batches_respects_tokens_and_sentences():
    lengths = [5, 30, 7, 7, 12, 3, 30, 100, 1]
    batches = make_batches(lengths, max_tokens=40, batch_size=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) <= 3
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 40
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat, reverse=True)


def test_decode_lines_splits_on_newline_only(caplog):
    raw = [b"\xef\xbb\xbfone\r\n", b"two \xe2\x80\xa8 still two\n", b"bad \xff\xfe\n", b"last"]
    with caplog.at_level("WARNING", logger="aiayn_cli"):
        lines = list(decode_lines(iter(raw), source="x.txt"))
    assert lines == ["one", "two \u2028 still two", "bad \ufffd\ufffd", "last"]
    assert "x.txt line 3: invalid UTF-8" in caplog.text and "line 1" not in caplog.text


def test_a_tokenizer_that_does_not_match_the_model_is_an_error(model_dir, tmp_path):
    other = tmp_path / "other"
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer) + 5).save_pretrained(other)
    tokenizer.save_pretrained(other)
    with pytest.raises(AiaynError, match="tokens but the model's vocabulary is"):
        Translator.from_pretrained(str(other))
    with pytest.raises(AiaynError, match="missing: no such model folder"):
        Translator.from_pretrained(str(tmp_path / "missing"))


def test_generate_still_works_for_hugging_face_users(model_dir):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batch = tokenizer(["a man runs", "the dog"], return_tensors="pt", padding=True)
    out = model.generate(**batch, max_new_tokens=8)
    assert out.shape[0] == 2


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow  # 1,000 lines through a new process; the default tier streams stdin in
# test_stdin_is_streamed_line_by_line and reads hostile files in process (tests/data/test_lines.py)
def test_stdin_1000_hostile_lines(model_dir):
    """Point 2: 1,000 lines in, 1,000 lines out, no crash, warnings on stderr only."""
    rng = random.Random(3)
    kinds = [
        lambda: b"",
        lambda: b"   \t ",
        lambda: " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 10))).encode(),
        lambda: "a dog \U0001f415\U0001f3f3\ufe0f\u200d\U0001f308 runs \U0001f600".encode(),
        lambda: (
            "\u05d0\u05d9\u05e9 \u05e8\u05e5 \u0631\u062c\u0644 \u064a\u062c\u0631\u064a \u202b\u05dc\u202c".encode()
        ),
        lambda: " ".join(["man"] * 2000).encode(),
        lambda: b"a man \xff\xfe\xc3( runs \x80",
        lambda: b"ends with a carriage return\r",
        lambda: "tab\tand\u2028line separator\u0085and a form feed \x0c".encode(),  # NUL: refused, test_lines
    ]
    lines = [kinds[i % len(kinds)]() for i in range(1000)]
    rng.shuffle(lines)
    result = run_cli(
        "translate",
        "--model",
        model_dir,
        "--threads",
        "1",
        "--beam",
        "2",
        "--max-len-a",
        "0",
        "--max-len-b",
        "4",
        input=b"\n".join(lines) + b"\n",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    out = result.stdout.split(b"\n")
    assert out[-1] == b"" and len(out) - 1 == 1000
    for line, translated in zip(lines, out):
        if not line.strip():
            assert translated == b""
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr and "error" not in stderr
    long_lines = [i + 1 for i, line in enumerate(lines) if line.startswith(b"man man")]
    bad_lines = [i + 1 for i, line in enumerate(lines) if b"\xff" in line]
    assert f"stdin line {long_lines[0]}: 2001 tokens" in stderr
    assert f"stdin line {bad_lines[0]}: invalid UTF-8" in stderr
    assert all(w.startswith("warning: ") for w in stderr.splitlines() if w.strip())
    assert b"warning" not in result.stdout
    out[:-1][0].decode("utf-8")  # valid UTF-8 out


def test_stdin_is_streamed_line_by_line(model_dir):
    """Each translation comes out as soon as its line has been read, before the input ends."""
    process = subprocess.Popen(
        cli_command("translate", "--model", model_dir, "-b", "2", "--threads", "1"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    try:
        got = []
        for line in (b"a man runs in the park\n", b"\n", b"the red dog\n"):
            process.stdin.write(line)
            process.stdin.flush()
            deadline = time.monotonic() + 120
            buffer = b""
            while not buffer.endswith(b"\n"):
                ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
                assert ready, "no output line before the input ended"
                byte = os.read(process.stdout.fileno(), 1)
                # End of file (select calls it readable) or a dead child: a failure, never a loop without end.
                assert byte, f"translate ended (exit code {process.poll()}): {process.stderr.read().decode()[-2000:]}"
                buffer += byte
            got.append(buffer)
        assert got[1] == b"\n"
        process.stdin.close()
        assert process.wait(timeout=60) == 0
        assert process.stdout.read() == b""
    finally:
        if process.poll() is None:
            process.kill()


def test_arguments_and_files(model_dir, tmp_path, capsysbinary):
    code, out, err = run_cli("translate", "-m", model_dir, "a man runs", "", "the dog", capsys=capsysbinary)
    assert code == 0, err
    assert len(out.decode().split("\n")) == 4 and out.decode().split("\n")[1] == ""

    source = tmp_path / "in.txt"
    inputs = sentences(30, seed=4) + ["", "  "]
    source.write_text("\n".join(inputs) + "\n", encoding="utf-8")
    target = tmp_path / "out.txt"
    args = ("translate", "-m", model_dir, "--precision", "fp32", "-i", source, "-o", target)
    code, out, err = run_cli(*args, "--progress", capsys=capsysbinary)
    assert code == 0, err
    assert out == b"" and "translating" in err  # the progress bar, asked for, on stderr
    code, out, err = run_cli(*args, capsys=capsysbinary)
    assert code == 0 and err == "", err  # stderr is not a terminal here: no bar by default
    written = target.read_text(encoding="utf-8").split("\n")
    assert len(written) == 33 and written[-1] == "" and written[30:32] == ["", ""]
    assert written[:30] == Translator.from_pretrained(str(model_dir)).translate(inputs[:30])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]  # no temporary left


def test_nbest_sampling_and_greedy(model_dir, capsysbinary):
    code, out, err = run_cli(
        "translate", "-m", model_dir, "--beam", "3", "--nbest", "3", "a man runs", "", capsys=capsysbinary
    )
    assert code == 0, err
    lines = out.decode().splitlines()
    assert len(lines) == 6 and [line.split(" ||| ")[0] for line in lines] == ["0", "0", "0", "1", "1", "1"]
    scores = [float(line.split(" ||| ")[2]) for line in lines[:3]]
    assert scores == sorted(scores, reverse=True)

    args = (
        "translate",
        "-m",
        model_dir,
        "--sample",
        "--seed",
        "5",
        "--top-k",
        "10",
        "--temperature",
        "2",
        "a man runs",
        "the dog sits",
    )
    first, second = (run_cli(*args, capsys=capsysbinary) for _ in range(2))
    assert first[0] == 0 and first[1] == second[1]
    code, out, err = run_cli(
        "translate",
        "-m",
        model_dir,
        "--beam",
        "1",
        "--length-penalty-style",
        "hf",
        "--precision",
        "bf16",
        "--device",
        "cpu",
        "a man",
        capsys=capsysbinary,
    )
    assert code == 0 and len(out.splitlines()) == 1, err


def test_user_errors_exit_2_with_one_line(model_dir, capsysbinary):
    long = " ".join(["man"] * 100)
    cases = [
        (("--on-long", "error"), b"a dog\n" + long.encode() + b"\n", "stdin line 2: "),
        (("--on-long", "sometimes"), b"a dog\n", "--on-long: 'sometimes' is not one of"),
        (("--nbest", "5", "--beam", "4"), b"a dog\n", "--nbest"),
        (("--length-penalty-style", "marian"), b"a dog\n", "--length-penalty-style"),
        (("--precision", "fp8"), b"a dog\n", "--precision: 'fp8' is not one of"),
        (("-i", "/no/such/file"), b"", "no such file"),
    ]
    for extra, stdin, message in cases:
        code, out, err = run_cli("translate", "-m", model_dir, *extra, input=stdin, capsys=capsysbinary)
        assert code == 2, (extra, err)
        assert err.startswith("error: ") and message in err and "Traceback" not in err, (extra, err)
    code, out, err = run_cli(
        "translate",
        "-m",
        model_dir,
        "--on-long",
        "skip",
        input=b"a dog\n" + long.encode() + b"\n",
        capsys=capsysbinary,
    )
    assert code == 0 and out.split(b"\n")[1] == b"" and "stdin line 2:" in err and "skipped" in err


def test_int8_translates_on_cpus(model_dir):
    int8 = Translator.from_pretrained(str(model_dir), device="cpu", dtype="int8")
    assert int8.prepared.dtype == "int8" and int8.model.dtype == torch.float32
    outputs = int8.translate(sentences(8, seed=3))
    assert len(outputs) == 8 and all(isinstance(o, str) for o in outputs)
