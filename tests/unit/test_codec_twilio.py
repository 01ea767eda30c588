"""Twilio's codec as tables: Media Streams messages -> inputs, events -> media/mark/clear, bad input
-> counted and dropped (Twilio has no error message), a start without the secret -> closed."""

from __future__ import annotations

import base64
import json

import pytest

from voicebot.gateway.codec_twilio import CLOSE_UNAUTHORIZED, TwilioCodec, admits
from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.events import (
    Audio,
    AudioEnd,
    AudioFrame,
    Close,
    End,
    Error,
    Interrupted,
    Played,
    Reply,
    ReplyDelta,
    SessionStarted,
    Start,
    TranscriptFinal,
)
from voicebot.gateway.g711 import pcm16_to_ulaw, ulaw_to_pcm16
from voicebot.gateway.protocol import SessionStart

SETTINGS = GatewaySettings(twilio_secret="s3cret")
ULAW = pcm16_to_ulaw(b"\0\1" * 160)
PAYLOAD = base64.b64encode(ULAW).decode()
START = {"event": "start", "streamSid": "MZ1", "start": {
    "streamSid": "MZ1", "callSid": "CA1", "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000},
    "customParameters": {"secret": "s3cret", "language": "es", "caller": "+1555"}}}
BAD = Reply((), error="bad_request")


def started() -> TwilioCodec:
    codec = TwilioCodec(SETTINGS)
    codec.decode_text(json.dumps(START))
    return codec


def media(payload: str, track: str = "inbound") -> dict:
    return {"event": "media", "streamSid": "MZ1", "media": {"track": track, "payload": payload}}


def test_start_with_the_secret_opens_the_session_with_its_parameters_less_the_secret():
    codec = TwilioCodec(SETTINGS)
    assert codec.decode_text(json.dumps(START)) == [
        Start(SessionStart(None, "es", 8000), {"language": "es", "caller": "+1555"})]
    assert codec.stream_sid == "MZ1" and codec.call_sid == "CA1"


START_CASES = [
    ("a wrong secret closes the socket", {"customParameters": {"secret": "nope"}},
     [Close(CLOSE_UNAUTHORIZED, "unauthorized")]),
    ("no secret closes the socket", {"customParameters": {}}, [Close(CLOSE_UNAUTHORIZED, "unauthorized")]),
    ("another media format is counted, the call goes on",
     {"mediaFormat": {"encoding": "audio/x-l16", "sampleRate": 16000}},
     [BAD, Start(SessionStart(None, "es", 8000), {"language": "es", "caller": "+1555"})]),
    ("a language that is no code falls back to English", {"customParameters": {"secret": "s3cret",
                                                                               "language": "Spanish!!!"}},
     [Start(SessionStart(None, "en", 8000), {"language": "Spanish!!!"})]),
]


@pytest.mark.parametrize(("case", "change", "inputs"), START_CASES, ids=[c for c, _, _ in START_CASES])
def test_start_messages(case, change, inputs):
    message = json.loads(json.dumps(START))
    message["start"].update(change)
    assert TwilioCodec(SETTINGS).decode_text(json.dumps(message)) == inputs, case


def test_the_secret_in_the_url_stands_for_the_parameter():
    message = json.loads(json.dumps(START))
    message["start"]["customParameters"] = {}
    assert isinstance(TwilioCodec(SETTINGS, url_secret="s3cret").decode_text(json.dumps(message))[0], Start)


DECODED = [
    ("connected is Twilio's hello", {"event": "connected", "protocol": "Call"}, []),
    ("dtmf is ignored", {"event": "dtmf", "dtmf": {"digit": "1"}}, []),
    ("inbound media is the caller's audio", media(PAYLOAD), [Audio(ulaw_to_pcm16(ULAW))]),
    ("an outbound track echoed back is not the caller", media(PAYLOAD, "outbound"), []),
    ("a mark of ours reports playback", {"event": "mark", "mark": {"name": "t_abc:480"}},
     [Played("t_abc", 480)]),
    ("stop ends the call", {"event": "stop"}, [End()]),
    ("media without a payload", {"event": "media", "media": {}}, [BAD]),
    ("media that is not base64", media("%%%"), [BAD]),
    ("a mark not of ours", {"event": "mark", "mark": {"name": "hello"}}, [BAD]),
    ("an unknown event", {"event": "dance"}, [BAD]),
    ("a second start", START, [BAD]),
]


@pytest.mark.parametrize(("case", "message", "inputs"), DECODED, ids=[c for c, _, _ in DECODED])
def test_messages_after_start_decode_into_inputs(case, message, inputs):
    assert started().decode_text(json.dumps(message)) == inputs, case


@pytest.mark.parametrize("raw", ["not json", json.dumps(media("AAAA")), json.dumps({"event": "mark"})])
def test_anything_but_start_before_start_is_counted_and_dropped(raw):
    assert TwilioCodec(SETTINGS).decode_text(raw) == [BAD]


def test_binary_messages_are_not_twilios():
    assert not TwilioCodec.binary_audio and started().decode_bytes(b"\0\0") == [BAD]


def test_reply_audio_goes_as_ulaw_media_each_with_a_mark_where_it_ends():
    pcm = b"\0\1" * 160  # 20 ms at 8 kHz
    media_message, mark = (json.loads(m) for m in started().encode(AudioFrame("t_1", pcm, 40.0)))
    assert media_message == {"event": "media", "streamSid": "MZ1",
                             "media": {"payload": base64.b64encode(pcm16_to_ulaw(pcm)).decode()}}
    assert mark == {"event": "mark", "streamSid": "MZ1", "mark": {"name": "t_1:60"}}


def test_an_interrupt_clears_twilios_buffer_and_its_returned_marks_are_not_heard():
    codec = started()
    cleared = [json.loads(m) for m in codec.encode(Interrupted("t_1"))]
    assert cleared == [{"event": "clear", "streamSid": "MZ1"}]
    assert codec.decode_text(json.dumps({"event": "mark", "mark": {"name": "t_1:480"}})) == []
    later = codec.decode_text(json.dumps({"event": "mark", "mark": {"name": "t_2:480"}}))
    assert later == [Played("t_2", 480)]


@pytest.mark.parametrize("event", [SessionStarted("s_1", 8000, "audio"), TranscriptFinal("t_1", "Hi"),
                                   ReplyDelta("t_1", "Hello"), AudioEnd("t_1"), Error("overloaded", "busy")])
def test_the_phone_hears_audio_only(event):
    assert started().encode(event) == []


@pytest.mark.parametrize(("raw", "verdict"), [
    (json.dumps(START), True),  # the start with the secret admits the stream
    (json.dumps({"event": "connected", "protocol": "Call"}), None),  # Twilio's first message: wait
    (json.dumps({**START, "start": {**START["start"], "customParameters": {"secret": "nope"}}}), False),
    (json.dumps({"event": "start", "start": {}}), False),  # no secret at all
    (json.dumps({"event": "media", "media": {"payload": PAYLOAD}}), False),  # media before start
    ("not json", False),
    (json.dumps(["start"]), False),
])
def test_before_its_start_the_codec_judges_each_message_and_the_transport_reads_them(raw, verdict):
    assert admits(raw, SETTINGS) is verdict
