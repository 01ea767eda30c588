"""Make streamed model text fit for the ear, delta by delta (no waiting for the whole reply).

Markdown goes; numbers, times and money become words. A number can be split
across deltas ("$12." + "50"), so a trailing word that holds a digit waits for
the next delta (or the end of the call); everything else passes at once.
"""

from __future__ import annotations

import re

from voicebot.common.speech_text import speakable

_MARKDOWN = re.compile(r"[*_`#>|~]+")
_BULLET = re.compile(r"(^|\n)\s*(?:[-•]|\d+\.)\s+")
_MAY_CONTINUE = re.compile(r"[\d$]")


class SpokenTextCleaner:
    def __init__(self, language: str = "en") -> None:
        self.language = language
        self._held = ""
        self._at_line_start = True

    def clean(self, delta: str) -> str:
        """Text that can be spoken now."""
        text = self._held + self._strip_markup(delta)
        # The last word, even when a space already follows it: "5 " may still become
        # "5 km" or "5 pm", which read differently from "five" alone.
        body = text.rstrip()
        cut = body.rfind(" ") + 1
        if _MAY_CONTINUE.search(body[cut:]):
            self._held, text = text[cut:], text[:cut]
        else:
            self._held = ""
        return speakable(text, self.language)

    def flush(self) -> str:
        text, self._held = self._held, ""
        return speakable(text, self.language)

    def _strip_markup(self, delta: str) -> str:
        text = _BULLET.sub(lambda m: m.group(1), ("\n" if self._at_line_start else "") + delta)
        if self._at_line_start:
            text = text[1:]
        self._at_line_start = delta.endswith("\n")
        return _MARKDOWN.sub("", text).replace("\n", " ")
