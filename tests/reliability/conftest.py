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
    LOG_ROOT.mkdir(parents=True, exist_ok=True)
    (LOG_ROOT / "reliability.json").write_text(json.dumps(RESULTS, indent=2, default=str))
    terminalreporter.write_line(f"(JSON: {LOG_ROOT / 'reliability.json'})")
