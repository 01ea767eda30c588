"""The clinic MCP server (the second business) as a real process, reached through the brain's MCP adapter.

Nothing here is clinic code in the brain: the tools come from the server's
listing, and the profile's templates are checked against what the server
really returns.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from voicebot.brain.act.mcp_tools import McpConnectionError, McpTool, McpToolSource
from voicebot.brain.act.tools import ToolContext, ToolKind, ToolRefused, ToolRegistry
from voicebot.brain.business.profile import load_profile
from voicebot.brain.business.tasks import build_tasks
from voicebot.brain.speak.readback import field_names, render
from voicebot.devstack import Stack

pytestmark = pytest.mark.integration

LOG_ROOT = Path(os.environ.get("VOICEBOT_TEST_LOGS", "/tmp/voicebot-test-logs")) / "clinic"
TODAY = "2030-01-07"  # a Monday: the server's calendar is pinned, so days and weekdays are fixed
PHONE = "+44 7700 900456"
BORN = "1961-04-23"
REASON = "a persistent cough"
TOKEN = "clinic-test-token"
PROFILE = load_profile("clinic")
OVERRIDES = PROFILE.mcp_servers[0].tools


def server_env(db: str = ":memory:", token: str = "", port: int = 0) -> dict[str, str]:
    return {"CLINIC_PORT": str(port), "CLINIC_DB": db, "CLINIC_TODAY": TODAY, "CLINIC_TOKEN": token,
            "CLINIC_LOG_LEVEL": "WARNING"}


def start(stack: Stack, env: dict[str, str], name: str = "clinic") -> str:
    proc = stack.start_service(name, "examples.clinic.server", env, timeout=30)
    return f"http://127.0.0.1:{proc.ready['http']}/mcp"


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    stack = Stack(LOG_ROOT, quiet=True)
    try:
        yield start(stack, server_env())
    finally:
        stack.stop()


@pytest.fixture
async def tools(server_url: str) -> AsyncIterator[dict[str, McpTool]]:
    async with McpToolSource(server_url) as source:
        yield await tools_of(source)


async def tools_of(source: McpToolSource) -> dict[str, McpTool]:
    return {tool.spec.name: tool for tool in await source.load_tools(overrides=OVERRIDES)}


def ctx(key: str | None = None) -> ToolContext:
    return ToolContext(user_id="pat", session_id="s1", turn_id="t1", idempotency_key=key)


async def openings(tools: dict[str, McpTool], **args: Any) -> list[dict[str, Any]]:
    return (await tools["list_openings"].run(args, ctx()))["openings"]


async def book(tools: dict[str, McpTool], opening_id: str, name: str, key: str | None = None,
               **extra: Any) -> dict[str, Any]:
    args = {"opening_id": opening_id, "patient_name": name, "reason": REASON, **extra}
    return await tools["book_appointment"].run(args, ctx(key))


async def test_tools_are_listed_with_kinds_from_their_annotations(tools: dict[str, McpTool]) -> None:
    kinds = {name: tool.spec.kind for name, tool in tools.items()}
    assert kinds == {"list_openings": ToolKind.READ_ONLY, "find_appointments": ToolKind.READ_ONLY,
                     "book_appointment": ToolKind.WRITE, "cancel_appointment": ToolKind.WRITE}
    booking = tools["book_appointment"].spec
    assert booking.accepts_idempotency_key  # code fills it, the model never sees it
    assert "idempotency_key" not in booking.parameters["properties"]
    assert {"opening_id", "patient_name", "reason"} <= set(booking.parameters["required"])
    assert not tools["list_openings"].spec.accepts_idempotency_key
    assert len(ToolRegistry(list(tools.values()))) == 4  # the schemas are valid JSON Schema

    # The profile's overrides arrive, and every task's read-back names only what its form holds:
    # the tool's arguments, the fields the profile adds, and the keys of the items a finder finds.
    assert tools["find_appointments"].spec.only_known == "appointment_id"
    tasks = build_tasks(PROFILE, ToolRegistry(list(tools.values())))
    assert tasks["book_appointment"].title == "book an appointment"
    item_keys = {"opening_id", "date", "weekday", "start", "clinician"}
    for name in ("book_appointment", "cancel_appointment"):
        task = tasks[name]
        named = set(tools[name].spec.parameters["properties"]) | {f.name for f in task.fields} | item_keys
        assert task.read_back and field_names(task.read_back) <= named


async def test_openings_on_a_day(tools: dict[str, McpTool]) -> None:
    monday = await openings(tools, date="today")
    assert [(o["start"], o["clinician"]) for o in monday] == [
        ("09:00", "Dr. Patel"), ("09:00", "Dr. Kim"), ("09:20", "Dr. Patel"), ("09:20", "Dr. Kim")]
    assert monday[0]["date"] == TODAY and monday[0]["weekday"] == "Monday"
    assert set(monday[0]) == {"opening_id", "date", "weekday", "start", "clinician"}

    kim = await openings(tools, date="tuesday", clinician="dr kim", after="14:10")
    assert [(o["date"], o["start"]) for o in kim] == [("2030-01-08", t) for t in
                                                      ("14:20", "14:40", "15:00", "15:20")]
    assert {o["clinician"] for o in kim} == {"Dr. Kim"}
    late = await openings(tools, date="2030-01-08", clinician="Patel", after="18:00")
    assert late[0]["start"] == "16:40"  # nothing after the wished time: the nearest before it

    # The profile's spoken label fits what the server returns.
    label = PROFILE.references["opening_id"].label
    assert render(label, kim[0]) == "Tuesday, January 8th at 2:20 pm with Dr. Kim"

    weekend = await tools["list_openings"].run({"date": "saturday"}, ctx())
    assert weekend["openings"] == [] and "closed" in weekend["note"]


async def test_book_find_cancel(tools: dict[str, McpTool]) -> None:
    opening = (await openings(tools, date="2030-01-09", clinician="Dr. Patel", after="10:00"))[0]
    booked = await book(tools, opening["opening_id"], "Grace Hopper", "k-flow",
                        phone=PHONE, date_of_birth=BORN)
    assert {k: booked[k] for k in ("date", "weekday", "start", "clinician", "patient_name", "status")} == {
        "date": "2030-01-09", "weekday": "Wednesday", "start": "10:00", "clinician": "Dr. Patel",
        "patient_name": "Grace Hopper", "status": "confirmed"}
    done = PROFILE.tasks["book_appointment"].done
    assert render(done or "", booked).startswith(
        "You're booked with Dr. Patel on Wednesday, January 9th at 10 am, for Grace Hopper.")

    found = await tools["find_appointments"].run({"patient_name": "grace hopper"}, ctx())
    assert [a["appointment_id"] for a in found["appointments"]] == [booked["appointment_id"]]
    still_free = await openings(tools, date="2030-01-09", clinician="Dr. Patel", after="10:00")
    assert opening["opening_id"] not in {o["opening_id"] for o in still_free}

    cancelled = await tools["cancel_appointment"].run({"appointment_id": booked["appointment_id"]}, ctx())
    again = await tools["cancel_appointment"].run({"appointment_id": booked["appointment_id"].lower()}, ctx())
    assert cancelled["status"] == again["status"] == "cancelled"
    after = await tools["find_appointments"].run({"patient_name": "Grace Hopper"}, ctx())
    assert after["appointments"][0]["status"] == "cancelled"
    freed = await openings(tools, date="2030-01-09", clinician="Dr. Patel", after="10:00")
    assert freed[0]["opening_id"] == opening["opening_id"]  # a cancelled appointment frees its opening

    text = json.dumps([booked, found, cancelled, again, after])
    for secret in ("7700", BORN, "cough", "phone", "date_of_birth", "reason"):
        assert secret not in text  # stored, never returned


async def test_the_same_idempotency_key_books_once(tools: dict[str, McpTool]) -> None:
    first_opening, second_opening = (await openings(tools, date="2030-01-10", clinician="Dr. Kim"))[:2]
    first = await book(tools, first_opening["opening_id"], "Idem Potent", "turn-3-book")
    retry = await book(tools, first_opening["opening_id"], "Idem Potent", "turn-3-book")
    assert retry == first
    # A retry whose arguments drifted still returns the booking that went through, never a second one.
    drifted = await book(tools, second_opening["opening_id"], "Idem Potent", "turn-3-book")
    assert drifted == first
    # A key the model slips into its arguments is not used: it is not the model's to choose.
    other = await tools["book_appointment"].run(
        {"opening_id": second_opening["opening_id"], "patient_name": "Idem Potent", "reason": REASON,
         "idempotency_key": "turn-3-book"}, ctx())
    assert other["appointment_id"] != first["appointment_id"]

    listed = await tools["find_appointments"].run({"patient_name": "Idem Potent"}, ctx())
    assert sorted(a["appointment_id"] for a in listed["appointments"]) == sorted(
        [first["appointment_id"], other["appointment_id"]])


async def test_a_taken_opening_is_refused(tools: dict[str, McpTool]) -> None:
    opening = (await openings(tools, date="2030-01-11", clinician="Dr. Kim", after="15:00"))[0]
    await book(tools, opening["opening_id"], "First Caller", "taken-1")
    with pytest.raises(ToolRefused, match=r"^refused: opening_taken"):
        await book(tools, opening["opening_id"], "Second Caller", "taken-2")
    second = await tools["find_appointments"].run({"patient_name": "Second Caller"}, ctx())
    assert second["appointments"] == []


async def test_a_name_without_a_surname_names_the_field_to_ask_again(tools: dict[str, McpTool]) -> None:
    opening = (await openings(tools, date="2030-01-11", clinician="Dr. Patel", after="10:00"))[0]
    with pytest.raises(ValueError, match=r"^invalid_patient_name: "):
        await book(tools, opening["opening_id"], "Hopper", "surname-1")
    assert (await tools["find_appointments"].run({"patient_name": "Hopper"}, ctx()))["appointments"] == []
    booked = await book(tools, opening["opening_id"], "Grace Hopper", "surname-2")
    assert booked["start"] == opening["start"]


@pytest.mark.parametrize(("tool", "args", "error"), [
    ("book_appointment", {"opening_id": "nope", "patient_name": "X", "reason": "r"}, "unknown opening_id"),
    ("book_appointment", {"opening_id": "20300112-0900-patel", "patient_name": "X", "reason": "r"},
     "unknown opening_id"),  # a Saturday: not in the schedule
    ("book_appointment", {"opening_id": "20300114-0910-kim", "patient_name": "X", "reason": "r"},
     "unknown opening_id"),  # not on the 20-minute grid
    ("book_appointment", {"opening_id": "20300114-0900-kim", "patient_name": " ", "reason": "r"},
     "patient_name is empty"),
    ("book_appointment", {"opening_id": "20300114-0900-kim", "patient_name": "X", "reason": ""},
     "reason is empty"),
    ("book_appointment", {"opening_id": "20300114-0900-kim", "patient_name": "X", "reason": "r",
                          "date_of_birth": "23/04/1961"}, "date_of_birth"),
    ("list_openings", {"date": "2030-01-01"}, "in the past"),
    ("list_openings", {"date": "2030-03-01"}, "up to 2030-01-27"),
    ("list_openings", {"date": "someday"}, "give a date"),
    ("list_openings", {"date": "today", "clinician": "Dr. Who"}, "no clinician"),
    ("list_openings", {"date": "today", "after": "half past two"}, "give a time"),
    ("find_appointments", {"patient_name": ""}, "patient_name is empty"),
    ("cancel_appointment", {"appointment_id": "APT-NOPE"}, "no appointment"),
])
async def test_bad_input_is_a_tool_error(tools: dict[str, McpTool], tool: str, args: dict[str, Any],
                                         error: str) -> None:
    with pytest.raises(ValueError, match=rf"^invalid: .*{error}"):
        await tools[tool].run(args, ctx("bad-input"))


def _status(url: str, headers: dict[str, str], post: bool = True) -> int:
    """The HTTP status of a bare request (blocking: run it in a thread)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode() if post else None
    request = urllib.request.Request(url, body, method="POST" if post else "GET", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_the_token_is_required_when_set() -> None:
    stack = Stack(LOG_ROOT / "token", quiet=True)
    try:
        url = start(stack, server_env(token=TOKEN), "clinic-token")
        assert await asyncio.to_thread(_status, url, {}) == 401
        assert await asyncio.to_thread(_status, url, {"Authorization": "Bearer wrong"}) == 401
        healthz = url.removesuffix("/mcp") + "/healthz"
        assert await asyncio.to_thread(_status, healthz, {}, False) == 200  # probes need no token

        for headers in ({}, {"Authorization": "Bearer wrong"}):
            with pytest.raises(McpConnectionError):
                async with McpToolSource(url, headers=headers, connect_timeout_s=5.0):
                    pass
        async with McpToolSource(url, headers={"Authorization": f"Bearer {TOKEN}"}) as source:
            assert len(await openings(await tools_of(source), date="today")) == 4
    finally:
        stack.stop()


async def test_the_profile_sends_the_token_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    server = PROFILE.mcp_servers[0]
    assert server.auth_token_env == "CLINIC_TOKEN"
    monkeypatch.setenv("CLINIC_TOKEN", TOKEN)
    assert server.auth_headers() == {"Authorization": f"Bearer {TOKEN}"}
    monkeypatch.setenv("CLINIC_MCP_URL", "http://clinic:9000/mcp")
    assert load_profile("clinic").mcp_servers[0].url == "http://clinic:9000/mcp"


async def test_appointments_survive_a_restart(tmp_path: Path) -> None:
    env = server_env(db=str(tmp_path / "clinic.sqlite3"))
    stack = Stack(LOG_ROOT / "restart", quiet=True)
    try:
        async with McpToolSource(start(stack, env, "clinic-restart")) as source:
            tools = await tools_of(source)
            opening = (await openings(tools, date="thursday"))[0]
            booked = await book(tools, opening["opening_id"], "Re Start", "restart-1", phone=PHONE)
        stack.stop()

        async with McpToolSource(start(stack, env, "clinic-restart")) as source:
            tools = await tools_of(source)
            found = await tools["find_appointments"].run({"patient_name": "Re Start"}, ctx())
            assert found["appointments"] == [booked]
            assert (await book(tools, opening["opening_id"], "Re Start", "restart-1")) == booked
            with pytest.raises(ToolRefused, match=r"^refused: opening_taken"):
                await book(tools, opening["opening_id"], "Someone Else", "restart-2")
    finally:
        stack.stop()
