"""The model only reads: the caller's words into a short structured reading, never an action.

A reading is which task the words are about (or a question, or neither) and the
words the caller said for each field. It is made in three ways, cheapest first:

1. rules: each typed field's parser (``values.py``) runs over the words; an answer
   to the question code just asked ("seven pm", "four", "Jordan Blake") needs
   nothing else;
2. sentence embeddings pick the task from the profile's examples (a few ms);
3. the model, under constrained decoding (a JSON schema built from the active
   form, sent as ``response_format``), copies the words for each field and names
   the task when the embeddings could not tell. Code normalises what it copied.

Nothing the model writes is spoken or run: code validates every value.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from voicebot.brain.business.tasks import FieldSpec, TaskSpec
from voicebot.brain.decide.state import SessionState
from voicebot.brain.lang import pack_or_default
from voicebot.brain.llm import ChatFunction, LLMRequestError, LLMUnavailable
from voicebot.brain.metrics import LLM_CALL_SECONDS, LLM_TOKENS
from voicebot.brain.read.codes import code_pieces, parse_code
from voicebot.brain.read.confirm import Answer, answer_to_read_back
from voicebot.brain.read.corrections import corrected_values
from voicebot.brain.read.numbers import number_change, said_number, without_numbers
from voicebot.brain.read.pack_values import name_said as pack_name_said
from voicebot.brain.read.pack_values import reads_values
from voicebot.brain.read.sentence_encoder import SentenceEncoder
from voicebot.brain.read.values import (
    digits,
    match_choice,
    parse_date,
    parse_integer,
    parse_name,
    parse_time,
    relative_change,
)
from voicebot.common.telemetry import tracer

log = logging.getLogger(__name__)
TRACER = tracer("voicebot.brain")
QUESTION, OTHER = "question", "other"
_CORRECTABLE = ("date", "time", "integer", "number")  # values a caller takes back ("not two, three")


@functools.cache
def _name_said(language: str) -> re.Pattern[str]:
    """A capitalised name after one of the pack's ``names.said_leads``."""
    pack = pack_or_default(language)
    return re.compile(rf"\b(?i:{pack.phrases(pack.names.said_leads)})\s+([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)")


def name_said(text: str, language: str) -> str | None:
    """A name said as one inside other words ("for two under Jordan Blake")."""
    if reads_values(language):
        return pack_name_said(text, language)
    said = _name_said(language).search(text)
    return said[1] if said else None


@dataclass
class Reading:
    intent: str = OTHER  # a task's name, "question" or "other"
    values: dict[str, Any] = field(default_factory=dict)  # field -> the caller's words (or a value)
    by: str = "rules"
    record: dict[str, Any] = field(default_factory=dict)
    failed: bool = False  # the model was needed and could not read: the caller hears the fallback
    # What the words are as dialogue acts, read by rules (``turn_reading.py``), so that deciding
    # needs no words of its own.
    text: str = ""
    answer: Answer = Answer.OTHER  # as an answer to a read-back ("yes", "no", "hmm")
    for_person: bool = False  # asks for a person
    question: bool = False  # asked as a question
    closing: bool = False  # thanks, goodbye, "no, that's all"
    greeting: bool = False  # a short hello
    same: bool = False  # "the same (car, name, again...)": values of the call's earlier task


def is_question(text: str, language: str = "en") -> bool:
    return bool(_question(language).search(text.strip()))


@functools.cache
def _question(language: str) -> re.Pattern[str]:
    """Asked as a question: a question mark at the end, or the language pack's question words."""
    pack = pack_or_default(language)
    asked = pack.questions
    starts, anywhere = pack.word(pack.phrases(asked.starts)), pack.word(pack.phrases(asked.anywhere))
    return re.compile(rf"\?\s*$|^{starts}|{anywhere}", re.I)


