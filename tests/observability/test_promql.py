"""Every PromQL expression we ship parses (promtool), and the alert rules fire when they should."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "k8s" / "alerts"
DASHBOARDS = sorted((ROOT / "k8s" / "dashboards").glob("*.json"))


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: apt-get install prometheus (.ci/run installs it)")
    return path


def run(promtool: str, *args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_alert_rules_are_valid(promtool):
    assert "SUCCESS" in run(promtool, "check", "rules", str(ALERTS / "voicebot-rules.yaml"))


def test_alert_rules_fire_and_stay_quiet_as_specified(promtool):
    assert "SUCCESS" in run(promtool, "test", "rules", "voicebot-rules.test.yaml", cwd=ALERTS)


def dashboard_expressions(path: Path) -> list[tuple[str, str]]:
    found = []

    def walk(node, title=""):
        if isinstance(node, dict):
            title = node.get("title", title)
            if isinstance(node.get("expr"), str):
                found.append((title, node["expr"]))
            for value in node.values():
                walk(value, title)
        elif isinstance(node, list):
            for value in node:
                walk(value, title)

    walk(json.loads(path.read_text()))
    return found


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=lambda p: p.name)
def test_every_dashboard_query_parses(promtool, dashboard, tmp_path):
    expressions = dashboard_expressions(dashboard)
    assert expressions, f"{dashboard.name} has no queries"
    # Grafana's range variables are not PromQL: substitute what Grafana would.
    rules = [{"record": f"dashboard:expr_{i}",
              "expr": expr.replace("$__rate_interval", "1m").replace("$__interval", "1m")
                          .replace("$__range", "1h")}
             for i, (_, expr) in enumerate(expressions)]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run(promtool, "check", "rules", str(path))


def test_dashboard_shows_what_operators_need():
    path = ROOT / "k8s" / "dashboards" / "voicebot.json"
    dashboard = json.loads(path.read_text())
    queries = " ".join(expr for _, expr in dashboard_expressions(path))
    for needed in ('stage="voice_to_voice"', "histogram_quantile(0.99", 'stage="endpoint"', 'stage="stt"',
                   'stage="llm_ttft"', 'stage="tts_ttfa"', "voicebot_barge_ins_total", "voicebot_turns_total",
                   "voicebot_tool_calls_total", "voicebot_guard_blocks_total", "voicebot_llm_fallbacks_total",
                   "voicebot_handoffs_total", "voicebot_active_sessions", "vllm:time_to_first_token_seconds",
                   "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits",
                   "vllm:prefix_cache_queries"):
        assert needed in queries, needed
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
