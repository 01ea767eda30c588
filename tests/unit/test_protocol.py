"""WebSocket protocol v1 parsing: every malformed message maps to a documented error code."""

import pytest

from voicebot.gateway.protocol import (
    InputText,
    PlaybackPosition,
    ProtocolError,
    SessionStart,
    parse_client_text,
)


def test_session_start_defaults():
    assert parse_client_text('{"type":"session.start"}', 100) == SessionStart(None, "en", 16000)


@pytest.mark.parametrize(("raw", "code"), [
    ("not json", "bad_request"),
    ("[1, 2]", "bad_request"),
    ('{"type": 5}', "bad_request"),
    ('{"type": "nope"}', "bad_request"),
    ('{"type":"session.start","audio":{"sample_rate":44100}}', "bad_request"),
    ('{"type":"session.start","audio":{"encoding":"opus"}}', "bad_request"),
    ('{"type":"session.start","session_id":7}', "bad_request"),
    ('{"type":"input.text","text":"   "}', "bad_request"),
    ('{"type":"input.text","text":"' + "x" * 101 + '"}', "payload_too_large"),
    ('{"type":"playback.position","turn_id":"t","played_ms":-1}', "bad_request"),
    ("[" * 100000, "bad_request"),
])
def test_bad_messages(raw, code):
    with pytest.raises(ProtocolError) as error:
        parse_client_text(raw, 100)
    assert error.value.code == code


def test_good_messages():
    assert parse_client_text('{"type":"input.text","text":" hi "}', 100) == InputText("hi")
    assert parse_client_text('{"type":"playback.position","turn_id":"t1","played_ms":40}', 100) == \
        PlaybackPosition("t1", 40)
