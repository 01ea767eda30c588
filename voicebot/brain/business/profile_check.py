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
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml

from voicebot.brain.business.errors import ProfileError
from voicebot.brain.business.profile import McpServer, Profile, resolve_path
from voicebot.brain.business.profile_report import (
    Path_,
    Problem,
    ProfileCheckFailed,
    Report,
    key_lines,
    with_lines,
)
from voicebot.brain.business.profile_rules import (
    check_schema,
    check_sentences,
    check_tasks,
    check_translated_sentences,
    describe,
)

_ENV_NAME = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")

__all__ = ["Problem", "ProfileCheckFailed", "Report", "check_profile", "environment", "launched_servers",
           "main"]


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
        check_translated_sentences(report, raw)
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