class IntentPicker:
    """The task (or a question) nearest to the words, on sentence embeddings of the profile's
    examples: a few milliseconds of one core, and a 1.5B model's worst guess never enters."""

    def __init__(self, encoder: SentenceEncoder, examples: dict[str, list[str]], above: float = 0.5,
                 margin: float = 0.04) -> None:
        self.encoder = encoder
        self.labels = [label for label, texts in examples.items() for _ in texts]
        texts = [text for texts in examples.values() for text in texts]
        self.vectors = encoder.encode(texts) if texts else np.zeros((0, 1))
        self.above, self.margin = above, margin

    def pick(self, text: str) -> tuple[str | None, float]:
        if not self.labels:
            return None, 0.0
        scores = self.vectors @ self.encoder.encode([text])[0]
        best: dict[str, float] = {}
        for label, score in zip(self.labels, scores, strict=True):
            best[label] = max(best.get(label, -1.0), float(score))
        ranked = sorted(best.items(), key=lambda kv: kv[1], reverse=True)
        top, score = ranked[0]
        runner = ranked[1][1] if len(ranked) > 1 else -1.0
        if score >= self.above and score - runner >= self.margin:
            return top, score
        return None, score


def intent_examples(profile: Any, tasks: dict[str, TaskSpec]) -> dict[str, list[str]]:
    """The examples the picker compares words with: each task's, the knowledge's questions, and
    a few generic questions and pleasantries in the profile's language (its pack's ``examples``)."""
    examples = {name: list(task.examples) for name, task in tasks.items()}
    questions = [q for entry in profile.knowledge.faq for q in ([entry.q] if isinstance(entry.q, str)
                                                                else entry.q)]
    generic = pack_or_default(profile.languages[0]).examples
    examples[QUESTION] = [*questions, *generic.questions]
    examples[OTHER] = list(generic.other)
    return examples


def rule_values(text: str, fields: list[FieldSpec], asking: str, today: Any,
                current: dict[str, Any] | None = None) -> dict[str, Any]:
    """What typed parsers read for sure: a date word, a time said with "at" or am/pm, a party
    size said as one, a name said as one, a choice by its words. The field code asked for also
    takes a bare answer ("seven", "four", "Jordan Blake", or any words for a text field). A
    value already given may change relative to itself ("a little later", "one more person").
    A value taken back in the same words ("not two, three") gives way to the one said instead."""
    language = fields[0].language if fields else "en"

    def read(words: str, field_asked: str) -> dict[str, Any]:
        return _rule_values(words, fields, field_asked, today, current)

    correctable = frozenset(f.name for f in fields if f.choices or f.type in _CORRECTABLE)
    return corrected_values(text, language, asking, read, correctable)


def _rule_values(text: str, fields: list[FieldSpec], asking: str, today: Any,
                 current: dict[str, Any] | None) -> dict[str, Any]:
    found: dict[str, Any] = {}
    counted = [item.numbers for item in fields if item.numbers is not None]
    for item in fields:
        bare = item.name == asking
        words = without_numbers(text, counted) if item.type == "time" and counted else text
        given = current.get(item.name) if current else None
        # "한 명 더" holds "1 명": a number said as a change is the change, not the new number.
        value = _changed(item, text, given) if given is not None and item.numbers is not None else None
        if value is None:
            value = _rule_value(item, words, bare, today)
        if value is None and given is not None:
            value = _changed(item, text, given)
        if value is not None:
            found[item.name] = value
    return found


def _changed(item: FieldSpec, text: str, current: Any) -> Any:
    if item.type in ("integer", "number"):
        return number_change(text, item.numbers, current) if isinstance(current, int) else None
    return relative_change(item.type, text, current, item.language)


