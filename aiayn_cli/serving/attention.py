"""`POST /v1/attention` of `aiayn serve`: one sentence's attention, as the explorer draws it.

The answer is what the offline explorer (`aiayn attention -f html`) embeds for a sentence
(`inspection.explorer.explorer_data`: the tokens, each target token's log-probability, every head's
weights of the three kinds, and eq. (1)'s raw scores), for the model's own translation of `text` or for
a `reference` (teacher forcing). The page at `/` draws it with the explorer's own code ("look inside").

Limits and errors are those of `/v1/translate` (413 for a body over the size limit, 400 for a body
that is not JSON, 422 with one line for the rest), plus a token limit per side
(`Limits.attention_max_tokens`): the answer grows with the square of the sentence's length.
"""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.concurrency import run_in_threadpool

from ..errors import AiaynError
from .limits import Limits
from .request_fields import decoding_overrides, request_fields
from .requests import check_text, request_names

SEARCH = ("num_beams", "length_penalty", "length_penalty_style", "max_len_a", "max_len_b")
AttentionRequest = create_model(
    "AttentionRequest",
    __config__=ConfigDict(extra="forbid", strict=True),  # as /v1/translate: "beam": "2" is refused
    __doc__="One sentence; the decoding options of `/v1/translate` for its translation (the model's by default).",
    text=(str, Field(description="One source sentence.")),
    reference=(
        str | None,
        Field(
            None,
            description="A reference translation: explained by teacher forcing instead of the model's translation.",
        ),
    ),
    **request_fields(SEARCH),  # the search's options, as /v1/translate takes them
)


class AttentionSentence(BaseModel):
    model_config = ConfigDict(extra="allow")

    source: str
    target: str = Field(description="The translation (or the reference) whose attention is shown.")
    source_tokens: list[str]
    target_tokens: list[str]
    kinds: dict = Field(description="encoder, decoder, cross: attention[layer][head][query][key], scores, value_norms.")


class AttentionResponse(BaseModel):
    about: str
    d_k: int
    sentences: list[AttentionSentence]


def check_attention_request(body: AttentionRequest, limits: Limits, translator) -> tuple[str, str | None]:
    """The sentence and reference, or `AiaynError` (422) naming the field and the limit it breaks."""
    sides = [("text", body.text)] + ([("reference", body.reference)] if body.reference is not None else [])
    for name, text in sides:
        if not text.strip():
            raise AiaynError(f"{name}: empty; give a sentence")
        check_text(name, text, limits)
        if "\n" in text.strip() or "\r" in text.strip():
            raise AiaynError(f"{name}: one sentence, on one line")
        tokenized = translator.tokenizer(text_target=text) if name == "reference" else translator.tokenizer(text)
        count = len(tokenized["input_ids"])
        if count > limits.attention_max_tokens:
            raise AiaynError(
                f"{name}: {count} tokens, more than the limit of {limits.attention_max_tokens} for attention"
            )
    return body.text.strip(), body.reference.strip() if body.reference is not None else None


def install_attention(app: FastAPI, translator, limits: Limits, errors: dict) -> None:
    """Add `POST /v1/attention` to `app`."""
    from ..inspection.explorer import explorer_data
    from ..inspection.extract import explain

    @app.post("/v1/attention", response_model=AttentionResponse, responses=errors)
    async def attention(body: AttentionRequest) -> dict:
        """One sentence's attention (every head, the three kinds) for its translation or a reference: the explorer's data."""
        if translator.engine.name != "torch":  # the weights live in CTranslate2, which gives no attention
            raise AiaynError(
                f"attention is read from aiayn's own decoder; this server decodes with {translator.engine.name}"
            )
        sentence, reference = check_attention_request(body, limits, translator)
        try:
            options = decoding_overrides(body)
            translator.decoding_options(**options)
        except AiaynError as err:
            raise AiaynError(request_names(err)) from None
        references = [reference] if reference is not None else None
        explanations = await run_in_threadpool(explain, translator, None, [sentence], references, **options)
        return explorer_data(explanations)


__all__ = ["AttentionRequest", "AttentionResponse", "check_attention_request", "install_attention"]
