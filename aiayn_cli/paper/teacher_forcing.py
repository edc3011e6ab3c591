"""Teacher forcing (training) against free-running decoding (§5, §6.1).

In training the decoder reads the reference shifted right (`<s>` first) and predicts every position
in one forward pass: each position is fed the true previous token. In decoding it is fed its own
previous choice, one position at a time. Here both run on one sentence pair: the teacher-forced
choices are the argmax of the model's `logits`, the free-running ones are greedy search, the
`Translator` that `aiayn translate --beam 1` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import AiaynError
from .common import TopicResult, markdown_table, pyplot, save_figure, token_strings, write_markdown


@dataclass
class Comparison:
    decoder_input: list[int]  # the labels shifted right, <s> first
    labels: list[int]  # the reference, </s> last
    forced: list[int]  # argmax of the logits, position by position, under teacher forcing
    label_probabilities: list[float]  # p(label_t | source, labels_<t)
    free: list[int]  # greedy decoding's choices, </s> last
    translation: str  # the free-running output as text, as aiayn translate --beam 1 prints it

    @property
    def first_mistake(self) -> int | None:
        """The first position where the teacher-forced choice is not the label."""
        return next((t for t, (a, b) in enumerate(zip(self.forced, self.labels)) if a != b), None)

    @property
    def parting(self) -> int | None:
        """The first position where free-running decoding chooses differently from teacher forcing."""
        pairs = list(zip(self.free, self.forced))
        parted = next((t for t, (a, b) in enumerate(pairs) if a != b), None)
        if parted is None and len(self.free) != len(self.forced):
            return len(pairs)
        return parted


def compare(model, tokenizer, source: str, target: str) -> Comparison:
    """Teacher-forced and free-running (greedy) choices of `model` on one sentence pair."""
    from ..decoding import Translator, decode

    translator = Translator(model, tokenizer, device="cpu")
    source_ids = translator.encode([source])[0]
    labels = tokenizer(text_target=[target], return_tensors="pt")["input_ids"]
    if source_ids is None or labels.size(1) == 0:
        raise AiaynError("{source} and {target} must hold words", mentions=("source", "target"))
    input_ids = torch.tensor([source_ids])
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    with torch.no_grad():
        logits = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits[0]  # (T, V)
    probabilities = logits.float().softmax(-1).gather(1, labels[0][:, None])[:, 0]
    options = translator.decoding_options(num_beams=1)
    best = decode(model, input_ids, torch.ones_like(input_ids), options, translator.prepared)[0][0]
    return Comparison(
        decoder_input=decoder_input_ids[0].tolist(),
        labels=labels[0].tolist(),
        forced=logits.argmax(-1).tolist(),
        label_probabilities=probabilities.tolist(),
        free=[*best.tokens, model.config.eos_token_id],
        translation=translator.detokenize(best.tokens),
    )


def run(output_dir: Path, model: str | None = None, source: str | None = None, target: str | None = None, **_):
    from .common import load_model

    if source is None or target is None:
        raise AiaynError(
            "aiayn paper teacher-forcing needs a sentence pair: {source} TEXT {target} TEXT",
            mentions=("source", "target"),
        )
    loaded, tokenizer = load_model(model)
    comparison = compare(loaded, tokenizer, source, target)
    result = TopicResult("teacher-forcing", output_dir)
    result.numbers["comparison"] = comparison
    result.figures.append(_plot(pyplot(), comparison, tokenizer, output_dir))
    rows = _table_rows(comparison, tokenizer)
    header = ["t", "decoder input (teacher forcing)", "label", "teacher-forced choice", "p(label)"]
    header += ["decoder input (free running)", "free-running choice"]
    correct = sum(a == b for a, b in zip(comparison.forced, comparison.labels))
    mistake, parting = comparison.first_mistake, comparison.parting
    result.notes += [
        "teacher forcing: the decoder input is the label row shifted right by one, <s> first; all positions "
        "are predicted in one forward pass, each from the true previous tokens",
        f"teacher-forced choices equal to the label: {correct} of {len(comparison.labels)}"
        + (f"; the first mistake at t = {mistake}" if mistake is not None else ""),
        _free_running_note(mistake, parting),
        f"free-running translation: {comparison.translation!r}",
    ]
    sections = [f"Source: {source}\n\nReference: {target}", markdown_table(header, rows)]
    write_markdown(result, "Teacher forcing against free-running decoding", sections)
    return result


def _table_rows(comparison: Comparison, tokenizer) -> list[list]:
    """One row per target position: both decoder inputs, the label, both choices, p(label)."""
    columns = {
        "decoder_input": comparison.decoder_input,
        "labels": comparison.labels,
        "forced": comparison.forced,
        "free_input": [comparison.decoder_input[0], *comparison.free[:-1]],
        "free": comparison.free,
    }
    words = {name: token_strings(tokenizer, ids) for name, ids in columns.items()}
    rows = []
    for t in range(max(len(comparison.labels), len(comparison.free))):
        cell = {name: values[t] if t < len(values) else "" for name, values in words.items()}
        probability = f"{comparison.label_probabilities[t]:.2f}" if t < len(comparison.labels) else ""
        rows.append([t, cell["decoder_input"], cell["labels"], cell["forced"], probability])
        rows[-1] += [cell["free_input"], cell["free"]]
    return rows


def _free_running_note(mistake: int | None, parting: int | None) -> str:
    note = "free running (greedy, as aiayn translate --beam 1): "
    if mistake is None and parting is None:
        return note + "the model never errs here, so it is fed exactly what teacher forcing feeds it"
    if mistake is not None:
        note += (
            f"from t = {mistake + 1} on it is fed its own mistake, an input it never saw in training (exposure bias); "
        )
    if parting is None:
        return note + "its choices still equal the teacher-forced ones at every position"
    return note + f"its choices part from the teacher-forced ones at t = {parting}"


def _plot(plt, comparison: Comparison, tokenizer, output_dir: Path) -> Path:
    positions = max(len(comparison.labels), len(comparison.free))
    start = [comparison.decoder_input[0]]
    rows = [  # (name, tokens, compared with, colour where they differ)
        ("decoder input\n(teacher forcing)", comparison.decoder_input, None, None),
        ("label", comparison.labels, None, None),
        ("teacher-forced\nchoice", comparison.forced, comparison.labels, "#fed7d7"),
        ("decoder input\n(free running)", start + comparison.free[:-1], comparison.decoder_input, "#feebc8"),
        ("free-running\nchoice", comparison.free, comparison.forced, "#fed7d7"),
    ]
    fig, (table, bars) = plt.subplots(
        2, 1, figsize=(max(8, 0.95 * positions + 2), 5.6), gridspec_kw={"height_ratios": [2.2, 1]}, sharex=True
    )
    for y, (_, ids, reference, different) in enumerate(rows):
        for t, word in enumerate(token_strings(tokenizer, ids)):
            color = "#ffffff"
            if reference is not None:
                color = "#c6f6d5" if t < len(reference) and ids[t] == reference[t] else different
            table.add_patch(plt.Rectangle((t - 0.5, y - 0.5), 1, 1, facecolor=color, edgecolor="#cccccc"))
            table.text(t, y, word[:10], ha="center", va="center", fontsize=8)
    parting = comparison.parting
    if parting is not None:
        for ax in (table, bars):
            ax.axvline(parting - 0.5, color="tab:red", linewidth=2, label=f"free running parts at t = {parting}")
        bars.legend(loc="upper center", fontsize=8)
    table.set_ylim(len(rows) - 0.5, -0.5)
    table.set_yticks(range(len(rows)), [row[0] for row in rows], fontsize=8)
    table.set_title(
        "Teacher forcing against free-running greedy decoding\nred: a teacher-forced choice that is not the label, "
        "or a free-running choice that is not the teacher-forced one; orange: an input that training never gave",
        fontsize=10,
    )
    probabilities = comparison.label_probabilities
    bars.bar(range(len(probabilities)), probabilities, color="tab:blue")
    bars.set(ylim=(0, 1), ylabel="p(label | true prefix)", xlabel="target position t")
    bars.set_xticks(range(positions))
    bars.set_xlim(-0.5, positions - 0.5)
    fig.tight_layout()
    return save_figure(fig, output_dir / "teacher_forcing.png")
