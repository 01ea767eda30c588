"""StreamingRecognize through real gRPC: the real Whisper service, and the real VAD with a fake engine.

Assertions are on events, their order and their counts, never on how long
anything took: where the order depends on the server having done something,
the test waits for that event (RecognizeCall.until) before it sends more.
"""

from __future__ import annotations

import asyncio

import grpc
import httpx
import numpy as np
import pytest

from bench.stt import espeak_speech
from tests.audio import silence, speech
from tests.fakes.engines import FakeSttEngine, GatedSttEngine, LoudnessVad
from tests.stt_client import RecognizeCall, kinds, per_utterance, recognize
from tests.unit.test_stt_stream import loud, quiet
from voicebot.common.audio import pcm16_to_float
from voicebot.common.grpc_server import start_server
from voicebot.common.internal_auth import internal_channel
from voicebot.stt.config import SttSettings
from voicebot.stt.engine import FasterWhisperEngine
from voicebot.stt.models import resolve_whisper_model, silero_vad_path
from voicebot.stt.server import SpeechToTextServicer
from voicebot.stt.vad import SileroVad
from voicebot.v1 import stt_pb2, stt_pb2_grpc

pytestmark = pytest.mark.integration


@pytest.fixture
async def fake_stt():
    """An STT server on a random port with the real VAD and a fake engine."""
    servers = []

    async def start(engine=None, vad=None, **overrides):
        settings = SttSettings(port=0, metrics_port=0, **overrides)
        vad = vad or SileroVad(silero_vad_path())
        servicer = SpeechToTextServicer(settings, engine or FakeSttEngine(), vad)

        def register(server):
            stt_pb2_grpc.add_SpeechToTextServicer_to_server(servicer, server)
            return [stt_pb2.DESCRIPTOR.services_by_name["SpeechToText"].full_name]

        running = await start_server(settings, register)
        servers.append(running)
        return f"127.0.0.1:{running.port}", servicer

    yield start
    for running in servers:
        await running.server.stop(None)


async def test_one_utterance_gives_started_end_and_one_final(services):
    # No comma: piper pauses ~300 ms at one, close to the endpoint silence, which may split it.
    audio = np.concatenate([silence(400), speech("Book a table for two please."), silence(800)])
    records = await recognize(services.stt_addr, audio)
    assert kinds(records) == ["started", "eou", "final"]
    started, eou, final = records
    assert 250 <= started[1] <= 600  # onset near 400 ms (pre-roll and frame granularity)
    # Sent faster than real time, the end-of-turn model's verdict may land after the half-close.
    assert eou[2] in ("model", "words", "limit", "end_of_stream") and eou[1] > started[1]
    assert "table" in final[1].lower()


@pytest.mark.parametrize("rate", [8000, 48000])
async def test_8k_and_48k_streams_are_resampled(services, rate):
    audio = np.concatenate([silence(300, rate), speech("Tomorrow at seven.", rate), silence(800, rate)])
    records = await recognize(services.stt_addr, audio, rate=rate)
    finals = [r for r in records if r[0] == "final"]
    assert len(finals) == 1 and "tomorrow" in finals[0][1].lower()


async def test_two_utterances_separated_by_silence_give_two_finals(fake_stt):
    addr, _ = await fake_stt()
    audio = np.concatenate([silence(300), speech("Hello there."), silence(1000),
                            speech("A table for two."), silence(800)])
    records = await recognize(addr, audio)
    assert per_utterance(records) == {0: ["started", "eou", "final"], 1: ["started", "eou", "final"]}


async def test_a_short_pause_does_not_split_the_utterance(fake_stt):
    addr, _ = await fake_stt()
    audio = np.concatenate([silence(300), speech("I would like"), silence(150),
                            speech("a table for two."), silence(800)])
    assert kinds(await recognize(addr, audio)) == ["started", "eou", "final"]


async def test_max_utterance_length_forces_a_final(fake_stt):
    addr, _ = await fake_stt(max_utterance_s=1.0)
    audio = np.concatenate([silence(300), speech("I would like to book a table for two people tomorrow."),
                            silence(800)])
    records = await recognize(addr, audio)
    reasons = [r[2] for r in records if r[0] == "eou"]
    assert reasons[0] == "max_length" and len(reasons) >= 2
    assert kinds(records).count("final") == len(reasons)


async def test_stream_ending_mid_speech_still_gives_a_final(fake_stt):
    addr, _ = await fake_stt()
    # No comma: piper's comma pause is ~300 ms, as long as the endpoint silence.
    audio = np.concatenate([silence(300), speech("I would like to book a table for")])
    records = await recognize(addr, audio)
    assert kinds(records) == ["started", "eou", "final"] and records[1][2] == "end_of_stream"


