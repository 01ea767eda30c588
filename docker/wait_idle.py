#!/usr/bin/env python3
"""preStop hook: wait until this pod's calls have ended, then let Kubernetes stop it.

Kubernetes runs preStop when the pod starts terminating; at the same moment it
takes the pod out of the Service endpoints, so no new call arrives. This waits
until the gauge ``--metric`` on the pod's own /metrics reads 0 (at least
``--min-seconds``, at most ``--max-seconds``), then returns; SIGTERM follows.
A call still open after ``--max-seconds`` is closed with 1012 and its client
resumes the session (session_id) on another pod.

Standard library only: it runs inside the service image.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
import urllib.error
import urllib.request

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


def metric_value(text: str, metric: str) -> float | None:
    """Sum of all samples of ``metric`` in a Prometheus text exposition; None if absent."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = _SAMPLE.match(line.strip())
        if match and match["name"] == metric:
            total += float(match["value"])
            found = True
    return total if found else None


def read_metric(url: str, metric: str, timeout: float = 2.0) -> float | None:
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return metric_value(reply.read().decode("utf-8", "replace"), metric)


def wait_idle(url: str, metric: str, min_seconds: float, max_seconds: float, interval: float,
              clock=time.monotonic, sleep=time.sleep) -> str:
    """Return why the wait ended: 'idle', 'timeout' or 'unreachable'."""
    start = clock()
    sleep(min(min_seconds, max_seconds))
    while True:
        try:
            value = read_metric(url, metric)
        except (urllib.error.URLError, OSError, ValueError):
            return "unreachable"
        if value is None or math.isclose(value, 0.0) or value < 0:
            return "idle"
        elapsed = clock() - start
        if elapsed >= max_seconds:
            return "timeout"
        sleep(min(interval, max_seconds - elapsed))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the pod's own /metrics URL")
    parser.add_argument("--metric", required=True, help="gauge of open calls, e.g. voicebot_active_sessions")
    parser.add_argument("--min-seconds", type=float, default=5.0,
                        help="always wait this long (endpoint removal propagates)")
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    why = wait_idle(args.url, args.metric, args.min_seconds, args.max_seconds, args.interval)
    print(f"wait_idle: {why} after {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