def _rule_value(item: FieldSpec, text: str, bare: bool, today: Any) -> Any:

    if item.choices:
        return match_choice(text, item.choices)
    if item.type == "date":
        return text if parse_date(text, today, item.language) is not None else None
    if item.type == "time":
        return text if parse_time(text, item.between, item.language, bare) is not None else None
    if item.type in ("integer", "number"):
        said = said_number(text, item.numbers)  # "a table for four", "just me": the field's own words
        if said is not None:
            return said
        return text if bare and parse_integer(text, item.language) is not None else None
    if item.type == "name":
        if bare and answer_to_read_back(text, item.language) is Answer.OTHER \
                and parse_name(text, item.not_names, item.language) is not None:  # "네" names no one
            return text
        said = name_said(text, item.language)
        return said if said and parse_name(said, item.not_names, item.language) else None
    if item.type == "code" and bare:
        return text if parse_code(text, item.pattern, item.language) is not None else None
    if item.type in ("text", "reference") and bare and _free_answer(text, item.language):
        return text
    return None


def _free_answer(text: str, language: str = "en") -> bool:
    """Words that can be the answer to "what is the reason / the reference?": not a question,
    not a yes, no or hedge ("Yes, please." is no reason for a visit)."""
    return not is_question(text, language) and answer_to_read_back(text, language) is Answer.OTHER


class Reader:
    def __init__(self, chat: ChatFunction, tasks: dict[str, TaskSpec], business: str,
                 picker: IntentPicker | None = None, timeout_s: float = 20.0, model: str = "") -> None:
        self.chat = chat
        self.tasks = tasks
        self.business = business
        self.picker = picker
        self.timeout_s = timeout_s
        self.model = model

    def pick(self, text: str) -> tuple[str | None, float]:
        return self.picker.pick(text) if self.picker is not None else (None, 0.0)

    def fields_for(self, state: SessionState, intent: str | None) -> list[FieldSpec]:
        """The active form's fields, or the named task's, or every task's (first of each name)."""
        name = state.form.task if state.form is not None else intent
        if name in self.tasks:
            return list(self.tasks[name].fields)
        seen: dict[str, FieldSpec] = {}
        for task in self.tasks.values():
            for item in task.fields:
                seen.setdefault(item.name, item)
        return list(seen.values())

    def system_prompt(self) -> str:
        """The reading's instructions, the same for every turn of the business (every task and
        every field), so the LLM server keeps them cached and a turn prefills only its words; the
        JSON schema of each request narrows what is read to what the turn needs."""
        return reading_system(self.business, self.tasks, self.fields_for(SessionState(), None))

    async def model_reading(self, text: str, question: str, fields: list[FieldSpec],
                            with_intent: bool = True) -> Reading:
        """The model's reading of ``fields`` (and the task, ``with_intent``) under a JSON schema; an
        empty reading, marked failed, when the model cannot give one."""
        schema = reading_schema(list(self.tasks) if with_intent else None, fields)
        said = f"The assistant asked: {question}\nThe caller said: {text}" if question else \
            f"The caller said: {text}"
        messages = [{"role": "system", "content": self.system_prompt()}, {"role": "user", "content": said}]
        max_tokens = 16 + 24 * (len(fields) + with_intent)  # room for the JSON, never for prose
        parts: list[str] = []
        record: dict[str, Any] = {"purpose": "reading", "fields": [f.name for f in fields]}
        started = time.perf_counter()
        with TRACER.start_as_current_span("llm.reading", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": self.model,
                "gen_ai.request.max_tokens": max_tokens}) as span:
            try:
                async with asyncio.timeout(self.timeout_s):
                    async for chunk in self.chat(messages, max_tokens=max_tokens, response_format={
                            "type": "json_schema", "json_schema": {"name": "reading", "schema": schema}}):
                        parts.append(chunk.text)
                        if chunk.usage:
                            record.update(count_tokens(chunk.usage))
                data = json.loads("".join(parts))
            except (LLMUnavailable, LLMRequestError, ValueError, TimeoutError) as exc:
                log.info("no usable reading from the model", extra={"error": str(exc)[:200]})
                record["error"] = str(exc)[:200] or type(exc).__name__
                return Reading(OTHER, {}, "model", record, failed=True)
            finally:
                LLM_CALL_SECONDS.observe(time.perf_counter() - started)
                record["ms"] = round((time.perf_counter() - started) * 1000)
                span.set_attributes({f"gen_ai.usage.{k}": v for k, v in record.items()
                                     if k in ("input_tokens", "output_tokens") and v is not None})
        intent = data.get("intent") if data.get("intent") in (*self.tasks, QUESTION, OTHER) else OTHER
        values = {f.name: data.get(f.name) for f in fields if data.get(f.name) not in (None, "")}
        codes = {f.name for f in fields if f.type == "code"}
        language = fields[0].language if fields else "en"
        copied = {name: value for name, value in values.items()
                  if (code_said_in if name in codes else said_in)(value, text, language)}
        if len(copied) < len(values):  # a schema makes a small model fill every key: "John Doe"
            record["not_said"] = sorted(set(values) - set(copied))
        return Reading(intent, copied, "model", record)


