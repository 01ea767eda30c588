"""StreamingSynthesize through real gRPC: the real service as a process (piper, and espeak-ng's
Korean for Korean streams), and the servicer in-process with a scripted engine for the failure
paths."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest

from tests.conftest import LOG_ROOT
from voicebot.common.audio import pcm16_to_float, read_wav
from voicebot.common.grpc_server import start_server
from voicebot.common.internal_auth import internal_channel
from voicebot.devstack import Stack
from voicebot.tts.config import TtsSettings
from voicebot.tts.engine import RenderStop, RenderStopped, TtsEngine
from voicebot.tts.server import TextToSpeechServicer
from voicebot.v1 import tts_pb2, tts_pb2_grpc

pytestmark = pytest.mark.integration

# One sentence of many clauses: rendered as many phrases (min 24 phonemes each).
# Shorter than the default (1000): every sentence here is longer, so the chunking is seen.
CHUNK_MS = 250
LONG_SENTENCE = ", ".join(
    f"then on day {n} we walk along the quiet river past the old mill and the bridge" for n in range(1, 13)
) + "."


class PiperProcess:
    def __init__(self, addr: str, metrics_port: int) -> None:
        self.addr = addr
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"

    async def metric(self, name: str) -> float:
        async with httpx.AsyncClient() as http:
            text = (await http.get(self.metrics_url)).text
        match = re.search(rf"^{name} (\S+)$", text, re.M)
        assert match, f"{name} not in /metrics"
        return float(match.group(1))


@pytest.fixture(scope="module")
def piper_tts():
    """The real TTS service (piper). Clauses are not cut by length here, nor is the first one
    cut early (tests/unit/test_segmenter.py has that rule), so LONG_SENTENCE stays one sentence
    of many phrases."""
    stack = Stack(LOG_ROOT / "tts", quiet=True)
    try:
        proc = stack.start_service("tts", "voicebot.tts.server", {
            "TTS_PORT": "0", "TTS_METRICS_PORT": "0", "TTS_MAX_CLAUSE_CHARS": "2000",
            "TTS_FIRST_CLAUSE_CHARS": "0", "TTS_CHUNK_MS": str(CHUNK_MS)})
        yield PiperProcess(f"127.0.0.1:{proc.ready['grpc']}", proc.ready["metrics"])
    finally:
        stack.stop()


def config(rate: int = 16000, language: str = "en", with_audio: bool = False) -> tts_pb2.SynthesizeRequest:
    return tts_pb2.SynthesizeRequest(config=tts_pb2.SynthesisConfig(
        sample_rate=rate, language=language, sentence_with_first_audio=with_audio))


def text(value: str) -> tts_pb2.SynthesizeRequest:
    return tts_pb2.SynthesizeRequest(text=value)


def record(event: tts_pb2.SynthesizeEvent) -> tuple:
    kind = event.WhichOneof("event")
    if kind == "sentence_started":
        return ("started", event.sentence_started.index, event.sentence_started.text)
    if kind == "audio":
        return ("audio", event.audio.sentence_index, len(event.audio.pcm16), event.audio.sample_rate)
    if kind == "sentence_done":
        return ("done", event.sentence_done.index, event.sentence_done.duration_ms)
    return ("error", event.error.sentence_index)


def as_records(event: tts_pb2.SynthesizeEvent) -> list[tuple]:
    """A chunk that starts its sentence (``sentence_with_first_audio``) reads as the
    SentenceStarted it stands for, then the chunk: the same record as with the two apart."""
    if event.WhichOneof("event") == "audio" and event.audio.HasField("sentence"):
        return [("started", event.audio.sentence.index, event.audio.sentence.text), record(event)]
    return [record(event)]


async def stream_events(addr: str, deltas: list[str], rate: int = 16000, language: str = "en",
                        with_audio: bool = False) -> list[tts_pb2.SynthesizeEvent]:
    async with internal_channel(addr) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)

        async def requests():
            yield config(rate, language, with_audio)
            for delta in deltas:
                yield text(delta)

        return [ev async for ev in stub.StreamingSynthesize(requests(), timeout=120)]


async def synthesize(addr: str, deltas: list[str], rate: int = 16000, language: str = "en",
                     with_audio: bool = False) -> list[tuple]:
    events = await stream_events(addr, deltas, rate, language, with_audio)
    return [r for event in events for r in as_records(event)]


def kinds(records: list[tuple]) -> list[str]:
    """Event kinds with runs of audio collapsed: ["started", "audio", "done", ...]."""
    out: list[str] = []
    for r in records:
        if not (r[0] == "audio" and out and out[-1] == "audio"):
            out.append(r[0])
    return out


# ---- the real service ----------------------------------------------------------------------

async def test_first_sentence_is_spoken_before_the_text_stream_ends(piper_tts):
    """Audio for sentence 0 arrives while the call is still open and no more text was sent."""
    async with internal_channel(piper_tts.addr) as channel:
        call = tts_pb2_grpc.TextToSpeechStub(channel).StreamingSynthesize(timeout=60)
        await call.write(config(24000))
        await call.write(text("Sure, I can do that. And"))
        first = [record(await asyncio.wait_for(call.read(), 30)) for _ in range(2)]
        assert first[0] == ("started", 0, "Sure, I can do that.")
        assert first[1][:2] == ("audio", 0)
        await call.write(text(" then we are done."))
        await call.done_writing()
        rest = []
        while (event := await call.read()) is not grpc.aio.EOF:
            rest.append(record(event))
    assert kinds(first + rest) == ["started", "audio", "done", "started", "audio", "done"]
    assert ("started", 1, "And then we are done.") in rest


@pytest.mark.parametrize("rate", [8000, 24000, 48000])
async def test_audio_comes_in_chunks_of_at_most_chunk_ms_at_the_asked_rate(piper_tts, rate):
    records = await synthesize(piper_tts.addr, ["It is $12.50 for 2. ", "See you at 7:30 pm!"], rate)
    audio = [r for r in records if r[0] == "audio"]
    assert {r[3] for r in audio} == {rate}
    assert max(r[2] for r in audio) <= rate * CHUNK_MS // 1000 * 2  # PCM16
    assert len(audio) > len({r[1] for r in audio})  # a sentence longer than a chunk came in several
    for done in (r for r in records if r[0] == "done"):
        sent = sum(r[2] for r in audio if r[1] == done[1]) // 2
        assert sent * 1000 // rate == done[2]
        assert done[2] > 500  # real speech, not a click


async def wait_metric(tts: PiperProcess, name: str, ok, timeout_s: float = 20.0) -> float:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await tts.metric(name)
        if ok(value) or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.05)


async def settled(tts: PiperProcess, name: str, quiet_s: float = 1.0, timeout_s: float = 30.0) -> float:
    """The counter's value once it has not moved for ``quiet_s`` (a render in flight has ended)."""
    deadline = time.monotonic() + timeout_s
    value, since = await tts.metric(name), time.monotonic()
    while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        if (now := await tts.metric(name)) != value:
            value, since = now, time.monotonic()
    return value


