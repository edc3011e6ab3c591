"""What one request to `aiayn serve` may hold, and how much its worker decodes at once."""

from __future__ import annotations

from dataclasses import dataclass

from ..decoding.defaults import BATCH_SIZE, MAX_TOKENS


@dataclass
class Limits:
    """Request limits (413 / 422 above them) and the batching budget of `aiayn serve`.

    Args:
        max_body_bytes: the largest request body (413 above).
        max_sentences: sentences per request (422 above).
        max_chars: characters per sentence (422 above).
        token_budget: source tokens of the waiting requests gathered into one round of decoding.
        max_tokens, batch_size: batches within a round, as `aiayn translate --max-tokens --batch-size`.
        attention_max_tokens: tokens of the sentence (and of its reference) of `/v1/attention` (422 above):
            its answer holds every head's weights, which grow with the square of the length.
    """

    max_body_bytes: int = 1_000_000
    max_sentences: int = 64
    max_chars: int = 2000
    token_budget: int = 4 * MAX_TOKENS
    max_tokens: int = MAX_TOKENS
    batch_size: int = BATCH_SIZE
    attention_max_tokens: int = 128
