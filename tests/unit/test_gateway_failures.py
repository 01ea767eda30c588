"""Every failure is heard, and told once: STT refusing or down, TTS failing mid-reply, the brain
failing (scripted upstreams, no network). The socket stays open and the next turn works."""

from __future__ import annotations

import asyncio

import grpc

from tests.unit.test_bargein_logic import FRAME, FakeBrain, FakeCall, FakeTts, make_call, until
from voicebot.gateway.stt_link import Backoff
from voicebot.v1 import brain_pb2, tts_pb2

RATE = 16000


def rpc_error(code: grpc.StatusCode, details: str = "scripted") -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class RefusingStt:
    """Every stream is refused at once, as the real STT does at its stream cap."""

    def __init__(self, code: grpc.StatusCode) -> None:
        self.code, self.opened = code, 0

    def StreamingRecognize(self, requests, timeout=None, metadata=None):
        self.opened += 1

        async def events():
            raise rpc_error(self.code)
            yield  # an async generator

        return events()


class FailingTts(FakeTts):
    """Speaks the first sentence, then fails (TTS killed mid-reply); ``fail`` off: works again."""

    def __init__(self) -> None:
        super().__init__(audio_ms=300)
        self.fail = True

    def StreamingSynthesize(self, requests, timeout=None, metadata=None):
        if not self.fail:
            return super().StreamingSynthesize(requests, timeout, metadata)

        async def events():
            async for request in requests:
                if request.WhichOneof("request") == "text":
                    chunk = tts_pb2.AudioChunk(pcm16=b"\0" * 3200, sample_rate=RATE)
                    yield tts_pb2.SynthesizeEvent(audio=chunk)
                    raise rpc_error(grpc.StatusCode.UNAVAILABLE, "tts went away")

        return FakeCall(events())


class DownBrain(FakeBrain):
    def __init__(self) -> None:
        super().__init__()
        self.down = True

    def Respond(self, request, timeout=None, metadata=None):
        if not self.down:
            return super().Respond(request, timeout, metadata)
        self.requests.append(request)

        async def events():
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, "brain went away")
            yield

        return FakeCall(events())


def errors(ws) -> list[str]:
    return [e["code"] for e in ws.sent if isinstance(e, dict) and e["type"] == "error"]


async def test_a_refused_stt_stream_is_retried_with_backoff_and_told_once():
    call, ws = make_call(FakeBrain(), FakeTts())
    stt = RefusingStt(grpc.StatusCode.RESOURCE_EXHAUSTED)
    call.upstreams.stt = stt
    for _ in range(50):  # a second of audio, frame by frame
        await call.speech.on_audio(FRAME)
        await asyncio.sleep(0.02)
    await until(lambda: "audio.end" in ws.kinds())

    assert errors(ws) == ["overloaded"]  # once, not once per frame
    assert 2 <= stt.opened <= 10  # retried, with backoff (0.2 s doubling): not 50 times
    assert ws.kinds()[-3:] == ["audio.start", "audio", "audio.end"]  # and it was said out loud
    await call.close()


async def test_stt_down_is_told_once_as_upstream_unavailable():
    call, ws = make_call(FakeBrain(), FakeTts())
    call.upstreams.stt = RefusingStt(grpc.StatusCode.UNAVAILABLE)
    for _ in range(20):
        await call.speech.on_audio(FRAME)
        await asyncio.sleep(0.02)
    assert errors(ws) == ["upstream_unavailable"]
    await call.close()


def test_the_backoff_is_bounded():
    assert max(Backoff().delay(n) for n in range(100)) <= 5.0


async def test_tts_failing_mid_reply_sends_the_error_then_a_fallback_and_the_next_turn_works():
    tts = FailingTts()
    call, ws = make_call(FakeBrain(), tts)
    call.start_turn("When do you open?", _timings())
    await until(lambda: "audio.end" in ws.kinds())
    kinds = ws.kinds()
    # The error comes before any audio.end; the fallback follows on the same turn's audio.
    assert kinds.index("error") < kinds.index("audio.end")
    assert kinds.count("audio.start") == 1
    assert errors(ws) == ["upstream_unavailable"]
    error_at = next(i for i, e in enumerate(ws.sent) if isinstance(e, dict) and e["type"] == "error")
    after_error = ws.sent[error_at:]
    assert sum(n for n in after_error if isinstance(n, int)) > RATE * 2 * 0.3  # ~0.4 s of chime at least

    tts.fail = False
    ws.sent.clear()
    call.start_turn("And on Sunday?", _timings())
    await until(lambda: "turn.metrics" in ws.kinds())
    assert "error" not in ws.kinds()
    await call.close()


async def test_the_brain_down_is_heard_and_the_next_turn_works():
    brain = DownBrain()
    call, ws = make_call(brain, FakeTts())
    call.start_turn("Hello?", _timings())
    await until(lambda: "audio.end" in ws.kinds())
    assert ws.kinds() == ["error", "audio.start", "audio", "audio.end"]
    brain.down = False
    ws.sent.clear()
    call.start_turn("Hello again", _timings())
    await until(lambda: "turn.metrics" in ws.kinds())
    assert "error" not in ws.kinds() and "reply.done" in ws.kinds()
    await call.close()


class ResetAfterFinal(FakeBrain):
    """The whole reply and its final, then the call's end reported as INTERNAL: what grpc.aio
    says when the server ends the call under the client's last write (grpc/grpc#36066)."""

    def Respond(self, request, timeout=None, metadata=None):
        whole = super().Respond(request, timeout, metadata)

        async def events():
            async for event in whole:
                yield event
            raise rpc_error(grpc.StatusCode.INTERNAL, "Internal error from Core")

        return FakeCall(events())


async def test_an_error_after_the_brains_final_is_not_the_turns():
    call, ws = make_call(ResetAfterFinal(), FakeTts())
    call.start_turn("Hello?", _timings())
    await until(lambda: "turn.metrics" in ws.kinds())

    assert "error" not in ws.kinds()
    [done] = [e for e in ws.sent if isinstance(e, dict) and e["type"] == "reply.done"]
    assert done["text"] == "Sure, see you then."
    assert call.turns.history_settled()  # the turn is stored: the next may read ahead
    await call.close()


async def test_an_error_before_the_brains_final_is_still_heard():
    class ResetBeforeFinal(FakeBrain):
        def Respond(self, request, timeout=None, metadata=None):
            async def events():
                yield brain_pb2.RespondEvent(delta=brain_pb2.TextDelta(text="Sure, "))
                raise rpc_error(grpc.StatusCode.INTERNAL, "Internal error from Core")

            return FakeCall(events())

    call, ws = make_call(ResetBeforeFinal(), FakeTts())
    call.start_turn("Hello?", _timings())
    await until(lambda: "error" in ws.kinds())
    assert errors(ws) == ["upstream_unavailable"]
    await call.close()


def _timings():
    from voicebot.gateway.turn import TurnTimings

    return TurnTimings()


async def test_fallback_sentences_come_from_tts_once_it_answers_and_a_chime_before():
    from voicebot.gateway.fallback import FallbackVoice, chime

    tts = FailingTts()
    voice = FallbackVoice(tts, RATE)
    voice.warm("en")
    await asyncio.sleep(0.05)
    assert voice.audio("unavailable", "en") == (chime(RATE), "tone")  # TTS never answered
    tts.fail = False
    await until(lambda: voice.audio("unavailable", "de")[1] == "tts", timeout=5)  # English for now
    pcm, _ = voice.audio("cant_hear", "en")
    assert len(pcm) == 300 * RATE * 2 // 1000  # what the (fake) TTS said for that sentence
    await voice.close()
