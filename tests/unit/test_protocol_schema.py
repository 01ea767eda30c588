"""Protocol v1's JSON Schema: generated from voicebot/gateway/schema.py's models, and not stale."""

from __future__ import annotations

import json

import jsonschema
import pytest

from voicebot.gateway import schema


def test_the_committed_schema_is_the_generated_one():
    assert schema.SCHEMA_PATH.read_text() == schema.rendered(), \
        "run: .venv/bin/python -m voicebot.gateway.schema"


def validator(side: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(schema.SCHEMA_PATH.read_text())["$defs"][side])


def test_documented_client_messages_validate_and_wrong_ones_do_not():
    client = validator("client")
    client.validate({"type": "session.start", "session_id": None, "language": "en",
                     "audio": {"encoding": "pcm16", "sample_rate": 16000}})
    client.validate({"type": "playback.position", "turn_id": "t_1", "played_ms": 200})
    for wrong in ({"type": "session.start", "audio": {"sample_rate": 44100}}, {"type": "input.text"},
                  {"type": "nope"}):
        with pytest.raises(jsonschema.ValidationError):
            client.validate(wrong)


def test_server_events_validate_against_the_file_and_the_models():
    event = {"type": "turn.metrics", "turn_id": "t_1", "ms": {"endpoint": None, "stt": 30, "llm_ttft": 20,
                                                              "tts_ttfa": 40, "voice_to_voice": 300}}
    validator("server").validate(event)
    schema.validate_server_event(json.dumps(event))
    with pytest.raises(jsonschema.ValidationError):
        validator("server").validate({"type": "error", "code": "teapot", "message": ""})
