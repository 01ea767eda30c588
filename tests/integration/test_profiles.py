"""Profiles at start: a typo stops the brain naming the field; each shipped profile serves a turn.

The brain runs as a real process (``python -m voicebot.brain.server``) with
its profile's MCP servers started the way ``make run`` starts them (a bearer
token each), a scripted LLM and a real redis-server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.conftest import LOG_ROOT
from tests.fakes.fake_llm import is_guard
from voicebot.brain.business.profile import EXAMPLES_DIR, ProfileError, load_profile, parse_profile
from voicebot.common.internal_auth import internal_channel
from voicebot.devstack import ROOT, Stack, speech_env, start_mcp_servers
from voicebot.v1 import brain_pb2, brain_pb2_grpc

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("raw", "named"), [
    ({"name": "Joe", "sentences": {"fallbak": "Sorry."}}, "sentences.fallbak"),
    ({"mcp_servers": [{"name": "shop", "url": "ftp://x"}]}, "mcp_servers.0.url"),
    ({"mcp_servers": [{"name": "shop", "url": "http://x/mcp", "tools": {"buy": {"kind": "maybe"}}}]},
     "mcp_servers.0.tools.buy.kind"),
    ({"references": {"order_id": {"prefix": "order", "label": "{id}"}}}, "references.order_id.prefix"),
    ({"guard": {"timeout_s": 0}}, "guard.timeout_s"),
])
def test_a_profile_with_a_mistake_is_refused_naming_the_field(raw, named):
    with pytest.raises(ProfileError, match=named.replace(".", r"\.")):
        parse_profile(raw)


def test_an_unset_variable_in_a_profile_is_named(monkeypatch):
    monkeypatch.delenv("NO_SUCH_URL", raising=False)
    with pytest.raises(ProfileError, match="NO_SUCH_URL"):
        parse_profile({"mcp_servers": [{"name": "shop", "url": "${NO_SUCH_URL}"}]})


def test_the_brain_does_not_start_with_a_typo_in_its_profile(tmp_path, redis_url):
    bad = tmp_path / "bad.yaml"
    bad.write_text((EXAMPLES_DIR / "restaurant" / "profile.yaml").read_text().replace("purpose:", "purpsoe:"))
    brain = subprocess.run([sys.executable, "-m", "voicebot.brain.server"], cwd=ROOT, timeout=60,
                           capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "BRAIN_PROFILE": str(bad), "BRAIN_PORT": "0",
                                "BRAIN_REDIS_URL": redis_url, "VOICEBOT_INTERNAL_AUTH": "false",
                                "LOG_JSON": "false"})
    assert brain.returncode != 0
    assert "purpsoe" in brain.stderr and "Traceback" not in brain.stderr


@pytest.mark.parametrize("profile", ["restaurant", "clinic", "salon"])
def test_each_shipped_profile_loads(profile):
    loaded = load_profile(profile)
    assert loaded.mcp_servers and loaded.purpose


@pytest.mark.parametrize("profile", ["restaurant", "clinic", "salon"])
def test_make_run_tells_stt_what_the_profiles_callers_talk_about(profile, monkeypatch):
    monkeypatch.delenv("STT_CONTEXT", raising=False)
    assert speech_env(profile) == {"STT_CONTEXT": load_profile(profile).stt_context}
    assert len(speech_env(profile)["STT_CONTEXT"].split()) >= 8
    monkeypatch.setenv("STT_CONTEXT", "")  # the operator's own setting wins, even empty
    assert speech_env(profile) == {"STT_CONTEXT": ""}


@pytest.mark.parametrize(("profile", "request_text", "tool"), [
    ("restaurant", "A table for two on Friday at seven pm, my name is Lee.", "find_slots"),
    ("clinic", "Can I see Dr. Kim on Friday at 10 am? My name is Sam Lee, for a check-up.", "list_openings"),
    ("salon", "A haircut with Mia on Friday at 11 am, my name is Alex Lee.", "free_times"),
])
async def test_each_shipped_profile_starts_and_runs_its_task_from_its_tools(
        profile, request_text, tool, redis_url, scripted_llm):
    """The brain process with the shipped profile, its MCP server and the packaged encoder: a
    request in one line makes code call the business's finder tool and read the booking back."""
    def reader(body):
        if is_guard(body):
            return "ALLOW"
        return json.dumps({"intent": "other", "reason": "a check-up"})  # reads the reason, nothing else

    scripted_llm.script = reader
    stack = Stack(LOG_ROOT / f"profile-{profile}", quiet=True)
    try:
        _, brain_env = start_mcp_servers(stack, profile)
        brain = stack.start_service("brain", "voicebot.brain.server", {
            **brain_env, "BRAIN_PORT": "0", "BRAIN_METRICS_PORT": "0", "BRAIN_REDIS_URL": redis_url,
            "BRAIN_LLM_BASE_URL": scripted_llm.base_url})
        async with internal_channel(f"127.0.0.1:{brain.ready['grpc']}") as channel:
            request = brain_pb2.RespondRequest(session_id=uuid.uuid4().hex, turn_id="t1", user_id="alice",
                                               text=request_text)
            events = [e async for e in brain_pb2_grpc.BrainStub(channel).Respond(request)]
        tools = [e.tool for e in events if e.WhichOneof("event") == "tool"]
        assert [t.status for t in tools if t.tool == tool] == ["started", "succeeded"]
        assert events[-1].final.text.endswith("Shall I go ahead?"), events[-1].final.text
        assert events[-1].final.dialog_state == "confirm"
    finally:
        stack.stop()
