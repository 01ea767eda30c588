"""Every event the gateway sends on /v1/call validates against protocol v1's schema (real services)."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import numpy as np
import pytest

from tests.audio import silence, speech
from tests.integration.test_bargein import person
from voicebot.gateway import schema

pytestmark = pytest.mark.integration


async def test_every_event_of_a_session_validates(services, scripted_llm):
    server = jsonschema.Draft202012Validator(json.loads(schema.SCHEMA_PATH.read_text())["$defs"]["server"])
    async with person(services) as client:
        await client.ws.send("not json")
        await client.ws.send(json.dumps({"type": "input.text", "text": "Hello there."}))
        await client.until(lambda: client.has("turn.metrics"))
        client.say(np.concatenate([speech("A table for two, please."), silence(800)]))
        await client.until(lambda: sum(e["type"] == "turn.metrics" for e in client.events) >= 2, timeout=90)
        await asyncio.sleep(0.2)
        events = [e for e in client.events if e["type"] != "audio"]
    kinds = {e["type"] for e in events}
    assert {"error", "transcript.final", "reply.delta", "reply.done", "audio.start", "audio.end",
            "turn.metrics"} <= kinds
    for event in events:
        server.validate(event)
        schema.validate_server_event(json.dumps(event))
