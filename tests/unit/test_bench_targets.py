"""bench-gateway's verdict on the gateway's targets: one caller's p50 / p95, 200 sessions' p99 on at
most one core with no errors, and a clear refusal beyond capacity (bench/gateway_targets.py)."""

from __future__ import annotations

import pytest

from bench.gateway import refusal_codes
from bench.gateway_targets import as_json, checks, missed, summary


def level(sessions, admitted=None, p99=12.0, errors=None, missed_turns=0, cores=0.5, refusals=None):
    admitted = sessions if admitted is None else admitted
    refusals = refusals if refusals is not None else (
        {"overloaded": sessions - admitted} if sessions > admitted else {})
    return {"sessions": sessions, "admitted": admitted, "refused": sessions - admitted,
            "connect_failures": 0, "closed": 0, "turn_p99_ms": p99, "errors": errors or {},
            "missed_turns": missed_turns, "gateway_cores": cores, "refusals": refusals}


def variant(p50=4.2, p95=5.5, loads=None):
    return {"latency": {"turn_p50_ms": p50, "turn_p95_ms": p95},
            "load": loads if loads is not None else [level(10), level(200), level(400, admitted=200)]}


def verdicts(result, max_sessions=200):
    return [check.met for check in checks(result, max_sessions)]


# (case, the variant's results, what each of the four checks says: one caller p50, one caller
# p95, 200 sessions, 400 callers)
CASES = [
    ("a run that meets every target", variant(), [True, True, True, True]),
    ("one caller's p50 just over 5 ms", variant(p50=5.2), [False, True, True, True]),
    ("one caller's p50 at 5 ms", variant(p50=5.0), [True, True, True, True]),
    ("one caller's p50 a hair over 5 ms", variant(p50=5.004), [False, True, True, True]),
    ("one caller's p95 over 10 ms", variant(p95=10.4), [True, False, True, True]),
    ("200 sessions with a p99 of 23 ms", variant(loads=[level(200, p99=23.1), level(400, admitted=200)]),
     [True, True, False, True]),
    ("200 sessions with one error", variant(loads=[level(200, errors={"upstream_unavailable": 1}),
                                                   level(400, admitted=200)]), [True, True, False, True]),
    ("200 sessions with a missed turn", variant(loads=[level(200, missed_turns=1), level(400, admitted=200)]),
     [True, True, False, True]),
    ("200 sessions on more than one core", variant(loads=[level(200, cores=1.3), level(400, admitted=200)]),
     [True, True, False, True]),
    ("only 180 of 200 admitted", variant(loads=[level(200, admitted=180), level(400, admitted=200)]),
     [True, True, False, True]),
    ("400 callers all admitted: no refusal", variant(loads=[level(200), level(400, admitted=400)]),
     [True, True, True, False]),
    ("400 callers refused with another code",
     variant(loads=[level(200), level(400, admitted=200, refusals={"internal": 200})]),
     [True, True, True, False]),
    ("400 callers refused, the admitted degraded",
     variant(loads=[level(200), level(400, admitted=200, p99=41.0)]),
     [True, True, True, False]),
    ("refused by close code 1013 before the session started",
     variant(loads=[level(200), level(400, admitted=200, refusals={"1013": 150, "overloaded": 50})]),
     [True, True, True, True]),
    ("no load levels run", variant(loads=[]), [True, True, None, None]),
]


@pytest.mark.parametrize(("case", "result", "expected"), CASES, ids=[case for case, _, _ in CASES])
def test_each_target_is_judged_on_its_own(case, result, expected):
    assert verdicts(result) == expected


def test_a_load_level_that_was_not_run_is_neither_met_nor_missed():
    found = checks(variant(loads=[level(10), level(50)]), max_sessions=200)
    assert [check.met for check in found] == [True, True, None, None]
    assert missed(found) == []
    assert "not run" in summary(found)


def test_the_summary_names_what_was_measured_and_what_was_missed():
    found = checks(variant(p50=5.3, loads=[level(200, p99=14.0), level(400, admitted=200)]), 200)
    text = summary(found)
    assert "one caller p50 <= 5 ms: 5.30 ms -> NOT MET" in text
    assert "p99 14.0 ms, 0 errors or missed turns, 0.50 gateway cores -> met" in text
    assert "200 admitted, 200 refused (overloaded 200)" in text
    assert [check.target for check in missed(found)] == ["one caller p50 <= 5 ms"]
    assert as_json(found)[0] == {"target": "one caller p50 <= 5 ms", "measured": "5.30 ms", "met": False}


def test_the_cap_the_bench_ran_with_is_what_beyond_capacity_means():
    found = checks(variant(loads=[level(200), level(300, admitted=250)]), max_sessions=250)
    assert found[-1].met is True and "the 50 beyond the cap" in found[-1].target


def test_without_a_cap_no_level_is_beyond_it():
    found = checks(variant(loads=[level(200), level(400)]), max_sessions=0)
    assert [check.met for check in found] == [True, True, True, None]
    assert found[-1].measured == "no cap set"


def test_refusals_are_counted_by_the_code_the_caller_got():
    refused = [("refused", "overloaded"), ("refused", 1013), ("refused", "overloaded"), OSError("reset")]
    assert refusal_codes(refused) == {"overloaded": 2, "1013": 1}


def test_one_callers_p50_is_given_with_its_interval_and_a_warning_when_the_limit_is_inside_it():
    clear = variant(p50=4.2)
    clear["latency"]["turn_samples_ms"] = [4.0 + i * 0.01 for i in range(41)]  # 4.00-4.40 ms
    check = checks(clear, 200)[0]
    assert check.met is True
    assert check.measured.startswith("4.20 ms (90 % interval 4.1") and "rerun" not in check.measured

    edge = variant(p50=4.95)
    edge["latency"]["turn_samples_ms"] = [4.5 + i * 0.025 for i in range(37)]  # 4.50-5.40 ms
    check = checks(edge, 200)[0]
    assert check.met is True  # judged as measured: the interval only says how sure that is
    assert "the limit is inside it, a rerun may judge otherwise" in check.measured
