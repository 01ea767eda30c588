"""One turn, decided by code: the read-back's answer, the reading, the form's next step, or an answer.

``Conversation.decide`` returns what the agent carries out: words to say, the pending
action to run (only after a plain yes to its read-back), or a handoff. The order:

1. a request for a person hands off, from anywhere;
2. with an action read back: a plain yes runs it (if the gateway reported the read-back, the
   last reply, heard in full); a bare no drops it and asks what to change; a question or
   hedge hears the read-back again; anything else is read for new values (a new read-back);
3. the words are read (rules, embeddings, the model under a schema: ``reading.py``);
4. a task's values go into its form and code takes the next step (``form.py``);
5. a question is answered from the business's knowledge only (``answers.py``);
6. two turns in a row that give nothing for the field asked hand off with a summary.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from voicebot.brain.act.answers import Answers
from voicebot.brain.business.profile import Profile
from voicebot.brain.decide.carry import asks_for_the_same
from voicebot.brain.decide.form import Forms, ReadTool
from voicebot.brain.decide.state import FormState, PendingAction, SessionState
from voicebot.brain.read.confirm import Answer, answer_to_read_back, confirm_sentence, heard_in_full
from voicebot.brain.read.dialog import asks_for_human
from voicebot.brain.read.reading import OTHER, QUESTION, Reader, Reading, is_question, rule_values
from voicebot.brain.runtime.session_store import Turn
from voicebot.v1.brain_pb2 import SpokenPart

_GREETING = re.compile(r"^(?:hi|hello|hey|good (?:morning|afternoon|evening)|hiya|yo)\b", re.I)
_THANKS = re.compile(r"^(?:(?:ok(?:ay)?|great|perfect|cool),?\s+)?(?:thanks|thank you|cheers|bye|goodbye|"
                     r"that's all|that is all|nothing else|no,? that's (?:it|all))\b", re.I)
_NO_MORE = re.compile(r"^(?:no|nope|no thanks|no thank you|not now|i'll call back|no,? i'll call back)\b",
                      re.I)
MISSES_BEFORE_HANDOFF = 2
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


@dataclass
class Decision:
    say: str = ""
    run: PendingAction | None = None
    handoff: str = ""  # a reason: the call goes to a person
    read: Reading | None = None
    answer_question: str = ""  # a knowledge question to answer before ``say``
    fallback: bool = False  # the LLM failed the reading: ``say`` is the fallback sentence
    record: dict[str, Any] = field(default_factory=dict)


class Conversation:
    def __init__(self, profile: Profile, forms: Forms, reader: Reader, answers: Answers,
                 today: Callable[[], dt.date] = dt.date.today) -> None:
        self.profile = profile
        self.sentences = profile.sentences
        self.forms = forms
        self.reader = reader
        self.answers = answers
        self.today = today
        self.call_context: dict[str, str] = {}

    async def decide(self, state: SessionState, text: str, turn_id: str, last_turn: Turn | None,
                     read: ReadTool, before_model: Callable[[], Awaitable[Any]] | None = None,
                     call_context: dict[str, str] | None = None, heard: SpokenPart | None = None,
                     finished: FormState | None = None) -> Decision:
        """``heard``: the gateway's report of what the caller heard of the last reply (the only
        evidence that a read-back was heard). ``finished``: the task of a write that finished
        while the caller spoke over it."""
        self.call_context = dict(call_context or {})
        if asks_for_human(text):
            return Decision(self.sentences.handoff, handoff="caller_request")
        if finished is not None and state.pending is None and state.form is None:
            changed = await self._change_to_finished(state, text, turn_id, finished, read, before_model)
            if changed is not None:
                return changed
        answer = Answer.OTHER
        if state.pending is not None:
            answer = answer_to_read_back(text)
            decided = self._answer_to_read_back(state, answer, turn_id, last_turn, heard)
            if decided is not None:
                return decided
        reading = await self.read(state, text, before_model)
        if reading.failed:  # the words needed the model and it could not read them: say so
            return Decision(self.sentences.fallback, read=reading, fallback=True)
        if state.pending is not None:
            return await self._while_pending(state, text, turn_id, reading, answer, read)
        if state.form is not None:
            return await self._in_form(state, text, turn_id, reading, read)
        return await self._no_form(state, text, turn_id, reading, read)

    # ---- 2. the answer to a read-back ------------------------------------------------
    def _answer_to_read_back(self, state: SessionState, answer: Answer, turn_id: str,
                             last_turn: Turn | None, heard: SpokenPart | None) -> Decision | None:
        pending = state.pending
        assert pending is not None
        if answer is Answer.YES:
            if heard_in_full(pending, last_turn, heard):
                return Decision(run=pending)
            return self._read_back_again(state, turn_id)
        if answer is Answer.NO:
            state.drop_pending()
            if state.form is not None:
                state.form.asking = ""
            return Decision(self.sentences.ask_what_to_change)
        if answer is Answer.UNSURE:
            return self._read_back_again(state, turn_id)
        return None

    def _read_back_again(self, state: SessionState, turn_id: str, before: str = "") -> Decision:
        pending = state.pending
        assert pending is not None
        state.read_back(turn_id)  # this turn reads it back: the next plain yes may run it
        again = confirm_sentence(self.sentences, pending, again=True)
        return Decision(" ".join(filter(None, [before, again])))

    async def _while_pending(self, state: SessionState, text: str, turn_id: str, reading: Reading,
                             answer: Answer, read: ReadTool) -> Decision:
        """Words that are not a plain answer to the read-back: new values make a new proposal
        (nothing runs); a question is answered and the read-back said again."""
        if state.form is not None and reading.intent in (state.form.task, OTHER, QUESTION):
            values = reading.values
            if is_question(text):  # "Before I say yes, where are you?" is no reason for a visit
                spec = self.forms.tasks[state.form.task]
                values = {k: v for k, v in values.items()
                          if (item := spec.field(k)) is None or item.type not in ("text", "name")}
            changed = self.forms.apply(state, values, text)
            if changed:
                state.drop_pending()
                step = await self.forms.advance(state, turn_id, read)
                return Decision(step.say, read=reading)
        if reading.intent in self.forms.tasks and (state.form is None or reading.intent != state.form.task):
            state.drop_pending()
            return await self._start(state, text, turn_id, reading, read)
        if answer in (Answer.OTHER, Answer.CHANGE) and (reading.intent == QUESTION or is_question(text)):
            # "Before I say yes, where exactly are you?": answered, then the read-back again.
            decision = self._read_back_again(state, turn_id)
            decision.answer_question = text
            return decision
        return self._read_back_again(state, turn_id)

    async def _change_to_finished(self, state: SessionState, text: str, turn_id: str,
                                  finished: FormState, read: ReadTool,
                                  before_model: Callable[[], Awaitable[Any]] | None) -> Decision | None:
        """Words spoken over a write that finished meanwhile ("wait, make it eight"): new values
        for its task are a new proposal, read back (the write ran as it was read back, and a
        second one runs only after a yes to its own read-back); words that change nothing of
        it are read as usual (None)."""
        trial = state.model_copy(deep=True)
        trial.form = finished.model_copy(deep=True, update={"asking": ""})
        reading = await self.read(trial, text, before_model)
        if reading.failed or not self.forms.apply(trial, reading.values, text):
            return None
        state.form = trial.form
        step = await self.forms.advance(state, turn_id, read)
        return Decision(step.say, read=reading)

    # ---- 3. the reading ------------------------------------------------------------
    async def read(self, state: SessionState, text: str,
                   before_model: Callable[[], Awaitable[Any]] | None = None) -> Reading:
        """Rules and embeddings first; the model only for what they cannot read: the task when
        the embeddings cannot tell, or a name or free text said inside a longer sentence."""
        form = state.form
        asking = form.asking if form is not None else ""
        intent, score = self.reader.pick(text)
        if form is None and (by_values := self._task_by_values(state, text)) is not None:
            intent = by_values  # "a table for two on Thursday at six": the fields name the task
        elif intent in self.forms.tasks and is_question(text) and await self._rather_a_question(text, score):
            intent = QUESTION
        target = form.task if form is not None else intent if intent in self.forms.tasks else None
        fields = self.reader.fields_for(state, target)
        values = rule_values(text, fields, asking, self.today(), form.values if form is not None else None)
        record: dict[str, Any] = {"picked": intent, "score": round(score, 3)}
        if form is not None and asking in values:  # the answer to the question code asked
            return Reading(form.task, values, "rules", record)
        if not self._needs_model(state, target, intent, values, text):
            if intent is None:
                intent = QUESTION if is_question(text) else form.task if form and values else OTHER
            return Reading(intent, values, "rules" if values else "embeddings", record)
        question = self.forms.question(state, self._asked_field(state)) if form is not None else ""
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
        return score < TASK_QUESTION_ABOVE or await self.answers.best_score(text) >= score

    def _task_by_values(self, state: SessionState, text: str) -> str | None:
        """The one task two or more of whose fields the rules read in the words, if one is."""
        values = rule_values(text, self.reader.fields_for(state, None), "", self.today())
        counts = {name: sum(1 for f in task.fields if f.name in values)
                  for name, task in self.forms.tasks.items()}
        best = max(counts.values(), default=0)
        found = [name for name, count in counts.items() if count == best]
        writes = [name for name in found if not self.forms.tasks[name].lookup]
        found = writes or found
        return found[0] if best >= 2 and len(found) == 1 else None

    def _needs_model(self, state: SessionState, target: str | None, intent: str | None,
                     values: dict[str, Any], text: str) -> bool:
        words = len(text.split())
        if state.pending is not None and not values and words > 2:
            return True  # "Could we do eight instead?": a change to the read-back the rules cannot read
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
        unread = [f for f in self.forms.tasks[target].required()
                  if f.type in kinds and have.get(f.name) in (None, "")]
        if unread and words > 5:
            return True
        return form is not None and not values and words > 2 and intent not in (QUESTION, OTHER)

    def _asked_field(self, state: SessionState):
        form = state.form
        if form is None or not form.asking:
            return None
        return self.forms.tasks[form.task].field(form.asking)

    # ---- 4. the form ---------------------------------------------------------------
    async def _start(self, state: SessionState, text: str, turn_id: str, reading: Reading,
                     read: ReadTool) -> Decision:
        self.forms.start(state, reading.intent)
        self.forms.carry(state, text)  # "for the same car": values of the call's earlier task
        # The call's metadata (a phone line's custom parameters) fills fields of the same name,
        # as data; what the caller says overrides it.
        self.forms.apply(state, {**self.call_context, **reading.values}, text)
        step = await self.forms.advance(state, turn_id, read)
        return Decision(step.say, read=reading)

    async def _in_form(self, state: SessionState, text: str, turn_id: str, reading: Reading,
                       read: ReadTool) -> Decision:
        form = state.form
        assert form is not None
        if reading.intent in self.forms.tasks and reading.intent != form.task:
            return await self._start(state, text, turn_id, reading, read)
        changed = self.forms.apply(state, reading.values, text)
        if changed or (reading.intent == form.task and not form.asking):
            # New values, or the same request again after code could not check it: the next step.
            form.misses = 0
            step = await self.forms.advance(state, turn_id, read)
            return Decision(step.say, read=reading)
        asked = self.forms.question(state, self._asked_field(state)) if form.asking else \
            self.sentences.anything_else
        if reading.intent == QUESTION or is_question(text):
            return Decision(asked, read=reading, answer_question=text)
        if _NO_MORE.match(text.strip()) or _THANKS.match(text.strip()):
            state.form = None
            return Decision(self.sentences.nothing_done, read=reading)
        form.misses += 1
        if form.misses >= MISSES_BEFORE_HANDOFF:
            return Decision(self.sentences.handoff, handoff="not_understood", read=reading)
        if not form.asking:
            step = await self.forms.advance(state, turn_id, read)
            return Decision(step.say, read=reading)
        return Decision(self.sentences.ask_again.format(question=asked), read=reading)

    # ---- 5. no task at hand ------------------------------------------------------------
    async def _no_form(self, state: SessionState, text: str, turn_id: str, reading: Reading,
                       read: ReadTool) -> Decision:
        if reading.intent in self.forms.tasks:
            return await self._start(state, text, turn_id, reading, read)
        stripped = text.strip()
        if _THANKS.match(stripped) or _NO_MORE.match(stripped):
            return Decision(self.sentences.goodbye, read=reading)
        if answer_to_read_back(stripped) is Answer.YES:  # a yes to nothing pending
            return Decision(self.can_help(), read=reading)
        if _GREETING.match(stripped) and len(stripped.split()) <= 6:
            return Decision(self.greeting(), read=reading)
        if state.last_task in self.forms.tasks and asks_for_the_same(text):
            # "Can I have the same for Thursday as well?": the call's last task again, its values
            # carried, what the words change changed, all of it read back.
            reading.intent = state.last_task
            return await self._start(state, text, turn_id, reading, read)
        return Decision("", read=reading, answer_question=text)

    def greeting(self) -> str:
        return f"Hello, this is {self.profile.name}. " + self.can_help()

    def can_help(self) -> str:
        """What the bot can do: the profile's sentence, naming its tasks where it has ``{tasks}``."""
        titles = [task.title for task in self.forms.tasks.values()]
        template = self.sentences.can_help
        if "{tasks}" not in template:
            return template
        return template.format(tasks=_or_words(titles)) if titles else self.sentences.anything_else


def _or_words(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]
