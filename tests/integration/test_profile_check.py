"""``voicebot profile check``: the mistakes a newcomer makes in a profile are caught before a
caller meets them, each named with its line, and every shipped profile passes.

The seeded mistakes are made in a copy of the salon's profile, checked against the salon's real
MCP server (started once, with a token)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys

import pytest

from voicebot.brain.business.profile_check import check_profile
from voicebot.devstack import ROOT, Stack, start_mcp_servers

pytestmark = pytest.mark.integration

SALON = ROOT / "examples" / "salon"


@pytest.fixture(scope="module")
def salon_env(tmp_path_factory):
    """The salon's MCP server, as make run starts it: the brain's URL and token variables."""
    stack = Stack(tmp_path_factory.mktemp("logs"), quiet=True)
    try:
        _, env = start_mcp_servers(stack, "salon", {"SALON_DB": ":memory:"})
        yield env
    finally:
        stack.close()


# (what the newcomer wrote instead, the text the problem names, where the line is)
MISTAKES = {
    "unknown top-level key": ("name: Lumi", "nmae: Lumi", "nmae: unknown key", "nmae: Lumi"),
    "unknown key in a task": ("    read_back: a {service}", "    readback: a {service}",
                              "tasks.book_visit.readback: unknown key", "    readback:"),
    "misspelt placeholder in a read-back": (
        "at {time}, for {customer_name}\n", "at {time}, for {custmer_name}\n",
        "tasks.book_visit.read_back: {custmer_name} is not a field or item key",
        "    read_back: a {service}"),
    "misspelt placeholder in a done sentence": (
        "Your {service} with {stylist} on", "Your {service} with {stylst} on",
        "tasks.book_visit.done: {stylst}", "    done: Your {service}"),
    "misspelt field of a task": ("      customer_name: {ask:", "      customer_nme: {ask:",
                                 "tasks.book_visit.fields.customer_nme: book_visit has no argument",
                                 "      customer_nme:"),
    "override of a tool the server lacks": (
        "      find_visits:\n        only_known", "      find_visit:\n        only_known",
        "mcp_servers.0.tools.find_visit: the server offers no tool 'find_visit'", "      find_visit:"),
    "finder match key no item has": ("match: {time: from_time}", "match: {tme: from_time}",
                                     "find.time_id.match.tme: 'tme' is not a key of free_times's items",
                                     "match: {tme"),
    "placeholder a sentence does not have": (
        "  can_help: I can help you book", "  can_help: I can help you {task} and book",
        "sentences.can_help: {task} is not filled in the can_help sentence", "  can_help:"),
    "task no tool offers": ("  find_visits:\n    title: look up", "  find_visitz:\n    title: look up",
                            "tasks.find_visitz: no MCP server offers a tool 'find_visitz'", "  find_visitz:"),
    "misspelt placeholder in a finder's offer": (
        'offer: "{time:time} with {stylist}"', 'offer: "{time:time} with {stylst}"',
        "find.time_id.offer: {stylst} is not a key of free_times's items", "match: {time"),
    "misspelt placeholder in a lookup's found": (
        'found: "a {service} with {stylist} on {weekday}', 'found: "a {service} with {stylist} on {wekday}',
        "tasks.find_visits.found: {wekday}", "    found:"),
    "placeholder a translated sentence does not have": (
        "languages: [en]", 'languages: [en, ko]\ntranslations:\n  ko:\n    sentences:\n'
        '      can_help: "{task} 도와드릴 수 있어요."',
        "translations.ko.sentences.can_help: {task} is not filled in the can_help sentence",
        "      can_help: \"{task}"),
    "misspelt placeholder in a translated read-back": (
        "languages: [en]", 'languages: [en, ko]\ntranslations:\n  ko:\n    tasks:\n      book_visit:\n'
        '        read_back: "{custmer_name} 님 {service}"',
        "translations.ko.tasks.book_visit.read_back: {custmer_name} is not a field or item key",
        "        read_back: \"{custmer_name}"),
    "a wrong MCP token": (None, None, "refused the token (HTTP 401): SALON_TOKEN is not the server's token",
                          "    auth_token_env: SALON_TOKEN"),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_seeded_mistake_is_caught_named_with_its_line(mistake, salon_env, tmp_path):
    old, new, named, line_of = MISTAKES[mistake]
    text = (SALON / "profile.yaml").read_text()
    env = dict(salon_env)
    if old is None:
        env["SALON_TOKEN"] = "not-the-token"
    else:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (tmp_path / "profile.yaml").write_text(text)
    shutil.copy(SALON / "knowledge.md", tmp_path / "knowledge.md")
    report = asyncio.run(check_profile(str(tmp_path / "profile.yaml"), env, knowledge=False, wait_s=5))
    line = next(number for number, row in enumerate(text.splitlines(), 1) if line_of in row)
    found = [str(problem) for problem in report.problems]
    assert any(f"line {line}: " in problem and named in problem for problem in found), found
    assert len(found) == 1, found  # the one mistake, not a cascade


def test_the_salon_as_shipped_passes_the_same_check(salon_env):
    report = asyncio.run(check_profile("salon", salon_env, knowledge=False))
    assert report.problems == []
    shown = "\n".join(report.lines)
    assert "fields, in order: service (choice haircut|colour|beard trim), day (date), from_time" in shown
    assert "finds time_id with free_times(" in shown and "matching time=from_time" in shown
    assert "read-back: 'a haircut with Mia on " in shown


@pytest.mark.parametrize("profile", sorted(p.parent.name for p in (ROOT / "examples").glob("*/profile.yaml")))
def test_every_shipped_profile_passes(profile):
    """As the command checks it: the profile's own MCP servers started, the check (its knowledge
    files read), what the brain derived; the default business's knowledge also indexed (the
    brain's tests index every business's)."""
    from voicebot.brain.business.profile_check import launched_servers

    with launched_servers(profile) as env:
        report = asyncio.run(check_profile(profile, env, knowledge=profile == "restaurant"))
    assert report.problems == [], [str(problem) for problem in report.problems]
    shown = "\n".join(report.lines)
    assert "task " in shown and "fields, in order: " in shown
    assert ("indexed in" in shown) == (profile == "restaurant")


def test_the_command_passes_a_shipped_profile_and_prints_what_the_brain_derived(salon_env):
    """``voicebot profile check`` (the salon's server already running: the command uses it)."""
    import os

    done = subprocess.run([sys.executable, "-m", "voicebot.gateway.cli", "profile", "check", "salon",
                           "--no-knowledge"], cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, **salon_env})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "examples/salon/profile.yaml: passes" in done.stdout
    assert "  task book_visit: 'book a visit'" in done.stdout
    assert "    read-back: 'a haircut with Mia on " in done.stdout


