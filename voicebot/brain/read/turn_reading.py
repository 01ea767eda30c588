"""Stage 1 of a turn: the caller's words, read against the session's state, into one ``Reading``.

What the words are as dialogue acts (a yes to the read-back, a request for a person, a
question, thanks, a hello, "the same") is read by rules first; a plain answer to a pending
read-back needs nothing more. Otherwise the task and the field values are read: rules and
embeddings first, the model (``reading.py``) only for what they cannot read: the task when the
embeddings cannot tell, or a name or free text said inside a longer sentence. Deciding
(``decide/conversation.py``) then needs nothing but the reading and the state.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Awaitable, Callable
from typing import Any

from voicebot.brain.business.tasks import FieldSpec
from voicebot.brain.decide.carry import asks_for_the_same
from voicebot.brain.decide.state import FormState, SessionState
from voicebot.brain.read.confirm import Answer, answer_to_read_back
from voicebot.brain.read.dialog import asks_for_human
from voicebot.brain.read.reading import OTHER, QUESTION, Reader, Reading, is_question, rule_values

_GREETING = re.compile(r"^(?:hi|hello|hey|good (?:morning|afternoon|evening)|hiya|yo)\b", re.I)
_THANKS = re.compile(r"^(?:(?:ok(?:ay)?|great|perfect|cool),?\s+)?(?:thanks|thank you|cheers|bye|goodbye|"
                     r"that's all|that is all|nothing else|no,? that's (?:it|all))\b", re.I)
_NO_MORE = re.compile(r"^(?:no|nope|no thanks|no thank you|not now|i'll call back|no,? i'll call back)\b",
                      re.I)
# Words that introduce a name ("under lee", said in lower case, which the rules do not read).
_NAME_LEAD = re.compile(r"\b(?:my name is|name is|under|this is|i'm|i am|it's for|call me)\s+\w", re.I)
# A capitalised word after the first that is not "I": the shape of a name in a transcript.
_NAME_LIKE = re.compile(
    r"(?<!^)(?<![.?!]\s)\b(?!I\b|(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day\b|(?:January|February|March|April|"
    r"May|June|July|August|September|October|November|December)\b)[A-Z][a-z]+")
# "Where is the salon?", "How long does a colour take?": asking about the business, not for a task
# of the caller's own ("When is my appointment?" is one: it says "my").
_ASKS_ABOUT_THE_BUSINESS = re.compile(
    r"^(?:where|when|how (?:much|long|far|many)|what time|which|who)\b(?!.*\b(?:my|i|me|we|our|us)\b)",
    re.I)
# A question starts a task only this close to the task's examples ("Can I book a table?" ~0.84).
TASK_QUESTION_ABOVE = 0.62
BeforeModel = Callable[[], Awaitable[Any]] | None
Nearest = Callable[[str], Awaitable[float]]


class TurnReader:
    """Reads a turn's words against the session's state (the form, the pending read-back)."""

    def __init__(self, reader: Reader, nearest_knowledge: Nearest, anything_else: str = "",
                 today: Callable[[], dt.date] = dt.date.today) -> None:
        self.reader = reader
        self.anything_else = anything_else
        self.tasks = reader.tasks
        # How near the business's knowledge the words are (``Answers.best_score``).
        self.nearest_knowledge = nearest_knowledge
        self.today = today

    async def read(self, state: SessionState, text: str, before_model: BeforeModel = None) -> Reading:
        acts = self.acts(text)
        if acts.for_person or (state.pending is not None and acts.answer in
                               (Answer.YES, Answer.NO, Answer.UNSURE)):
            return acts  # a plain answer to the read-back, or a person asked for: nothing to read
        reading = await self.values(state, text, before_model)
        for name in ("text", "answer", "question", "closing", "greeting", "same"):
            setattr(reading, name, getattr(acts, name))
        return reading

    async def read_against(self, state: SessionState, finished: FormState, text: str,
                           before_model: BeforeModel = None) -> tuple[SessionState, Reading]:
        """The words read as changes to a write that finished while the caller spoke over it
        ("wait, make it eight"): against a copy of the state with that task's form open again."""
        trial = state.model_copy(deep=True)
        trial.form = finished.model_copy(deep=True, update={"asking": ""})
        return trial, await self.read(trial, text, before_model)

    @staticmethod
    def acts(text: str) -> Reading:
        stripped = text.strip()
        return Reading(OTHER, {}, "rules", text=text, answer=answer_to_read_back(stripped),
                       for_person=asks_for_human(text), question=is_question(text),
                       closing=bool(_THANKS.match(stripped) or _NO_MORE.match(stripped)),
                       greeting=bool(_GREETING.match(stripped)) and len(stripped.split()) <= 6,
                       same=asks_for_the_same(text))

    async def values(self, state: SessionState, text: str, before_model: BeforeModel = None) -> Reading:
        """The task and the field values in the words: rules and embeddings first, the model only
        for what they cannot read."""
        form = state.form
        asking = form.asking if form is not None else ""
        intent, score = self.reader.pick(text)
        if form is None and (by_values := self._task_by_values(state, text)) is not None:
            intent = by_values  # "a table for two on Thursday at six": the fields name the task
        elif intent in self.tasks and is_question(text) and await self._rather_a_question(text, score):
            intent = QUESTION
        target = form.task if form is not None else intent if intent in self.tasks else None
        fields = self.reader.fields_for(state, target)
        values = rule_values(text, fields, asking, self.today(), form.values if form is not None else None)
        record: dict[str, Any] = {"picked": intent, "score": round(score, 3)}
        if form is not None and asking in values:  # the answer to the question code asked
            return Reading(form.task, values, "rules", record)
        if not self._needs_model(state, target, intent, values, text):
            if intent is None:
                intent = QUESTION if is_question(text) else form.task if form and values else OTHER
            return Reading(intent, values, "rules" if values else "embeddings", record)
        question = self._asked_question(state)
        if before_model is not None:
            await before_model()
        unread = [f for f in fields if f.name not in values]  # the model reads only what rules did not
        model = await self.reader.model_reading(text, question, unread, with_intent=intent is None)
        model.record.update(record)
        return Reading(intent or model.intent, {**model.values, **values}, "model", model.record,
                       failed=model.failed and not values and intent is None)

    async def _rather_a_question(self, text: str, score: float) -> bool:
        """A question the embeddings put near a task ("Do you have a private dining room?" near
        "Do you have a table for four?") is a question unless it is plainly the task, or nearer to
        the business's knowledge than to the task's examples."""
        if _ASKS_ABOUT_THE_BUSINESS.search(text.strip()):
            return True
        return score < TASK_QUESTION_ABOVE or await self.nearest_knowledge(text) >= score

    def _task_by_values(self, state: SessionState, text: str) -> str | None:
        """The one task two or more of whose fields the rules read in the words, if one is."""
        values = rule_values(text, self.reader.fields_for(state, None), "", self.today())
        counts = {name: sum(1 for f in task.fields if f.name in values)
                  for name, task in self.tasks.items()}
        best = max(counts.values(), default=0)
        found = [name for name, count in counts.items() if count == best]
        writes = [name for name in found if not self.tasks[name].lookup]
        found = writes or found
        return found[0] if best >= 2 and len(found) == 1 else None

    def _needs_model(self, state: SessionState, target: str | None, intent: str | None,
                     values: dict[str, Any], text: str) -> bool:
        words = len(text.split())
        if state.pending is not None and not values and words > 2:
            # "Could we do eight instead?": a change to the read-back the rules cannot read; a
            # question about the business ("Before I say yes, where are you?") is answered as is.
            return intent != QUESTION
        if is_question(text) and not values:
            return False
        if target is None:
            return intent is None and words > 2
        form = state.form
        have = {**(form.values if form is not None else {}), **values}
        # A name is only worth the model's time when the words hold one ("..., Sam Lee, a rash",
        # "under lee").
        named = _NAME_LIKE.search(text) or _NAME_LEAD.search(text)
        kinds = ("name", "text", "code", "reference") if named else ("text", "code", "reference")
        unread = [f for f in self.tasks[target].required()
                  if f.type in kinds and have.get(f.name) in (None, "")]
        if unread and words > 5:
            return True
        return form is not None and not values and words > 2 and intent not in (QUESTION, OTHER)

    def _asked_question(self, state: SessionState) -> str:
        """The question code asked last, for the model's context."""
        form = state.form
        if form is None:
            return ""
        spec = self.tasks[form.task]
        item: FieldSpec | None = spec.field(form.asking) if form.asking else None
        if item is None:
            return spec.ask_any or self.anything_else
        return spec.ask_any if spec.lookup and spec.ask_any else item.ask
