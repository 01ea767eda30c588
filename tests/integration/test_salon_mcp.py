"""The salon MCP server (the third business) as a real process, reached through the brain's MCP adapter.

The salon's tools are named and shaped unlike the other businesses' on
purpose: nothing here is salon code in the brain, everything comes from the
server's listing, its annotations and its schemas' enums. Timeouts are
generous: a loaded two-core machine starts Python slowly.
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
from voicebot.devstack import Stack

pytestmark = pytest.mark.integration

LOG_ROOT = Path(os.environ.get("VOICEBOT_TEST_LOGS", "/tmp/voicebot-test-logs")) / "salon"
TODAY = "2030-01-07"  # a Monday (closed): the calendar is pinned, so days and weekdays are fixed
PHONE = "+1 555 0199 8765"
TOKEN = "salon-test-token"
START_TIMEOUT_S = 90.0
CONNECT_TIMEOUT_S = 30.0
SERVICES = ["haircut", "colour", "beard trim"]
STYLISTS = ["", "Mia", "Leo"]


def server_env(token: str = "") -> dict[str, str]:
    return {"SALON_PORT": "0", "SALON_DB": ":memory:", "SALON_TODAY": TODAY, "SALON_TOKEN": token,
            "SALON_LOG_LEVEL": "WARNING"}


def start(stack: Stack, env: dict[str, str], name: str = "salon") -> str:
    proc = stack.start_service(name, "examples.salon.server", env, timeout=START_TIMEOUT_S)
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
    async with McpToolSource(server_url, connect_timeout_s=CONNECT_TIMEOUT_S) as source:
        yield await tools_of(source)


async def tools_of(source: McpToolSource) -> dict[str, McpTool]:
    return {tool.spec.name: tool for tool in await source.load_tools()}


def ctx(key: str | None = None) -> ToolContext:
    return ToolContext(user_id="sam", session_id="s1", turn_id="t1", idempotency_key=key)


async def free(tools: dict[str, McpTool], **args: Any) -> list[dict[str, Any]]:
    return (await tools["free_times"].run(args, ctx()))["times"]


async def book(tools: dict[str, McpTool], time_id: str, name: str, key: str | None = None,
               **extra: Any) -> dict[str, Any]:
    return await tools["book_visit"].run({"time_id": time_id, "customer_name": name, **extra}, ctx(key))


def starts(times: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(t["time"], t["stylist"]) for t in times]


async def test_tools_are_listed_with_kinds_and_enums(tools: dict[str, McpTool]) -> None:
    kinds = {name: tool.spec.kind for name, tool in tools.items()}
    assert kinds == {"free_times": ToolKind.READ_ONLY, "find_visits": ToolKind.READ_ONLY,
                     "book_visit": ToolKind.WRITE, "cancel_visit": ToolKind.WRITE}
    listing = tools["free_times"].spec.parameters
    assert set(listing["required"]) == {"day", "service"}
    assert listing["properties"]["service"]["enum"] == SERVICES
    assert listing["properties"]["stylist"]["enum"] == STYLISTS
    assert listing["properties"]["from_time"]["type"] == "string"

    booking = tools["book_visit"].spec
    assert booking.accepts_idempotency_key  # code fills it, the model never sees it
    assert "idempotency_key" not in booking.parameters["properties"]
    assert set(booking.parameters["required"]) == {"time_id", "customer_name"}
    assert not tools["free_times"].spec.accepts_idempotency_key
    assert tools["cancel_visit"].spec.parameters["required"] == ["visit_id"]
    assert len(ToolRegistry(list(tools.values()))) == 4  # the schemas are valid JSON Schema


async def test_free_times_on_an_open_day(tools: dict[str, McpTool]) -> None:
    tuesday = await free(tools, day="tuesday", service="haircut")
    assert starts(tuesday) == [("10:00", "Mia"), ("10:00", "Leo"), ("10:30", "Mia"), ("10:30", "Leo")]
    assert tuesday[0] == {"time_id": tuesday[0]["time_id"], "day": "2030-01-08", "weekday": "Tuesday",
                          "time": "10:00", "stylist": "Mia", "service": "haircut"}

    leo = await free(tools, day="2030-01-08", service="Cut", stylist="leo", from_time="14:10")
    assert starts(leo) == [(t, "Leo") for t in ("14:30", "15:00", "15:30", "16:00")]
    assert {t["service"] for t in leo} == {"haircut"}  # a synonym, in any case, names the service
    late = await free(tools, day="tuesday", service="color", stylist="Mia", from_time="17:45")
    assert [t["time"] for t in late] == ["16:30", "16:00", "15:30", "15:00"]  # a colour ends by 18:00
    assert {t["service"] for t in late} == {"colour"}
    beard = await free(tools, day="saturday", service="Beard", from_time="17:30")
    assert starts(beard)[:2] == [("17:30", "Mia"), ("17:30", "Leo")]
    assert beard[0]["service"] == "beard trim" and beard[0]["weekday"] == "Saturday"


@pytest.mark.parametrize(("day", "weekday"), [("today", "Monday"), ("sunday", "Sunday")])
async def test_a_closed_day_gives_the_note(tools: dict[str, McpTool], day: str, weekday: str) -> None:
    closed = await tools["free_times"].run({"day": day, "service": "haircut"}, ctx())
    assert closed == {"times": [],
                      "note": f"the salon is closed on {weekday}s; it is open Tuesday to Saturday"}


async def test_a_booked_time_is_no_longer_free(tools: dict[str, McpTool]) -> None:
    first = (await free(tools, day="wednesday", service="haircut", stylist="Mia", from_time="10:00"))[0]
    booked = await book(tools, first["time_id"], "Ada Lovelace", "taken-1")
    assert {k: v for k, v in booked.items() if k != "visit_id"} == {
        "day": "2030-01-09", "weekday": "Wednesday", "time": "10:00", "stylist": "Mia",
        "service": "haircut", "customer_name": "Ada Lovelace", "status": "booked"}
    assert booked["visit_id"].startswith("V")

    again = await free(tools, day="wednesday", service="haircut", stylist="Mia", from_time="10:00")
    assert first["time_id"] not in {t["time_id"] for t in again}
    assert again[0]["time"] == "10:30"
    with pytest.raises(ToolRefused, match=r"^refused: time_taken"):
        await book(tools, first["time_id"], "Second Caller", "taken-2")
    second = await tools["find_visits"].run({"customer_name": "Second Caller"}, ctx())
    assert second["visits"] == []


async def test_a_name_without_a_surname_names_the_field_to_ask_again(tools: dict[str, McpTool]) -> None:
    time = (await free(tools, day="2030-01-16", service="beard trim", stylist="Mia", from_time="15:00"))[0]
    with pytest.raises(ValueError, match=r"^customer_name: "):
        await book(tools, time["time_id"], "Lovelace", "surname-1")
    assert (await tools["find_visits"].run({"customer_name": "Lovelace"}, ctx()))["visits"] == []
    booked = await book(tools, time["time_id"], "Ada Lovelace", "surname-2")
    assert booked["time"] == time["time"]


async def test_a_colour_blocks_three_openings(tools: dict[str, McpTool]) -> None:
    colour = (await free(tools, day="thursday", service="colour", stylist="Leo", from_time="11:00"))[0]
    assert colour["time"] == "11:00"
    cut_inside = (await free(tools, day="thursday", service="haircut", stylist="Leo", from_time="11:30"))[0]
    assert cut_inside["time"] == "11:30"
    await book(tools, colour["time_id"], "Grace Hopper", "colour-1")

    cuts = await free(tools, day="thursday", service="haircut", stylist="Leo", from_time="11:00")
    assert [t["time"] for t in cuts] == ["12:30", "13:00", "13:30", "14:00"]  # 11:00, 11:30, 12:00 held
    colours = await free(tools, day="thursday", service="colour", stylist="Leo", from_time="09:00")
    assert [t["time"] for t in colours][:2] == ["12:30", "13:00"]  # 10:00 and 10:30 would overlap
    early = await free(tools, day="thursday", service="haircut", stylist="Leo", from_time="10:00")
    assert [t["time"] for t in early][:2] == ["10:00", "10:30"]  # before the colour: still free
    mia = await free(tools, day="thursday", service="haircut", stylist="Mia", from_time="11:30")
    assert mia[0]["time"] == "11:30"  # the other stylist is not held
    with pytest.raises(ToolRefused, match=r"^refused: time_taken"):  # inside the colour
        await book(tools, cut_inside["time_id"], "Someone Else", "colour-2")


async def test_the_same_idempotency_key_books_once(tools: dict[str, McpTool]) -> None:
    first_time, second_time = (await free(tools, day="friday", service="haircut", stylist="Leo"))[:2]
    first = await book(tools, first_time["time_id"], "Idem Potent", "turn-3-book")
    retry = await book(tools, first_time["time_id"], "Idem Potent", "turn-3-book")
    assert retry == first
    # A retry whose arguments drifted still returns the booking that went through, never a second one.
    drifted = await book(tools, second_time["time_id"], "Idem Potent", "turn-3-book")
    assert drifted == first
    listed = await tools["find_visits"].run({"customer_name": "Idem Potent"}, ctx())
    assert [v["visit_id"] for v in listed["visits"]] == [first["visit_id"]]


async def test_find_then_cancel(tools: dict[str, McpTool]) -> None:
    time = (await free(tools, day="saturday", service="colour", stylist="Mia", from_time="14:00"))[0]
    booked = await book(tools, time["time_id"], "Grace Kelly", "cancel-1", phone=PHONE)

    found = await tools["find_visits"].run({"customer_name": "grace kelly"}, ctx())
    assert found["visits"] == [booked]
    assert set(booked) == {"visit_id", "day", "weekday", "time", "stylist", "service", "customer_name",
                           "status"}

    cancelled = await tools["cancel_visit"].run({"visit_id": booked["visit_id"]}, ctx())
    again = await tools["cancel_visit"].run({"visit_id": booked["visit_id"].lower()}, ctx())
    assert cancelled["status"] == again["status"] == "cancelled"
    after = await tools["find_visits"].run({"customer_name": "Grace Kelly"}, ctx())
    assert [(v["visit_id"], v["status"]) for v in after["visits"]] == [(booked["visit_id"], "cancelled")]
    freed = await free(tools, day="saturday", service="colour", stylist="Mia", from_time="14:00")
    assert freed[0]["time_id"] == time["time_id"]  # a cancelled visit frees its openings

    text = json.dumps([booked, found, cancelled, again, after])
    for secret in ("0199", "8765", "phone"):
        assert secret not in text  # stored, never returned


@pytest.mark.parametrize(("tool", "args", "error"), [
    ("free_times", {"day": "tuesday", "service": "perm"},
     "unknown service 'perm'; offer haircut, colour or beard trim"),
    ("free_times", {"day": "tuesday", "service": "haircut", "stylist": "Bob"}, "no stylist"),
    ("free_times", {"day": "2030-01-01", "service": "haircut"}, "in the past"),
    ("free_times", {"day": "someday", "service": "haircut"}, "give a date"),
    ("free_times", {"day": "tuesday", "service": "haircut", "from_time": "noon"}, "give a time"),
    ("book_visit", {"time_id": "nope", "customer_name": "X"}, "unknown time_id"),
    ("book_visit", {"time_id": "20300114-1000-mia-haircut", "customer_name": "X"},
     "unknown time_id"),  # a Monday: closed
    ("book_visit", {"time_id": "20300115-1700-mia-colour", "customer_name": "X"},
     "unknown time_id"),  # a colour would end after closing
    ("book_visit", {"time_id": "20300115-1015-leo-haircut", "customer_name": "X"},
     "unknown time_id"),  # not on the half hour
    ("book_visit", {"time_id": "20300115-1000-leo-haircut", "customer_name": " "}, "customer_name is empty"),
    ("find_visits", {"customer_name": ""}, "customer_name is empty"),
    ("cancel_visit", {"visit_id": "V-NOPE"}, "no visit"),
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
        with urllib.request.urlopen(request, timeout=CONNECT_TIMEOUT_S) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_the_token_is_required_when_set() -> None:
    stack = Stack(LOG_ROOT / "token", quiet=True)
    try:
        url = start(stack, server_env(token=TOKEN), "salon-token")
        assert await asyncio.to_thread(_status, url, {}) == 401
        assert await asyncio.to_thread(_status, url, {"Authorization": "Bearer wrong"}) == 401
        healthz = url.removesuffix("/mcp") + "/healthz"
        assert await asyncio.to_thread(_status, healthz, {}, False) == 200  # probes need no token

        with pytest.raises(McpConnectionError):
            async with McpToolSource(url, connect_timeout_s=CONNECT_TIMEOUT_S):
                pass
        async with McpToolSource(url, headers={"Authorization": f"Bearer {TOKEN}"},
                                 connect_timeout_s=CONNECT_TIMEOUT_S) as source:
            assert len(await free(await tools_of(source), day="tuesday", service="haircut")) == 4
    finally:
        stack.stop()