def test_the_command_lists_the_mistakes_and_fails(tmp_path):
    (tmp_path / "profile.yaml").write_text("name: Joe\npurpose: testing\nsentences:\n  confirm: Ok {acton}?\n"
                                           "gaurd: {}\n")
    done = subprocess.run([sys.executable, "-m", "voicebot.gateway.cli", "profile", "check",
                           str(tmp_path / "profile.yaml")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "2 mistake(s)" in done.stdout
    assert "line 5: gaurd: unknown key" in done.stdout
    assert "line 4: sentences.confirm: {acton} is not filled in the confirm sentence" in done.stdout


def test_make_run_runs_the_same_check_and_fails_the_start_with_the_line(salon_env, tmp_path):
    from voicebot.devstack import StartupError, check_profile_strictly

    text = (SALON / "profile.yaml").read_text().replace("match: {time: from_time}", "match: {tme: from_time}")
    (tmp_path / "profile.yaml").write_text(text)
    shutil.copy(SALON / "knowledge.md", tmp_path / "knowledge.md")
    stack = Stack(tmp_path / "logs", quiet=True)
    check_profile_strictly(stack, str(tmp_path / "profile.yaml"))  # the file alone is well formed
    line = next(number for number, row in enumerate(text.splitlines(), 1) if "match: {tme" in row)
    with pytest.raises(StartupError, match=rf"(?s)line {line}: tasks.book_visit.find.time_id.match.tme: .*"
                                           r"voicebot profile check"):
        check_profile_strictly(stack, str(tmp_path / "profile.yaml"), salon_env)
    check_profile_strictly(stack, "salon", salon_env)


def test_the_brain_itself_names_a_refused_token_at_once(salon_env):
    """A deployment's brain (no profile check before it) says "token" too, without waiting out
    BRAIN_MCP_CONNECT_WAIT_S."""
    import time

    from voicebot.brain.act.toolbox import connect_server
    from voicebot.brain.business.errors import ProfileError
    from voicebot.brain.business.profile import load_profile
    from voicebot.brain.business.profile_check import environment

    with environment({**salon_env, "SALON_TOKEN": "not-the-token"}):
        server = load_profile("salon").mcp_servers[0]
        started = time.monotonic()
        refused = r"refused the token \(HTTP 401\): SALON_TOKEN is not the server.s token"
        with pytest.raises(ProfileError, match=refused):
            asyncio.run(connect_server(server, wait_s=30))
    assert time.monotonic() - started < 20  # not the 30 s wait for a server still starting
