"""bench-gateway's hop probe: each kind of hop to a real echo process is timed, and a turn's
transport floor is the sum of the hops a turn crosses one after the other."""

from __future__ import annotations

import pytest

from bench import gateway_hops as bench_hops


async def test_every_kind_of_hop_is_timed_against_a_real_echo_process_and_summed_into_the_floor():
    hops = await bench_hops.measure(count=3)

    for kind in ("socket_round_trip_ms", "grpc_call_ms", "grpc_stream_message_ms"):
        # A round trip to another process takes some time, and never a second on an idle machine.
        assert 0 < hops[kind] < 1000, (kind, hops)
    # Three messages on open gRPC streams (STT, the brain's call and TTS, all opened at the
    # speech's onset) and three socket round trips (the client, Redis, the LLM).
    assert hops["turn_floor_ms"] == pytest.approx(
        3 * hops["grpc_stream_message_ms"] + 3 * hops["socket_round_trip_ms"])


async def test_a_round_trip_and_some_python_are_timed_after_a_long_idle_too():
    """One caller's brain, Redis and LLM sleep between turns: the probe times a round trip and a
    fixed piece of Python after that long idle, and the same work again right after it, and says
    how many times as long it took just woken."""
    hops = await bench_hops.measure(count=3)

    assert 0 < hops["socket_round_trip_after_idle_ms"] < 1000, hops
    assert 0 < hops["work_ms"] < 1000 and 0 < hops["work_after_idle_ms"] < 1000, hops
    assert hops["cold_work_factor"] == pytest.approx(hops["work_after_idle_ms"] / hops["work_ms"])
