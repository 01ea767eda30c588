"""Prints the fault suite's table (kill -> first fallback audio, per stage) after the run, and
writes it as JSON next to the test logs, also when pytest captures output."""

from __future__ import annotations

import json

from tests.conftest import LOG_ROOT
from tests.faults import RESULTS


def seconds(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else f"{value:{spec}} s"


def fault_table() -> str:
    rows = ["fault (SIGKILL mid-turn)     kill -> first fallback audio   error event   restart",
            "---------------------------  ----------------------------   -----------   -------"]
    for stage, r in RESULTS.items():
        audio = r.get("kill_to_first_audio_s")
        over = " *" if audio is not None and audio > r.get("target_s", 2.0) else "  "
        rows.append(f"{stage:<27}  {seconds(audio):>26}{over}   "
                    f"{seconds(r.get('error_s')):>11}   {seconds(r.get('restart_s'), '.1f'):>7}"
                    + (f"   ({r['note']})" if r.get("note") else ""))
    rows.append("* over the 2 s target (the assert has margin for a loaded machine); restart: the "
                "part's own start, on its port")
    return "\n".join(rows)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not RESULTS:
        return
    terminalreporter.write_sep("=", "fault table")
    terminalreporter.write_line(fault_table())
    terminalreporter.write_line(f"(JSON: {LOG_ROOT / 'faults.json'})")


def pytest_sessionfinish(session, exitstatus) -> None:
    """Written where the tests ran: under pytest-xdist a worker holds the results (in its own
    LOG_ROOT), and the controller, which prints the summary, has none."""
    if RESULTS:
        LOG_ROOT.mkdir(parents=True, exist_ok=True)
        (LOG_ROOT / "faults.json").write_text(json.dumps(RESULTS, indent=2))
