"""The paper's claims, shown and measured: the library behind `aiayn paper TOPIC`.

Each topic is one module that computes its numbers with the project's own code (the model's
`sinusoidal_positional_encoding`, its attention, its masks, its forward pass, the `Translator`),
writes PNG figures and a markdown table into an output folder, and returns a `TopicResult` whose
`notes` say what to notice:

    positions        §3.5   sinusoids, wavelengths, PE(pos+k) = M_k PE(pos), a naive encoding, learned positions
    scaling          §3.2.1 why divide by sqrt(d_k): variance of q.k, softmax saturation, trained logit scales
    masks            §3.2.3 padding, causal and encoder-decoder masks of a real padded batch
    complexity       §4     Table 1 measured: self-attention against a recurrent layer, a convolution, local attention
    teacher-forcing  §5     the decoder's input and labels; its choices when fed the truth and when fed itself
    normalization    §3.1   LayerNorm against BatchNorm on a padded batch

    from aiayn_cli.paper import run_topic
    result = run_topic("positions", "paper-figures")
    print(result.notes, result.figures)
"""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path

from ..errors import AiaynError
from .common import TopicResult, load_model, prepare_output_dir

# Topic -> (module, needs --model and a sentence pair)
TOPICS = {
    "positions": ("positions", False),
    "scaling": ("scaling", False),
    "masks": ("masks", False),
    "complexity": ("complexity", False),
    "teacher-forcing": ("teacher_forcing", True),
    "normalization": ("normalization", False),
}


def run_topic(
    topic: str,
    output_dir: str | Path = "paper",
    *,
    model: str | None = None,
    source: str | None = None,
    target: str | None = None,
) -> TopicResult:
    """Compute one topic's figures and numbers into `output_dir`; `AiaynError` on a user mistake."""
    if topic not in TOPICS:
        raise AiaynError(f"unknown topic {topic!r}: choose one of {', '.join(TOPICS)}")
    module_name, needs_model = TOPICS[topic]
    if needs_model and model is None:
        raise AiaynError(
            f"aiayn paper {topic} needs {{model}} (a folder saved by aiayn train, or a Hub id)", mentions=("model",)
        )
    if needs_model and (source is None or target is None):
        raise AiaynError(
            f"aiayn paper {topic} needs a sentence pair: {{source}} TEXT {{target}} TEXT", mentions=("source", "target")
        )
    if (source is None) != (target is None):
        raise AiaynError(
            "{source} and {target} go together: give both sides of the sentence pair", mentions=("source", "target")
        )
    for flag, text in (("--source", source), ("--target", target)):
        if text is not None and not text.strip():
            raise AiaynError(f"{flag} is empty: give a sentence")
    if model is not None:  # before anything is written: a model that does not load leaves no folder behind
        load_model(model)
    output = prepare_output_dir(output_dir)
    module = importlib.import_module(f".{module_name}", __name__)
    if topic == "complexity":  # measured with the threads a model would get here
        return module.run(output, model=model, source=source, target=target)
    with one_thread():  # small tensors: a second thread only waits on a busy machine
        return module.run(output, model=model, source=source, target=target)


@contextlib.contextmanager
def one_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


__all__ = ["TOPICS", "TopicResult", "run_topic"]
