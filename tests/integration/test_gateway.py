"""The gateway's WebSocket protocol against the real services (scripted LLM, real redis-server)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import websockets

from tests.fakes.stack_profile import FALLBACK, HOURS, NEEDS_READING, PARKING, TABLE, UNKNOWN_FACT, answer
from voicebot.brain.runtime.session_store import SessionHistory, SessionStore
from voicebot.gateway.cli import call

pytestmark = pytest.mark.integration


async def connect(services, token="tok-alice"):
    return await websockets.connect(services.ws_url, additional_headers={"Authorization": f"Bearer {token}"})


async def start_session(ws, session_id=None, rate=16000) -> dict:
    await ws.send(json.dumps({"type": "session.start", "session_id": session_id, "language": "en",
                              "audio": {"encoding": "pcm16", "sample_rate": rate}}))
    return json.loads(await asyncio.wait_for(ws.recv(), 10))


async def next_event(ws, timeout=10.0) -> dict:
    while True:
        message = await asyncio.wait_for(ws.recv(), timeout)
        if isinstance(message, str):
            return json.loads(message)


async def heard_turn(ws, text: str, rate: int = 16000) -> None:
    """A typed turn whose reply is heard to its end: returns once its audio has played out (a
    turn typed while the reply still plays interrupts it, and the history keeps what was heard)."""
    await ws.send(json.dumps({"type": "input.text", "text": text}))
    started, audio_bytes = None, 0
    while True:
        message = await asyncio.wait_for(ws.recv(), 10)
        if isinstance(message, bytes):
            audio_bytes += len(message)
            continue
        kind = json.loads(message)["type"]
        if kind == "audio.start":
            started = time.perf_counter()
        elif kind == "turn.metrics":
            break
    assert started is not None and audio_bytes > 0
    await asyncio.sleep(max(0.0, started + audio_bytes / 2 / rate - time.perf_counter()) + 0.5)


async def test_typed_turn_streams_reply_audio_and_metrics(services, scripted_llm):
    result = await call(services.ws_url, "tok-alice", text="a table for two")

    assert result.replies == [answer(TABLE)]  # the business's own answer, spoken by code
    kinds = result.events
    assert kinds.index("reply.delta") < kinds.index("reply.done")
    assert kinds.index("audio.start") < kinds.index("audio.end") < kinds.index("turn.metrics")
    assert len(result.audio) / 2 / result.audio_rate > 0.5
    metrics = result.metrics[0]
    assert metrics["llm_ttft"] is not None and metrics["tts_ttfa"] is not None
    assert metrics["voice_to_voice"] >= metrics["llm_ttft"]


async def test_history_carries_into_the_next_turn(services, scripted_llm, redis_client):
    # The model is shown no history any more (it only reads the turn's words): the session's
    # history in Redis holds both turns, in order, each with the reply the caller heard.
    async with await connect(services) as ws:
        session_id = (await start_session(ws))["session_id"]
        for text in (PARKING, HOURS):
            await heard_turn(ws, text)
    history = SessionHistory.from_json(redis_client.get(SessionStore.key("alice", session_id)))
    assert [(t.user, t.assistant) for t in history.turns] == [(PARKING, answer(PARKING)),
                                                              (HOURS, answer(HOURS))]
    assert not any(t.interrupted for t in history.turns)


async def test_bad_messages_get_errors_and_the_session_goes_on(services, scripted_llm):
    async with await connect(services) as ws:
        await ws.send(b"\x00\x01" * 10)  # audio before session.start
        assert (await next_event(ws))["code"] == "bad_request"
        await ws.send("{not json")
        assert (await next_event(ws))["code"] == "bad_request"
        await start_session(ws)
        await ws.send(json.dumps({"type": "dance"}))
        assert (await next_event(ws)) == {"type": "error", "code": "bad_request",
                                          "message": "unknown message type 'dance'"}
        await ws.send(b"\x00" * 40_000)
        assert (await next_event(ws))["code"] == "payload_too_large"
        await ws.send(json.dumps({"type": "input.text", "text": ""}))
        assert (await next_event(ws))["code"] == "bad_request"
        await ws.send(json.dumps({"type": "input.text", "text": "still there?"}))
        assert (await next_event(ws))["type"] == "reply.delta"


async def test_an_unspoken_language_is_an_error_and_the_call_goes_on(services, scripted_llm):
    async with await connect(services) as ws:
        await ws.send(json.dumps({"type": "session.start", "language": "fr",
                                  "audio": {"encoding": "pcm16", "sample_rate": 16000}}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "session.started"
        error = await next_event(ws)
        assert error["code"] == "unsupported_language"
        assert "'fr'" in error["message"] and "goes on in 'en'" in error["message"]
        await ws.send(json.dumps({"type": "input.text", "text": "still there?"}))
        assert (await next_event(ws))["type"] == "reply.delta"


async def test_bad_token_is_closed_with_4401(services):
    ws = await connect(services, token="wrong")
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await ws.recv()
    assert closed.value.rcvd.code == 4401


async def test_a_page_on_another_origin_is_refused_and_clients_without_origin_are_not(services):
    headers = {"Authorization": "Bearer tok-alice"}
    ws = await websockets.connect(services.ws_url, additional_headers=headers, origin="https://evil.example")
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await ws.recv()
    assert closed.value.rcvd.code == 4403
    local = f"http://localhost:{services.gateway_port}"
    async with websockets.connect(services.ws_url, additional_headers=headers, origin=local) as ws:
        assert (await start_session(ws))["type"] == "session.started"
    async with await connect(services) as ws:  # the CLI sends no Origin
        assert (await start_session(ws))["type"] == "session.started"


async def test_another_users_session_looks_like_no_session(services, scripted_llm):
    async with await connect(services, "tok-alice") as ws:
        session_id = (await start_session(ws))["session_id"]
    async with await connect(services, "tok-bob") as ws:
        stolen = await start_session(ws, session_id)
    async with await connect(services, "tok-bob") as ws:
        unknown = await start_session(ws, "s_does_not_exist")
    assert stolen == unknown == {"type": "error", "code": "not_found", "message": "no such session"}
    async with await connect(services, "tok-alice") as ws:
        resumed = await start_session(ws, session_id)
    assert resumed["session_id"] == session_id


async def test_llm_down_speaks_the_fallback_and_the_call_goes_on(services, scripted_llm):
    scripted_llm.fail_next = 100
    async with await connect(services) as ws:
        await start_session(ws)
        # Words that need the model's reading (no question, no task): with the model down the
        # caller hears the fallback.
        await ws.send(json.dumps({"type": "input.text", "text": NEEDS_READING}))
        events = []
        while (event := await next_event(ws, 30))["type"] != "turn.metrics":
            events.append(event)
        done = next(e for e in events if e["type"] == "reply.done")
        assert "trouble" in done["text"] and done["text"] == FALLBACK
        assert any(e["type"] == "audio.start" for e in events)  # spoken, not only shown
        reading_requests = sum(1 for r in scripted_llm.requests if r.get("response_format"))
        assert reading_requests >= 1
        scripted_llm.fail_next = 0
        # The same words once the model is back: read, and answered by code.
        await ws.send(json.dumps({"type": "input.text", "text": NEEDS_READING}))
        while (event := await next_event(ws, 30))["type"] != "reply.done":
            pass
        assert "trouble" not in event["text"]
        assert event["text"].startswith(UNKNOWN_FACT)  # the knowledge has nothing on the chef
        assert sum(1 for r in scripted_llm.requests if r.get("response_format")) > reading_requests


async def test_health_readiness_and_metrics(services):
    async with httpx.AsyncClient(base_url=services.http_url) as http:
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        ready = (await http.get("/readyz")).json()
        assert ready["ready"] and all(ready["checks"].values())
        assert "voicebot_stage_seconds" in (await http.get("/metrics")).text
        page = await http.get("/")
        assert page.status_code == 200 and '<script src="/static/page.js">' in page.text
        assert "getUserMedia" in (await http.get("/static/page.js")).text  # the page's microphone


def test_every_service_settles_its_garbage_collector_once_started(services):
    # Start-up's objects frozen, thresholds raised (voicebot.common.gc_tuning): a full
    # collection used to stall a service's event loop for up to ~130 ms under load.
    settled = {proc.name for proc in services.stack.procs if "gc settled" in proc.log_path.read_text()}
    names = {proc.name for proc in services.stack.procs}
    assert {name for name in names if name.startswith(("stt", "tts", "brain", "gateway"))} <= settled
    assert len(settled) >= 4
