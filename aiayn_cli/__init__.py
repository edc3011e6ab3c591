"""aiayn: the Transformer of "Attention Is All You Need" in the Hugging Face ecosystem.

The package is laid out by the layers of the work, each a subpackage that says what it owns:

    model/        the paper's model as a `transformers` model (also the remote code of a saved folder)
    data/         parallel corpora, the shared BPE vocabulary, token-count batches
    training/     recipes, the training loop, checkpoints, checkpoint averaging
    decoding/     beam search and sampling over the incremental decoder; `Translator`
    evaluation/   sacreBLEU, chrF, TER and the paper's tokenized BLEU as `evaluate` modules
    hub/          the folder and model card that go to the Hugging Face Hub
    quickstart/   the generated English->German corpus and the end-to-end quickstart
    inspection/   attention of a trained model: extraction, pictures, the explorer, word alignments
    paper/        the paper's claims shown and measured (`aiayn paper TOPIC`)
    serving/      an HTTP API over `Translator` (`aiayn serve`) and the CTranslate2 export
    cli/          the `aiayn` command line: thin commands over the layers above

Names are imported on first use, so that `aiayn --version` does not load torch. Importing the model
(`from aiayn_cli import AiaynForConditionalGeneration`, or any module of `aiayn_cli.model`)
registers it with `AutoConfig` and `AutoModelForSeq2SeqLM`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

__version__ = "0.1.0"


# Public name -> the module that defines it.
_EXPORTS = {
    "AiaynConfig": "aiayn_cli.model",
    "AiaynForConditionalGeneration": "aiayn_cli.model",
    "AiaynModel": "aiayn_cli.model",
    "AiaynPreTrainedModel": "aiayn_cli.model",
    "Translator": "aiayn_cli.decoding",
    "DecodingOptions": "aiayn_cli.decoding",
    "decode": "aiayn_cli.decoding",
    "score": "aiayn_cli.evaluation",
    "metric_path": "aiayn_cli.evaluation",
}

if TYPE_CHECKING:  # pragma: no cover
    from .decoding import DecodingOptions, Translator, decode
    from .evaluation import metric_path, score
    from .model import AiaynConfig, AiaynForConditionalGeneration, AiaynModel, AiaynPreTrainedModel


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = [*_EXPORTS, "__version__"]
