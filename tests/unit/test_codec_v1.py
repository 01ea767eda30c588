"""Protocol v1's codec as tables: client message -> inputs, event -> messages, bad input -> error."""

from __future__ import annotations

import json

import pytest

from voicebot.gateway.codec_v1 import V1Codec
from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.events import (
    Audio,
    AudioEnd,
    AudioFrame,
    AudioStart,
    End,
    Error,
    Interrupted,
    Played,
    Reply,
    ReplyCancelled,
    ReplyDelta,
    ReplyDone,
    Say,
    SessionStarted,
    Speech,
    Start,
    TranscriptFinal,
    TranscriptPartial,
    TurnMetrics,
    TurnOver,
)
from voicebot.gateway.protocol import SessionStart

CODEC = V1Codec(GatewaySettings(max_text_chars=20, max_message_bytes=200))

DECODED = [
    ({"type": "session.start"}, [Start(SessionStart(None, "en", 16000, "audio"))]),
    ({"type": "session.start", "session_id": "s_1", "language": "DE", "audio": {"sample_rate": 8000},
      "output": "text"}, [Start(SessionStart("s_1", "de", 8000, "text"))]),
    ({"type": "input.text", "text": "  When do you open? "}, [Say("When do you open?")]),
    ({"type": "playback.position", "turn_id": "t_1", "played_ms": 480}, [Played("t_1", 480)]),
    ({"type": "session.end"}, [End()]),
]


@pytest.mark.parametrize(("message", "inputs"), DECODED, ids=[json.dumps(m)[:60] for m, _ in DECODED])
def test_client_messages_decode_into_inputs(message, inputs):
    assert CODEC.decode_text(json.dumps(message)) == inputs


BAD = [
    ("not json", "bad_request"),
    ("[1, 2]", "bad_request"),
    (json.dumps({"type": "dance"}), "bad_request"),
    (json.dumps({"type": "session.start", "audio": {"sample_rate": 11025}}), "bad_request"),
    (json.dumps({"type": "session.start", "output": "video"}), "bad_request"),
    (json.dumps({"type": "input.text", "text": " "}), "bad_request"),
    (json.dumps({"type": "input.text", "text": "x" * 21}), "payload_too_large"),
    (json.dumps({"type": "playback.position", "turn_id": "t_1", "played_ms": -1}), "bad_request"),
    (json.dumps({"type": "input.text", "text": "x" * 300}), "payload_too_large"),  # over max_message_bytes
]


@pytest.mark.parametrize(("raw", "code"), BAD, ids=[raw[:40] for raw, _ in BAD])
def test_bad_messages_get_the_documented_error(raw, code):
    [reply] = CODEC.decode_text(raw)
    assert isinstance(reply, Reply) and reply.error == code
    [frame] = reply.frames
    assert json.loads(frame)["type"] == "error" and json.loads(frame)["code"] == code


def test_binary_messages_are_the_callers_audio_as_it_is():
    assert CODEC.binary_audio and CODEC.decode_bytes(b"\1\0" * 4) == [Audio(b"\1\0" * 4)]


ENCODED = [
    (SessionStarted("s_1", 16000, "audio"),
     [{"type": "session.started", "session_id": "s_1", "audio": {"encoding": "pcm16", "sample_rate": 16000},
       "output": "audio"}]),
    (TranscriptPartial("When do"), [{"type": "transcript.partial", "turn_id": "", "text": "When do"}]),
    (TranscriptFinal("t_1", "When do you open?"),
     [{"type": "transcript.final", "turn_id": "t_1", "text": "When do you open?"}]),
    (ReplyDelta("t_1", "At noon."), [{"type": "reply.delta", "turn_id": "t_1", "text": "At noon."}]),
    (ReplyDone("t_1", "At noon."), [{"type": "reply.done", "turn_id": "t_1", "text": "At noon."}]),
    (AudioStart("t_1"), [{"type": "audio.start", "turn_id": "t_1"}]),
    (AudioFrame("t_1", b"\1\2\3\4", 40.0), [b"\1\2\3\4"]),
    (AudioEnd("t_1"), [{"type": "audio.end", "turn_id": "t_1"}]),
    (Interrupted("t_1"), [{"type": "interrupt", "turn_id": "t_1"}]),
    (TurnMetrics("t_1", {"total": 420, "tts": None}),
     [{"type": "turn.metrics", "turn_id": "t_1", "ms": {"total": 420, "tts": None}}]),
    (Error("rate_limited", "slow down", "t_1"),
     [{"type": "error", "code": "rate_limited", "message": "slow down"}]),
    (TurnOver("t_1", "completed"), []),
    (ReplyCancelled("t_1"), []),
    (Speech(True, 120), []),
]


@pytest.mark.parametrize(("event", "messages"), ENCODED, ids=[type(e).__name__ for e, _ in ENCODED])
def test_events_encode_as_v1_messages(event, messages):
    out = CODEC.encode(event)
    assert [m if isinstance(m, bytes) else json.loads(m) for m in out] == messages