def said_in(value: Any, text: str, language: str = "en") -> bool:
    """The model only copies: each word of its value is one the caller said (numbers compared as
    digits, "two" as "2", "두" as "2"; in any script). A value the caller never said is the model's
    invention, never used. A word outside ASCII may carry a particle in the words ("김민수로"
    holds "김민수")."""
    small = _small_words(language)
    heard = set(re.findall(r"[^\W_]+", digits(text.lower(), language)))
    words = [w for w in re.findall(r"[^\W_]+", digits(str(value).lower(), language)) if w not in small]
    return bool(words) and all(w in heard or (not w.isascii() and any(h.startswith(w) for h in heard))
                               for w in words)


@functools.cache
def _small_words(language: str) -> frozenset[str]:
    return frozenset(w.lower() for w in pack_or_default(language).small_words)


def code_said_in(value: Any, text: str, language: str = "en") -> bool:
    """A code the model copied is one the caller read out, in whatever pieces ("M N seven three
    one zero" holds "MN7310")."""
    code = "".join(code_pieces(str(value), language))
    return bool(code) and code in "".join(code_pieces(text, language))


def count_tokens(usage: dict[str, Any]) -> dict[str, Any]:
    """A reading's token counts, into the metrics and its record."""
    prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    LLM_TOKENS.labels("input").inc(prompt)
    LLM_TOKENS.labels("output").inc(completion)
    if cached:
        LLM_TOKENS.labels("cached").inc(cached)
    return {"input_tokens": prompt, "output_tokens": completion, "cached_tokens": cached}


def reading_schema(tasks: list[str] | None, fields: list[FieldSpec]) -> dict[str, Any]:
    """One string (or an allowed value) per field, null when not said; the task when asked."""
    properties: dict[str, Any] = {}
    if tasks is not None:
        properties["intent"] = {"type": "string", "enum": [OTHER, QUESTION, *tasks]}
    for item in fields:
        if item.choices:
            properties[item.name] = {"anyOf": [{"type": "string", "enum": list(item.choices)},
                                               {"type": "null"}]}
        else:
            properties[item.name] = {"type": ["string", "null"], "maxLength": 60}
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


def reading_system(business: str, tasks: dict[str, TaskSpec], fields: list[FieldSpec]) -> str:
    task_lines = "\n".join(f"- {name}: the caller wants to {task.title}" for name, task in tasks.items())
    field_lines = "\n".join(f"- {f.name}: {_field_hint(f)}" for f in fields)
    return (
        f"You read what a caller said to {business} and write compact JSON on one line, only the "
        f"keys asked for. You never answer.\n"
        f"intent, one of:\n- other: greetings, thanks, yes or no, anything else\n"
        f"- question: the caller asks for information\n{task_lines}\n"
        f"For each field asked for, copy the caller's own words for it from their message, or null "
        f"when they did not say it:\n{field_lines}")


def _field_hint(item: FieldSpec) -> str:
    hints = {"date": "the day", "time": "the clock time", "integer": "a number", "number": "a number",
             "name": "a person's name", "reference": "a booking reference code",
             "code": "the code exactly as spelled"}
    hint = hints.get(item.type, item.description or item.name.replace("_", " "))
    return f"{hint} ({', '.join(item.choices)})" if item.choices else hint
