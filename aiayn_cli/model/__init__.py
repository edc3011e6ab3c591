"""The model of the paper as a `transformers` model: `AiaynConfig` and `AiaynForConditionalGeneration`.

`configuration_aiayn.py` and `modeling_aiayn.py` are all of the model's maths; they import each
other only, relatively, because a saved folder carries copies of both and loads them with
`trust_remote_code=True` where this package is not installed. Importing this package registers the
model with `AutoConfig`, `AutoModel` and `AutoModelForSeq2SeqLM`. `loading.py` (`load_pretrained`) is the
project's one loader of a saved model, with its checks; it is not part of the remote code.
"""

from .configuration_aiayn import PRESETS, AiaynConfig
from .modeling_aiayn import AiaynForConditionalGeneration, AiaynModel, AiaynPreTrainedModel


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

__all__ = ["PRESETS", "AiaynConfig", "AiaynForConditionalGeneration", "AiaynModel", "AiaynPreTrainedModel"]
