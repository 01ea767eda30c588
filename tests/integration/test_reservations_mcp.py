"""The reservation MCP server as a real process, reached through the brain's MCP tool adapter."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest

from voicebot.brain.act.mcp_tools import McpConnectionError, McpTool, McpToolSource, load_mcp_tools, tool_spec
from voicebot.brain.act.toolcalls import ToolCall
from voicebot.brain.act.tools import Dispatcher, ToolContext, ToolKind, ToolRefused, ToolRegistry, ToolSpec
from voicebot.devstack import Stack, free_port

pytestmark = pytest.mark.integration

LOG_ROOT = Path(os.environ.get("VOICEBOT_TEST_LOGS", "/tmp/voicebot-test-logs")) / "reservations"
TODAY = "2030-01-07"  # a Monday: the server's calendar is pinned, so days and weekdays are fixed
PHONE = "+44 7700 900123"


def server_env(port: int = 0, db: str = ":memory:") -> dict[str, str]:
    # Admin tools (failure injection) are off unless turned on: these tests need them.
    return {"RESERVATIONS_PORT": str(port), "RESERVATIONS_DB": db, "RESERVATIONS_TODAY": TODAY,
            "RESERVATIONS_LOG_LEVEL": "WARNING", "RESERVATIONS_ADMIN": "true"}


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    stack = Stack(LOG_ROOT, quiet=True)
    try:
        proc = stack.start_service("reservations", "examples.restaurant.server", server_env(), timeout=30)
        yield f"http://127.0.0.1:{proc.ready['http']}/mcp"
    finally:
        stack.stop()


@pytest.fixture
async def source(server_url: str) -> AsyncIterator[McpToolSource]:
    async with McpToolSource(server_url) as src:
        await set_failures(src, {})  # each test starts without injected failures
        yield src


async def set_failures(src: McpToolSource, plan: dict[str, Any]) -> None:
    result = await src.call("admin_set_failures", {"plan_json": json.dumps(plan)})
    assert not result.is_error, result


async def tools_of(src: McpToolSource) -> dict[str, McpTool]:
    return {tool.spec.name: tool for tool in await src.load_tools()}


async def slots(tools: dict[str, McpTool], **args: Any) -> list[dict[str, Any]]:
    return (await tools["find_slots"].run(args, ctx()))["slots"]


def ctx(key: str | None = None) -> ToolContext:
    return ToolContext(user_id="alice", session_id="s1", turn_id="t1", idempotency_key=key)


async def test_tools_are_listed_with_kinds_from_their_annotations(server_url: str) -> None:
    tools = {tool.spec.name: tool for tool in await load_mcp_tools(server_url)}
    try:
        assert sorted(tools) == ["cancel_reservation", "create_reservation", "find_slots", "get_reservation"]
        kinds = {name: tool.spec.kind for name, tool in tools.items()}
        assert kinds == {
            "find_slots": ToolKind.READ_ONLY, "get_reservation": ToolKind.READ_ONLY,
            "create_reservation": ToolKind.IRREVERSIBLE, "cancel_reservation": ToolKind.IRREVERSIBLE}
        create = tools["create_reservation"].spec
        assert create.accepts_idempotency_key
        assert "idempotency_key" not in create.parameters["properties"]
        assert "idempotency_key" not in create.parameters.get("required", [])
        assert {"slot_id", "name", "people", "phone"} <= set(create.parameters["properties"])
        assert not tools["find_slots"].spec.accepts_idempotency_key
        assert create.timeout_s == ToolSpec("x", "x", {}).timeout_s  # the ToolSpec default
        assert len(ToolRegistry(list(tools.values()))) == 4  # the schemas are valid JSON Schema
    finally:
        await next(iter(tools.values())).source.aclose()


def test_annotation_mapping_on_hand_built_tools() -> None:
    schema = {"type": "object", "required": ["x", "idempotency_key"],
              "properties": {"x": {"type": "string"}, "idempotency_key": {"type": "string"}}}

    def spec(annotations: mcp_types.ToolAnnotations | None) -> ToolSpec:
        listed = mcp_types.Tool(name="t", description="d", input_schema=schema, annotations=annotations)
        return tool_spec(listed)

    assert spec(None).kind is ToolKind.IRREVERSIBLE  # nothing declared: the safe default
    assert spec(mcp_types.ToolAnnotations()).kind is ToolKind.IRREVERSIBLE
    assert spec(mcp_types.ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                          idempotent_hint=True)).kind is ToolKind.IRREVERSIBLE
    assert spec(mcp_types.ToolAnnotations(read_only_hint=True)).kind is ToolKind.READ_ONLY
    hidden = spec(None)
    assert hidden.accepts_idempotency_key
    assert hidden.parameters == {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    assert "idempotency_key" in schema["properties"]  # the listing itself is not modified


async def test_find_create_get_cancel(source: McpToolSource) -> None:
    tools = await tools_of(source)
    seen: list[Any] = []

    found = await tools["find_slots"].run({"day": "tuesday", "people": 2, "time": "19:10"}, ctx())
    seen.append(found)
    first = found["slots"][0]
    assert first["day"] == "2030-01-08" and first["weekday"] == "Tuesday"
    assert first["time"] == "19:00" and first["seats"] == 2  # the nearest time, the smallest table
    assert 1 < len(found["slots"]) <= 4

    booked = await tools["create_reservation"].run(
        {"slot_id": first["slot_id"], "name": "Ada Flow", "people": 2, "phone": PHONE}, ctx("k-flow"))
    seen.append(booked)
    assert booked["status"] == "confirmed"
    assert (booked["day"], booked["time"], booked["name"], booked["people"]) == ("2030-01-08", "19:00",
                                                                                  "Ada Flow", 2)
    by_id = await tools["get_reservation"].run({"reservation_id": booked["reservation_id"]}, ctx())
    by_name = await tools["get_reservation"].run({"name": "ada flow"}, ctx())
    seen += [by_id, by_name]
    assert [r["reservation_id"] for r in by_id["reservations"]] == [booked["reservation_id"]]
    assert by_name["reservations"] == by_id["reservations"]

    cancelled = await tools["cancel_reservation"].run({"reservation_id": booked["reservation_id"]}, ctx())
    again = await tools["cancel_reservation"].run({"reservation_id": booked["reservation_id"]}, ctx())
    after = await tools["get_reservation"].run({"reservation_id": booked["reservation_id"]}, ctx())
    seen += [cancelled, again, after]
    assert cancelled["status"] == again["status"] == "cancelled"
    assert after["reservations"][0]["status"] == "cancelled"

    text = json.dumps(seen)
    assert "phone" not in text and "7700" not in text  # stored, never returned


async def test_the_same_idempotency_key_books_once(source: McpToolSource) -> None:
    tools = await tools_of(source)
    slot = (await slots(tools, day="2030-01-09", people=3, time="20:00"))[0]
    args = {"slot_id": slot["slot_id"], "name": "Idem Potent", "people": 3, "phone": PHONE}

    first = await tools["create_reservation"].run(args, ctx("turn-7-create"))
    retry = await tools["create_reservation"].run(args, ctx("turn-7-create"))
    assert retry == first
    # A key the model slips into its arguments is not used: it is not the model's to choose.
    other = await tools["create_reservation"].run({**args, "idempotency_key": "turn-7-create"}, ctx())
    assert other["reservation_id"] != first["reservation_id"]

    listed = await tools["get_reservation"].run({"name": "Idem Potent"}, ctx())
    assert sorted(r["reservation_id"] for r in listed["reservations"]) == sorted(
        [first["reservation_id"], other["reservation_id"]])
    assert "7700" not in json.dumps([first, retry, other, listed])


async def test_a_full_slot_is_refused(source: McpToolSource) -> None:
    tools = await tools_of(source)
    create = tools["create_reservation"]
    slot = (await slots(tools, day="2030-01-10", people=2, time="18:00"))[0]
    assert (slot["time"], slot["seats"]) == ("18:00", 2)
    for n in range(3):  # three tables for two at each time
        await create.run({"slot_id": slot["slot_id"], "name": f"Guest {n}", "people": 2}, ctx(f"full-{n}"))

    with pytest.raises(ToolRefused, match=r"^refused: slot_taken"):
        await create.run({"slot_id": slot["slot_id"], "name": "Late", "people": 2}, ctx("full-late"))
    # Search moves the party to a bigger table at that time.
    again = await slots(tools, day="2030-01-10", people=2, time="18:00")
    assert (again[0]["time"], again[0]["seats"]) == ("18:00", 4)


async def test_bad_input_is_a_tool_error(source: McpToolSource) -> None:
    tools = await tools_of(source)
    with pytest.raises(ValueError, match=r"^invalid: unknown slot_id"):
        await tools["create_reservation"].run({"slot_id": "nope", "name": "X", "people": 2}, ctx("bad-1"))
    with pytest.raises(ValueError, match=r"^invalid: .*past"):
        await tools["find_slots"].run({"day": "2030-01-01", "people": 2}, ctx())
    with pytest.raises(ToolRefused, match=r"^refused: our largest table seats 4 people, so we cannot "
                                          r"book a table for 9$"):  # a sentence the caller hears
        await tools["find_slots"].run({"day": "friday", "people": 9}, ctx())


async def test_failure_plan_times_out_once_then_answers(source: McpToolSource) -> None:
    find = (await tools_of(source))["find_slots"]
    await set_failures(source, {"find_slots": [{"kind": "timeout", "delay_s": 2.0}]})
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(find.run({"day": "monday", "people": 2}, ctx()), 0.3)
    assert loop.time() - started < 1.0  # the dispatcher's wait_for is what ends a slow call

    answer = await asyncio.wait_for(find.run({"day": "monday", "people": 2}, ctx()), 2.0)
    assert answer["slots"] and answer["slots"][0]["day"] == TODAY


async def test_failure_plan_through_the_dispatcher(source: McpToolSource) -> None:
    tools = await tools_of(source)
    # A short timeout so the read-only retry happens within the test's budget.
    find = McpTool(dataclasses.replace(tools["find_slots"].spec, timeout_s=0.3), source)
    create = tools["create_reservation"]
    await set_failures(source, {"find_slots": [{"kind": "timeout", "delay_s": 2.0}, {"kind": "ok"}],
                                "create_reservation": [{"kind": "slot_taken"}],
                                "get_reservation": [{"kind": "error", "message": "database away"}]})

    async def no_sleep(_: float) -> None:
        return None

    dispatcher = Dispatcher(ToolRegistry([find, create, tools["get_reservation"]]), sleep=no_sleep)
    call = ToolCall("c1", "find_slots", json.dumps({"day": "wednesday", "people": 2}))
    result = await dispatcher.execute(call, ctx())
    assert (result.outcome, result.attempts) == ("succeeded", 2)
    assert result.content["result"]["slots"][0]["day"] == "2030-01-09"

    slot_id = result.content["result"]["slots"][0]["slot_id"]
    refused = await dispatcher.run(create, ToolCall("c2", "create_reservation", "{}"),
                                   {"slot_id": slot_id, "name": "Plan", "people": 2}, ctx("plan-1"))
    assert refused.outcome == "refused" and refused.content["refused"].startswith("refused: slot_taken")
    failed = await dispatcher.execute(ToolCall("c3", "get_reservation", json.dumps({"name": "Plan"})), ctx())
    assert failed.outcome == "failed" and failed.content["error"] == "error: database away"


# Protocol revision 2026-07-28 (sessionless), and the handshake.
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_reconnects_after_the_server_restarts(tmp_path: Path, mode: str) -> None:
    port = free_port()
    env = server_env(port, str(tmp_path / "book.sqlite3"))  # a file: bookings survive the restart
    stack = Stack(LOG_ROOT / f"restart-{mode}", quiet=True)
    try:
        stack.start_service("reservations-restart", "examples.restaurant.server", env, timeout=30)
        async with McpToolSource(f"http://127.0.0.1:{port}/mcp", connect_timeout_s=2.0, mode=mode) as src:
            tools = await tools_of(src)
            slot = (await slots(tools, day="thursday", people=4))[0]
            booked = await tools["create_reservation"].run(
                {"slot_id": slot["slot_id"], "name": "Re Start", "people": 4}, ctx("restart-1"))

            # Restarted between two calls: the old session (legacy) or pooled connection is stale,
            # which proves the request never ran, so the source reconnects and resends once.
            stack.stop()
            stack.start_service("reservations-restart", "examples.restaurant.server", env, timeout=30)
            found = await tools["get_reservation"].run({"name": "Re Start"}, ctx())
            assert [r["reservation_id"] for r in found["reservations"]] == [booked["reservation_id"]]

            if mode == "legacy":
                return  # the rest is transport-level, the same in both modes
            stack.stop()
            with pytest.raises(McpConnectionError):
                await tools["get_reservation"].run({"name": "Re Start"}, ctx())
            stack.start_service("reservations-restart", "examples.restaurant.server", env, timeout=30)
            found = await tools["get_reservation"].run({"name": "Re Start"}, ctx())
            assert found["reservations"][0]["reservation_id"] == booked["reservation_id"]
    finally:
        stack.stop()