async def test_cancelling_mid_sentence_stops_synthesis(piper_tts):
    """The race this once lost on a busy machine: the phrase rendering when the cancel came
    used to run to its end (and count) after the call was gone. Now it is stopped mid-render.
    Bounds, not exact counts: how many phrases finish before the cancel reaches the server
    depends on the machine's load."""
    # How many phrases this sentence is when spoken to the end.
    before = await piper_tts.metric("voicebot_tts_phrases_total")
    whole = await synthesize(piper_tts.addr, [LONG_SENTENCE], 48000)
    phrases = await piper_tts.metric("voicebot_tts_phrases_total") - before
    assert kinds(whole) == ["started", "audio", "done"] and phrases >= 8

    before = await piper_tts.metric("voicebot_tts_phrases_total")
    stopped_before = await piper_tts.metric("voicebot_tts_renders_stopped_total")
    async with internal_channel(piper_tts.addr) as channel:
        call = tts_pb2_grpc.TextToSpeechStub(channel).StreamingSynthesize(timeout=60)
        await call.write(config(48000))
        await call.write(text(LONG_SENTENCE))
        await call.done_writing()
        while record(await call.read())[0] != "audio":
            pass
        at_cancel = await piper_tts.metric("voicebot_tts_phrases_total") - before
        call.cancel()  # mid-sentence: one phrase heard, the rest not made yet
    # The stream is closed at once, not when its generator is garbage-collected.
    assert await wait_metric(piper_tts, "voicebot_tts_active_streams", lambda v: v == 0) == 0
    made = await settled(piper_tts, "voicebot_tts_phrases_total") - before
    stopped = await piper_tts.metric("voicebot_tts_renders_stopped_total") - stopped_before
    # At most the render that was running when the cancel arrived finished after it (it was
    # then on its last graph nodes); every other one was stopped or never started.
    assert at_cancel >= 1
    assert made <= at_cancel + 2, (at_cancel, made)
    assert made < phrases / 2
    assert stopped <= 1
    await asyncio.sleep(0.5)
    assert await piper_tts.metric("voicebot_tts_phrases_total") - before == made  # nothing later