async def test_garbage_audio_does_not_crash_the_service(fake_stt):
    addr, _ = await fake_stt()
    rng = np.random.default_rng(1)
    async with internal_channel(addr) as channel:
        stub = stt_pb2_grpc.SpeechToTextStub(channel)

        async def requests():
            yield stt_pb2.RecognizeRequest(config=stt_pb2.RecognitionConfig(sample_rate=16000))
            for size in (1, 3, 641, 999, 4097):  # odd sizes split samples across messages
                yield stt_pb2.RecognizeRequest(audio=rng.bytes(size))

        events = [e async for e in stub.StreamingRecognize(requests(), timeout=30)]
    assert all(e.WhichOneof("event") for e in events)
    # and the server still serves a normal stream afterwards
    assert kinds(await recognize(addr, np.concatenate([silence(300), speech("Hello."), silence(700)]))) == [
        "started", "eou", "final"]


@pytest.mark.parametrize(("config", "message"), [
    ({"sample_rate": 44100}, "sample_rate 44100 is not supported"),
    ({"sample_rate": 16000, "encoding": "opus"}, "encoding 'opus' is not supported"),
    ({"sample_rate": 16000, "language": "ko"}, "language 'ko' is not supported"),
    ({"sample_rate": 16000, "endpoint_silence_ms": 10}, "endpoint_silence_ms"),
])
async def test_unsupported_config_is_invalid_argument(fake_stt, config, message):
    addr, _ = await fake_stt(FakeSttEngine(multilingual=False))
    error = await config_error(addr, stt_pb2.RecognitionConfig(**config))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in error.details()


async def config_error(addr: str, config: stt_pb2.RecognitionConfig) -> grpc.aio.AioRpcError:
    """Send only a config; return the error the call ends with."""
    async with internal_channel(addr) as channel:
        stub = stt_pb2_grpc.SpeechToTextStub(channel)

        async def requests():
            yield stt_pb2.RecognizeRequest(config=config)

        with pytest.raises(grpc.aio.AioRpcError) as error:
            _ = [e async for e in stub.StreamingRecognize(requests(), timeout=10)]
    return error.value


