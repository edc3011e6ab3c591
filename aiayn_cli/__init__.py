"""aiayn: the Transformer of "Attention Is All You Need" in the Hugging Face ecosystem.

Importing the package registers the model with ``AutoConfig`` and ``AutoModelForSeq2SeqLM``,
so that ``AutoModelForSeq2SeqLM.from_pretrained(folder)`` works for any saved aiayn model.
"""

__version__ = "0.1.0"

from .configuration_aiayn import AiaynConfig  # noqa: E402
from .modeling_aiayn import (  # noqa: E402
    AiaynForConditionalGeneration,
    AiaynModel,
    AiaynPreTrainedModel,
)


def _register() -> None:
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

    AutoConfig.register(AiaynConfig.model_type, AiaynConfig, exist_ok=True)
    AutoModel.register(AiaynConfig, AiaynModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(AiaynConfig, AiaynForConditionalGeneration, exist_ok=True)
    # A saved folder carries `auto_map` and a copy of the modeling code, so that it loads with
    # `trust_remote_code=True` where this package is not installed.
    AiaynConfig.register_for_auto_class()
    AiaynModel.register_for_auto_class("AutoModel")
    AiaynForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")


_register()

__all__ = [
    "AiaynConfig",
    "AiaynForConditionalGeneration",
    "AiaynModel",
    "AiaynPreTrainedModel",
    "__version__",
]
