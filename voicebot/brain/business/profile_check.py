"""``voicebot profile check PATH``: a profile's mistakes before a caller meets them.

The brain accepts a profile whose templates name nothing (``{custmer_name}`` reads as nothing),
whose finder matches no item key (every caller hears alternatives), whose overrides name no
tool (only a log line). This check refuses all of them, each named with its line:

1. the file strictly: unknown keys anywhere, wrong types (the brain's own models);
2. every fixed sentence's placeholders (``confirm`` knows ``{action}`` only, ...);
3. each MCP server: reached with the profile's token (a 401 says the token is wrong), its tool
   listing read; overrides, ``include`` and ``exclude`` must name tools it offers;
4. the tasks the brain builds from the listing (a task no tool offers fails here); a field
   under ``tasks.<t>.fields`` must be an argument of the tool or a finder's field; a finder's
   ``match`` keys must be item keys and its values fields; every template (``read_back``,
   ``done``, ``found``, a finder's ``offer``, a field's ``spoken``, the overrides' ``read_back``
   and ``done``) may name only what will be there (``template_names``);
5. the knowledge: read and indexed as the brain does.

Then it prints what the brain derived: tasks, fields in order with their types, finders,
references, each read-back rendered with sample values. ``make run`` runs the same check
(without indexing the knowledge, which the brain does next) once the MCP servers are up.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import re
import string
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from voicebot.brain.act.tools import ToolRegistry
from voicebot.brain.business.errors import ProfileError
from voicebot.brain.business.profile import McpServer, Profile, Sentences, expand_env, resolve_path
from voicebot.brain.business.tasks import TaskError, TaskSpec, build_tasks
from voicebot.brain.speak.readback import render

Path_ = tuple[str | int, ...]
_ENV_NAME = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")

# The placeholders code fills in each fixed sentence (``Sentences``); any other name is a mistake.
SENTENCE_PLACEHOLDERS: dict[str, frozenset[str]] = {
    "confirm": frozenset({"action"}), "confirm_again": frozenset({"action"}),
    "done": frozenset({"action"}), "refused": frozenset({"reason"}), "can_help": frozenset({"tasks"}),
    "hello": frozenset({"name"}),
    "ask_again": frozenset({"question"}), "not_found": frozenset({"question"}),
    "alternatives": frozenset({"wanted", "options"}), "nothing_free": frozenset({"wanted"}),
    "field_again": frozenset({"field", "question"}),
}


@dataclass(frozen=True)
class Problem:
    path: Path_
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = ".".join(str(part) for part in self.path) or "profile"
        return f"line {self.line}: {where}: {self.message}" if self.line else f"{where}: {self.message}"


class ProfileCheckFailed(ProfileError):
    def __init__(self, where: str, problems: list[Problem]) -> None:
        self.problems = problems
        listed = "\n".join(f"  {problem}" for problem in problems)
        super().__init__(f"{where}: {len(problems)} mistake(s):\n{listed}")


@dataclass
class Report:
    """What the check found and what the brain derived from the profile."""

    path: Path
    problems: list[Problem] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the derived view, for people

    def fail(self, path: Path_, message: str) -> None:
        self.problems.append(Problem(path, message))

    def raise_if_failed(self) -> None:
        if self.problems:
            raise ProfileCheckFailed(str(self.path), self.problems)


# ---- lines -------------------------------------------------------------------------------------
def key_lines(text: str) -> dict[Path_, int]:
    """The line (1-based) of every key and list item in the YAML, by its path."""
    lines: dict[Path_, int] = {}

    def walk(node: yaml.Node, path: Path_) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                lines[(*path, key.value)] = key.start_mark.line + 1
                walk(value, (*path, key.value))
        elif isinstance(node, yaml.SequenceNode):
            for index, value in enumerate(node.value):
                lines[(*path, index)] = value.start_mark.line + 1
                walk(value, (*path, index))

    root = yaml.compose(text)
    if root is not None:
        walk(root, ())
    return lines


def with_lines(problems: list[Problem], lines: dict[Path_, int]) -> list[Problem]:
    """Each problem with the line of the longest part of its path the file has."""
    placed = []
    for problem in problems:
        line = next((lines[problem.path[:n]] for n in range(len(problem.path), 0, -1)
                     if problem.path[:n] in lines), None)
        placed.append(Problem(problem.path, problem.message, line))
    return placed


# ---- templates ---------------------------------------------------------------------------------
def placeholders(template: str) -> set[str]:
    """The names a template fills in (``{time:time}`` -> ``time``); ValueError for broken braces."""
    return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}


def check_template(report: Report, path: Path_, template: str | None, allowed: set[str], what: str) -> None:
    if not template:
        return
    try:
        names = placeholders(template)
    except ValueError as exc:
        report.fail(path, f"not a template ({exc}); a literal brace is written {{{{ or }}}}")
        return
    unknown = sorted(names - allowed)
    if unknown:
        shown = ", ".join(f"{{{name}}}" for name in unknown)
        report.fail(path, f"{shown} is not {what}; known here: {', '.join(sorted(allowed)) or 'none'}")


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


async def check_server(report: Report, index: int, server: McpServer, wait_s: float) -> set[str] | None:
    """The names of the tools the server lists, or None (a problem said why)."""
    from voicebot.brain.act.toolbox import connect_server, token_refusal

    path: Path_ = ("mcp_servers", index)
    refused = await token_refusal(server)
    if refused:
        report.fail((*path, "auth_token_env"), refused)
        return None
    try:
        source, _ = await connect_server(server, wait_s)
    except ProfileError as exc:
        report.fail((*path, "url"), f"cannot list its tools: {exc}")
        return None
    try:
        everything = await source.load_tools()  # unfiltered: include and exclude are checked against it
    finally:
        await source.aclose()
    offered = {tool.spec.name for tool in everything}
    for key, names in (("tools", list(server.tools)), ("include", server.include or []),
                       ("exclude", server.exclude)):
        for name in names:
            if name not in offered:
                where = (*path, key, name) if key == "tools" else (*path, key, names.index(name))
                report.fail(where, f"the server offers no tool {name!r}; it offers "
                                   f"{', '.join(sorted(offered))}")
    return offered


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


async def index_knowledge(profile: Profile) -> str:
    from voicebot.brain.business.knowledge import open_knowledge
    from voicebot.brain.read.sentence_encoder import EncoderUnavailable, MiniLMEncoder

    settings = profile.knowledge
    if not (settings.faq or settings.files):
        return "knowledge: none"
    started = time.monotonic()
    try:
        encoder = MiniLMEncoder(None)
    except EncoderUnavailable as exc:
        raise ProfileError(f"knowledge: the sentence encoder is needed: {exc}") from None
    index = await open_knowledge(settings, Path(profile.base_dir or "."), encoder)
    size = getattr(index.index, "size", None)
    await index.aclose()
    return (f"knowledge: {len(settings.faq)} FAQ entries and {len(settings.files)} file(s) indexed in "
            f"{time.monotonic() - started:.1f} s" + (f" ({size} passages)" if size else ""))


# ---- the whole check ----------------------------------------------------------------------------
@contextlib.contextmanager
def environment(env: Mapping[str, str] | None) -> Iterator[None]:
    """``env`` over the process environment while the check runs (the URLs and tokens ``make run``
    gives the brain)."""
    saved = {key: os.environ.get(key) for key in env or {}}
    os.environ.update(env or {})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


async def check_profile(name_or_path: str, env: Mapping[str, str] | None = None, *, connect: bool = True,
                        knowledge: bool = True, wait_s: float = 10.0) -> Report:
    """Every check above; the report's problems carry their lines. ``connect=False`` stops after
    the file and its sentences (no MCP server, no tasks)."""
    path = resolve_path(name_or_path)
    report = Report(path)
    try:
        text = path.read_text()
        raw = yaml.safe_load(text)
        lines = key_lines(text)
    except OSError as exc:
        raise ProfileError(f"profile {path}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile {path}: not valid YAML: {exc}") from None
    with environment(env):
        if isinstance(raw, dict):
            raw.setdefault("base_dir", str(path.resolve().parent))
        profile = check_schema(report, raw)
        check_sentences(report, raw)
        if profile is not None and not report.problems:
            await check_connected(report, profile, connect, knowledge, wait_s)
    report.problems = with_lines(report.problems, lines)
    return report


async def check_connected(report: Report, profile: Profile, connect: bool, knowledge: bool,
                          wait_s: float) -> None:
    from voicebot.brain.act.toolbox import build_registry
    from voicebot.brain.business.knowledge import load_passages

    try:
        await asyncio.to_thread(load_passages, profile.knowledge, Path(profile.base_dir or "."))
    except ProfileError as exc:
        report.fail(("knowledge",), str(exc))
        return
    if not connect:
        return
    listed = [await check_server(report, index, server, wait_s)
              for index, server in enumerate(profile.mcp_servers)]
    if report.problems:
        return
    for server, offered in zip(profile.mcp_servers, listed, strict=True):
        report.lines.append(f"MCP server {server.name}: {', '.join(sorted(offered or ()))}")
    registry, sources = await build_registry(profile, wait_s)
    try:
        tasks = check_tasks(report, profile, registry)
        if not report.problems:
            report.lines += describe(profile, registry, tasks)
    finally:
        for source in sources:
            await source.aclose()
    if knowledge and not report.problems:
        report.lines.append(await index_knowledge(profile))


# ---- the command ------------------------------------------------------------------------------------
@contextlib.contextmanager
def launched_servers(name_or_path: str) -> Iterator[dict[str, str]]:
    """The profile's own MCP servers (``launch``), started as ``make run`` starts them, on free
    ports, unless the environment already names their URLs; yields the brain's environment."""
    import tempfile

    from voicebot.devstack import Stack, StartupError, start_mcp_servers

    raw = yaml.safe_load(resolve_path(name_or_path).read_text()) or {}
    servers = raw.get("mcp_servers") or [] if isinstance(raw, dict) else []
    wanted = [s for s in servers if isinstance(s, dict) and s.get("launch")
              and not any(var in os.environ for var in _url_variables(str(s.get("url", ""))))]
    if not wanted:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="profile-check-") as logs:
        stack = Stack(Path(logs), quiet=True)
        try:
            _, env = start_mcp_servers(stack, name_or_path)
            yield {key: value for key, value in env.items() if key not in os.environ}
        except StartupError as exc:
            raise ProfileError(f"could not start the profile's MCP servers: {exc}") from None
        finally:
            stack.close()


def _url_variables(url: str) -> list[str]:
    return [match[0] for match in _ENV_NAME.findall(url)]


def main(name_or_path: str, knowledge: bool = True) -> int:
    """``voicebot profile check PATH``: 0 when the profile passes, 1 with its mistakes listed."""
    try:
        report = asyncio.run(check_profile(name_or_path, connect=False))
        if not report.problems:
            with launched_servers(name_or_path) as env:
                report = asyncio.run(check_profile(name_or_path, env, knowledge=knowledge))
    except ProfileError as exc:
        print(f"profile check failed: {exc}")
        return 1
    if report.problems:
        print(ProfileCheckFailed(str(report.path), report.problems))
        return 1
    print(f"{report.path}: passes")
    for line in report.lines:
        print(f"  {line}")
    return 0
