"""The OpenAI Realtime API's codec as tables: client events -> inputs (and replies), the
conversation's events -> server events, bad events -> ``invalid_request_error`` with its code.
Server events carry random ``event_id``s: compared without them."""

from __future__ import annotations

import base64
import json

import pytest

from voicebot.gateway.codec_realtime import COMMIT_SILENCE_MS, RealtimeCodec
from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.events import (
    Audio,
    AudioEnd,
    AudioFrame,
    AudioStart,
    Cancel,
    Commit,
    Configure,
    Error,
    Interrupted,
    Reply,
    ReplyCancelled,
    ReplyDelta,
    ReplyDone,
    Say,
    SessionStarted,
    Speech,
    TranscriptFinal,
    TranscriptPartial,
    Truncated,
    TurnMetrics,
    TurnOver,
)
from voicebot.gateway.g711 import pcm16_to_ulaw, ulaw_to_pcm16
from voicebot.gateway.protocol import SessionStart

SETTINGS = GatewaySettings(max_text_chars=20, max_audio_frame_bytes=100)


def codec() -> RealtimeCodec:
    c = RealtimeCodec(SETTINGS)
    c.encode(SessionStarted("s_1", 24000, "audio"))
    return c


def kinds(frames) -> list[str]:
    return [json.loads(f)["type"] for f in frames]


def error_of(inputs) -> tuple[str, str | None, str | None]:
    """(code, param, event_id) of the one error among the inputs' frames."""
    frames = [f for i in inputs for f in (i.frames if isinstance(i, Reply) else i.refused)]
    [error] = [json.loads(f)["error"] for f in frames if json.loads(f)["type"] == "error"]
    assert error["type"] == "invalid_request_error"
    return error["code"], error["param"], error["event_id"]


def test_the_session_opens_at_connect_in_openais_default_format():
    c = RealtimeCodec(SETTINGS)
    assert c.opening() == [SessionStart(None, "en", 24000)] and c.output_rate == 24000
    [created] = c.encode(SessionStarted("s_1", 24000, "audio"))
    session = json.loads(created)["session"]
    assert session["id"] == "s_1"
    assert session["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}


UPDATES = [
    ("GA formats and language", {"audio": {"input": {"format": {"type": "audio/pcmu"},
                                                     "transcription": {"language": "DE"}},
                                           "output": {"format": {"type": "audio/pcma"}}}},
     Configure("de", 8000, 8000, False)),
    ("beta names",
     {"input_audio_format": "g711_ulaw", "output_audio_format": "pcm16", "modalities": ["text"]},
     Configure("en", 8000, 24000, True)),
    ("nothing new", {}, Configure("en", 24000, 24000, False)),
]


@pytest.mark.parametrize(("case", "session", "configure"), UPDATES, ids=[c for c, _, _ in UPDATES])
def test_session_update_configures_the_conversation_and_answers_with_the_session_in_effect(case, session,
                                                                                          configure):
    inputs = codec().decode_text(json.dumps({"type": "session.update", "session": session}))
    assert inputs[0] == configure, case
    assert isinstance(inputs[1], Reply) and kinds(inputs[1].frames) == ["session.updated"]


def test_append_decodes_its_format_and_cuts_it_into_frames():
    c = codec()
    pcm = bytes(range(250))
    inputs = c.decode_text(json.dumps({"type": "input_audio_buffer.append",
                                       "audio": base64.b64encode(pcm).decode()}))
    assert inputs == [Audio(pcm[:100]), Audio(pcm[100:200]), Audio(pcm[200:250])]
    c.decode_text(json.dumps({"type": "session.update", "session": {"input_audio_format": "g711_ulaw"}}))
    ulaw = pcm16_to_ulaw(b"\0\1" * 20)
    appended = c.decode_text(json.dumps({"type": "input_audio_buffer.append",
                                         "audio": base64.b64encode(ulaw).decode()}))
    assert appended == [Audio(ulaw_to_pcm16(ulaw))]


def test_a_typed_message_then_response_create_is_a_typed_turn():
    c = codec()
    [reply] = c.decode_text(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "When do you open?"}]}}))
    assert kinds(reply.frames) == ["conversation.item.added", "conversation.item.done"]
    assert c.decode_text(json.dumps({"type": "response.create"})) == [Say("When do you open?")]
    assert error_of(c.decode_text(json.dumps({"type": "response.create"})))[0] == "no_input"


