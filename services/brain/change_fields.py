"""A change to a read-back, read by the model as a domain hook's fields.

When the caller changes what was read back in words the hook's rules cannot read, the model is
asked (over the turn's own prompt, so the LLM server's cache holds, plus one instruction after the
caller's words) for the hook's fields only, as JSON constrained by their schema. Code checks
them against the same schema; the hook then picks the tool and its arguments. The model never
names a tool or a reference here, so it cannot reuse an old slot for a new time.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import jsonschema

from services.brain.hooks import ChangeFields
from services.brain.llm import ChatFunction, LLMRequestError, LLMUnavailable

log = logging.getLogger("brain.change_fields")


async def ask_change_fields(chat: ChatFunction, messages: list[dict[str, Any]],
                            tools: list[dict[str, Any]] | None, spec: ChangeFields,
                            record: dict[str, Any]) -> dict[str, Any] | None:
    """The fields the model read from the caller's change, checked; None when it gave none we
    can use (the server down, no JSON, JSON outside the schema). ``record`` gets the call's
    figures. ``tools`` are sent as in the turn's other calls: they are part of the cached prefix."""
    started = time.perf_counter()
    parts: list[str] = []
    record.update(purpose="change_fields", messages=len(messages))
    try:
        async for chunk in chat(messages, tools=tools, max_tokens=spec.max_tokens, response_format={
                "type": "json_schema", "json_schema": {"name": "change", "schema": spec.schema}}):
            parts.append(chunk.text)
            if chunk.usage:
                record.update(prompt_tokens=chunk.usage.get("prompt_tokens"),
                              completion_tokens=chunk.usage.get("completion_tokens"))
            if chunk.timings:
                record.update(cached_tokens=chunk.timings.get("cache_n"),
                              prefill_tokens=chunk.timings.get("prompt_n"))
        fields = json.loads("".join(parts))
        jsonschema.validate(fields, spec.schema)
    except (LLMUnavailable, LLMRequestError, ValueError, jsonschema.ValidationError) as exc:
        # ValueError covers JSON that does not parse; the turn goes on without the fields.
        log.info("no usable change fields from the model", extra={"error": str(exc)[:200]})
        record["error"] = str(exc)[:200]
        return None
    finally:
        record["ms"] = round((time.perf_counter() - started) * 1000)
    if not isinstance(fields, dict):
        record["error"] = "not a JSON object"
        return None
    record["fields"] = fields
    return fields
