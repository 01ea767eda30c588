"""The instant fakes of make bench-gateway (tests/fakes/speech_servers.py). STT: a loud frame is
speech, and the first quiet frame after it ends the utterance at once, with its final: inside
the EndOfUtterance when the client asked for that, as the real STT sends a final it has. TTS:
each sentence's audio at once, started apart or on its first chunk, as the real TTS does."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fakes import speech_servers
from tests.stt_client import event_kind

RATE = 16000
QUIET = bytes(RATE // 50 * 2)
LOUD = (np.sin(np.arange(RATE // 50) / 3) * 8000).astype(np.int16).tobytes()


def kinds(events) -> list[str]:
    return [event_kind(event) for event in events]


@pytest.mark.parametrize("together", [False, True], ids=["final-apart", "final-inside"])
def test_the_first_quiet_frame_after_speech_ends_the_utterance_with_its_final(together):
    stream = speech_servers._Utterances(RATE, "a table for two", final_with_end=together)
    assert kinds(stream.feed(QUIET * 3 + LOUD[:100])) == []  # part of a frame waits for the rest
    assert kinds(stream.feed(LOUD[100:] + LOUD * 4)) == ["speech_started"]
    events = stream.feed(QUIET + QUIET)
    assert kinds(events) == (["end_of_utterance+final"] if together else ["end_of_utterance", "final"])
    final = events[0].end_of_utterance.final if together else events[1].transcript
    assert final.text == "a table for two" and final.is_final
    assert (final.start_ms, final.end_ms) == (60, 160)  # the onset at the fourth frame, the end at the ninth


@pytest.mark.parametrize("on_audio", [False, True], ids=["sentence-apart", "sentence-on-audio"])
def test_a_sentence_is_started_apart_or_on_its_first_chunk_as_the_client_asked(on_audio):
    events = speech_servers._speak("Sure, see you then.", 2, RATE, chunk_ms=100, with_audio=on_audio)
    kinds = [event.WhichOneof("event") for event in events]
    assert kinds == ([] if on_audio else ["sentence_started"]) + ["audio"] * 3 + ["sentence_done"]
    starts = [e.sentence_started for e in events if e.HasField("sentence_started")]
    starts += [e.audio.sentence for e in events if e.HasField("audio") and e.audio.HasField("sentence")]
    assert [(s.index, s.text) for s in starts] == [(2, "Sure, see you then.")]
    first_audio = next(e.audio for e in events if e.HasField("audio"))
    assert first_audio.HasField("sentence") == on_audio  # the sentence starts on its first chunk
    four_words = 4 * speech_servers.WORD_MS * RATE // 1000 * 2
    assert sum(len(e.audio.pcm16) for e in events if e.HasField("audio")) == four_words
