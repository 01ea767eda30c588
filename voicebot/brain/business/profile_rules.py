"""The profile check's rules on the file and the tasks built from it, and the derived view for people.

Every fixed sentence and task template may name only what will be there (``template_names``);
``describe`` shows what the brain derived, each read-back rendered with sample values.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from pydantic import ValidationError

from voicebot.brain.act.tools import ToolRegistry
from voicebot.brain.business.errors import ProfileError
from voicebot.brain.business.profile import Profile, Sentences, expand_env
from voicebot.brain.business.profile_report import Report, check_template, placeholders
from voicebot.brain.business.tasks import TaskError, TaskSpec, build_tasks
from voicebot.brain.speak.readback import render

# The placeholders code fills in each fixed sentence (``Sentences``); any other name is a mistake.
SENTENCE_PLACEHOLDERS: dict[str, frozenset[str]] = {
    "confirm": frozenset({"action"}), "confirm_again": frozenset({"action"}),
    "done": frozenset({"action"}), "refused": frozenset({"reason"}), "can_help": frozenset({"tasks"}),
    "hello": frozenset({"name"}),
    "ask_again": frozenset({"question"}), "not_found": frozenset({"question"}),
    "alternatives": frozenset({"wanted", "options"}), "nothing_free": frozenset({"wanted"}),
    "field_again": frozenset({"field", "question"}),
}


def item_keys(profile: Profile, registry: ToolRegistry) -> set[str]:
    """The keys the business's tools put in their items, as far as the profile and the listing
    tell: every reference label's placeholders, every reference, every tool argument."""
    keys = set(profile.references)
    for kind in profile.references.values():
        with contextlib.suppress(ValueError):
            keys |= placeholders(kind.label)
    for spec in registry.specs():
        keys |= set(spec.parameters.get("properties") or {})
    return keys


def template_names(task: TaskSpec, items: set[str]) -> set[str]:
    """What a task's templates may name: its fields, the ids its finders find, and item keys."""
    return {f.name for f in task.fields} | {f.argument for f in task.finders} | items


# ---- the checks --------------------------------------------------------------------------------
def check_schema(report: Report, raw: Any) -> Profile | None:
    if not isinstance(raw, dict):
        report.fail((), "the top level must be a mapping of fields")
        return None
    try:
        return Profile.model_validate(expand_env(raw))
    except ProfileError as exc:  # an unset ${VAR} without a default
        report.fail((), str(exc))
    except ValidationError as exc:
        for error in exc.errors():
            message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
            report.fail(tuple(error["loc"]), message)
    return None


def check_sentences(report: Report, raw: Any) -> None:
    """The fixed sentences as written (checked even when another part of the file is wrong)."""
    sentences = raw.get("sentences") if isinstance(raw, dict) else None
    for name, text in (sentences.items() if isinstance(sentences, dict) else ()):
        if isinstance(text, str) and name in Sentences.model_fields:
            check_template(report, ("sentences", name), text, set(SENTENCE_PLACEHOLDERS.get(name, ())),
                           f"filled in the {name} sentence")


def check_translated_sentences(report: Report, raw: Any) -> None:
    """Each translation's sentences, as the first language's (``translations.<l>.sentences``)."""
    translations = raw.get("translations") if isinstance(raw, dict) else None
    for language, text in (translations.items() if isinstance(translations, dict) else ()):
        sentences = text.get("sentences") if isinstance(text, dict) else None
        for name, sentence in (sentences.items() if isinstance(sentences, dict) else ()):
            if isinstance(sentence, str) and name in Sentences.model_fields:
                check_template(report, ("translations", language, "sentences", name), sentence,
                               set(SENTENCE_PLACEHOLDERS.get(name, ())), f"filled in the {name} sentence")


def check_translated_tasks(report: Report, profile: Profile, tasks: dict[str, TaskSpec],
                           items: set[str]) -> None:
    """Each translation's task templates name what the first language's may."""
    for language in profile.languages[1:]:
        text = profile.translations.get(language)
        for name, task_text in (text.tasks.items() if text is not None else ()):
            if name not in tasks:
                continue
            names, path = template_names(tasks[name], items), ("translations", language, "tasks", name)
            check_template(report, (*path, "read_back"), task_text.read_back or "", names,
                           f"a field or item key of {name}")
            check_template(report, (*path, "done"), task_text.done or "", names | {"action"},
                           f"a field, item key or result of {name}")
            check_template(report, (*path, "found"), task_text.found or "", names, f"a key of {name}'s items")


