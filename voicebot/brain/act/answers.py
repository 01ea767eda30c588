"""Answers only from what the business wrote, and outcomes only in code's words.

A question is answered with the passage the knowledge index finds (``knowledge.py``):
the business's own answer, read as written, cleaned for the ear. When nothing
relevant is found, code says the profile's sentence for an unknown fact and
what the bot can do: never a guess. With an answer check (``answerable.py``), a passage is
spoken only when the check says it answers the question; the passages found are tried best
first, at most ``check_passages`` of them, and when none answers the caller hears the unknown
sentence. A check that gives no verdict (the model timed out or is down) lets the passage be
spoken, as without a check: it is the business's own true words, the nearest to the question,
and knowledge answers keep working while the model is away; at worst it is beside the point,
never false.

``claims_outcome`` tells text that states or promises an action or its result
("I've booked", "is confirmed", "I'll cancel"): such text comes only from code's
read-back and done sentences; anywhere else it is replaced before it is spoken.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from voicebot.brain.act.answerable import AnswerCheck
from voicebot.brain.act.tools import ReadTool
from voicebot.brain.business.profile import Sentences
from voicebot.brain.decide.options import items_of
from voicebot.brain.lang import pack_or_default
from voicebot.brain.metrics import ANSWER_CHECKS, KNOWLEDGE_PREFETCHES
from voicebot.brain.speak.spoken import SpokenTextCleaner

log = logging.getLogger(__name__)

_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_LIST_MARK = re.compile(r"^\s*(?:[-*•]|\d+[.)]|#+)\s+")


@functools.cache
def _claim(language: str) -> re.Pattern[str]:
    """The language pack's ``claims``: "I've booked", "your table is confirmed", "I'll cancel"."""
    pack = pack_or_default(language)
    claims, said, word = pack.claims, pack.phrases, pack.word
    done = (rf"\b(?:{said(claims.done_by)}|(?:{said(claims.owners)})\s+\w+)\s+(?:\w+\s+){{0,2}}"
            rf"(?:{said(claims.done)})\b")
    will = rf"\b(?:{said(claims.will)})\s+(?:\w+\s+){{0,1}}(?:{said(claims.will_do)})\b"
    return re.compile(rf"{done}|{will}|{word(said(claims.phrases))}", re.I)


def claims_outcome(text: str, language: str = "en") -> bool:
    return bool(_claim(language).search(text))


def for_the_ear(text: str, language: str = "en") -> str:
    """A passage as speech: no markdown, no list marks, numbers and prices as words."""
    cleaner = SpokenTextCleaner(language)
    lines = [_LIST_MARK.sub("", line).strip() for line in _LINK.sub(r"\1", text).splitlines()]
    lines = [line for line in lines if line]
    joined = " ".join(line if line.endswith((".", "!", "?", ":")) else line + "." for line in lines)
    return " ".join((cleaner.clean(joined) + cleaner.flush()).split())


@functools.cache
def _stop_words(language: str) -> frozenset[str]:
    return frozenset(w.lower() for w in pack_or_default(language).stop_words)


def content_words(text: str, language: str = "en") -> list[str]:
    """The words of some length that are not the pack's ``stop_words`` (Latin letters and digits:
    the words a question and a passage share across scripts too)."""
    stop = _stop_words(language)
    return [w for w in re.findall(r"[a-z0-9']+", text.lower()) if w not in stop and len(w) > 2]


def names_or_phrase(question: str, passage: str, language: str = "en") -> bool:
    """The passage holds two of the question's content words side by side, or a name it gives."""
    asked, held = content_words(question, language), content_words(passage, language)
    if set(itertools.pairwise(asked)) & set(itertools.pairwise(held)):
        return True
    names = {w.lower() for w in re.findall(r"(?<![.?!]\s)(?<!^)\b[A-Z][a-z]{2,}\b", question.strip())}
    return bool(names & set(held) - _stop_words(language))


def shares_words(question: str, passage: str, title: str = "", language: str = "en") -> bool:
    """The passage holds two of the question's own content words next to each other ("American
    Express"), a name the question gives ("Medicare", "Korean"), or three of its content words
    anywhere: a lexical match that embeddings of a short question against a longer passage score
    low."""
    if names_or_phrase(question, passage, language):
        return True
    asked, held = content_words(question, language), content_words(passage, language)
    heading = set(content_words(title, language))
    if heading and len(heading) <= 3 and set(asked) & heading:  # "Is there parking nearby?": Parking
        return True
    return len(set(asked) & set(held)) >= 3


class Passage(Protocol):
    text: str
    score: float
    kind: str


