"""Stage 2 of a turn: code decides the next step from the reading and the session state alone.

``Conversation.decide`` is a function of (reading, state, the turn's facts) to one decision of
the closed set in ``decisions.py``; it calls no model and no tool (a step that needs a
read-only tool's answer is ``Find``, taken again by the form with the result). The order:

1. a request for a person hands off, from anywhere;
2. with an action read back: a plain yes runs it (if the gateway reported the read-back, the
   last reply, heard in full); a bare no drops it and asks what to change; a hedge hears the
   read-back again; a question is answered and the read-back said again; new values make a
   new read-back;
3. the words needed the model and it could not read them: the fallback sentence;
4. a task's values go into its form and code takes the next step (``form.py``);
5. a question is answered from the business's knowledge only (``Answer``);
6. two turns in a row that give nothing for the field asked hand off with a summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from voicebot.brain.business.profile import Profile
from voicebot.brain.decide.decisions import Answer, Ask, Decision, Fallback, Handoff, Run, Say
from voicebot.brain.decide.form import Forms
from voicebot.brain.decide.state import SessionState
from voicebot.brain.read.confirm import Answer as Reply
from voicebot.brain.read.confirm import confirm_sentence, heard_in_full
from voicebot.brain.read.reading import OTHER, QUESTION, Reading

if TYPE_CHECKING:
    from voicebot.brain.act.actions import WriteOutcome
    from voicebot.brain.runtime.session_store import Turn
    from voicebot.v1.brain_pb2 import SpokenPart

MISSES_BEFORE_HANDOFF = 2


@dataclass
class TurnFacts:
    """What the turn brings besides the words: its id, the last turn, the gateway's report of
    what the caller heard of the last reply (the only evidence a read-back was heard), and the
    call's metadata (a phone line's custom parameters)."""

    turn_id: str
    last_turn: Turn | None = None
    heard: SpokenPart | None = None
    call_context: dict[str, str] = field(default_factory=dict)


class Conversation:
    def __init__(self, profile: Profile, forms: Forms) -> None:
        self.profile = profile
        self.sentences = profile.sentences
        self.forms = forms

    def decide(self, state: SessionState, reading: Reading, turn: TurnFacts) -> Decision:
        if reading.for_person:
            return Handoff("caller_request", self.sentences.handoff)
        if state.pending is not None and reading.answer in (Reply.YES, Reply.NO, Reply.UNSURE):
            return self._answer_to_read_back(state, reading.answer, turn)
        if reading.failed:  # the words needed the model and it could not read them: say so
            return Fallback(self.sentences.fallback)
        if state.pending is not None:
            return self._while_pending(state, reading, turn)
        if state.form is not None:
            return self._in_form(state, reading, turn)
        return self._no_form(state, reading, turn)

    def change_to_finished(self, state: SessionState, trial: SessionState, reading: Reading,
                           turn: TurnFacts) -> Decision | None:
        """Words spoken over a write that finished meanwhile ("wait, make it eight"), read against
        its task (``trial``): new values for it are a new proposal, read back (the write ran as it
        was read back; a second one runs only after a yes to its own read-back). None: the words
        change nothing of it and are read as usual."""
        if reading.for_person or reading.failed or not self.forms.apply(trial, reading.values, reading.text):
            return None
        state.form = trial.form
        return self.forms.next_step(state, turn.turn_id)

    def after_write(self, state: SessionState, outcome: WriteOutcome, turn: TurnFacts) -> list[Decision]:
        """What follows a confirmed write's outcome (``actions.py``)."""
        if outcome.status == "unknown":
            return [Handoff("unknown_outcome", outcome.say)]
        if outcome.status == "field" and state.form is not None:
            # A value the business did not accept: that field again, the others kept.
            return [Ask(outcome.field, self.forms.ask_again(state, outcome.field, outcome.note or None))]
        said = outcome.say or self.sentences.not_done
        if outcome.status == "refused" and self._finds_again(state):
            # The business said no (the slot was just taken): nothing was done; code looks again
            # and offers what is possible now.
            return [Say(said), self.forms.next_step(state, turn.turn_id)]
        if outcome.status in ("refused", "field"):
            state.form = None
            return [Say(f"{said} {self.sentences.anything_else}")]
        return [Say(outcome.say)]

    # ---- 2. the answer to a read-back ------------------------------------------------
    def _answer_to_read_back(self, state: SessionState, answer: Reply, turn: TurnFacts) -> Decision:
        pending = state.pending
        assert pending is not None
        language = self.profile.languages[0]  # this conversation's: the profile is in its language
        if answer is Reply.YES and heard_in_full(pending, turn.last_turn, turn.heard, language):
            return Run(pending)
        if answer is Reply.NO:
            state.drop_pending()
            if state.form is not None:
                state.form.asking = ""
            return Ask("", self.sentences.ask_what_to_change)
        return self._read_back_again(state, turn)  # a hedge, or a yes to what was not heard

    def _read_back_again(self, state: SessionState, turn: TurnFacts) -> Ask:
        pending = state.pending
        assert pending is not None
        state.read_back(turn.turn_id)  # this turn reads it back: the next plain yes may run it
        return Ask("", confirm_sentence(self.sentences, pending, again=True))

    def _while_pending(self, state: SessionState, reading: Reading, turn: TurnFacts) -> Decision:
        """Words that are not a plain answer to the read-back: new values make a new proposal
        (nothing runs); a question is answered and the read-back said again."""
        form = state.form
        if form is not None and reading.intent in (form.task, OTHER, QUESTION):
            values = reading.values
            if reading.question:  # "Before I say yes, where are you?" is no reason for a visit
                spec = self.forms.tasks[form.task]
                values = {k: v for k, v in values.items()
                          if (item := spec.field(k)) is None or item.type not in ("text", "name")}
            if self.forms.apply(state, values, reading.text):
                state.drop_pending()
                return self.forms.next_step(state, turn.turn_id)
        if reading.intent in self.forms.tasks and (form is None or reading.intent != form.task):
            state.drop_pending()
            return self._start(state, reading, turn)
        again = self._read_back_again(state, turn)
        if reading.answer in (Reply.OTHER, Reply.CHANGE) and (reading.intent == QUESTION or reading.question):
            # "Before I say yes, where exactly are you?": answered, then the read-back again.
            return Answer(reading.text, again.text)
        return again

    # ---- 4. the form ---------------------------------------------------------------
    def _start(self, state: SessionState, reading: Reading, turn: TurnFacts) -> Decision:
        self.forms.start(state, reading.intent)
        self.forms.carry(state, reading.text)  # "for the same car": values of the call's earlier task
        # The call's metadata fills fields of the same name, as data; what the caller says
        # overrides it.
        self.forms.apply(state, {**turn.call_context, **reading.values}, reading.text)
        return self.forms.next_step(state, turn.turn_id)

    def _in_form(self, state: SessionState, reading: Reading, turn: TurnFacts) -> Decision:
        form = state.form
        assert form is not None
        if reading.intent in self.forms.tasks and reading.intent != form.task:
            return self._start(state, reading, turn)
        changed = self.forms.apply(state, reading.values, reading.text)
        if changed or (reading.intent == form.task and not form.asking):
            # New values, or the same request again after code could not check it: the next step.
            form.misses = 0
            return self.forms.next_step(state, turn.turn_id)
        asked = self.forms.question(state, self._asked_field(state)) if form.asking else \
            self.sentences.anything_else
        if reading.intent == QUESTION or reading.question:
            return Answer(reading.text, asked)
        if reading.closing:
            state.form = None
            return Say(self.sentences.nothing_done)
        form.misses += 1
        if form.misses >= MISSES_BEFORE_HANDOFF:
            return Handoff("not_understood", self.sentences.handoff)
        if not form.asking:
            return self.forms.next_step(state, turn.turn_id)
        return Ask(form.asking, self.sentences.ask_again.format(question=asked))

    def still_asked(self, state: SessionState) -> str:
        """What the caller was asked and has not answered, to say again after a reply that did
        not answer it (the guard's block): the read-back, or the form's question; "" if none."""
        if state.pending is not None:
            return confirm_sentence(self.sentences, state.pending, again=True)
        form = state.form
        if form is None or not form.asking or form.task not in self.forms.tasks:
            return ""
        return self.forms.question(state, self._asked_field(state))

    def _asked_field(self, state: SessionState):
        form = state.form
        if form is None or not form.asking:
            return None
        return self.forms.tasks[form.task].field(form.asking)

    # ---- 5. no task at hand ------------------------------------------------------------
    def _no_form(self, state: SessionState, reading: Reading, turn: TurnFacts) -> Decision:
        if reading.intent in self.forms.tasks:
            return self._start(state, reading, turn)
        if reading.closing:
            return Say(self.sentences.goodbye)
        if reading.answer is Reply.YES:  # a yes to nothing pending
            return Say(self.can_help())
        if reading.greeting:
            return Say(self.greeting())
        if state.last_task in self.forms.tasks and reading.same:
            # "Can I have the same for Thursday as well?": the call's last task again, its values
            # carried, what the words change changed, all of it read back.
            reading.intent = state.last_task
            return self._start(state, reading, turn)
        return Answer(reading.text)

    def _finds_again(self, state: SessionState) -> bool:
        """After a refusal, a task with finders looks again (what is free now); one without
        would only propose the same refused action again."""
        form = state.form
        return form is not None and bool(self.forms.tasks[form.task].finders)

    def greeting(self) -> str:
        return f"{self.sentences.hello.format(name=self.profile.name)} {self.can_help()}"

    def can_help(self) -> str:
        """What the bot can do: the profile's sentence, naming its tasks where it has ``{tasks}``."""
        titles = [task.title for task in self.forms.tasks.values()]
        template = self.sentences.can_help
        if "{tasks}" not in template:
            return template
        return template.format(tasks=_or_words(titles)) if titles else self.sentences.anything_else


def _or_words(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]
