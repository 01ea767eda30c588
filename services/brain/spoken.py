"""Make streamed model text fit for the ear, delta by delta (no waiting for the whole reply)."""

from __future__ import annotations

import re

_MARKDOWN = re.compile(r"[*_`#>|~]+")
_BULLET = re.compile(r"(^|\n)\s*(?:[-•]|\d+\.)\s+")


class SpokenTextCleaner:
    """Strip markdown from a stream of deltas; keeps line starts across deltas."""

    def __init__(self) -> None:
        self._at_line_start = True

    def clean(self, delta: str) -> str:
        text = _BULLET.sub(lambda m: m.group(1), ("\n" if self._at_line_start else "") + delta)
        if self._at_line_start:
            text = text[1:]
        text = _MARKDOWN.sub("", text).replace("\n", " ")
        self._at_line_start = delta.endswith("\n")
        return text
