"""Agent profiles: one YAML file per deployment says what the bot is for and where its tools are.

The brain core knows no business. A profile names the bot and its purpose
(used by the system prompt and the topic guard), its languages, the fixed
sentences code speaks, guard settings, one or more MCP servers with per-tool
overrides (kind, timeout, retries), the tasks code runs from the write tools
(questions, finders, read-back and done sentences), the business's knowledge,
and how entity ids in tool results become session references (``S1``). No
business brings code. ``BRAIN_PROFILE`` picks the file; a bad profile fails at
start with the field named.

Strings may use ``${VAR}`` or ``${VAR:-default}``: the environment fills them
in before validation, so one profile serves a laptop, compose and Kubernetes.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from voicebot.brain.business.errors import ProfileError
from voicebot.brain.business.knowledge import KnowledgeSettings, load_passages
from voicebot.brain.business.sentences import Sentences
from voicebot.brain.business.translations import Translation, check_languages, in_language, packed
from voicebot.brain.lang import LanguageError, language_pack

# Defined in errors.py and sentences.py; importers may take them from either.
__all__ = ["ProfileError", "Sentences"]
log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[3]
# The demo businesses, each a folder: profile.yaml, knowledge.md and its MCP server.
EXAMPLES_DIR = ROOT / "examples"
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScreenSettings(_Strict):
    """The guard's quick screen (``guard_screen.py``): turns close to ``examples`` and not to
    anything blocked pass on sentence embeddings, without an LLM call. No examples: no screen."""

    # What callers of this business say, a sentence or two per allowed topic.
    examples: list[str] = Field(default_factory=list)
    # Near-domain requests the LLM guard must still judge (a clinic's "which pills should I take").
    block_examples: list[str] = Field(default_factory=list)
    # Passed when the nearest example's cosine similarity is at least ``above`` and at least
    # ``margin`` more than the nearest blocked one's (make bench-guard shows both sides).
    above: float = Field(0.6, gt=0, lt=1)
    margin: float = Field(0.15, ge=0, lt=1)


class GuardSettings(_Strict):
    enabled: bool = True
    # Topics the bot covers and examples of what to block, for the guard's prompt.
    allow: list[str] = Field(default_factory=list)
    block: list[str] = Field(default_factory=lambda: [
        "writing code", "homework", "medical or legal advice", "politics"])
    timeout_s: float = Field(4.0, gt=0)
    # Blocked only when P(BLOCK) is above this (servers that report token probabilities; others
    # are judged by the word written). 0.5 is the model's own word. With the packaged 1.5B model
    # a higher line passed no more in-domain turns of the corpora but let far more off-topic
    # requests through (at the clinic, medical advice), so a profile raises it only for a reason
    # (make bench-guard reports the rates at 0.5 and 0.7 from the same verdicts).
    block_above: float = Field(0.5, gt=0, lt=1)
    screen: ScreenSettings = Field(default_factory=ScreenSettings)


class ErrorRule(_Strict):
    """What one error of a tool means (``mcp_servers[].tools.<tool>.errors``), for servers whose
    messages do not follow the convention (``tool_errors.py``)."""

    kind: Literal["refusal", "field", "transient", "unknown"] = "field"
    field: str | None = None  # kind field: the field asked again
    say: str | None = None  # the sentence the caller hears (a refusal's reason; a field's request)

    @model_validator(mode="after")
    def _field_named(self) -> ErrorRule:
        if self.kind == "field" and not self.field:
            raise ValueError("an error of kind field names the field to ask again (field: ...)")
        return self


class ToolOverride(_Strict):
    """Per-tool settings over what the MCP server's listing says."""

    kind: Literal["read_only", "write"] | None = None
    timeout_s: float | None = Field(None, gt=0)
    retries: int | None = Field(None, ge=0, le=5)
    title: str | None = None
    # The sentence code speaks to confirm the action: ``{argument}`` fields in spoken form,
    # a reference argument as its label. Without one, code builds it from the title and arguments.
    read_back: str | None = None
    # Said after the write succeeded: ``{action}`` plus the result's fields (a new reference as R1).
    done: str | None = None
    # A reference field: list items of the result that this conversation does not know yet are
    # dropped (a lookup by name must not reveal other people's records).
    only_known: str | None = None
    # The tool's own error codes (or words its errors contain) -> what they mean.
    errors: dict[str, ErrorRule] = Field(default_factory=dict)


