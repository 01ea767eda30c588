"""Model text that reads an action back the way code does, caught before it is spoken.

Only code reads a pending action back (DESIGN 5), and a "yes" runs exactly what code read
back. Measured with the packaged 1.5B model: asked to change a booking it had just heard code
read back, it wrote a read-back of its own as text ("To confirm: a table for two on Friday ...
Shall I go ahead?"), with no tool call behind it, so the caller was asked to confirm an action
that did not exist. The start of the model's text is held until it cannot be the opening of
one of the profile's confirm sentences (the words before ``{action}``, punctuation included:
"To confirm:" but not "To confirm your booking, I need your name"); when it is, nothing of it
is spoken and the agent asks again for a tool call. A template without an opening ("{action}.
Shall I go ahead?") gives nothing to catch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def opening(template: str) -> str:
    """The words a confirm sentence speaks before the action ("To confirm: "); "" for none."""
    return template.split("{action}", 1)[0] if "{action}" in template else ""


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).lstrip()


class ReadBackMimicry:
    def __init__(self, templates: Iterable[str]) -> None:
        openings = (_normal(opening(t)).rstrip() for t in templates)
        self.openings = [o for o in openings if o]
        self.caught = False
        self._held = ""
        self._released = not self.openings

    def push(self, text: str) -> str:
        """The text that may be spoken now: "" while the start is held, and once caught."""
        if self._released or self.caught:
            return "" if self.caught else text
        self._held += text
        start = _normal(self._held)
        if any(start.startswith(opening) for opening in self.openings):
            self.caught, self._held = True, ""
            return ""
        if any(opening.startswith(start.rstrip()) for opening in self.openings):
            return ""  # it may still become one
        return self._release()

    def flush(self) -> str:
        """The model's text ended: what is still held (a reply as short as "To")."""
        return "" if self.caught or self._released else self._release()

    def _release(self) -> str:
        held, self._held, self._released = self._held, "", True
        return held
