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
import dataclasses
import importlib
from pathlib import Path

from ..errors import AiaynError
from ..files import check_output_files, staging_files
from .common import TopicResult, load_model

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
    overwrite: bool = False,
) -> TopicResult:
    """Compute one topic's figures and numbers into `output_dir`; `AiaynError` on a user mistake.

    The files are made in a staging folder and moved into `output_dir` at the end, by the output rule
    (`files.staging_files`): a file there of the same name is replaced only where `aiayn paper` wrote
    it (and it is unchanged since), or with `overwrite`."""
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
    output = Path(output_dir)
    check_output_files(output, [f"{module_name}.md"], overwrite=overwrite, key="output_dir")
    if model is not None:  # before anything is written: a model that does not load leaves no folder behind
        load_model(model)
    module = importlib.import_module(f".{module_name}", __name__)
    with staging_files(output, overwrite=overwrite, key="output_dir") as staging:
        # complexity is measured with the threads a model would get here; the other topics' small
        # tensors run on one thread (a second one only waits on a busy machine)
        with contextlib.nullcontext() if topic == "complexity" else one_thread():
            result = module.run(staging, model=model, source=source, target=target)
    return dataclasses.replace(
        result,
        output_dir=output,
        figures=[output / path.name for path in result.figures],
        table=output / result.table.name if result.table is not None else None,
    )


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