class LocalLaunch(_Strict):
    """For ``make run`` only: the local process that serves this MCP server. The launcher
    sets ``<env_prefix>_PORT`` and ``<env_prefix>_TOKEN`` for it and the URL variable the
    profile's ``url`` names; deployments run their servers themselves and ignore this."""

    module: str = Field(pattern=r"^[\w.]+$")
    env_prefix: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    port: int = Field(0, ge=0, le=65535)


class McpServer(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    url: str = Field(pattern=r"^https?://")
    # The value of this environment variable is sent as ``Authorization: Bearer <value>``.
    auth_token_env: str | None = None
    include: list[str] | None = None  # only these tools (after exclude)
    exclude: list[str] = Field(default_factory=list)
    tools: dict[str, ToolOverride] = Field(default_factory=dict)
    connect_timeout_s: float = Field(5.0, gt=0)
    launch: LocalLaunch | None = None

    def auth_headers(self) -> dict[str, str]:
        """The header for this server; none while its variable is unset (a server that
        requires a token then refuses us, and the start fails naming it)."""
        token = os.environ.get(self.auth_token_env or "", "")
        return {"Authorization": f"Bearer {token}"} if token else {}


class ReferenceKind(_Strict):
    """An id field in tool results that the model sees as ``<prefix><n>`` with a spoken label."""

    prefix: str = Field(pattern=r"^[A-Z]{1,3}$")
    label: str  # a template over the item holding the id, e.g. "{weekday}, {day:date} at {time:time}"


FieldType = Literal["date", "time", "integer", "number", "name", "text", "code", "choice", "reference"]


class FieldSettings(_Strict):
    """What the profile adds to one field of a task: the question code asks, and how to read the
    answer. Everything left out comes from the tool's input schema."""

    ask: str | None = None  # "At what time?"; default: "What is the <field name>?"
    type: FieldType | None = None  # how the caller's words become a value (values.py)
    required: bool | None = None  # default: required in the tool's schema (or the finder's)
    choices: list[str] | None = None  # the allowed values; default: the schema's enum
    # For a time: the hours it usually falls in ("HH:MM" pair), so "at seven" reads 19:00 there.
    between: tuple[str, str] | None = None
    spoken: str | None = None  # how a value reads back ("{value:time}"); default by type
    # What a number field's number means in the caller's words (docs/add-a-business.md, "Number
    # fields"); none of it is built in, so a garage's mileage never reads "for four" as its value.
    counts: list[str] = Field(default_factory=list)  # said after the number: "people", "of us"
    said_as: list[str] = Field(default_factory=list)  # with {n}: "table for {n}", "party of {n}"
    words_for: dict[int, list[str]] = Field(default_factory=dict)  # 1: ["just me"], 2: ["a couple"]
    more: list[str] = Field(default_factory=list)  # one more: "is joining us"
    fewer: list[str] = Field(default_factory=list)  # one fewer: "can't come"

    @field_validator("said_as")
    @classmethod
    def _has_n(cls, phrases: list[str]) -> list[str]:
        for phrase in phrases:
            if "{n}" not in phrase:
                raise ValueError(f"said_as: {phrase!r} has no {{n}} for the number")
        return phrases


class FindSettings(_Strict):
    """A tool argument that code finds with a read-only tool rather than asking the caller: a
    ``slot_id`` from the day, time and party size, through ``find_slots``."""

    tool: str  # the read-only tool to call
    # The finder's arguments from the task's fields (finder argument: field); default: every
    # finder argument that is also a field of the task, by the same name.
    args: dict[str, str] = Field(default_factory=dict)
    # The item that fits: item key -> field whose value it must equal ("time": "time"). Without
    # a match, the items are offered to the caller as choices.
    match: dict[str, str] = Field(default_factory=dict)
    offer: str = ""  # how an item is offered as an alternative, e.g. "{time:time}"; default: its label
    items: str = ""  # the result's key that holds the list; default: the first list in it


class TaskSettings(_Strict):
    """A write tool as a task code runs: which fields to ask, in which order, how to find the rest,
    and what code says about it. Every write tool is a task, listed here or not; a read-only tool
    listed here is a lookup (no confirmation: code says what it found)."""

    title: str | None = None  # "book a table": how code names the task to the caller
    examples: list[str] = Field(default_factory=list)  # what callers say to start it
    fields: dict[str, FieldSettings] = Field(default_factory=dict)  # in the order code asks them
    find: dict[str, FindSettings] = Field(default_factory=dict)
    read_back: str | None = None  # over the fields and the found items' keys
    done: str | None = None  # over the same and the tool's result
    found: str | None = None  # a lookup: how each item found reads ("{weekday} at {time:time}")
    # A lookup's question when nothing is given: the reference or the name to look up by.
    ask_any: str | None = None
    # Fields this task takes from an earlier task of the call without asking (the caller's
    # name); the read-back still says them. Others carry when the caller says "the same".
    carry: list[str] = Field(default_factory=list)


class UrgentSituation(_Strict):
    """A situation the business names as urgent (an emergency at a clinic, a gas smell at a
    plumber's): recognised in any phrasing before anything else in the turn (``urgent.py``),
    and answered with the business's own sentence."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    # The situation in words, for the model's check: "the caller or someone with them has a
    # medical emergency now: chest pain, trouble breathing, ...".
    describe: str = Field(min_length=3)
    # How callers say it: the quick screen compares every turn with these.
    examples: list[str] = Field(min_length=1)
    say: str = Field(min_length=1)  # what the bot says, before anything else
    handoff: bool = False  # and then the call goes to a person

    @field_validator("say", "describe")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("must not be blank")
        return text


class UrgentSettings(_Strict):
    """``urgent:`` in a profile. A turn whose words are at least ``sure_above`` close (cosine) to
    a situation's example (or ``near_above`` and clearly nearer than to anything routine) is
    urgent at once; one below ``ask_above`` to every example is not;
    in between, the model reads it under a grammar (one label: a situation or none).
    ``routine``: what callers of this business say that sounds close but is not urgent (a
    past symptom, a routine check): a turn nearer to these than to any situation is not
    urgent unless the model says it is."""

    situations: list[UrgentSituation] = Field(default_factory=list)
    routine: list[str] = Field(default_factory=list)
    sure_above: float = Field(0.8, gt=0, le=1)
    ask_above: float = Field(0.35, ge=0, lt=1)
    # Also urgent without the model: at least ``near_above`` to a situation's example and
    # ``margin`` more than to any routine one (only with ``routine`` examples).
    near_above: float = Field(0.6, gt=0, le=1)
    margin: float = Field(0.25, ge=0, lt=1)

    @field_validator("situations")
    @classmethod
    def _unique_names(cls, situations: list[UrgentSituation]) -> list[UrgentSituation]:
        return _unique_by_name(situations, "situation")


class Profile(_Strict):
    name: str = "Joe"
    purpose: str = "answering questions"
    languages: list[str] = Field(default_factory=lambda: ["en"], min_length=1)
    # What callers talk about, for the speech recogniser (STT_CONTEXT; make run passes it):
    # a sentence naming the business's topics and its own words (dishes, streets, names).
    stt_context: str = Field("", max_length=600)
    sentences: Sentences
    guard: GuardSettings = Field(default_factory=GuardSettings)
    mcp_servers: list[McpServer] = Field(default_factory=list)
    references: dict[str, ReferenceKind] = Field(default_factory=dict)
    # Fields of tool results the model never sees (phone numbers, internal notes).
    hidden_fields: list[str] = Field(default_factory=list)
    tasks: dict[str, TaskSettings] = Field(default_factory=dict)
    knowledge: KnowledgeSettings = Field(default_factory=KnowledgeSettings)
    urgent: UrgentSettings = Field(default_factory=UrgentSettings)
    # The business's texts in its other languages (translations.py, docs/languages.md).
    translations: dict[str, Translation] = Field(default_factory=dict)
    # Where the profile file is: knowledge files are read relative to it.
    base_dir: str = ""

    @model_validator(mode="before")
    @classmethod
    def _sentences_in_its_language(cls, data: Any) -> Any:
        """The first language's pack's sentences under the profile's own."""
        if not isinstance(data, dict) or not isinstance(data.get("sentences", {}), dict):
            return data
        languages = data.get("languages") or ["en"]
        try:
            pack = language_pack(str(languages[0]).lower())
        except LanguageError:
            return data  # the languages' own check names it
        return {**data, "sentences": {**pack.sentences, **(data.get("sentences") or {})}}

    @field_validator("mcp_servers")
    @classmethod
    def _unique_names(cls, servers: list[McpServer]) -> list[McpServer]:
        return _unique_by_name(servers, "server")

    @model_validator(mode="after")
    def _speaks_its_languages(self) -> Profile:
        check_languages(self)
        return self

    def in_language(self, language: str) -> Profile:
        """The business with ``language``'s texts (``translations.py``)."""
        return in_language(self, language)

    @field_validator("languages")
    @classmethod
    def _packed(cls, languages: list[str]) -> list[str]:
        return packed(languages)


def _unique_by_name(items: list[Any], what: str) -> list[Any]:
    names = [item.name for item in items]
    if len(names) != len(set(names)):
        raise ValueError(f"{what} names must be unique, got {names}")
    return items


def expand_env(value: Any) -> Any:
    """``${VAR}`` / ``${VAR:-default}`` in every string, from the environment."""
    if isinstance(value, str):
        def one(match: re.Match[str]) -> str:
            found = os.environ.get(match[1])
            if found is None and match[2] is None:
                raise ProfileError(f"environment variable {match[1]} is not set (used in the profile)")
            return found if found is not None else match[2]

        return _ENV.sub(one, value)
    if isinstance(value, list):
        return [expand_env(v) for v in value]
    if isinstance(value, dict):
        return {k: expand_env(v) for k, v in value.items()}
    return value


def resolve_path(name_or_path: str) -> Path:
    """A path, or a shipped profile's name (``restaurant`` → ``examples/restaurant/profile.yaml``)."""
    path = Path(name_or_path).expanduser()
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    return EXAMPLES_DIR / name_or_path / "profile.yaml"


def load_profile(name_or_path: str) -> Profile:
    path = resolve_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ProfileError(f"profile {path}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile {path}: not valid YAML: {exc}") from None
    if isinstance(raw, dict):
        raw.setdefault("base_dir", str(path.resolve().parent))
    profile = parse_profile(raw, str(path))
    check_knowledge_files(profile, str(path))
    return profile


def check_knowledge_files(profile: Profile, where: str) -> None:
    """A knowledge file that is missing, unreadable or empty stops the start, naming it."""
    try:
        load_passages(profile.knowledge, Path(profile.base_dir or "."))
    except ProfileError as exc:
        raise ProfileError(f"{where}: {exc}") from None


def parse_profile(raw: Any, where: str = "profile") -> Profile:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: the top level must be a mapping of fields")
    if "instructions" in raw:
        # Code runs the conversation and the model only reads, so free-form instructions had no
        # reader: what they held belongs in ``knowledge`` (facts) or ``urgent`` (emergencies).
        raw = {k: v for k, v in raw.items() if k != "instructions"}
        log.warning("%s: 'instructions' is not read (the brain follows its tasks in code): put "
                    "facts in knowledge and emergencies under urgent; the key is ignored", where)
    try:
        return Profile.model_validate(expand_env(raw))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'profile'}: {e['msg']}"
                             for e in exc.errors())
        raise ProfileError(f"{where}: {problems}") from None