def check_tasks(report: Report, profile: Profile, registry: ToolRegistry) -> dict[str, TaskSpec]:
    try:
        tasks = build_tasks(profile, registry)
    except TaskError as exc:
        message = str(exc)
        where, _, why = message.partition(": ")
        if where == "tasks" and why.startswith("no MCP server offers "):
            for name in why.removeprefix("no MCP server offers ").split(", "):
                report.fail(("tasks", name), f"no MCP server offers a tool {name!r}")
        else:
            report.fail(tuple(where.split(".")), why or message)
        return {}
    items = item_keys(profile, registry)
    specs = {spec.name: spec for spec in registry.specs()}
    for name, settings in profile.tasks.items():
        task, path = tasks[name], ("tasks", name)
        own = set(specs[name].parameters.get("properties") or {})
        from_finders = {v for f in task.finders for v in (*f.args.values(), *f.match.values())}
        for field_name in settings.fields:
            if field_name not in own | from_finders:
                report.fail((*path, "fields", field_name), f"{name} has no argument {field_name!r} and no "
                            f"finder takes it; its arguments: {', '.join(sorted(own))}")
        fields = {f.name for f in task.fields}
        for argument, find in settings.find.items():
            for key, field_name in find.match.items():
                if key not in items:
                    report.fail((*path, "find", argument, "match", key),
                                f"{key!r} is not a key of {find.tool}'s items as far as the profile tells "
                                f"(reference labels, tool arguments): {', '.join(sorted(items))}")
                if field_name not in fields:
                    report.fail((*path, "find", argument, "match", key),
                                f"{field_name!r} is not a field of {name}")
            check_template(report, (*path, "find", argument, "offer"), find.offer, items,
                           f"a key of {find.tool}'s items")
        names = template_names(task, items)
        check_template(report, (*path, "read_back"), settings.read_back, names,
                       f"a field or item key of {name}")
        check_template(report, (*path, "done"), settings.done, names | {"action"},
                       f"a field, item key or result of {name}")
        check_template(report, (*path, "found"), settings.found, names, f"a key of {name}'s items")
        for field_name, extra in settings.fields.items():
            check_template(report, (*path, "fields", field_name, "spoken"), extra.spoken, {"value"},
                           "filled in a field's spoken form (only {value} is)")
    for index, server in enumerate(profile.mcp_servers):
        for tool, override in server.tools.items():
            if tool not in tasks:
                continue
            names = template_names(tasks[tool], items)
            path = ("mcp_servers", index, "tools", tool)
            check_template(report, (*path, "read_back"), override.read_back, names, f"a field of {tool}")
            check_template(report, (*path, "done"), override.done, names | {"action"}, f"a field of {tool}")
            if override.read_back and profile.tasks.get(tool) and profile.tasks[tool].read_back:
                report.lines.append(f"note: tasks.{tool}.read_back wins over "
                                    f"mcp_servers[{index}].tools.{tool}.read_back")
    check_translated_tasks(report, profile, tasks, items)
    return tasks


# ---- what the brain derived ---------------------------------------------------------------------
def sample_values(profile: Profile, tasks: dict[str, TaskSpec], items: set[str]) -> dict[str, Any]:
    """A value for every name a template may use, to show the sentences filled in: by the type
    of the field of that name (in any task), a found id as its reference's label."""
    day = dt.date.today() + dt.timedelta(days=1)
    values: dict[str, Any] = {key: f"<{key}>" for key in items}
    values.update({"weekday": day.strftime("%A"), "action": "<the read-back>"})
    for task in tasks.values():
        for item in task.fields:
            values[item.name] = {
                "date": day.isoformat(), "time": (item.between or ("19:00",))[0], "integer": 2,
                "number": 2, "name": "Alex Morgan", "choice": item.choices[0] if item.choices else "<choice>",
            }.get(item.type, values.get(item.name, f"<{item.name}>"))
        for finder in task.finders:
            for key, field_name in finder.match.items():
                values[key] = values.get(field_name, values.get(key))
    for name, kind in profile.references.items():
        values[name] = render(kind.label, values)
    return values


def describe(profile: Profile, registry: ToolRegistry, tasks: dict[str, TaskSpec]) -> list[str]:
    values = sample_values(profile, tasks, item_keys(profile, registry))
    lines = []
    for name, task in tasks.items():
        kind = "lookup, no confirmation" if task.lookup else "write, read back and confirmed"
        lines.append(f"task {name}: {task.title!r} ({kind})")
        shown = []
        for item in task.fields:
            detail = item.type + (f" {'|'.join(item.choices)}" if item.choices else "")
            detail += f" {item.between[0]}-{item.between[1]}" if item.between else ""
            shown.append(f"{item.name} ({detail}{'' if item.required else ', optional'})")
        lines.append(f"  fields, in order: {', '.join(shown) or 'none'}")
        for finder in task.finders:
            args = ", ".join(f"{arg}={field_name}" for arg, field_name in finder.args.items())
            match = ", ".join(f"{key}={field_name}" for key, field_name in finder.match.items()) or "nothing"
            lines.append(f"  finds {finder.argument} with {finder.tool}({args}), matching {match}")
        if task.read_back:
            lines.append(f"  read-back: {render(task.read_back, values)!r}")
        if task.done:
            lines.append(f"  done: {render(task.done, values)!r}")
        if task.found:
            lines.append(f"  each found: {render(task.found, values)!r}")
    for name, kind in profile.references.items():
        lines.append(f"reference {name}: {kind.prefix}1, {kind.prefix}2 ... read as {kind.label!r}")
    for situation in profile.urgent.situations:
        then = ", then a handoff" if situation.handoff else ""
        lines.append(f"urgent {situation.name}: {len(situation.examples)} examples; says "
                     f"{' '.join(situation.say.split())!r}{then}")
    for name, task in tasks.items():
        if task.carry:
            lines.append(f"task {name} carries {', '.join(task.carry)} from earlier tasks of the call")
    return lines