async def test_concurrent_calls_all_get_their_own_audio(piper_tts):
    texts = ["One table for two.", "Three people at eight, please.", "Is the terrace open?", "Thank you!"]
    results = await asyncio.gather(*(synthesize(piper_tts.addr, [t]) for t in texts))
    for sentence, records in zip(texts, results, strict=True):
        assert records[0] == ("started", 0, sentence)
        assert kinds(records) == ["started", "audio", "done"]


async def test_bad_config_is_rejected(piper_tts):
    # Config alone: text written after the server aborted can race the abort, and grpc-python
    # then reports the failed write (INTERNAL) instead of the server's status.
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await synthesize(piper_tts.addr, [], rate=11025)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# ---- a voice per language: the same service, Korean spoken by espeak-ng's Korean by default ----

KOREAN = "내일 저녁 일곱 시에 두 명 예약하고 싶어요."  # no comma: one phrase, as espeak-ng says it whole
ESPEAK_RATE = 22050
# One sentence of many clauses: a phrase each.
LONG_KOREAN = ", ".join(["우리는 조용한 강을 따라 오래된 방앗간과 다리를 지나 천천히 걸어요"] * 30) + "."


def espeak_says(sentence: str, voice: str, folder: Path) -> np.ndarray:
    """espeak-ng run here, on its own, into a WAV file: what its voice makes of ``sentence``."""
    path = folder / f"{voice}.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), sentence], check=True)
    pcm, rate = read_wav(path)
    assert rate == ESPEAK_RATE
    return pcm16_to_float(pcm)


def heard(events: list[tts_pb2.SynthesizeEvent]) -> np.ndarray:
    return pcm16_to_float(b"".join(e.audio.pcm16 for e in events if e.WhichOneof("event") == "audio"))


