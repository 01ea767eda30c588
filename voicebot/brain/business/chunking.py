"""Text and markdown cut into voice-sized chunks: headings start a section; paragraphs and list
items become chunks of 1-3 sentences."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

CHUNK_CHARS = 300  # about two spoken sentences: what a reply can quote without a monologue
CHUNK_SENTENCES = 3

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+(.*)$")
_RULE = re.compile(r"^\s*([-*_=])(?:\s*\1){2,}\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?[\s:|-]+\|[\s:|-]*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MARKUP = re.compile(r"\*\*|__|`")


@dataclass
class _Unit:
    """A paragraph or a list item (a table row counts as one) within one section."""

    title: str
    text: str
    item: bool


def chunk_text(text: str, markdown: bool = True) -> Iterator[tuple[str, str]]:
    """(title, chunk) pairs in file order. A paragraph starts a new chunk; list items and table
    rows join the chunk before them (a list reads as one answer, with its lead-in line); no
    chunk spans a heading, so each chunk's title says where it was written."""
    chunk: list[str] = []
    title = ""
    for unit in _units(text, markdown):
        if chunk and (unit.title != title or not unit.item):
            yield title, " ".join(chunk)
            chunk = []
        title = unit.title
        for sentence in _sentences(_speakable_item(unit.text) if unit.item else unit.text):
            # Prose is cut after a few sentences; list items are short, so only length cuts them.
            if chunk and ((not unit.item and len(chunk) >= CHUNK_SENTENCES)
                          or sum(len(s) + 1 for s in chunk) + len(sentence) > CHUNK_CHARS):
                yield title, " ".join(chunk)
                chunk = []
            chunk.append(sentence)
    if chunk:
        yield title, " ".join(chunk)


def _units(text: str, markdown: bool) -> Iterator[_Unit]:
    title = ""
    current: _Unit | None = None
    for raw in text.splitlines():
        line = raw.strip().removeprefix(">").strip() if markdown else raw.strip()
        heading = _HEADING.match(line) if markdown else None
        item = _ITEM.match(line)
        ends_unit = (not line or heading or item or _RULE.match(line)
                     or (markdown and (_FENCE.match(line) or line.startswith("|"))))
        if ends_unit and current:
            yield current
            current = None
        if heading:
            title = _clean(heading[2])
        elif item:
            current = _Unit(title, _clean(item[1]), item=True)
        elif markdown and line.startswith("|") and not _TABLE_SEPARATOR.match(line):
            cells = [_clean(cell) for cell in line.strip("|").split("|")]
            yield _Unit(title, ", ".join(c for c in cells if c), item=True)
        elif not ends_unit:
            if current:
                current.text += " " + _clean(line)
            else:
                current = _Unit(title, _clean(line), item=False)
    if current:
        yield current


def _clean(text: str) -> str:
    """Markdown markup is not said aloud: a link's words stay, its address goes."""
    return " ".join(_MARKUP.sub("", _LINK.sub(r"\1", text)).split())


def _speakable_item(text: str) -> str:
    # "Visa" then "Mastercard" joined as "Visa. Mastercard." reads as two short sentences.
    return text if not text or text[-1] in ".!?:;," else text + "."


def _sentences(text: str) -> Iterator[str]:
    for sentence in _SENTENCE_END.split(text):
        while len(sentence) > CHUNK_CHARS:  # a run-on sentence is cut at a word boundary
            cut = sentence.rfind(" ", 0, CHUNK_CHARS)
            cut = cut if cut > 0 else CHUNK_CHARS
            yield sentence[:cut].strip()
            sentence = sentence[cut:].strip()
        if sentence:
            yield sentence