def test_conditional_events_carry_their_answers():
    c = codec()
    [commit] = c.decode_text(json.dumps({"type": "input_audio_buffer.commit", "event_id": "e1"}))
    assert isinstance(commit, Commit) and commit.silence_ms == COMMIT_SILENCE_MS
    assert error_of([commit]) == ("input_audio_buffer_commit_empty", None, "e1")
    [cancel] = c.decode_text(json.dumps({"type": "response.cancel"}))
    assert isinstance(cancel, Cancel) and error_of([cancel])[0] == "response_cancel_not_active"
    [truncate] = c.decode_text(json.dumps({"type": "conversation.item.truncate", "item_id": "item_t_1",
                                           "content_index": 0, "audio_end_ms": 640}))
    assert isinstance(truncate, Truncated) and (truncate.turn_id, truncate.played_ms) == ("t_1", 640)
    assert kinds(truncate.done) == ["conversation.item.truncated"]
    assert error_of([truncate])[:2] == ("item_not_found", "item_id")
    [clear] = c.decode_text(json.dumps({"type": "input_audio_buffer.clear"}))
    assert kinds(clear.frames) == ["input_audio_buffer.cleared"]


BAD = [
    ("not json", "invalid_json", None),
    ("[]", "invalid_value", None),
    (json.dumps({"type": "dance", "event_id": "e7"}), "unknown_event", "type"),
    (json.dumps({"type": "session.update"}), "invalid_value", "session"),
    (json.dumps({"type": "session.update", "session": {"input_audio_format": "mp3"}}),
     "unsupported_audio_format", "session.audio.input.format"),
    (json.dumps({"type": "session.update", "session": {"audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 16000}}}}}), "unsupported_audio_format",
     "session.audio.input.format.rate"),
    (json.dumps({"type": "session.update", "session": {"output_modalities": ["video"]}}), "invalid_value",
     "session.output_modalities"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "%%%"}), "invalid_value", "audio"),
    (json.dumps({"type": "conversation.item.create", "item": {"role": "assistant", "content": []}}),
     "invalid_value", "item"),
    (json.dumps({"type": "conversation.item.create", "item": {"role": "user", "content": [
        {"type": "input_text", "text": "x" * 21}]}}), "payload_too_large", None),
    (json.dumps({"type": "conversation.item.truncate", "item_id": "msg_1", "audio_end_ms": 1}),
     "invalid_value", "item_id"),
    (json.dumps({"type": "conversation.item.truncate", "item_id": "item_t_1", "audio_end_ms": -1}),
     "invalid_value", "audio_end_ms"),
]


@pytest.mark.parametrize(("raw", "code", "param"), BAD, ids=[raw[:50] for raw, _, _ in BAD])
def test_bad_events_get_an_invalid_request_error(raw, code, param):
    inputs = codec().decode_text(raw)
    assert len(inputs) == 1 and isinstance(inputs[0], Reply) and inputs[0].error == "bad_request"
    assert error_of(inputs)[:2] == (code, param)


def test_binary_messages_are_not_part_of_the_api():
    assert not RealtimeCodec.binary_audio and error_of(codec().decode_bytes(b"\0\0"))[0] == "invalid_event"


RESPONSE_OPENS = ["response.created", "response.output_item.added", "conversation.item.added",
                  "response.content_part.added"]
RESPONSE_CLOSES = ["response.output_audio_transcript.done", "response.content_part.done",
                   "response.output_item.done", "response.done"]
# A turn's events in order, and the server events each becomes.
TURN = [
    (Speech(True, 0), ["input_audio_buffer.speech_started"]),
    (TranscriptPartial("When do"), ["conversation.item.input_audio_transcription.delta"]),
    (Speech(False, 0), ["input_audio_buffer.speech_stopped"]),
    (TranscriptFinal("t_1", "When do you open?"),
     ["input_audio_buffer.committed", "conversation.item.added", "conversation.item.done",
      "conversation.item.input_audio_transcription.completed", *RESPONSE_OPENS]),
    (ReplyDelta("t_1", "At noon."), ["response.output_audio_transcript.delta"]),
    (AudioStart("t_1"), []),
    (AudioFrame("t_1", b"\0\0" * 480), ["response.output_audio.delta"]),
    (ReplyDone("t_1", "At noon."), ["response.output_audio_transcript.done"]),
    (AudioEnd("t_1"), ["response.output_audio.done"]),
    (TurnMetrics("t_1", {"total": 400}), RESPONSE_CLOSES[1:]),
    (TurnOver("t_1", "completed"), []),
]


def test_a_spoken_turn_is_one_response():
    c = codec()
    for event, expected in TURN:
        assert kinds(c.encode(event)) == expected, event
    done = json.loads(c.encode(TurnMetrics("t_1", {}))[-1]) if c._response else None
    assert done is None  # closed once


ENDINGS = [
    ("a barge-in cancels it", Interrupted("t_1"), "cancelled", "turn_detected"),
    ("the client's cancel", ReplyCancelled("t_1"), "cancelled", "client_cancelled"),
    ("a failed turn", TurnOver("t_1", "error"), "failed", None),
]


@pytest.mark.parametrize(("case", "event", "status", "reason"), ENDINGS, ids=[c for c, *_ in ENDINGS])
def test_how_a_response_ends(case, event, status, reason):
    c = codec()
    c.encode(ReplyDelta("t_1", "At noon"))
    frames = c.encode(event)
    assert kinds(frames) == ["response.output_audio_transcript.done", "response.output_audio.done",
                             *RESPONSE_CLOSES[1:]], case
    response = json.loads(frames[-1])["response"]
    assert response["status"] == status and response.get("status_details", {}).get("reason") == reason
    assert c.encode(event) == []  # nothing left to end


def test_an_error_in_the_turn_fails_its_response_and_speaks_the_openai_error_type():
    c = codec()
    c.encode(AudioStart("t_1"))
    [error] = c.encode(Error("upstream_unavailable", "the assistant is unavailable", "t_1"))
    assert json.loads(error)["error"]["type"] == "server_error"
    assert json.loads(c.encode(AudioEnd("t_1"))[-1])["response"]["status"] == "failed"
    [limited] = codec().encode(Error("rate_limited", "slow down"))
    assert json.loads(limited)["error"]["type"] == "rate_limit_error"


def test_a_language_the_business_does_not_speak_is_openais_invalid_value_on_the_language():
    [error] = codec().encode(Error("unsupported_language", "language 'fr' is not one this business speaks"))
    body = json.loads(error)["error"]
    assert (body["type"], body["code"]) == ("invalid_request_error", "invalid_value")
    assert body["param"] == "session.audio.input.transcription.language"


def test_audio_goes_in_the_sessions_output_format():
    c = codec()
    c.decode_text(json.dumps({"type": "session.update", "session": {"output_audio_format": "g711_ulaw"}}))
    pcm = b"\0\1" * 80
    *_, delta = c.encode(AudioFrame("t_1", pcm))
    assert base64.b64decode(json.loads(delta)["delta"]) == pcm16_to_ulaw(pcm)


def test_speech_times_count_from_the_clients_first_append():
    c = codec()
    c.decode_text(json.dumps({"type": "input_audio_buffer.append",
                              "audio": base64.b64encode(bytes(48000)).decode()}))  # 1 s at 24 kHz
    [started] = c.encode(Speech(True, 300))
    assert json.loads(started)["audio_start_ms"] == 700
