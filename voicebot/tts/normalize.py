"""Prepare one sentence for the voice: stray markdown out, numbers and units as words.

The brain already writes for the ear, but TTS speaks whatever it is sent
(another client, a model that slipped into markdown), so it cleans again.
Runs per complete sentence, after segmentation: a number or a markdown pair
split across text deltas is whole by then.
"""

from __future__ import annotations

import re

from voicebot.common.speech_text import speakable

_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"```[\w-]*"), " "),  # code fences (their content is read as text)
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),  # [link text](url), ![alt](src)
    (re.compile(r"<(?:https?://)?[^>\s]+>"), " "),  # <http://…> autolinks, <br> tags
    (re.compile(r"https?://\S+"), " "),  # bare URLs are not worth reading out
    (re.compile(r"(?m)^\s{0,3}(?:#{1,6}|>+)\s*"), ""),  # headings, quotes
    (re.compile(r"(?m)^\s*(?:[-*+•]|\d{1,2}[.)])\s+"), ""),  # list markers
    (re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1"), r"\2"),  # **bold**, __bold__
    (re.compile(r"(?<!\*)\*(?=\S)([^*]+?)(?<=\S)\*(?!\*)"), r"\1"),  # *italic*, also inside a word
    (re.compile(r"(?<!\w)_(?=\S)(.+?)(?<=\S)_(?!\w)"), r"\1"),  # _italic_, but not snake_case
    (re.compile(r"`([^`]*)`"), r"\1"),  # `code`
    (re.compile(r"~~(.+?)~~"), " "),  # ~~struck out~~ is not meant any more
    (re.compile(r"[*_`#|~]{2,}|(?<!\w)[*#|~](?!\w)"), " "),  # unpaired leftovers, table pipes
    (re.compile(r"\s*&\s*"), " and "),
    (re.compile(r"\s+"), " "),
]


def strip_markdown(text: str) -> str:
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text.strip()


def prepare(sentence: str, language: str = "en") -> str:
    """What the voice should read for ``sentence``; empty when nothing is left to say."""
    return speakable(strip_markdown(sentence), language or "en").strip()
