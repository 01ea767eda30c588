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
import functools
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from voicebot.brain.business.tasks import FieldSpec
from voicebot.brain.decide.carry import asks_for_the_same
from voicebot.brain.decide.state import FormState, SessionState
from voicebot.brain.lang import LanguagePack, pack_or_default
from voicebot.brain.read.confirm import Answer, answer_to_read_back
from voicebot.brain.read.dialog import asks_for_human
from voicebot.brain.read.pack_values import reads_values
from voicebot.brain.read.reading import OTHER, QUESTION, Reader, Reading, is_question, rule_values


@dataclass(frozen=True)
class _ActWords:
    greeting: re.Pattern[str]
    closing: re.Pattern[str]  # thanks, goodbye, "no, that's all"
    name_lead: re.Pattern[str]  # words that introduce a name ("under lee", said in lower case)
    name_like: re.Pattern[str]  # a capitalised word after the first: the shape of a name
    about_business: re.Pattern[str]  # "Where is the salon?", not "When is my appointment?"


@functools.cache
def _act_words(language: str) -> _ActWords:
    """The language pack's words (``lang/``) as the shapes of dialogue acts."""
    pack = pack_or_default(language)
    acts, phrases, word = pack.acts, pack.phrases, pack.word
    thanks = rf"^(?:(?:{phrases(acts.thanks_lead)}),?\s+)?{word(phrases(acts.thanks))}"
    not_names = "|".join(re.escape(w) for w in pack.names.not_names) or r"(?!x)x"
    return _ActWords(
        greeting=re.compile("^" + word(phrases(acts.greeting)), re.I),
        closing=re.compile(rf"{thanks}|^{word(phrases(acts.no_more))}", re.I),
        name_lead=re.compile(word(phrases(pack.names.leads)) + r"\s+\w", re.I),
        name_like=re.compile(rf"(?<!^)(?<![.?!]\s)\b(?!(?:{not_names})\b)[A-Z][a-z]+"),
        about_business=_about_business(pack),
    )


def _about_business(pack: LanguagePack) -> re.Pattern[str]:
    """"Where is the salon?" (the question words first) or "거기 몇 시에 열어요?" (anywhere, where
    the pack says so), and none of the words that make it the caller's own ("my appointment")."""
    asked, phrases, word = pack.questions, pack.phrases, pack.word
    business, caller = word(phrases(asked.about_business)), word(phrases(asked.about_caller))
    if asked.about_business_anywhere:
        return re.compile(rf"^(?!.*{caller}).*?{business}", re.I)
    return re.compile(rf"^{business}(?!.*{caller})", re.I)


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

    async def read(self, state: SessionState, text: str, before_model: BeforeModel = None,
                   language: str = "en") -> Reading:
        acts = self.acts(text, language)
        if acts.for_person or (state.pending is not None and acts.answer in
                               (Answer.YES, Answer.NO, Answer.UNSURE)):
            return acts  # a plain answer to the read-back, or a person asked for: nothing to read
        reading = await self.values(state, text, before_model, language)
        for name in ("text", "answer", "question", "closing", "greeting", "same"):
            setattr(reading, name, getattr(acts, name))
        return reading

    async def read_against(self, state: SessionState, finished: FormState, text: str,
                           before_model: BeforeModel = None, language: str = "en"
                           ) -> tuple[SessionState, Reading]:
        """The words read as changes to a write that finished while the caller spoke over it
        ("wait, make it eight"): against a copy of the state with that task's form open again."""
        trial = state.model_copy(deep=True)
        trial.form = finished.model_copy(deep=True, update={"asking": ""})
        return trial, await self.read(trial, text, before_model, language)

    @staticmethod
    def acts(text: str, language: str = "en") -> Reading:
        stripped, words = text.strip(), _act_words(language)
        return Reading(OTHER, {}, "rules", text=text, answer=answer_to_read_back(stripped, language),
                       for_person=asks_for_human(text, language), question=is_question(text, language),
                       closing=bool(words.closing.match(stripped)),
                       greeting=bool(words.greeting.match(stripped)) and len(stripped.split()) <= 6,
                       same=asks_for_the_same(text, language))

    async def values(self, state: SessionState, text: str, before_model: BeforeModel = None,
                     language: str = "en") -> Reading:
        """The task and the field values in the words: rules and embeddings first, the model only
        for what they cannot read."""
        form = state.form
        asking = form.asking if form is not None else ""
        intent, score = self.reader.pick(text)
        if form is None and (by_values := self._task_by_values(state, text)) is not None:
            intent = by_values  # "a table for two on Thursday at six": the fields name the task
        elif intent in self.tasks and is_question(text, language) and \
                await self._rather_a_question(text, score, language):
            intent = QUESTION
        target = form.task if form is not None else intent if intent in self.tasks else None
        fields = self.reader.fields_for(state, target)
        values = rule_values(text, fields, asking, self.today(), form.values if form is not None else None)
        record: dict[str, Any] = {"picked": intent, "score": round(score, 3)}
        if form is not None and asking in values:  # the answer to the question code asked
            return Reading(form.task, values, "rules", record)
        if not self._needs_model(state, target, intent, values, text, language):
            if intent is None:
                intent = QUESTION if is_question(text, language) else form.task if form and values else OTHER
            return Reading(intent, values, "rules" if values else "embeddings", record)
        question = self._asked_question(state)
        if before_model is not None:
            await before_model()
        unread = [f for f in fields if f.name not in values]  # the model reads only what rules did not
        model = await self.reader.model_reading(text, question, unread, with_intent=intent is None)
        model.record.update(record)
        return Reading(intent or model.intent, {**model.values, **values}, "model", model.record,
                       failed=model.failed and not values and intent is None)

    async def _rather_a_question(self, text: str, score: float, language: str) -> bool:
        """A question the embeddings put near a task ("Do you have a private dining room?" near
        "Do you have a table for four?") is a question unless it is plainly the task, or nearer to
        the business's knowledge than to the task's examples."""
        if _act_words(language).about_business.search(text.strip()):
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
                     values: dict[str, Any], text: str,
                     language: str = "en") -> bool:
        words = len(text.split())
        if state.pending is not None and not values and words > 2:
            # "Could we do eight instead?": a change to the read-back the rules cannot read; a
            # question about the business ("Before I say yes, where are you?") is answered as is.
            # Where the pack reads the language's values ("아홉 시로 될까요?"), a question in which
            # the rules found none asks about the business.
            return intent != QUESTION and not (reads_values(language) and is_question(text, language))
        if is_question(text, language) and not values:
            return False
        if target is None:
            return intent is None and words > 2
        form = state.form
        have = {**(form.values if form is not None else {}), **values}
        # A name is only worth the model's time when the words hold one ("..., Sam Lee, a rash",
        # "under lee").
        words_of = _act_words(language)
        named = words_of.name_like.search(text) or words_of.name_lead.search(text)
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
