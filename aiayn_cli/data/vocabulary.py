"""The vocabulary contract between a tokenizer and a model: the special tokens `aiayn train-tokenizer`
puts first, and the one check that a tokenizer fits a model (used by training and by translation).
It imports nothing heavy: `aiayn translate` checks its tokenizer without loading `datasets`."""

from __future__ import annotations

from ..errors import AiaynError

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0, 1, 2, 3
SPECIAL_IDS = {"pad": 0, "bos": 1, "eos": 2}  # what AiaynConfig expects of a tokenizer


def check_tokenizer(
    tokenizer,
    *,
    vocab_size: int | None,
    special_ids: dict[str, int | None],
    where: str = "the tokenizer",
    model: str = "the model's vocabulary",
    advice: str = "use the tokenizer the model was trained with",
) -> None:
    """Raise `AiaynError` where a tokenizer does not match a model: its size is not `vocab_size`
    (unless None), or one of its special ids (`pad`, `bos`, `eos`) is not the one given.
    A tokenizer may lack `<s>`; it must have `</s>`."""
    if vocab_size is not None and len(tokenizer) != vocab_size:
        raise AiaynError(f"{where} has {len(tokenizer)} tokens but {model} is {vocab_size}: {advice}")
    for name, expected in special_ids.items():
        got = getattr(tokenizer, f"{name}_token_id")
        if expected is not None and got != expected and not (got is None and name == "bos"):
            raise AiaynError(f"{where} has {name} id {got}, but the model expects {expected}: {advice}")
    if tokenizer.eos_token_id is None:
        raise AiaynError(f"{where} has no end-of-sentence token </s>: {advice}")


def model_vocabulary(config) -> dict:
    """`check_tokenizer`'s `vocab_size` and `special_ids` as a model's config (an `AiaynConfig`) states them."""
    ids = {name: getattr(config, f"{name}_token_id") for name in ("pad", "eos", "bos")}
    return {"vocab_size": config.vocab_size, "special_ids": ids}


__all__ = ["SPECIAL_IDS", "SPECIAL_TOKENS", "check_tokenizer", "model_vocabulary"]
