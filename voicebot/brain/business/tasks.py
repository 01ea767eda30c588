"""Tasks: a business's write tools as forms code fills in, built from their input schemas.

A task is a write tool. Its fields are the tool's required arguments (types,
enums and descriptions from the MCP listing) plus what the profile adds per
field (the question, how the answer is read). An argument the caller cannot
know (a ``slot_id``) is *found*: code calls the read-only tool the profile
names with the fields it needs (day, time, party) and takes the item that
matches; the finder's arguments join the form as fields. A read-only tool the
profile lists under ``tasks`` is a lookup: code collects its fields and says
what it found, no confirmation needed.

Without profile settings a write tool is still a task: every required argument
is asked by its name, and an id argument whose description names a read-only
tool ("a slot_id from list_free_slots") is found through that tool, its items
offered to the caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from voicebot.brain.act.tools import ToolKind, ToolRegistry, ToolSpec
from voicebot.brain.business.profile import FieldSettings, FindSettings, Profile, TaskSettings
from voicebot.brain.business.references import IDEMPOTENCY_KEY
from voicebot.brain.read.numbers import NumberWords, number_words


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: str  # date | time | integer | number | name | text | code | choice | reference
    ask: str
    required: bool
    choices: tuple[str, ...] = ()
    between: tuple[str, str] | None = None
    spoken: str = ""
    description: str = ""
    pattern: str = ""  # the schema's pattern for a code ("^[A-Z]{2} ?[0-9]{4}$")
    # A name field: the business's own words ("table", "reservation"), never a caller's name.
    not_names: frozenset[str] = frozenset()
    numbers: NumberWords | None = None  # what a number field's number means in words (profile)
    language: str = "en"  # whose words its values are read in (``read/values.py``)


@dataclass(frozen=True)
class Finder:
    argument: str  # the tool argument it finds
    tool: str  # the read-only tool that lists the candidates
    args: dict[str, str]  # finder argument -> field
    match: dict[str, str]  # item key -> field
    offer: str = ""
    items: str = ""


@dataclass(frozen=True)
class TaskSpec:
    name: str  # the tool's name
    title: str
    lookup: bool
    fields: tuple[FieldSpec, ...]
    finders: tuple[Finder, ...] = ()
    arguments: tuple[str, ...] = ()  # tool arguments taken straight from fields
    read_back: str = ""
    done: str = ""
    found: str = ""
    ask_any: str = ""
    examples: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    carry: tuple[str, ...] = ()  # fields taken from earlier tasks of the call without asking
    schema: dict[str, Any] = field(default_factory=dict)  # the tool's input schema

    def field(self, name: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.name == name), None)

    def required(self) -> list[FieldSpec]:
        return [f for f in self.fields if f.required]


class TaskError(ValueError):
    """A task in the profile names a tool or field that does not exist: the message says which."""


def build_tasks(profile: Profile, registry: ToolRegistry) -> dict[str, TaskSpec]:
    """Every write tool as a task, and every read-only tool the profile lists as a lookup."""
    specs = {spec.name: spec for spec in registry.specs()}
    unknown = sorted(set(profile.tasks) - set(specs))
    if unknown:
        raise TaskError(f"tasks: no MCP server offers {', '.join(unknown)}")
    tasks: dict[str, TaskSpec] = {}
    for spec in specs.values():
        settings = profile.tasks.get(spec.name)
        if spec.kind is ToolKind.WRITE or settings is not None:
            tasks[spec.name] = _task(spec, settings or TaskSettings(), specs, profile)
    return _with_business_words(tasks)


def _with_business_words(tasks: dict[str, TaskSpec]) -> dict[str, TaskSpec]:
    """Name fields learn the business's own words (its tasks' titles and names: "book a table",
    "cancel_reservation"), so "A table, please." is never read as a name."""
    said = " ".join(f"{task.title} {task.name}".replace("_", " ").lower() for task in tasks.values())
    words = frozenset(re.findall(r"[^\W\d_]{4,}", said))
    return {name: replace(task, fields=tuple(replace(f, not_names=words) if f.type == "name" else f
                                             for f in task.fields))
            for name, task in tasks.items()}


def _task(spec: ToolSpec, settings: TaskSettings, specs: dict[str, ToolSpec], profile: Profile) -> TaskSpec:
    lookup = spec.kind is not ToolKind.WRITE
    properties = _properties(spec)
    required = set(spec.parameters.get("required") or ())
    hidden = set(profile.hidden_fields) | {IDEMPOTENCY_KEY}
    finders = [_finder(spec, name, find, specs) for name, find in settings.find.items()]
    finders += _inferred_finders(spec, properties, required, specs, {f.argument for f in finders}, profile)
    found = {f.argument for f in finders}
    fields: dict[str, FieldSpec] = {}
    for name, extra in settings.fields.items():  # the profile's order first
        fields[name] = _field(name, _property_for(name, spec, finders, specs), extra,
                              _required_default(name, spec, finders, specs, required), profile)
    for name in properties:
        if name in fields or name in found or name in hidden:
            continue
        if name in required or lookup:
            fields[name] = _field(name, properties[name], FieldSettings(), name in required, profile)
    for finder in finders:
        for arg, field_name in finder.args.items():
            if field_name not in fields:
                prop = _properties(specs[finder.tool]).get(arg, {})
                needed = field_name in finder.match.values() or arg in (
                    specs[finder.tool].parameters.get("required") or ())
                fields[field_name] = _field(field_name, prop, FieldSettings(), needed, profile)
    arguments = tuple(n for n in properties if n in fields and n not in found)
    missing = [name for name in settings.carry if name not in fields]
    if missing:
        raise TaskError(f"tasks.{spec.name}.carry: the task has no field {', '.join(missing)}")
    return TaskSpec(
        name=spec.name, title=_title(spec, settings), lookup=lookup, fields=tuple(fields.values()),
        finders=tuple(finders), arguments=arguments,
        read_back=settings.read_back or spec.read_back, done=settings.done or spec.done,
        found=settings.found or "", ask_any=settings.ask_any or "",
        examples=tuple(settings.examples) or _default_examples(spec, settings),
        carry=tuple(settings.carry), schema=dict(spec.parameters))


def _properties(spec: ToolSpec) -> dict[str, dict[str, Any]]:
    return dict(spec.parameters.get("properties") or {})


def _title(spec: ToolSpec, settings: TaskSettings) -> str:
    title = settings.title or spec.title or spec.description.split(". ")[0] or spec.name.replace("_", " ")
    return title[:1].lower() + title[1:].rstrip(".")


def _default_examples(spec: ToolSpec, settings: TaskSettings) -> tuple[str, ...]:
    title = _title(spec, settings)
    return (f"I'd like to {title}.", f"Can you {title} for me?", spec.name.replace("_", " "))


def _finder(spec: ToolSpec, argument: str, find: FindSettings, specs: dict[str, ToolSpec]) -> Finder:
    where = f"tasks.{spec.name}.find.{argument}"
    if argument not in _properties(spec):
        raise TaskError(f"{where}: {spec.name} has no argument {argument!r}")
    finder = specs.get(find.tool)
    if finder is None:
        raise TaskError(f"{where}: no MCP server offers the tool {find.tool!r}")
    if finder.kind is ToolKind.WRITE:
        raise TaskError(f"{where}: {find.tool!r} is a write tool; a finder must be read-only")
    finder_props = _properties(finder)
    args = dict(find.args) or {name: name for name in finder_props if name != IDEMPOTENCY_KEY}
    bad = sorted(set(args) - set(finder_props))
    if bad:
        raise TaskError(f"{where}: {find.tool} has no argument {', '.join(bad)}")
    return Finder(argument, find.tool, args, dict(find.match), find.offer, find.items)


def _inferred_finders(spec: ToolSpec, properties: dict[str, dict[str, Any]], required: set[str],
                      specs: dict[str, ToolSpec], done: set[str], profile: Profile) -> list[Finder]:
    """An id the caller cannot know, whose description names the read-only tool that lists it."""
    finders = []
    for name in sorted(required - done):
        if not name.endswith("_id"):
            continue
        description = str(properties[name].get("description", ""))
        tool = next((s for s in specs.values() if s.kind is ToolKind.READ_ONLY
                     and re.search(rf"\b{re.escape(s.name)}\b", description)), None)
        if tool is not None and spec.kind is ToolKind.WRITE:
            args = {n: n for n in _properties(tool) if n != IDEMPOTENCY_KEY}
            finders.append(Finder(name, tool.name, args, {}))
    return finders


def _property_for(name: str, spec: ToolSpec, finders: list[Finder], specs: dict[str, ToolSpec]
                  ) -> dict[str, Any]:
    if name in _properties(spec):
        return _properties(spec)[name]
    for finder in finders:
        for arg, field_name in finder.args.items():
            if field_name == name:
                return _properties(specs[finder.tool]).get(arg, {})
    return {}


def _required_default(name: str, spec: ToolSpec, finders: list[Finder], specs: dict[str, ToolSpec],
                      required: set[str]) -> bool:
    if name in _properties(spec):
        return name in required
    for finder in finders:
        if name in finder.match.values():
            return True
        for arg, field_name in finder.args.items():
            if field_name == name and arg in (specs[finder.tool].parameters.get("required") or ()):
                return True
    return False


def _field(name: str, prop: dict[str, Any], extra: FieldSettings, required: bool,
           profile: Profile) -> FieldSpec:
    listed = re.fullmatch(r"\^\(([\w |]+)\)\$", str(prop.get("pattern", "")))  # "^(low|normal|high)$"
    enum = prop.get("enum") or (listed[1].split("|") if listed else ())
    choices = tuple(str(c) for c in (extra.choices or enum) if str(c))
    kind = extra.type or _kind(name, prop, choices, profile)
    spoken_name = name.replace("_", " ")
    if extra.ask:
        ask = extra.ask
    elif choices:
        ask = f"Which {spoken_name} would you like: {_or_list(choices)}?"
    else:
        ask = f"What is the {spoken_name}?"
    return FieldSpec(name=name, type=kind, ask=ask, required=extra.required if extra.required is not None
                     else required, choices=choices, between=extra.between, spoken=extra.spoken or "",
                     description=str(prop.get("description", "")),
                     pattern=str(prop.get("pattern", "")) if not listed else "",
                     numbers=number_words(extra, profile.languages[0])
                     if kind in ("integer", "number") else None, language=profile.languages[0])


def _kind(name: str, prop: dict[str, Any], choices: tuple[str, ...], profile: Profile) -> str:
    types = prop.get("type")
    types = set(types) if isinstance(types, list) else {types}
    if prop.get("anyOf"):
        types |= {p.get("type") for p in prop["anyOf"] if isinstance(p, dict)}
    description = str(prop.get("description", "")).lower()
    if choices:
        return "choice"
    if "integer" in types:
        return "integer"
    if "number" in types:
        return "number"
    if prop.get("format") == "date" or "yyyy-mm-dd" in description or name in ("day", "date"):
        return "date"
    if prop.get("format") == "time" or "hh:mm" in description or name in ("time", "hour"):
        return "time"
    if name in profile.references:
        return "reference"
    if prop.get("pattern"):  # a plate, a member number: read and spoken character by character
        return "code"
    if name == "name" or name.endswith("_name") or "name" in description.split()[:3]:
        return "name"
    return "text"


def _or_list(items: tuple[str, ...]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]
