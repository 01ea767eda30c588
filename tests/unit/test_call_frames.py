"""A call's frame sink (``Conversation.audio_now``, voicebot/gateway/ws_direct.py): which audio
frames it takes where the socket reads them, and which it leaves to the awaited path (that answers errors and
weighs a barge-in), as a table of cases."""

from __future__ import annotations

import pytest

from tests.unit.test_bargein_logic import FakeBrain, FakeTts, make_call

FRAME = b"\x00\x01" * 320  # 20 ms at 16 kHz


def no_session(call):
    call.session = None


def oversized(call):
    return b"\x00" * (call.settings.max_audio_frame_bytes + 2)


def barge_in_pending(call):
    call.turns.barge_in.speech_started(1, 0, audible_turn="t1", received_ms=0, now=0.0)


def stt_queue_full(call):
    assert call.audio_now(FRAME)  # the link is open
    call.speech.stt.would_drop = lambda: True


@pytest.mark.parametrize(("case", "prepare", "taken"), [
    ("a frame of a started session", None, True),
    ("audio before session.start: an error to answer", no_session, False),
    ("a frame over the size limit: an error to answer", oversized, False),
    ("a barge-in is being weighed", barge_in_pending, False),
    ("STT's queue is full: rate_limited to answer", stt_queue_full, False),
])
async def test_which_frames_the_sink_takes(case, prepare, taken):
    call, _ws = make_call(FakeBrain(), FakeTts())
    frame = (prepare and prepare(call)) or FRAME
    stt_before = call.speech.stt
    frames_before = len(stt_before.outbox) if stt_before else 0
    assert call.audio_now(frame) is taken, case
    if taken:
        assert call.speech.stt is not None and len(call.speech.stt.outbox) == frames_before + 1
    elif stt_before is not None:
        assert len(stt_before.outbox) == frames_before  # declined: nothing was done with it
    await call.close()
