"""A saved model read from its folder's files alone, for `Translator.from_converted`: the configuration
from config.json, the generation_config's values as kept at conversion, the tokenizer with
`tokenizers` (the library under transformers' fast tokenizers). With the model converted for CTranslate2 already, this is all that
translating needs, without importing torch or transformers (about 4 s of a one-sentence run).

Only what `Translator` reads is here: `ModelFiles.config` and `.generation_config` (their JSON as
attributes), and `FilesTokenizer`, which encodes and decodes as `PreTrainedTokenizerFast` does for
the same tokenizer.json (no truncation, no padding; special tokens added, and skipped when decoding).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from ..errors import AiaynError

VERY_LARGE_INTEGER = int(1e30)  # transformers' model_max_length where tokenizer_config.json gives none


def read_json(path: Path) -> dict:
    """A JSON object from `path`, or an `AiaynError` naming it."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise AiaynError(f"{path}: cannot read it ({err})", key="model") from None
    if not isinstance(value, dict):
        raise AiaynError(f"{path}: not a JSON object", key="model")
    return value


class ModelFiles:
    """A model folder's `config` (config.json) and `generation_config` (the values transformers reads
    from generation_config.json, kept at conversion: `ctranslate2_cache.decoding_defaults`) as
    attribute namespaces."""

    def __init__(self, folder: str | Path, generation: dict):
        self.config = SimpleNamespace(**read_json(Path(folder) / "config.json"))
        self.generation_config = SimpleNamespace(**generation)


class FilesTokenizer:
    """The folder's tokenizer.json (`tokenizers.Tokenizer`), with tokenizer_config.json's
    `model_max_length`, called as `Translator` calls a transformers tokenizer."""

    def __init__(self, folder: str | Path, eos_token_id: int):
        from tokenizers import Tokenizer

        folder = Path(folder)
        try:
            self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as err:  # the library's own exception type
            raise AiaynError(f"{folder / 'tokenizer.json'}: cannot read it ({err})", key="model") from None
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        config = folder / "tokenizer_config.json"
        saved = read_json(config) if config.is_file() else {}
        self.model_max_length = saved.get("model_max_length") or VERY_LARGE_INTEGER
        self.eos_token_id = eos_token_id

    def get_vocab(self) -> dict[str, int]:
        return self.tokenizer.get_vocab(with_added_tokens=True)

    def __call__(self, texts: list[str], add_special_tokens: bool = True, **_) -> dict[str, list[list[int]]]:
        encoded = self.tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)
        return {"input_ids": [e.ids for e in encoded]}

    def decode(self, ids: list[int], skip_special_tokens: bool = False, **_) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


__all__ = ["FilesTokenizer", "ModelFiles"]
