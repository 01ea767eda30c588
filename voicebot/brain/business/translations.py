"""A business in each of its languages: the profile's ``translations.<language>`` over its texts.

The profile is written in its first language. For each other language it names, the brain
builds the same business with that language's texts: the business's own where
``translations.<language>`` writes them (its name, purpose, sentences, tasks' titles, examples,
questions, read-backs, number words, knowledge, what its tools' errors say), the language pack's sentences
(``lang/<language>.yaml``) where it does not, and the first language's texts last. Tools, fields,
finders and rules are the same in every language (docs/languages.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from voicebot.brain.business.knowledge import KnowledgeSettings
from voicebot.brain.lang import LanguageError, language_pack

if TYPE_CHECKING:
    from voicebot.brain.business.profile import Profile, TaskSettings

_TASK_TEXTS = ("title", "examples", "ask_any", "read_back", "done", "found")
_FIELD_TEXTS = ("ask", "spoken", "counts", "said_as", "words_for", "more", "fewer")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FieldText(_Strict):
    ask: str | None = None
    spoken: str | None = None
    counts: list[str] | None = None
    said_as: list[str] | None = None
    words_for: dict[int, list[str]] | None = None
    more: list[str] | None = None
    fewer: list[str] | None = None


class TaskText(_Strict):
    title: str | None = None
    examples: list[str] | None = None
    ask_any: str | None = None
    read_back: str | None = None
    done: str | None = None
    found: str | None = None
    fields: dict[str, FieldText] = Field(default_factory=dict)


class Translation(_Strict):
    name: str | None = None
    purpose: str | None = None
    stt_context: str | None = None
    sentences: dict[str, str] = Field(default_factory=dict)
    tasks: dict[str, TaskText] = Field(default_factory=dict)
    knowledge: KnowledgeSettings | None = None
    # Per tool, an error rule's key (``mcp_servers[].tools.<tool>.errors.<key>``) -> its ``say``.
    tool_errors: dict[str, dict[str, str]] = Field(default_factory=dict)


def packed(languages: list[str]) -> list[str]:
    """The profile's languages, each with the brain's words for it (``lang/``)."""
    codes = [code.lower() for code in languages]
    for code in codes:
        try:
            language_pack(code)
        except LanguageError as exc:
            raise ValueError(str(exc)) from None
    return codes


def check_languages(profile: Profile) -> None:
    """Every translation is of a language the profile names, and every language other than the
    first has sentences (its pack's or the translation's) and builds."""
    unknown = sorted(set(profile.translations) - set(profile.languages))
    if unknown:
        raise ValueError(f"translations: {', '.join(unknown)} is not one of languages {profile.languages}")
    for language in profile.languages[1:]:
        text = profile.translations.get(language) or Translation()
        if not (language_pack(language).sentences or text.sentences) and language != "en":
            raise ValueError(f"languages: {language!r} has no sentences (neither its language pack nor "
                             f"translations.{language}.sentences)")
        _check_tool_errors(profile, language, text.tool_errors)
        try:
            in_language(profile, language)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"])
            raise ValueError(f"translations.{language}: {where}: {error['msg']}") from None


def in_language(profile: Profile, language: str) -> Profile:
    """The business with ``language``'s texts (the profile itself for its first language)."""
    if language == profile.languages[0]:
        return profile
    text = profile.translations.get(language) or Translation()
    unknown = sorted(set(text.tasks) - set(profile.tasks))
    if unknown:
        raise ValueError(f"translations.{language}.tasks: {', '.join(unknown)} is not a task of the profile")
    said = {**profile.sentences.model_dump(), **language_pack(language).sentences, **text.sentences}
    sentences = type(profile.sentences)(**said)
    tasks = {name: _task_in(settings, text.tasks.get(name)) for name, settings in profile.tasks.items()}
    update: dict[str, Any] = {"sentences": sentences, "tasks": tasks, "translations": {},
                              "languages": [language], "mcp_servers": _servers_in(profile, text.tool_errors)}
    for key in ("name", "purpose", "stt_context", "knowledge"):
        if getattr(text, key) is not None:
            update[key] = getattr(text, key)
    return profile.model_copy(update=update)


def _check_tool_errors(profile: Profile, language: str, said: dict[str, dict[str, str]]) -> None:
    rules = {tool: set(override.errors) for server in profile.mcp_servers
             for tool, override in server.tools.items()}
    for tool, keys in said.items():
        for key in keys:
            if key not in rules.get(tool, ()):
                raise ValueError(f"translations.{language}.tool_errors.{tool}: {key!r} is not an error rule "
                                 f"of the tool (mcp_servers[].tools.{tool}.errors)")


def _servers_in(profile: Profile, said: dict[str, dict[str, str]]) -> list[Any]:
    """The MCP servers with their tools' error sentences in the language (the rules are the same)."""
    servers = []
    for server in profile.mcp_servers:
        tools = {}
        for tool, override in server.tools.items():
            errors = {key: rule.model_copy(update={"say": said[tool][key]})
                      if key in said.get(tool, {}) else rule for key, rule in override.errors.items()}
            tools[tool] = override.model_copy(update={"errors": errors})
        servers.append(server.model_copy(update={"tools": tools}))
    return servers


def _task_in(settings: TaskSettings, text: TaskText | None) -> TaskSettings:
    if text is None:
        return settings
    fields = dict(settings.fields)
    for name, field_text in text.fields.items():
        base = fields.get(name) or _field_settings(settings)()
        fields[name] = base.model_copy(update=_set(field_text, _FIELD_TEXTS))
    return settings.model_copy(update={**_set(text, _TASK_TEXTS), "fields": fields})


def _set(text: BaseModel, keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: getattr(text, key) for key in keys if getattr(text, key) is not None}


def _field_settings(settings: TaskSettings) -> type:
    """The profile's ``FieldSettings``, from the task's own field annotation (this module is
    imported by the profile's, so it does not import it)."""
    return get_args(type(settings).model_fields["fields"].annotation)[1]