def likeness(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity over the shorter one's length: 1.0 is the same sound at any loudness."""
    n = min(len(a), len(b))
    a, b = a[:n].astype(np.float64), b[:n].astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def is_speech(audio: np.ndarray) -> bool:
    """Seconds of sound, not a click, silence, or a minute of noise."""
    return 1.0 < len(audio) / ESPEAK_RATE < 10 and float(np.sqrt(np.mean(audio ** 2))) > 0.02


async def test_a_korean_stream_is_spoken_by_the_korean_voice(piper_tts, tmp_path):
    reference = espeak_says(KOREAN, "ko", tmp_path)
    for language in ("ko", "ko-KR"):
        korean = heard(await stream_events(piper_tts.addr, [KOREAN], ESPEAK_RATE, language))
        assert is_speech(korean)
        # espeak-ng's Korean, sample for sample (levelled to full scale, so compared by shape).
        assert len(korean) == len(reference)
        assert likeness(korean, reference) > 0.99, language


async def test_an_english_stream_is_still_spoken_by_piper(piper_tts, tmp_path):
    korean_by_english = heard(await stream_events(piper_tts.addr, [KOREAN], ESPEAK_RATE, "en"))
    assert is_speech(korean_by_english)  # piper reads it (badly): another voice, as before
    assert likeness(korean_by_english, espeak_says(KOREAN, "ko", tmp_path)) < 0.5
    english = "We have a table for two at seven tonight."
    spoken = heard(await stream_events(piper_tts.addr, [english], ESPEAK_RATE, "en"))
    assert is_speech(spoken)
    assert likeness(spoken, espeak_says(english, "en-us", tmp_path)) < 0.5  # not espeak-ng's English


async def test_cancelling_a_korean_stream_stops_its_synthesis(piper_tts):
    before = await piper_tts.metric("voicebot_tts_phrases_total")
    whole = await synthesize(piper_tts.addr, [LONG_KOREAN], 48000, "ko")
    phrases = await piper_tts.metric("voicebot_tts_phrases_total") - before
    assert kinds(whole) == ["started", "audio", "done"] and phrases >= 20

    before = await piper_tts.metric("voicebot_tts_phrases_total")
    async with internal_channel(piper_tts.addr) as channel:
        call = tts_pb2_grpc.TextToSpeechStub(channel).StreamingSynthesize(timeout=60)
        await call.write(config(48000, "ko"))
        await call.write(text(LONG_KOREAN))
        await call.done_writing()
        while record(await call.read())[0] != "audio":
            pass
        call.cancel()  # one phrase heard, the rest waits behind the stream's flow control
    assert await wait_metric(piper_tts, "voicebot_tts_active_streams", lambda v: v == 0) == 0
    made = await settled(piper_tts, "voicebot_tts_phrases_total") - before
    assert 1 <= made < phrases / 2, (made, phrases)


def test_a_malformed_tts_voices_stops_the_service_at_its_start_naming_it():
    env = {**os.environ, "TTS_PORT": "0", "TTS_METRICS_PORT": "0", "TTS_VOICES": "ko=festival:ko"}
    ended = subprocess.run([sys.executable, "-m", "voicebot.tts.server"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert ended.returncode != 0
    assert "TTS_VOICES: 'ko=festival:ko': unknown kind 'festival'" in ended.stderr
    assert "Traceback" not in ended.stderr + ended.stdout


# ---- in-process, scripted engine -------------------------------------------------------------

class ScriptedEngine(TtsEngine):
    """One phrase per comma-separated piece, 50 ms of tone each; a piece containing FAIL raises."""

    sample_rate = 16000

    def __init__(self) -> None:
        self.split_texts: list[str] = []

    def split(self, text: str, urgent: bool = False) -> list[str]:
        self.split_texts.append(text)
        return [piece for piece in text.split(",") if piece.strip()]

    def render(self, phrase: str, stop: RenderStop | None = None) -> np.ndarray:
        if "FAIL" in phrase:
            raise RuntimeError("piper could not speak this")
        return np.full(800, 0.3, np.float32)


class BlockingEngine(ScriptedEngine):
    """Phrases containing HOLD render until their call's RenderStop is set (or 30 s pass)."""

    def __init__(self) -> None:
        super().__init__()
        self.rendering = threading.Event()
        self.rendered: list[str] = []
        self.stopped: list[str] = []

    def render(self, phrase: str, stop: RenderStop | None = None) -> np.ndarray:
        if "HOLD" in phrase:
            assert stop is not None
            released = threading.Event()
            unregister = stop.on_set(released.set)
            self.rendering.set()
            try:
                if released.wait(30):
                    self.stopped.append(phrase)
                    raise RenderStopped(phrase)
            finally:
                unregister()
        self.rendered.append(phrase.strip())
        return super().render(phrase, stop)


@pytest.fixture
async def scripted_tts(request):
    engine = getattr(request, "param", ScriptedEngine)()
    settings = TtsSettings(port=0, metrics_port=0, workers=2, first_clause_chars=0)  # whole sentences
    servicer = TextToSpeechServicer(settings, engine)

    def register(server):
        tts_pb2_grpc.add_TextToSpeechServicer_to_server(servicer, server)
        return [tts_pb2.DESCRIPTOR.services_by_name["TextToSpeech"].full_name]

    running = await start_server(settings, register)
    yield f"127.0.0.1:{running.port}", engine
    await running.server.stop(None)
    servicer.shutdown()


async def test_a_failed_sentence_is_reported_and_the_next_one_is_spoken(scripted_tts):
    addr, _engine = scripted_tts
    records = await synthesize(addr, ["First one. Then FAIL here. ", "And the last one."])
    assert kinds(records) == ["started", "audio", "done", "started", "error", "started", "audio", "done"]
    assert [r for r in records if r[0] in ("started", "error")] == [
        ("started", 0, "First one."), ("started", 1, "Then FAIL here."), ("error", 1),
        ("started", 2, "And the last one.")]


async def test_when_asked_a_sentence_starts_on_its_first_chunk_and_reads_the_same(scripted_tts):
    """``sentence_with_first_audio``: no SentenceStarted message; each sentence's first chunk
    carries it, with how long ago it started; the record is the same as with the two apart."""
    addr, _engine = scripted_tts
    deltas = ["Good start, then more, and the end. ", "Fine."]
    events = await stream_events(addr, deltas, with_audio=True)
    assert [e.WhichOneof("event") for e in events].count("sentence_started") == 0
    audio = [e.audio for e in events if e.WhichOneof("event") == "audio"]
    assert [(a.sentence_index, a.HasField("sentence")) for a in audio] == [
        (0, True), (0, False), (0, False), (1, True)]
    assert [(a.sentence.index, a.sentence.text) for a in audio if a.HasField("sentence")] == [
        (0, "Good start, then more, and the end."), (1, "Fine.")]
    assert all(0 <= a.sentence_started_ms_ago < 30_000 for a in audio if a.HasField("sentence"))
    assert [r for e in events for r in as_records(e)] == await synthesize(addr, deltas)


async def test_when_asked_a_failed_sentence_without_audio_is_never_started(scripted_tts):
    addr, _engine = scripted_tts
    told = await synthesize(addr, ["First one. Then FAIL here. ", "And the last one."], with_audio=True)
    assert kinds(told) == ["started", "audio", "done", "error", "started", "audio", "done"]
    assert [r for r in told if r[0] in ("started", "error")] == [
        ("started", 0, "First one."), ("error", 1), ("started", 2, "And the last one.")]


async def test_a_failure_after_the_first_phrase_stops_that_sentence_only(scripted_tts):
    addr, _engine = scripted_tts
    records = await synthesize(addr, ["Good start, then FAIL, never heard. Fine."])
    assert kinds(records) == ["started", "audio", "error", "started", "audio", "done"]


async def test_text_is_normalised_but_reported_as_written(scripted_tts):
    addr, engine = scripted_tts
    records = await synthesize(addr, ["**Sure**, it is $12.50. ", "**\n", "- Two *people* at 7:30 pm."])
    started = [r[2] for r in records if r[0] == "started"]
    assert started == ["**Sure**, it is $12.50.", "- Two *people* at 7:30 pm."]  # "**" alone: nothing to say
    assert engine.split_texts == ["Sure, it is twelve dollars fifty cents.",
                                  "Two people at seven thirty p m."]


async def test_korean_hours_and_counts_are_said_with_native_numbers_and_the_rest_kept(scripted_tts):
    addr, engine = scripted_tts
    await synthesize(addr, ["**네**, 7시 30분에 2명 예약했어요. 감사합니다!"], language="ko")
    assert engine.split_texts == ["네, 일곱 시 30분에 두 명 예약했어요.", "감사합니다!"]


@pytest.mark.parametrize("scripted_tts", [BlockingEngine], indirect=True)
async def test_cancel_stops_the_render_in_flight_and_nothing_more_is_rendered(scripted_tts):
    addr, engine = scripted_tts
    async with internal_channel(addr) as channel:
        call = tts_pb2_grpc.TextToSpeechStub(channel).StreamingSynthesize(timeout=60)
        await call.write(config())
        await call.write(text("first, HOLD this one, never, never either."))
        await call.done_writing()
        assert record(await call.read())[0] == "started"
        assert record(await call.read())[:2] == ("audio", 0)  # "first" was heard
        assert await asyncio.to_thread(engine.rendering.wait, 10)  # HOLD is on a worker now
        call.cancel()
        # The running render sees its stop (the engine's wait ends), quickly.
        for _ in range(200):
            if engine.stopped:
                break
            await asyncio.sleep(0.01)
    assert engine.stopped == [" HOLD this one"]
    await asyncio.sleep(0.3)
    assert engine.rendered == ["first"]  # nothing after the cancel
