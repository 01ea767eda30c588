"""The fault suite. ``RESULTS``: what each case measured, printed as a table by conftest.py."""

from typing import Any

RESULTS: dict[str, dict[str, Any]] = {}
