"""The answer to a read-back, by code's rule alone: no model output can make a yes.

Only a plain yes runs the action that was just read back: "yes", "yes please",
"sure, go ahead", "that's right". Anything that carries more ("yes at nine",
"sure, but for three") is a change: its values are read and read back anew. A
question ("okay?") or a hedge ("hmm, maybe") gets the read-back again. A bare no
drops the action and asks what to change. Everything else is OTHER: the turn is
read as usual (a question to answer, or new values for the task).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import TYPE_CHECKING

from voicebot.common.speech_text import speakable

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


_YES_WORDS = (
    r"yes|yeah|yep|yup|yes please|sure|correct|right|that's right|that is right|that's correct|"
    r"exactly|ok|okay|alright|all right|please do|go ahead|do it|book it|confirm|confirmed|"
    r"sounds good|perfect|great|absolutely|definitely|of course|yes that's right|yes go ahead|"
    r"네|예|응|맞아요|맞습니다|좋아요|그래요|그렇게 해 ?주세요|해 ?주세요")
_POLITE = r"please|thanks|thank you|go ahead|do it|book it|that's right|that's correct|please do|" \
          r"that's great|sounds good|perfect|great|thank you very much|thanks a lot|네|예약해 ?주세요"
_PLAIN_YES = re.compile(
    rf"^(?:(?:oh|well|um|uh|ah),?\s+)?(?:{_YES_WORDS})(?:[\s,.!]+(?:{_YES_WORDS}|{_POLITE}))*[\s.!]*$", re.I)
_PLAIN_NO = re.compile(
    r"^(?:no|nope|nah|no thanks|no thank you|not really|no,? (?:that's|that is) (?:wrong|not right)|"
    r"that's (?:wrong|not right)|don't|do not|wait|hold on|stop|아니요|아니오|아뇨|아니)"
    r"(?:[\s,.!]+(?:no|thanks|thank you|wait|hold on|please|sorry))*[\s.!]*$", re.I)
_LEADING_YES = re.compile(rf"^(?:{_YES_WORDS})\b", re.I)
_LEADING_NO = re.compile(r"^(?:no|nope|nah|not|don't|wait|actually|아니요|아니오|아뇨|아니)\b", re.I)
_HEDGE = re.compile(
    r"^(?:(?:hmm+|um+|uh+|er+|well|maybe|perhaps|i guess(?: so)?|i think so|i'm not sure|not sure|"
    r"i don't know|i suppose so|"
    r"let me think|probably|possibly|kind of|sort of|i suppose)[\s,.!?]*)+$", re.I)


def _clean(text: str) -> str:
    return " ".join(text.replace("’", "'").split()).strip()


def answer_to_read_back(text: str) -> Answer:
    """What the caller's words are as an answer to "…. Shall I go ahead?"."""
    text = _clean(text)
    if not text:
        return Answer.UNSURE
    if "?" in text:  # "okay?", "yes at nine?": a question is never a yes
        return Answer.CHANGE if len(text.split()) > 3 else Answer.UNSURE
    if _PLAIN_YES.match(text):
        return Answer.YES
    if _PLAIN_NO.match(text):
        return Answer.NO
    if _HEDGE.match(text):
        return Answer.UNSURE
    if _LEADING_YES.match(text) or _LEADING_NO.match(text):
        return Answer.CHANGE
    return Answer.OTHER


def is_plain_yes(text: str) -> bool:
    return answer_to_read_back(text) is Answer.YES


def confirm_sentence(sentences: Sentences, action: PendingAction, again: bool = False) -> str:
    template = sentences.confirm_again if again else sentences.confirm
    return template.format(action=action.action)


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", speakable(text).lower()).split())


def heard_in_full(action: PendingAction, last_turn: Turn | None, report: SpokenPart | None) -> bool:
    """The read-back was the bot's last turn, and the gateway's report of that reply (what was
    played, or the text delivered to a text-only client) holds all of the action (a "yes" over
    the closing question is fine; one over the details is not). The report is the only
    evidence: without one (a resumed session, a client that reported nothing) the caller may
    have heard nothing of it, and a yes gets the read-back again."""
    if last_turn is None or last_turn.turn_id != action.read_back_turn:
        return False
    if report is None or report.turn_id != action.read_back_turn:
        return False
    return f" {_words(action.action)} " in f" {_words(report.text)} "
