"""A change to a read-back, read by the model as a domain hook's fields.

When the caller changes what was read back in words the hook's rules cannot read, the model is
asked (over the turn's own prompt, so the LLM server's cache holds, plus one instruction after the
caller's words) for the hook's fields only, as JSON constrained by their schema. Code checks
them against the same schema; the hook then picks the tool and its arguments. The model never
names a tool or a reference here, so it cannot reuse an old slot for a new time.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from services.brain.hooks import ChangeFields, HookResult

# The model's fields are what was read back: it read no change into the words, so code asks.
UNCHANGED = HookResult()


def response_format(spec: ChangeFields) -> dict[str, Any]:
    """The hook's schema as the OpenAI response format (llama-server and vLLM constrain to it),
    its properties in the hook's order, the order the answer is written in. Not the state
    block's sorted order, though that would let the answer copy longer runs of the block's
    tokens (n-gram drafts): so asked, the 1.5B model read "Could we do eight instead" as no
    change in 3 of 3 sessions, twice (``make bench-v2v``, 2026-12-03), and as asked in this one."""
    return {"type": "json_schema", "json_schema": {"name": "change", "schema": spec.schema}}


def parse_fields(text: str, spec: ChangeFields) -> dict[str, Any]:
    """The model's answer, checked against the hook's schema; ValueError when it is not JSON, not
    an object, or outside the schema (a server that ignored the response format)."""
    fields = json.loads(text)  # json.JSONDecodeError is a ValueError
    try:
        jsonschema.validate(fields, spec.schema)
    except jsonschema.ValidationError as exc:
        raise ValueError(f"outside the schema: {exc.message}") from exc
    if not isinstance(fields, dict):
        raise ValueError("not a JSON object")
    return fields
