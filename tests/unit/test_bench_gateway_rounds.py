"""bench-gateway's one-caller latency in rounds: the variants take turns, and each variant's rounds
are pooled into one sample."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from bench.gateway import gc_pauses, pooled


def test_a_variants_latency_rounds_are_pooled_as_one_sample():
    def run(turns, errors, cores, stalls):
        return {"machine_stalls": stalls, "turn_samples_ms": turns, "brain_samples_ms": [4.0] * len(turns),
                "without_brain_samples_ms": [t - 4.0 for t in turns], "missed_turns": 1, "errors": errors,
                "gateway_cores": cores, "gateway_us_per_frame": 100.0, "stt_messages_per_frame": 0.1,
                "ws_messages_per_turn": 17.0, "reply_deltas_per_turn": 1.0,
                "gc_pauses": {"gateway": {"collections": 2, "ms": 3.5},
                              "brain": {"collections": 1, "ms": 2.0}}}

    merged = pooled([
        run([6.0, 7.0, 8.0], {"internal": 1}, 0.02, {"over_2ms": 3, "over_10ms": 1, "max_ms": 12.5}),
        run([9.0, 10.0], {"internal": 2, "x": 1}, 0.04, {"over_2ms": 2, "over_10ms": 0, "max_ms": 4.0})])
    assert merged["rounds"] == 2 and merged["turns"] == 5
    assert merged["turn_p50_ms"] == 8.0 and merged["turn_p99_ms"] == 10.0
    assert merged["without_brain_p50_ms"] == 4.0 and merged["brain_p50_ms"] == 4.0
    assert merged["missed_turns"] == 2 and merged["errors"] == {"internal": 3, "x": 1}
    assert abs(merged["gateway_cores"] - 0.03) < 1e-9
    # The collector's pauses of both rounds: the whole time each process was stopped.
    assert merged["gc_pauses"] == {"gateway": {"collections": 4, "ms": 7.0},
                                   "brain": {"collections": 2, "ms": 4.0}}
    # The machine's late wake-ups in both windows, and the latest of them.
    assert merged["machine_stalls"] == {"over_2ms": 5, "over_10ms": 1, "max_ms": 12.5}


async def test_the_variants_take_turns_at_each_load_level_and_each_is_pooled(monkeypatch):
    from argparse import Namespace

    from bench import gateway as bench_gateway

    calls = []

    async def run_sessions(url, count, seconds, period, gateway_pid, others, samples=False,
                           brain_metrics=None, stalls=None):
        calls.append((url, count, seconds))
        turns = [float(len(calls))]
        return {"turn_samples_ms": turns, "brain_samples_ms": [1.0], "without_brain_samples_ms": [0.0],
                "missed_turns": 0, "errors": {}, "gateway_cores": 0.5, "gateway_us_per_frame": 60.0,
                "stt_messages_per_frame": 0.1, "ws_messages_per_turn": 17.0, "reply_deltas_per_turn": 1.0,
                "sessions": count, "gc_pauses": {"gateway": {"collections": 0, "ms": 0.0}}}

    async def until_idle(http_url):
        return None

    monkeypatch.setattr(bench_gateway, "run_sessions", run_sessions)
    monkeypatch.setattr(bench_gateway, "until_idle", until_idle)
    urls = {"a": "ws://a/v1/call", "b": "ws://b/v1/call"}
    loads = await bench_gateway.interleaved_loads(urls, {"a": 1, "b": 2}, {},
                                                  Namespace(sessions=[10, 50], seconds=20.0, load_rounds=2),
                                                  "http://brain/metrics")

    # Per level, the order rotates each round; each round gets half the level's seconds.
    assert [(url[5], count) for url, count, _ in calls] == [
        ("a", 10), ("b", 10), ("b", 10), ("a", 10), ("a", 50), ("b", 50), ("b", 50), ("a", 50)]
    assert {seconds for _, _, seconds in calls} == {10.0}
    assert [level["sessions"] for level in loads["a"]] == [10, 50]
    assert loads["a"][0]["rounds"] == 2 and loads["a"][0]["turns"] == 2
    assert loads["b"][1]["turn_p99_ms"] == 7.0  # b's two runs at 50 sessions were the 6th and 7th
    assert not any(key.endswith("_samples_ms") for level in loads["a"] for key in level)


def test_a_process_collections_are_read_from_its_metrics_all_generations_summed():
    registry = CollectorRegistry()
    pauses = Histogram("voicebot_gc_pause_seconds", "", ["generation"], registry=registry)
    pauses.labels("0").observe(0.002)
    pauses.labels("0").observe(0.003)
    pauses.labels("2").observe(0.015)
    found = gc_pauses(generate_latest(registry).decode())
    assert found["collections"] == 3 and abs(found["seconds"] - 0.020) < 1e-9


def test_a_levels_rounds_keep_every_rounds_faults_and_refusals_and_are_judged_per_round():
    """``--load-rounds 2`` at 400 callers with a cap of 200: a failed connection and a session the
    gateway closed in the first round, and a refusal by another code in it, are not lost behind a
    clean last round, and the verdict weighs both rounds' sessions."""
    from bench.gateway_targets import checks

    def run(refusals, connect_failures=0, closed=0):
        return {"turn_samples_ms": [5.0], "brain_samples_ms": [2.0], "without_brain_samples_ms": [3.0],
                "missed_turns": 0, "errors": {}, "gateway_cores": 0.5, "gateway_us_per_frame": 50.0,
                "stt_messages_per_frame": 0.1, "ws_messages_per_turn": 17.0, "reply_deltas_per_turn": 1.0,
                "gc_pauses": {}, "sessions": 400, "admitted": 200, "refused": 200, "refusals": refusals,
                "connect_failures": connect_failures, "closed": closed}

    clean = run({"overloaded": 200})
    merged = pooled([run({"overloaded": 199, "internal": 1}, connect_failures=1, closed=1), clean])
    assert (merged["admitted"], merged["refused"]) == (400, 400)
    assert merged["refusals"] == {"overloaded": 399, "internal": 1}
    assert (merged["connect_failures"], merged["closed"]) == (1, 1)
    latency = {"turn_p50_ms": 4.0, "turn_p95_ms": 5.0}
    [*_, beyond] = checks({"latency": latency, "load": [merged]}, 200)
    assert beyond.met is False  # the first round's faults and its refusal by another code
    [*_, beyond] = checks({"latency": latency, "load": [pooled([clean, clean])]}, 200)
    assert beyond.met is True  # two clean rounds: 400 admitted of 800 callers is each round's 200
