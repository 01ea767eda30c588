"""The task engine: code fills a task's form and decides every step (a state machine: docs/design.md).

Per turn, after the caller's words were read into field values (``reading.py``):

1. a required field still missing: code asks for it, one question;
2. all there: each argument the caller cannot know is found with the business's
   read-only tool (``Finder``); the item that matches the caller's wish is taken;
   none matches: code offers what the tool listed instead and asks again; the tool
   lists nothing: code says so and asks for another value of the first field;
3. everything known: code builds the one pending action (exact tool arguments)
   and its read-back from the same values. Only a plain yes to that read-back
   runs it (``confirm.py``), so the caller hears exactly what will run.

A lookup task (a read-only tool) runs at step 3 and code says what it found.
Nothing here calls the model, a tool or writes anything: a step that needs a read-only tool's
answer returns ``Find``; the act stage calls the tool and the step is taken again with the
result (``next_step``'s ``found``), so every step is a pure function of the state and results.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from voicebot.brain.business.profile import Sentences
from voicebot.brain.business.references import References
from voicebot.brain.business.tasks import FieldSpec, Finder, TaskSpec
from voicebot.brain.decide.carry import carry_values
from voicebot.brain.decide.decisions import Ask, Decision, Find, Found, Offer, ReadBack, Say
from voicebot.brain.decide.options import items_of, pick_option, same_value
from voicebot.brain.decide.state import FormState, Option, PendingAction, SessionState
from voicebot.brain.decide.tool_errors import classify, said_in
from voicebot.brain.lang import pack_or_default
from voicebot.brain.read.codes import code_pieces, parse_code, spoken_code, spoken_codes_in, strip_lead
from voicebot.brain.read.numbers import said_number
from voicebot.brain.read.values import normalise
from voicebot.brain.speak.readback import default_action, join_words, render, sentence, spoken_value

if TYPE_CHECKING:
    from voicebot.brain.act.tools import ToolResult

# The read-only tools' results this turn, by ``lookup_key``.
Lookups = dict[str, "ToolResult"]
MAX_OPTIONS = 3


class Forms:
    def __init__(self, tasks: dict[str, TaskSpec], sentences: Sentences, references: References,
                 today: Callable[[], dt.date] = dt.date.today,
                 errors: dict[str, dict[str, Any]] | None = None, language: str = "en",
                 server_words: bool = True) -> None:
        self.tasks = tasks
        self.language = language  # whose words values are said in (``speak/readback.py``)
        # The tool servers' own sentences may be said: the call is in their (the business's) language.
        self.server_words = server_words
        # Per tool, the profile's meanings of its errors (``mcp_servers[].tools.<t>.errors``).
        self.errors = errors or {}
        self.sentences = sentences
        self.references = references
        self.today = today

    # ---- the caller's values into the form ---------------------------------------
    def start(self, state: SessionState, task: str) -> FormState:
        """A new task, or the same one again: values already given for the old task carry over
        to fields of the same name ("book for Friday... no, cancel my Friday booking")."""
        if state.form is not None and state.form.task == task:
            return state.form
        old = state.form.values if state.form is not None else {}
        spec = self.tasks[task]
        state.form = FormState(task=task, values={k: v for k, v in old.items() if spec.field(k)})
        return state.form

    def carry(self, state: SessionState, words: str) -> list[str]:
        """Values from the call's earlier tasks (``carry.py``)."""
        form = state.form
        if form is None:
            return []
        return carry_values(state, self.tasks[form.task], words, self.language)

    def ask_again(self, state: SessionState, name: str, said: str | None = None) -> str:
        """A value the business's tool did not accept: dropped, and its question asked again
        (after the business's own sentence when it gave one); the other values stay."""
        form = state.form
        assert form is not None
        spec = self.tasks[form.task]
        item = spec.field(name)
        form.values.pop(name, None)
        form.picked.pop(name, None)
        form.options = []
        form.asking = name if item is not None else ""
        question = item.ask if item is not None else self.sentences.anything_else
        spoken = name.replace("_", " ")
        sentence_ = self.sentences.field_again.format(field=spoken, question="").strip() if said is None \
            else said
        return f"{sentence_} {question}".strip()

    def fields_of(self, state: SessionState) -> list[FieldSpec]:
        return list(self.tasks[state.form.task].fields) if state.form is not None else []

    def apply(self, state: SessionState, raw: dict[str, Any], words: str) -> list[str]:
        """The values read this turn, each normalised by its field's type; returns the fields
        whose value changed. An option offered last turn may be picked by its words."""
        form = state.form
        if form is None:
            return []
        spec = self.tasks[form.task]
        changed = []
        for item in spec.fields:
            value = self.value_of(item, raw.get(item.name), state)
            if value is not None and form.values.get(item.name) != value:
                form.values[item.name] = value
                changed.append(item.name)
        if form.options and (option := pick_option(words, form.options, self.language)) is not None:
            form.picked[option.argument] = option.item
            changed.append(option.argument)
        if changed:
            form.options = []
        return changed

    def value_of(self, item: FieldSpec, raw: Any, state: SessionState) -> Any:
        if item.type == "reference":
            return self._reference(item, raw, state)
        if item.type == "code":
            return parse_code(str(raw), item.pattern, item.language) if raw is not None else None
        if item.type in ("text", "name") and isinstance(raw, str):
            raw = strip_lead(raw, item.language)  # "The plate is MN 7310." -> "MN 7310": only the value
        if item.type in ("integer", "number") and isinstance(raw, str):
            said = said_number(raw, item.numbers)  # the model copied "just me"
            raw = said if said is not None else raw
        return normalise(item.type, raw, today=self.today(), between=item.between, choices=item.choices,
                         not_names=item.not_names, language=item.language)

    def _reference(self, item: FieldSpec, raw: Any, state: SessionState) -> str | None:
        """A reference the conversation issued (R1), or the code the caller read out."""
        if raw is None or not str(raw).strip() or str(raw).strip().lower() in ("null", "none"):
            return None
        # Its pieces as a code is read ("It's A4K9T2." is A4K9T2, "R one" is R1), else every letter
        pieces = "".join(code_pieces(str(raw), item.language))
        every = re.sub(r"[^A-Za-z0-9-]", "", str(raw)).upper().strip("-")
        code = pieces if re.search(r"\d", pieces) else every
        if state.resolve_ref(code, item.name) is not None:
            return code
        return code if 3 <= len(code) <= 40 and re.search(r"\d", code) else None

    def known_reference(self, state: SessionState, spec: TaskSpec) -> None:
        """"Cancel it": a reference field takes the latest one of its kind this call issued."""
        form = state.form
        assert form is not None
        for item in spec.fields:
            if item.type == "reference" and not form.values.get(item.name):
                latest = [ref for ref, entry in state.refs.items() if entry.kind == item.name]
                if latest:
                    form.values[item.name] = latest[-1]

    # ---- the next step ------------------------------------------------------------
    def missing(self, state: SessionState) -> FieldSpec | None:
        form = state.form
        assert form is not None
        spec = self.tasks[form.task]
        if spec.lookup:
            given = any(form.values.get(f.name) not in (None, "") for f in spec.fields)
            return None if given else (spec.required() or list(spec.fields) or [None])[0]
        return next((f for f in spec.required() if form.values.get(f.name) in (None, "")), None)

    def question(self, state: SessionState, item: FieldSpec | None) -> str:
        spec = self.tasks[state.form.task] if state.form is not None else None
        if item is None:
            return spec.ask_any if spec and spec.ask_any else self.sentences.anything_else
        if spec is not None and spec.lookup and spec.ask_any:
            return spec.ask_any
        return item.ask

    def next_step(self, state: SessionState, turn_id: str, found: Lookups | None = None) -> Decision:
        """The form's next step: ask, offer, read back, say what a lookup found, or ``Find`` what
        a read-only tool must answer first (taken again with its result in ``found``). The state
        changes only on the step that ends it, so taking it again is safe."""
        form = state.form
        assert form is not None
        found = found or {}
        spec = self.tasks[form.task]
        self.known_reference(state, spec)
        missing = self.missing(state)
        if missing is not None:
            form.asking = missing.name
            return Ask(missing.name, self.question(state, missing))
        form.asking = ""
        if spec.lookup:
            return self._look_up(state, spec, found)
        chosen: dict[str, dict[str, Any]] = {}
        for finder in spec.finders:
            item = self._find(state, spec, finder, found)
            if not isinstance(item, dict):
                return item
            chosen[finder.argument] = item
        return self._propose(state, spec, chosen, turn_id)

    def _find(self, state: SessionState, spec: TaskSpec, finder: Finder, found: Lookups
              ) -> dict[str, Any] | Decision:
        form = state.form
        assert form is not None
        picked = form.picked.get(finder.argument)
        if picked is not None and not finder.match:
            return picked
        args = {arg: form.values[name] for arg, name in finder.args.items()
                if form.values.get(name) not in (None, "")}
        result, step = self._answer_of(state, finder.tool, args, found)
        if step is not None:
            return step
        assert result is not None
        items = items_of(result.content.get("result"), finder.items) if result.outcome == "succeeded" else []
        match = [i for i in items if all(same_value(i.get(key), form.values.get(name))
                                         for key, name in finder.match.items())]
        if finder.match and match:
            return match[0]
        if not finder.match and picked is not None:
            return picked
        if not finder.match and len(items) == 1:
            return items[0]
        if items:
            return self._offer(state, spec, finder, items)
        return self._nothing(state, spec, finder, result)

    def _answer_of(self, state: SessionState, tool: str, args: dict[str, Any], found: Lookups
                   ) -> tuple[ToolResult | None, Decision | None]:
        """A read-only tool's answer this turn; else the step instead: ``Find`` when it was not
        called yet, what its error means when it failed."""
        find = Find(tool, args)
        result = found.get(find.key)
        if result is None:
            return None, find
        if result.outcome != "succeeded" and (said := self._tool_problem(state, tool, result)):
            return None, said
        return result, None

    def _tool_problem(self, state: SessionState, tool: str, result: ToolResult) -> Decision | None:
        """A read-only tool's error, by rule (``tool_errors.py``): a value it did not accept is
        asked again; a refusal is said and the first value asked again (None: as nothing found);
        anything else is "I can't check that right now"."""
        form = state.form
        assert form is not None
        spec = self.tasks[form.task]
        problem = classify(result, [f.name for f in spec.fields], self.errors.get(tool))
        say = said_in(problem, self.server_words)
        if problem.kind == "field" and spec.field(problem.field) is not None:
            return Ask(problem.field, self.ask_again(state, problem.field, say or None))
        if problem.kind == "refusal":
            first = next((f for f in spec.fields if form.values.get(f.name) not in (None, "")), None)
            if first is None or not say:
                return None
            return Ask(first.name, f"{say} {self.ask_again(state, first.name, '')}")
        return Say(self.sentences.tool_unavailable)

    def _offer(self, state: SessionState, spec: TaskSpec, finder: Finder,
               items: list[dict[str, Any]]) -> Offer:
        form = state.form
        assert form is not None
        options = [Option(argument=finder.argument, label=self._label(finder, item), item=item)
                   for item in items[:MAX_OPTIONS]]
        named = list(dict.fromkeys([*finder.match.values(), *finder.args.values()]))
        wanted = self._wanted(spec, form, named) if finder.match else ""
        for name in finder.match.values():  # the next answer names the value again
            form.values.pop(name, None)
        form.options = options
        form.asking = next(iter(finder.match.values()), "")
        labels = join_words([o.label for o in options], self.language, either=True)
        said = render(self.sentences.alternatives if wanted else self.sentences.offer,
                      {"wanted": wanted, "options": labels}, self.language)
        return Offer(form.asking, tuple(o.label for o in options), said)

    def _nothing(self, state: SessionState, spec: TaskSpec, finder: Finder, result: ToolResult) -> Ask:
        """Nothing listed (a closed day, a full one, or a value the tool refused): code asks for
        another value of the first field the finder was given."""
        form = state.form
        assert form is not None
        inputs = [name for name in finder.args.values() if form.values.get(name) not in (None, "")]
        wanted = self._wanted(spec, form, inputs)
        first = next((name for name in inputs if (f := spec.field(name)) and f.type == "date"),
                     inputs[0] if inputs else "")
        if first:
            form.values.pop(first, None)
            form.asking = first
        return Ask(first, render(self.sentences.nothing_free, {"wanted": wanted}, self.language))

    def _wanted(self, spec: TaskSpec, form: FormState, names: list[str]) -> str:
        forms = pack_or_default(self.language).speak.wanted
        parts = []
        for name in names:
            value = form.values.get(name)
            item = spec.field(name)
            if value in (None, "") or item is None:
                continue
            kind = "integer" if item.type == "number" else item.type
            shape = forms.get(kind) or forms.get("other") or "{value}"  # the pack's ``speak.wanted``
            unit = item.numbers.unit if item.numbers is not None else ""
            parts.append(shape.format(value=spoken_value(value, self.language), unit=unit))
        return " ".join(parts)

    def _label(self, finder: Finder, item: dict[str, Any]) -> str:
        if finder.offer:
            return render(finder.offer, item, self.language)
        kind = self.references.kinds.get(finder.argument)
        if kind is not None:
            return render(kind.label, item, self.language)
        shown = [spoken_value(v, self.language) for k, v in item.items()
                 if k != finder.argument and not k.endswith("_id")
                 and isinstance(v, str | int) and k not in self.references.hidden]
        return " ".join(shown[:3])

    # ---- the proposal and the lookup ----------------------------------------------
    def _propose(self, state: SessionState, spec: TaskSpec, chosen: dict[str, dict[str, Any]],
                 turn_id: str) -> ReadBack:
        form = state.form
        assert form is not None
        args: dict[str, Any] = {}
        spoken: dict[str, Any] = {}
        for item in chosen.values():
            spoken.update({k: v for k, v in item.items() if k not in self.references.hidden})
        for name in spec.arguments:
            value = form.values.get(name)
            if value in (None, ""):
                continue
            args[name] = self._argument(spec.field(name), value, state)
            spoken[name] = self._spoken(spec.field(name), value, state)
        for name, value in form.values.items():
            spoken.setdefault(name, self._spoken(spec.field(name), value, state))
        for argument, item in chosen.items():
            args[argument] = item[argument]
            kind = self.references.kinds.get(argument)
            if kind is not None:  # the found id gets a reference: "done" and later turns name it
                ref = state.issue_ref(argument, str(item[argument]), render(kind.label, item), kind.prefix)
                spoken[argument] = state.refs[ref].label
        references = frozenset(f.name for f in spec.fields if f.type == "reference")
        action = render(spec.read_back, spoken, self.language) if spec.read_back else default_action(
            spec.title, {f.name: spoken[f.name] for f in spec.fields if f.name in spoken}, references,
            self.language)
        pending = PendingAction(tool=spec.name, args=args, action=action, read_back_turn=turn_id)
        pending_spoken = {k: v for k, v in spoken.items() if isinstance(v, str | int | float)}
        state.propose(pending)
        state.task = pending_spoken  # what the done sentence and a handoff summary may name
        return ReadBack(pending, sentence(self.sentences.confirm.format(action=action)))

    def _argument(self, item: FieldSpec | None, value: Any, state: SessionState) -> Any:
        if item is not None and item.type == "reference":
            entry = state.resolve_ref(value, item.name)
            return entry.id if entry is not None else value
        return value

    def _spoken(self, item: FieldSpec | None, value: Any, state: SessionState) -> Any:
        if item is not None and item.type == "reference":
            entry = state.resolve_ref(value, item.name)
            return entry.label if entry is not None else " ".join(str(value))
        if item is not None and item.spoken:
            return render(item.spoken, {"value": value}, self.language)
        if item is not None and item.type == "code":
            return spoken_code(value)
        if item is not None and item.type == "text":
            return spoken_codes_in(str(value))
        return spoken_value(value, self.language)

    def _look_up(self, state: SessionState, spec: TaskSpec, found: Lookups) -> Decision:
        form = state.form
        assert form is not None
        args = {name: self._argument(spec.field(name), form.values[name], state)
                for name in spec.arguments if form.values.get(name) not in (None, "")}
        result, step = self._answer_of(state, spec.name, args, found)
        if step is not None:
            return step
        assert result is not None
        value = result.content.get("result") if result.outcome == "succeeded" else None
        items = items_of(value, "")
        if isinstance(value, dict) and not any(isinstance(v, list) for v in value.values()):
            items = [value]  # one record, not a list of them
        state.keep_given()
        state.form = None
        if not items:
            question = spec.ask_any or self.sentences.anything_else
            return Found(self.sentences.not_found.format(question=question))
        said = []
        for item in items[:MAX_OPTIONS]:
            shown = self.references.present(item, state)
            values = {**item, **{k: v for k, v in shown.items() if isinstance(v, str) and v in state.refs}}
            said.append(render(spec.found, values, self.language) if spec.found else self._plain(item))
        found_items = self.sentences.found_items.format(items=join_words(said, self.language))
        return Found(sentence(found_items) + " " + self.sentences.anything_else)

    def _plain(self, item: dict[str, Any]) -> str:
        shown = [spoken_value(v, self.language) for k, v in item.items() if not k.endswith("_id")
                 and k not in self.references.hidden and isinstance(v, str | int)]
        return ", ".join(shown[:5])
