""""Heard" from evidence (issue 53, item 2): a yes runs a read-back's action only when the
gateway's record of what was played holds all of it.

Real processes on random ports: the instant fake STT and TTS (tests/fakes/speech_servers.py,
with the TTS faults a test writes to its fault file), the real brain on the helpdesk profile
with the scripted model reading the caller's words, the real gateway; the helpdesk MCP server
(tests/fakes/helpdesk_mcp.py) records every write. Each test is a scenario, judged by what that
server recorded; the read-back is "Let me check: open a high priority ticket about ... Shall I
go ahead?", whose action TTS speaks as one piece.

Timing holds on a loaded 2-core machine: the tests wait for events, never for a fixed time,
except to let audio that was sent play out (with a wide margin).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import websockets

from bench.abuse import Caller, start_gateway
from tests.conftest import LOG_ROOT
from tests.fakes.helpdesk_mcp import PROFILE, Helpdesk
from tests.reliability import RESULTS
from tests.unit.test_any_business import TOKEN, desk_reader
from voicebot.devstack import Stack
from voicebot.gateway.cli import call

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

CALLER_TOKEN = "tok-caller"
REQUEST = "The printer on floor two is jammed, please open a high priority ticket."
IN_THE_ACTION = "priority ticket"  # words of the action's piece, in the read-back and its repeat
ASKED = "Shall I go ahead?"
AGAIN = "Just to be sure"  # how the read-back said again begins
RATE = 16000
PLAY_MARGIN_S = 1.0  # past the audio's own length: the client has played all it was sent


@dataclass
class HeardStack:
    base: str
    desk: Helpdesk
    faults: Path

    def fault(self, **spec: str | float) -> None:
        """TTS's next streams meet this fault (``skip`` or ``abort`` words); none: cleared."""
        if spec:
            self.faults.write_text(json.dumps(spec))
        else:
            self.faults.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def heard_stack(redis_url, fake_llm, tmp_path_factory):
    folder = tmp_path_factory.mktemp("heard")
    profile, faults = folder / "helpdesk.yaml", folder / "tts-faults.json"
    # The write's own time limit is for a loaded machine: a retried write would be a second one.
    profile.write_text(PROFILE.replace("timeout_s: 0.5", "timeout_s: 10"))
    desk = Helpdesk(token=TOKEN).start()
    stack = Stack(LOG_ROOT / "reliability-heard", quiet=True)
    try:
        speech = stack.start_service("fake-speech", "tests.fakes.speech_servers",
                                     {"FAKE_TTS_FAULTS": str(faults)})
        brain = stack.start_service("brain", "voicebot.brain.server", {
            "BRAIN_PORT": "0", "BRAIN_METRICS_PORT": "0", "BRAIN_REDIS_URL": redis_url,
            "BRAIN_LLM_BASE_URL": fake_llm.base_url, "BRAIN_GUARD_ENABLED": "false",
            "BRAIN_PROFILE": str(profile),
            "HELPDESK_URL": desk.url, "HELPDESK_TOKEN": TOKEN})
        upstream = {"stt": speech.ready["stt"], "tts": speech.ready["tts"], "brain": brain.ready["grpc"]}
        gateway = start_gateway(stack, upstream, redis_url, "not-used",
                                {"GATEWAY_TOKENS": f"{CALLER_TOKEN}=caller"})
        yield HeardStack(f"ws://127.0.0.1:{gateway.ready['http']}", desk, faults)
    finally:
        stack.stop()
        desk.stop()


@pytest.fixture
def heard(heard_stack, scripted_llm):
    scripted_llm.script = desk_reader
    heard_stack.desk.reset()
    heard_stack.fault()
    yield heard_stack
    heard_stack.fault()


@asynccontextmanager
async def session(stack: HeardStack, session_id: str | None = None, **start) -> AsyncIterator[Caller]:
    caller = await Caller.open(stack.base, CALLER_TOKEN, session_id, **start)
    assert caller.session_id, caller.kinds()
    try:
        yield caller
    finally:
        await caller.close()


async def say(caller: Caller, text: str, until: str = "turn.metrics") -> dict:
    """A typed turn; returns its reply.done (the reply's text), once ``until`` came."""
    mark = len(caller.events)
    await caller.send({"type": "input.text", "text": text})
    await caller.wait_for((until,), mark, timeout=30)
    return next(payload for _t, kind, payload in caller.events[mark:] if kind == "reply.done")


async def played_out(caller: Caller, since: int) -> None:
    """Until the client has played all the audio it was sent since ``since`` (real-time playback
    from its first frame), with a wide margin."""
    audio = [(at, size) for at, kind, size in caller.events[since:] if kind == "audio"]
    if audio:
        seconds = sum(size for _at, size in audio) / (2 * RATE)
        await asyncio.sleep(max(0.0, audio[0][0] + seconds + PLAY_MARGIN_S - time.perf_counter()))


async def read_back(caller: Caller) -> dict:
    done = await say(caller, REQUEST)
    assert IN_THE_ACTION in done["text"] and done["text"].endswith(ASKED), done
    return done


def writes(stack: HeardStack) -> list[str]:
    return [name for name, _args in stack.desk.writes()]


async def test_a_yes_after_the_read_back_played_to_its_end_writes_once(heard):
    async with session(heard) as caller:
        mark = len(caller.events)
        await read_back(caller)
        await played_out(caller, mark)
        done = await say(caller, "Yes.")
    assert writes(heard) == ["open_ticket"]
    assert "someone will contact you today" in done["text"]
    RESULTS["voice: read-back played to its end, then yes"] = {"writes": len(writes(heard))}