class KnowledgeSearch(Protocol):
    async def search(self, text: str, k: int | None = None) -> list[Any]: ...

    def prefetch(self, text: str) -> None: ...


@dataclass
class Answer:
    text: str
    known: bool
    record: dict[str, Any] = field(default_factory=dict)


class Answers:
    def __init__(self, knowledge: KnowledgeSearch | None, sentences: Sentences,
                 can_help: Callable[[], str], tools: dict[str, str | None] | None = None,
                 min_score: float = 0.0, check: AnswerCheck | None = None,
                 check_passages: int = 2, language: str = "en") -> None:
        self.knowledge = knowledge
        self.language = language  # the knowledge's: its words are compared in it (``shares_words``)
        self.check = check  # None: the best passage found is spoken
        self.check_passages = check_passages
        # Passages at or above this are relevant; below it (down to what the index returns) only
        # when they share the question's own words (``shares_words``).
        self.min_score = min_score
        self.sentences = sentences
        self.can_help = can_help
        # Read-only tools whose result is knowledge: name -> the argument the question goes in.
        self.tools = tools or {}

    def prefetch(self, text: str) -> None:
        """Retrieval started on the words so far (the speculative transcript): at the endpoint
        the same words find it done."""
        if self.knowledge is not None and text.strip():
            KNOWLEDGE_PREFETCHES.inc()
            self.knowledge.prefetch(text)

    async def answer(self, text: str, language: str = "en", read: ReadTool | None = None) -> Answer:
        passages = await self._search(text)
        if not passages and read is not None and self.tools:
            found = await self._from_tools(text, read)
            if found:
                return Answer(for_the_ear(found, language), True, {"passages": 0, "tool": True})
        if not passages:
            return Answer(f"{self.sentences.unknown_fact} {self.can_help()}", False, {"passages": 0})
        top, record = await self._answering(text, passages)
        if top is None:
            return Answer(f"{self.sentences.unknown_fact} {self.can_help()}", False, record)
        said = for_the_ear(top.text, language)
        record.update({"passages": len(passages), "score": round(float(top.score), 3), "kind": top.kind})
        if claims_outcome(said, language):  # knowledge never claims that an action happened
            return Answer(f"{self.sentences.unknown_fact} {self.can_help()}", False,
                          {**record, "claim_replaced": True})
        return Answer(said, True, record)

    async def _answering(self, question: str, passages: list[Any]) -> tuple[Any | None, dict[str, Any]]:
        """The first passage, best first, that the check says answers the question (the best one
        when there is no check, or the check gives no verdict), with what the check said."""
        if self.check is None:
            return passages[0], {}
        verdicts: list[str] = []
        ms = 0.0
        for passage in passages[:self.check_passages]:
            title = getattr(passage, "title", "")
            verdict = await self.check(question, f"{title}: {passage.text}" if title else passage.text)
            verdicts.append({None: "none", True: "yes", False: "no"}[verdict.answers])
            ANSWER_CHECKS.labels(verdicts[-1]).inc()
            ms += verdict.ms
            if verdict.answers is not False:
                return passage, {"check": verdicts, "check_ms": round(ms)}
        return None, {"passages": len(passages), "check": verdicts, "check_ms": round(ms)}

    async def _from_tools(self, text: str, read: ReadTool) -> str:
        """What the business's knowledge tools return for the question, as plain sentences."""
        said: list[str] = []
        for name, argument in self.tools.items():
            result = await read(name, {argument: text} if argument else {})
            if result.outcome != "succeeded":
                continue
            for item in items_of(result.content.get("result"), "")[:3]:
                words = [str(v) for k, v in item.items() if isinstance(v, str) and not k.endswith("_id")]
                if words:
                    said.append(", ".join(words))
        return self.sentences.found_items.format(items="; ".join(said)) if said else ""

    async def best_score(self, text: str) -> float:
        """How close the nearest relevant passage is to the words (0: none)."""
        passages = await self._search(text)
        return float(passages[0].score) if passages else 0.0

    async def _search(self, text: str) -> list[Any]:
        if self.knowledge is None or not text.strip():
            return []
        try:
            found = list(await self.knowledge.search(text))
        except Exception as exc:  # noqa: BLE001 - an index outage is an unknown fact, not a crash
            log.warning("knowledge search failed", extra={"error": repr(exc)})
            return []
        kept = [p for p in found if p.score >= self.min_score
                or shares_words(text, p.text, getattr(p, "title", ""), self.language)]
        # A passage that holds a name or a phrase of the question ("Medicare") answers it before a
        # nearer FAQ phrasing of another question ("Do you take walk-ins?").
        return sorted(kept, key=lambda p: not names_or_phrase(
            text, f"{getattr(p, 'title', '')}. {p.text}", self.language))
