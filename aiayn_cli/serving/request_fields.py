"""The decoding fields of a request to `aiayn serve`, generated from `DecodingOptions` (the one
definition of the options: `aiayn_cli/decoding/defaults.py`): `/v1/translate` takes them all,
`/v1/attention` the search's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, Field

from ..decoding.defaults import DecodingOptions, decoding_flags, given_options


def request_fields(names: Iterable[str] | None = None) -> dict[str, Any]:
    """`create_model` field definitions for the options `names` (all by default): each named as its flag
    without dashes (`beam`, `top_k`), None by default (the model's generation_config decides), with the
    option's bounds (and the server's own, `request_high`) and help."""
    types = get_type_hints(DecodingOptions)
    chosen = set(names) if names is not None else None
    fields: dict[str, Any] = {}
    for name, spec in decoding_flags().items():
        if chosen is not None and name not in chosen:
            continue
        kind = Literal[spec.choices] if spec.choices else types[name]  # type: ignore[valid-type]
        if kind is bool:
            fields[spec.request_name] = (bool, Field(False, description=spec.help))
            continue
        bounds = {"gt" if spec.above_low else "ge": spec.low, "le": spec.request_high or spec.high}
        bounds = {key: value for key, value in bounds.items() if value is not None}
        if types[name] in (float, float | None):
            bounds["allow_inf_nan"] = False
        fields[spec.request_name] = (kind | None, Field(None, description=spec.help, **bounds))
    return fields


# The request's field for each option: its flag without dashes (`num_beams` -> `beam`).
REQUEST_FIELDS = {name: spec.request_name for name, spec in decoding_flags().items()}


def decoding_overrides(request: BaseModel) -> dict:
    """The `DecodingOptions` overrides a request gives (those among its fields), checked as the command
    line checks them (`given_options`)."""
    values = {name: getattr(request, field) for name, field in REQUEST_FIELDS.items() if hasattr(request, field)}
    return given_options(values)
