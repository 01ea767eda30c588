"""bench-gateway's one-caller latency in rounds: the variants take turns, and each variant's rounds
are pooled into one sample."""

from __future__ import annotations

from gateway.bench_gateway import pooled


def test_a_variants_latency_rounds_are_pooled_as_one_sample():
    def run(turns, errors, cores):
        return {"turn_samples_ms": turns, "brain_samples_ms": [4.0] * len(turns),
                "without_brain_samples_ms": [t - 4.0 for t in turns], "missed_turns": 1, "errors": errors,
                "gateway_cores": cores, "gateway_us_per_frame": 100.0, "stt_messages_per_frame": 0.1,
                "ws_messages_per_turn": 17.0, "reply_deltas_per_turn": 1.0}

    merged = pooled([run([6.0, 7.0, 8.0], {"internal": 1}, 0.02),
                     run([9.0, 10.0], {"internal": 2, "x": 1}, 0.04)])
    assert merged["rounds"] == 2 and merged["turns"] == 5
    assert merged["turn_p50_ms"] == 8.0 and merged["turn_p99_ms"] == 10.0
    assert merged["without_brain_p50_ms"] == 4.0 and merged["brain_p50_ms"] == 4.0
    assert merged["missed_turns"] == 2 and merged["errors"] == {"internal": 3, "x": 1}
    assert abs(merged["gateway_cores"] - 0.03) < 1e-9