async def test_audio_before_config_is_invalid_argument(fake_stt):
    addr, _ = await fake_stt()
    async with internal_channel(addr) as channel:
        stub = stt_pb2_grpc.SpeechToTextStub(channel)

        async def requests():
            yield stt_pb2.RecognizeRequest(audio=b"\x00\x00" * 320)

        with pytest.raises(grpc.aio.AioRpcError) as error:
            _ = [e async for e in stub.StreamingRecognize(requests(), timeout=10)]
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def wait_until(condition, timeout: float = 30) -> None:
    """Poll server-side state (no event to wait on); fails the test after ``timeout``."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


LONG = "I would like to book a table for four people tomorrow evening."


async def test_partials_come_before_the_final(fake_stt):
    addr, _ = await fake_stt()
    async with RecognizeCall(addr, interim_results=True) as call:
        await call.send(np.concatenate([silence(300), speech(LONG)]))
        await call.until("partial")  # the utterance is still open: a partial comes without more audio
        await call.send(silence(800))
        records = await call.finish()
    assert per_utterance(records).keys() == {0}
    found = kinds(records)
    assert found[0] == "started" and found[-2:] == ["eou", "final"] and set(found[1:-2]) == {"partial"}
    final = records[-1]
    partials = [r for r in records if r[0] == "partial"]
    assert all(p[1] and p[2] == final[2] and p[3] <= final[3] for p in partials)


async def test_a_final_known_at_the_endpoint_comes_inside_its_end_of_utterance_when_asked(fake_stt):
    addr, _ = await fake_stt(vad=LoudnessVad())  # loud frames are speech: each decision exact
    async with RecognizeCall(addr, speculative_results=True, final_with_end_of_utterance=True) as call:
        await call.send(pcm16_to_float(quiet(5) + loud(20) + quiet(2)))
        early = await call.until("partial")  # the decode made at the pause is done
        await call.send(pcm16_to_float(quiet(20)))  # the endpoint
        records = await call.finish()
    assert kinds(records) == ["started", "partial", "eou+final"]
    assert records[-1][2] == "silence" and records[-1][3] == early[1]  # the pause's words, one message


async def test_without_interim_results_there_are_no_partials(fake_stt):
    engine = FakeSttEngine()
    addr, _ = await fake_stt(engine)
    records = await recognize(addr, np.concatenate([silence(300), speech(LONG), silence(800)]))
    assert kinds(records) == ["started", "eou", "final"]


async def test_real_model_partials_then_one_final(services):
    async with RecognizeCall(services.stt_addr, interim_results=True) as call:
        await call.send(np.concatenate([silence(300), speech(LONG)]))
        await call.until("partial")
        await call.send(silence(800))
        records = await call.finish()
    found = kinds(records)
    last_partial = max(i for i, k in enumerate(found) if k == "partial")
    assert found.count("final") == 1 and found.index("eou") > last_partial
    assert "table" in records[-1][1].lower()


async def test_many_streams_at_once_each_get_their_own_finals(fake_stt):
    addr, _ = await fake_stt(FakeSttEngine(delay_s=0.05), workers=1)
    audio = np.concatenate([silence(300), speech("Hello there."), silence(800),
                            speech("A table for two."), silence(800)])
    results = await asyncio.gather(*(recognize(addr, audio, session_id=f"s{i}") for i in range(4)))
    for records in results:
        assert per_utterance(records) == {0: ["started", "eou", "final"], 1: ["started", "eou", "final"]}
        assert all(r[1].startswith("speech ") for r in records if r[0] == "final")


async def test_cancelling_a_stream_drops_its_queued_decodes_and_frees_the_worker(fake_stt):
    engine = GatedSttEngine()
    addr, servicer = await fake_stt(engine, workers=1)
    utterance = np.concatenate([silence(300), speech("A table for two."), silence(800)])
    try:
        async with RecognizeCall(addr, language="fr") as first:
            await first.send(utterance)
            await engine.wait_entered()  # the only worker is busy with this stream
            async with RecognizeCall(addr, language="de") as cancelled:
                await cancelled.send(utterance)
                await cancelled.until("eou")
                await wait_until(lambda: servicer.pool.waiting >= 1)  # its decodes wait for the worker
            # Leaving the block cancelled the call: its queued decodes go, before any worker is free.
            await wait_until(lambda: servicer.active_streams == 1 and servicer.pool.waiting == 0)
            engine.gate.set()
            await first.until("final")
    finally:
        engine.gate.set()
    assert kinds(await recognize(addr, utterance)) == ["started", "eou", "final"]
    assert "de" not in {language for _, language in engine.started}
    await wait_until(lambda: servicer.active_streams == 0)
    assert (servicer.pool.running, servicer.pool.waiting) == (0, 0)


async def test_stt_metrics_are_exported(services):
    audio = np.concatenate([silence(300), speech("Tomorrow at seven."), silence(800)])
    await recognize(services.stt_addr, audio)
    async with httpx.AsyncClient() as client:
        body = (await client.get(f"http://127.0.0.1:{services.metrics_ports['stt']}/metrics")).text
    for name in ("voicebot_stt_decode_seconds_count", "voicebot_stt_endpoint_to_final_seconds_count",
                 "voicebot_stt_active_streams", "voicebot_stt_queue_depth", "voicebot_stt_finals_total"):
        assert name in body


async def test_korean_with_the_multilingual_model(services):
    korean = espeak_speech("안녕하세요, 내일 저녁에 두 명 예약하고 싶어요.", "ko")
    audio = np.concatenate([silence(300), korean, silence(800)])
    records = await recognize(services.stt_addr, audio, language="ko")
    text = " ".join(r[1] for r in records if r[0] == "final")
    assert any("\uac00" <= ch <= "\ud7a3" for ch in text), text  # Hangul syllables


@pytest.fixture(scope="module")
def tiny_en():
    model_dir, multilingual = resolve_whisper_model("tiny.en", SttSettings().model_cache_dir)
    return FasterWhisperEngine(model_dir, multilingual, cpu_threads=2)


async def test_tiny_en_transcribes_english_and_refuses_other_languages(fake_stt, tiny_en):
    addr, _ = await fake_stt(tiny_en)
    records = await recognize(addr, np.concatenate([silence(300), speech("A table for two."), silence(800)]))
    assert kinds(records) == ["started", "eou", "final"] and "table" in records[-1][1].lower()
    error = await config_error(addr, stt_pb2.RecognitionConfig(sample_rate=16000, language="ko"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "English-only" in error.details()


async def test_streams_over_the_limit_are_refused(fake_stt):
    addr, servicer = await fake_stt(max_streams=1)
    async with RecognizeCall(addr) as first:
        await first.send(silence(100))
        await wait_until(lambda: servicer.active_streams == 1)
        error = await config_error(addr, stt_pb2.RecognitionConfig(sample_rate=16000))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
