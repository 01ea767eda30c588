"""Injected failures for tests and demos: a per-tool queue, one entry consumed per call.

``{"find_slots": [{"kind": "timeout", "delay_s": 0.5}, {"kind": "ok"}],
"create_reservation": [{"kind": "slot_taken"}]}``. Kinds:

- ``ok``: behave normally (useful to fail the second call, not the first);
- ``timeout``: sleep ``delay_s`` (default 30 s), then answer with a tool error and do nothing;
- ``slow``: sleep ``delay_s`` (default 30 s), then do the work and answer normally;
- ``slot_taken``: refuse with ``refused: slot_taken``;
- ``error``: a tool error ``error: <message>`` (default message "simulated failure").

An empty or missing queue means normal behaviour.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

KINDS = ("ok", "timeout", "slow", "slot_taken", "error")


@dataclass(frozen=True)
class Failure:
    kind: str
    delay_s: float = 30.0
    message: str = "simulated failure"

    @classmethod
    def parse(cls, raw: Any) -> Failure:
        if not isinstance(raw, dict) or raw.get("kind") not in KINDS:
            raise ValueError(f"each failure is an object with kind in {KINDS}; got {raw!r}")
        delay = float(raw.get("delay_s", cls.delay_s))
        if delay < 0:
            raise ValueError(f"delay_s must not be negative; got {delay}")
        return cls(raw["kind"], delay, str(raw.get("message", cls.message)))


def parse_plan(text: str) -> dict[str, list[Failure]]:
    """Parse and validate a plan; raises ValueError naming what is wrong."""
    if not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"failure plan is not JSON: {exc}") from None
    if not isinstance(raw, dict) or not all(isinstance(v, list) for v in raw.values()):
        raise ValueError('failure plan must look like {"tool_name": [{"kind": "timeout"}, ...]}')
    return {str(tool): [Failure.parse(entry) for entry in entries] for tool, entries in raw.items()}


class FailurePlan:
    def __init__(self, plan: dict[str, list[Failure]] | None = None) -> None:
        # Tool calls run on the event loop, but a lock keeps this safe from any thread.
        self._lock = threading.Lock()
        self._queues: dict[str, deque[Failure]] = {}
        self.replace(plan or {})

    def replace(self, plan: dict[str, list[Failure]]) -> None:
        with self._lock:
            self._queues = {tool: deque(entries) for tool, entries in plan.items()}

    def next(self, tool: str) -> Failure | None:
        with self._lock:
            queue = self._queues.get(tool)
            return queue.popleft() if queue else None

    def pending(self) -> dict[str, int]:
        with self._lock:
            return {tool: len(queue) for tool, queue in self._queues.items() if queue}
