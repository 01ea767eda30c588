"""Prints what each reliability scenario recorded after the run, and writes it as JSON next to the
test logs (also when pytest captures output)."""

from __future__ import annotations

import json

from tests.conftest import LOG_ROOT
from tests.reliability import RESULTS


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not RESULTS:
        return
    terminalreporter.write_sep("=", "reliability scenarios: what happened")
    for scenario, record in RESULTS.items():
        terminalreporter.write_line(f"{scenario}:")
        for key, value in record.items():
            terminalreporter.write_line(f"    {key}: {value}")
    terminalreporter.write_line(f"(JSON: {LOG_ROOT / 'reliability.json'})")


def pytest_sessionfinish(session, exitstatus) -> None:
    """Written where the tests ran: under pytest-xdist a worker holds the results (in its own
    LOG_ROOT), and the controller, which prints the summary, has none."""
    if RESULTS:
        LOG_ROOT.mkdir(parents=True, exist_ok=True)
        (LOG_ROOT / "reliability.json").write_text(json.dumps(RESULTS, indent=2, default=str))
