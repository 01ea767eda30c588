"""StreamingRecognize through real gRPC: the real Whisper service, and the real VAD with a fake engine."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from services.stt.config import SttSettings
from services.stt.models import silero_vad_path
from services.stt.server import SpeechToTextServicer
from services.stt.vad import SileroVad
from tests.audio import silence, speech
from tests.fakes.engines import FakeSttEngine
from tests.stt_client import kinds, recognize
from voicebot.common.grpc_server import start_server
from voicebot.v1 import stt_pb2, stt_pb2_grpc

pytestmark = pytest.mark.integration


@pytest.fixture
async def fake_stt():
    """An STT server on a random port with the real VAD and a fake engine."""
    servers = []

    async def start(engine=None, **overrides):
        settings = SttSettings(port=0, metrics_port=0, **overrides)
        servicer = SpeechToTextServicer(settings, engine or FakeSttEngine(), SileroVad(silero_vad_path()))

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
    audio = np.concatenate([silence(400), speech("Book a table for two, please."), silence(800)])
    records = await recognize(services.stt_addr, audio)
    assert kinds(records) == ["started", "eou", "final"]
    started, eou, final = records
    assert 250 <= started[1] <= 600  # onset near 400 ms (pre-roll and frame granularity)
    assert eou[2] == "silence" and eou[1] > started[1]
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
    assert kinds(records) == ["started", "eou", "final", "started", "eou", "final"]


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
    records = await recognize(addr, np.concatenate([silence(300), speech("Hello there, this is")]))
    assert kinds(records) == ["started", "eou", "final"] and records[1][2] == "end_of_stream"


async def test_garbage_audio_does_not_crash_the_service(fake_stt):
    addr, _ = await fake_stt()
    rng = np.random.default_rng(1)
    async with grpc.aio.insecure_channel(addr) as channel:
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
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = stt_pb2_grpc.SpeechToTextStub(channel)

        async def requests():
            yield stt_pb2.RecognizeRequest(config=stt_pb2.RecognitionConfig(**config))

        with pytest.raises(grpc.aio.AioRpcError) as error:
            _ = [e async for e in stub.StreamingRecognize(requests(), timeout=10)]
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in error.value.details()


async def test_audio_before_config_is_invalid_argument(fake_stt):
    addr, _ = await fake_stt()
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = stt_pb2_grpc.SpeechToTextStub(channel)

        async def requests():
            yield stt_pb2.RecognizeRequest(audio=b"\x00\x00" * 320)

        with pytest.raises(grpc.aio.AioRpcError) as error:
            _ = [e async for e in stub.StreamingRecognize(requests(), timeout=10)]
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
