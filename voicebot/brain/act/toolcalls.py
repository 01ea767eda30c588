"""Tool calls from a model stream: structured ``tool_calls`` deltas, and calls the
model wrote as text.

Small local models (the embedded Qwen2.5-Coder among them: docs/design.md,
Engines) often answer a tool request with the call as plain text: bare
``{"name": ..., "arguments": ...}`` JSON, ``<tool_call>...</tool_call>`` tags
or a fenced json block. ``TextToolCallFilter`` watches the streamed text: it
passes prose straight through and holds back anything that may be such a
call, so the person never hears JSON read aloud.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    # The raw argument text as the model wrote it: parsed later, defensively.
    arguments: str

    def signature(self) -> str:
        """Identity of a call for the repeated-call stop: name plus canonical arguments."""
        try:
            canonical = json.dumps(json.loads(self.arguments or "{}"), sort_keys=True)
        except json.JSONDecodeError:
            canonical = self.arguments.strip()
        return f"{self.name}:{canonical}"

    def as_message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:12]


class StructuredCallAccumulator:
    """Joins OpenAI streaming ``tool_calls`` fragments (by index) into whole calls."""

    def __init__(self) -> None:
        self._parts: dict[int, dict[str, str]] = {}

    def add(self, fragments: list[dict[str, Any]]) -> None:
        for fragment in fragments:
            index = fragment.get("index", len(self._parts))
            part = self._parts.setdefault(index, {"id": "", "name": "", "arguments": ""})
            part["id"] = fragment.get("id") or part["id"]
            function = fragment.get("function") or {}
            part["name"] += function.get("name") or ""
            arguments = function.get("arguments")
            if isinstance(arguments, dict):  # some servers send an object, not a string
                arguments = json.dumps(arguments)
            part["arguments"] += arguments or ""

    def calls(self) -> list[ToolCall]:
        return [ToolCall(p["id"] or new_call_id(), p["name"], p["arguments"])
                for _, p in sorted(self._parts.items()) if p["name"]]


_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.S)
# Prefixes that may be the start of a call written as text.
_SUSPECT_STARTS = ("{", "<tool_call>", "```", "[{")


def calls_from_text(text: str) -> list[ToolCall]:
    """Recover tool calls written as text; [] when the text holds none."""
    candidates = _TAGGED.findall(text) or _FENCED.findall(text) or [text.strip()]
    calls: list[ToolCall] = []
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        for item in data if isinstance(data, list) else [data]:
            call = _call_from_object(item)
            if call is not None:
                calls.append(call)
    return calls


def _call_from_object(item: Any) -> ToolCall | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict):  # {"type": "function", "function": {...}}
        item = item["function"]
    name = item.get("name")
    if not isinstance(name, str) or not name:
        return None
    arguments = item.get("arguments", item.get("parameters", {}))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return ToolCall(new_call_id(), name, arguments)


class TextToolCallFilter:
    """Split streamed content into speakable text and a held-back possible tool call."""

    def __init__(self) -> None:
        self._pending = ""  # start of the reply, not yet known to be prose
        self._decided_prose = False
        self.held = ""  # text that may be a tool call, examined at the end

    def push(self, text: str) -> str:
        """Return the part of ``text`` that can be spoken now."""
        if self.held:
            self.held += text
            return ""
        if not self._decided_prose:
            self._pending += text
            stripped = self._pending.lstrip()
            if not stripped:
                return ""
            if stripped.startswith("<") or any(stripped.startswith(s) or s.startswith(stripped)
                                               for s in _SUSPECT_STARTS):
                if (len(stripped) < len("<tool_call>") and not stripped.startswith(("{", "[{", "<"))):
                    return ""  # too short to tell yet
                self.held, self._pending = self._pending, ""
                return ""
            self._decided_prose = True
            text, self._pending = self._pending, ""
        return self._split_tag(text)

    def _split_tag(self, text: str) -> str:
        """A call tag in the middle of prose: speak what comes before it, hold the rest."""
        at = text.find("<tool_call>")
        if at < 0:
            return text
        self.held = text[at:]
        return text[:at]

    def finish(self) -> tuple[str, list[ToolCall]]:
        """End of the stream: (text still to speak, recovered calls)."""
        if self._pending:
            self.held, self._pending = self._pending, ""
        if not self.held:
            return "", []
        calls = calls_from_text(self.held) or _embedded_call(self.held)
        if calls:
            return "", calls
        botched = _NAME.search(self.held)
        if botched or self.held.lstrip().startswith(("{", "[{", "<tool_call>")):
            # A call the model botched ({{...}}, bare words for values): never read JSON aloud.
            # It goes back to the model as a call that fails, with the error saying why.
            name = botched.group(1) if botched else "invalid_tool_call"
            return "", [ToolCall(new_call_id(), name, self.held.strip())]
        # It was not a call after all (say, a fenced snippet in prose, or a broken tag such as
        # "<tools</tools"): speak what is left without the markup, which may be nothing.
        return re.sub(r"</?[A-Za-z_][^>\s]*>?|```(?:json)?", "", self.held).strip(), []


_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')


def _embedded_call(text: str) -> list[ToolCall]:
    """A call object inside extra braces or trailing junk ("{{...}}}}"): the first JSON
    object, from one of the first few opening braces, that names a tool."""
    decoder = json.JSONDecoder()
    starts = [i for i, ch in enumerate(text) if ch == "{"][:4]
    for start in starts:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        call = _call_from_object(value)
        if call is not None:
            return [call]
    return []


def parse_arguments(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """Arguments are a JSON string from the model: (object, None) or (None, error)."""
    if not raw or not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"arguments are not valid JSON: {exc.msg} at position {exc.pos}"
    if isinstance(value, str):  # double-encoded, a common slip
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None, "arguments must be a JSON object"
    if not isinstance(value, dict):
        return None, "arguments must be a JSON object"
    return value, None
