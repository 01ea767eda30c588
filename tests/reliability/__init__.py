"""The reliability suite. ``RESULTS``: what each scenario recorded, printed as a table by conftest.py."""

from typing import Any

RESULTS: dict[str, dict[str, Any]] = {}
