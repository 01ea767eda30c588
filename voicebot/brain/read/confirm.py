"""The answer to a read-back, by code's rule alone: no model output can make a yes.

Only a plain yes runs the action that was just read back: "yes", "yes please",
"sure, go ahead", "that's right". Anything that carries more ("yes at nine",
"sure, but for three") is a change: its values are read and read back anew. A
question ("okay?") or a hedge ("hmm, maybe") gets the read-back again. A bare no
drops the action and asks what to change. Everything else is OTHER: the turn is
read as usual (a question to answer, or new values for the task).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from voicebot.brain.lang import pack_or_default
from voicebot.common.speech_text import spoken_words

if TYPE_CHECKING:
    from voicebot.brain.business.profile import Sentences
    from voicebot.brain.decide.state import PendingAction
    from voicebot.brain.runtime.session_store import Turn
    from voicebot.v1.brain_pb2 import SpokenPart


class Answer(StrEnum):
    YES = "yes"  # a plain yes: run exactly what was read back
    NO = "no"  # a bare no: drop it and ask what to change
    UNSURE = "unsure"  # a question or a hedge: read it back again
    CHANGE = "change"  # a yes or no that carries something else: read the new values
    OTHER = "other"  # not an answer to the read-back


@dataclass(frozen=True)
class _ReadBackWords:
    plain_yes: re.Pattern[str]
    plain_no: re.Pattern[str]
    hedge: re.Pattern[str]
    leading: re.Pattern[str]


@functools.cache
def _read_back_words(language: str) -> _ReadBackWords:
    """The language pack's words (``lang/``) as the shapes of an answer to a read-back."""
    pack = pack_or_default(language)
    acts, phrases = pack.acts, pack.phrases
    yes, polite, fillers = phrases(acts.yes), phrases(acts.polite), phrases(acts.fillers)
    space = r"\s+" if pack.word_boundaries else r"\s*"
    return _ReadBackWords(
        plain_yes=re.compile(rf"^(?:(?:{fillers}),?{space})?(?:{yes})(?:[\s,.!]+(?:{yes}|{polite}))*[\s.!]*$",
                             re.I),
        plain_no=re.compile(rf"^(?:{phrases(acts.no)})(?:[\s,.!]+(?:{phrases(acts.no_tail)}))*[\s.!]*$",
                            re.I),
        hedge=re.compile(rf"^(?:(?:{phrases(acts.hedge, drawn_out=True)})[\s,.!?]*)+$", re.I),
        leading=re.compile("^" + pack.word(f"{yes}|{phrases(acts.leading_no)}"), re.I),
    )


def _clean(text: str) -> str:
    return " ".join(text.replace("’", "'").split()).strip()


def answer_to_read_back(text: str, language: str = "en") -> Answer:
    """What the caller's words are as an answer to "…. Shall I go ahead?"."""
    text = _clean(text)
    if not text:
        return Answer.UNSURE
    if "?" in text:  # "okay?", "yes at nine?": a question is never a yes
        return Answer.CHANGE if len(text.split()) > 3 else Answer.UNSURE
    words = _read_back_words(language)
    if words.plain_yes.match(text):
        return Answer.YES
    if words.plain_no.match(text):
        return Answer.NO
    if words.hedge.match(text):
        return Answer.UNSURE
    if words.leading.match(text):
        return Answer.CHANGE
    return Answer.OTHER


def is_plain_yes(text: str, language: str = "en") -> bool:
    return answer_to_read_back(text, language) is Answer.YES


def confirm_sentence(sentences: Sentences, action: PendingAction, again: bool = False) -> str:
    template = sentences.confirm_again if again else sentences.confirm
    return template.format(action=action.action)


def heard_in_full(action: PendingAction, last_turn: Turn | None, report: SpokenPart | None,
                  language: str = "en") -> bool:
    """The read-back was the bot's last turn, and the gateway's report of that reply (what was
    played, or the text delivered to a text-only client) holds all of the action (a "yes" over
    the closing question is fine; one over the details is not). The report is the only
    evidence: without one (a resumed session, a client that reported nothing) the caller may
    have heard nothing of it, and a yes gets the read-back again."""
    if last_turn is None or last_turn.turn_id != action.read_back_turn:
        return False
    if report is None or report.turn_id != action.read_back_turn:
        return False
    return f" {spoken_words(action.action, language)} " in f" {spoken_words(report.text, language)} "