async def test_a_voice_caller_typing_yes_before_the_read_back_played_hears_it_again(heard):
    """The client's playback.position says none of the read-back has played yet (its player is
    still starting): the yes runs nothing, and the action is read back."""
    async with session(heard) as caller:
        read = await say(caller, REQUEST, until="reply.done")
        await caller.send({"type": "playback.position", "turn_id": read["turn_id"], "played_ms": 0})
        done = await say(caller, "Yes.")
    assert done["text"].startswith(AGAIN) and writes(heard) == []
    RESULTS["voice: yes before the read-back played"] = {"writes": 0, "reply": done["text"][:40]}


async def test_tts_failing_on_the_read_backs_action_then_yes_runs_nothing_and_reads_it_again(heard):
    """The caller heard "Let me check: ... Shall I go ahead?" without the action between."""
    async with session(heard) as caller:
        heard.fault(skip=IN_THE_ACTION)
        mark = len(caller.events)
        await read_back(caller)
        heard.fault()
        await played_out(caller, mark)
        mark = len(caller.events)
        again = await say(caller, "Yes.")
        assert again["text"].startswith(AGAIN) and writes(heard) == []
        await played_out(caller, mark)
        await say(caller, "Yes.")  # the action read back again, heard in full this time
    assert writes(heard) == ["open_ticket"]
    RESULTS["tts skips the read-back's action sentence"] = {
        "writes after the first yes": 0, "writes after the yes to the repeat": 1}


async def test_tts_failing_mid_read_back_then_yes_runs_nothing_and_reads_it_again(heard):
    """TTS dies halfway through the action: the error, the fallback, and no record of the action."""
    async with session(heard) as caller:
        # Later than the brain's end of turn (it stores the read-back before its last event).
        heard.fault(abort=IN_THE_ACTION, abort_after_s=2.0)
        mark = len(caller.events)
        await caller.send({"type": "input.text", "text": REQUEST})
        await caller.wait_for(("error",), mark, timeout=30)
        await caller.wait_for(("audio.end",), mark, timeout=30)  # the fallback was heard
        heard.fault()
        assert caller.errors(mark) == ["upstream_unavailable"]
        await played_out(caller, mark)
        again = await say(caller, "Yes.")
    assert again["text"].startswith(AGAIN) and writes(heard) == []
    RESULTS["tts stream fails mid read-back"] = {"error": "upstream_unavailable", "writes": 0}


async def test_a_socket_dropped_mid_read_back_then_resumed_yes_runs_nothing(heard):
    async with session(heard) as caller:
        await say(caller, REQUEST, until="reply.done")  # the brain has the read-back: its audio plays
        session_id = caller.session_id
        caller.ws.transport.abort()  # no close handshake: the connection is just gone
    async with session(heard, session_id) as resumed:
        again = await say(resumed, "Yes.")
    assert again["text"].startswith(AGAIN) and writes(heard) == []
    RESULTS["socket dropped mid read-back, session resumed"] = {"writes": 0}


async def test_a_text_only_session_yes_right_after_the_read_back_writes_once(heard):
    async with session(heard, output="text") as caller:
        started = next(p for _t, kind, p in caller.events if kind == "session.started")
        await read_back(caller)
        done = await say(caller, "Yes.")  # at once: a text client has nothing to wait for
        kinds = [kind for _t, kind, _p in caller.events]
    assert started["output"] == "text"
    assert writes(heard) == ["open_ticket"] and "someone will contact you today" in done["text"]
    assert not {"audio", "audio.start", "audio.end"} & set(kinds)
    RESULTS["text-only session (v1): yes right after the read-back"] = {"writes": 1, "audio messages": 0}


async def test_the_clis_typed_turn_is_a_text_only_session(heard):
    """``voicebot call --text`` (without ``--out``): the read-back comes as text, with no audio."""
    result = await call(heard.base + "/v1/call", CALLER_TOKEN, text=REQUEST, timeout=30, output="text")
    [reply] = result.replies
    assert IN_THE_ACTION in reply and result.audio == bytearray() and "audio.start" not in result.events


async def realtime_turn(ws, text: str) -> list[dict]:
    await ws.send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}))
    await ws.send(json.dumps({"type": "response.create"}))
    events: list[dict] = []
    async with asyncio.timeout(30):
        while not events or events[-1]["type"] != "response.done":
            events.append(json.loads(await ws.recv()))
    return events


async def test_a_realtime_text_only_session_yes_right_after_the_read_back_writes_once(heard):
    url = heard.base + "/v1/realtime"
    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {CALLER_TOKEN}"}) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "output_modalities": ["text"]}}))
        first = await realtime_turn(ws, REQUEST)
        done = await realtime_turn(ws, "Yes.")
    updated = next(e for e in first if e["type"] == "session.updated")
    assert updated["session"]["output_modalities"] == ["text"]
    text = "".join(e["delta"] for e in first if e["type"] == "response.output_text.delta")
    assert IN_THE_ACTION in text and text.endswith(ASKED)
    assert not any(e["type"].startswith("response.output_audio") for e in first + done)
    assert writes(heard) == ["open_ticket"]
    assert done[-1]["response"]["status"] == "completed"
    RESULTS["text-only session (Realtime): yes right after the read-back"] = {"writes": 1}
