"""What a tool's error means for the caller, decided by rule (docs/add-a-business.md, "Tool errors").

The convention for a business's MCP server: a tool error's text starts with a code and
a colon.

- ``refused: <sentence>``: a business refusal ("refused: the garage is closed on
  Sundays"); nothing was done, the sentence is said to the caller (``refused: <code>: ...``,
  a code and a note for the logs, is a refusal too, with nothing of it said);
- ``invalid: ...``: the server checked the input and did nothing; when the first word is
  one of the tool's arguments (``invalid: plate: ...``) that field is asked again.
- ``<field>: ...`` or ``invalid_<field>: ...``, where ``<field>`` is one of the tool's
  arguments: that value was wrong ("invalid_plate: not a plate number"); the field is
  asked again and the other values are kept.
- anything else has no known shape.

A profile's per-tool ``errors:`` map (a code, or words the error contains, to a kind, a
field and a sentence) covers servers whose messages cannot be changed. Transient errors
(timeouts, an unreachable server) are the dispatcher's: read-only calls are retried there,
writes never blindly. An error of unknown shape is, for a write, an unknown outcome (it
may have run: a person checks), and for a read, "I can't check that right now".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from voicebot.brain.act.tools import ToolResult


Kind = Literal["refusal", "field", "transient", "unknown"]
_CODE = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*:\s*(.*)$", re.S)
TRANSIENT = ("timeout", "unavailable")


@dataclass(frozen=True)
class ToolProblem:
    kind: Kind
    field: str = ""  # the field to ask again (kind "field")
    say: str = ""  # the business's sentence for the caller, when it gave one
    code: str = ""
    # ``say`` is the tool server's own text (``refused: <sentence>``), in the business's first
    # language, not a profile sentence (which has a translation per language).
    from_server: bool = False

    @property
    def reason(self) -> str:
        return self.say


def error_text(result: ToolResult) -> str:
    content = result.content
    return str(content.get("refused") or content.get("error") or "")


def classify(result: ToolResult, fields: Iterable[str], rules: Mapping[str, Any] | None = None
             ) -> ToolProblem:
    """The kind of a failed tool call's error (``result.outcome`` is not "succeeded")."""
    if result.outcome in TRANSIENT:
        return ToolProblem("transient")
    text = error_text(result)
    found = _CODE.match(text)
    code, rest = (found[1], found[2].strip()) if found else ("", text.strip())
    refused = code.lower() == "refused" or result.outcome == "refused"
    server_says = _server_sentence(rest) if refused else ""
    ruled = _by_rule(code, text, rules or {}, server_says)
    if ruled is not None:
        return ruled
    names = set(fields)
    if refused:
        if server_says or not (inner := _CODE.match(rest)):
            return ToolProblem("refusal", say=server_says, code="refused", from_server=True)
        return ToolProblem("refusal", code=inner[1])  # "refused: slot_taken: ...": a note, not a sentence
    if code.lower() == "invalid":  # the server checked the input and did nothing
        first = re.match(r"[\w.-]+", rest)
        field = _field_named(first[0], names) if first else ""
        return ToolProblem("field", field=field, code=code) if field else ToolProblem("refusal", code=code)
    field = _field_named(code, names)
    if field:
        return ToolProblem("field", field=field, code=code)
    return ToolProblem("unknown", code=code)


def said_in(problem: ToolProblem, server_words: bool) -> str:
    """The problem's sentence for the caller: a tool server's own words only where the call is
    in the business's first language (``server_words``), which its servers speak."""
    return problem.say if server_words or not problem.from_server else ""


def _by_rule(code: str, text: str, rules: Mapping[str, Any], server_says: str) -> ToolProblem | None:
    """The profile's rule for the error; a refusal rule without ``say`` keeps the server's own
    sentence (a translation can then give the other languages theirs)."""
    for key, rule in rules.items():
        if key == code or (key and key.lower() in text.lower()):
            if rule.say is None and rule.kind == "refusal" and server_says:
                return ToolProblem("refusal", say=server_says, code=key, from_server=True)
            return ToolProblem(rule.kind, field=rule.field or "", say=rule.say or "", code=key)
    return None


def _server_sentence(rest: str) -> str:
    """The sentence after ``refused:``; none when a code and a note follow instead."""
    inner = _CODE.match(rest)
    return "" if inner is not None and " " not in inner[1] else _sentence(rest)


def _field_named(code: str, fields: set[str]) -> str:
    """``plate``, ``invalid_plate``, ``plate_invalid``, ``bad_plate``: the field ``plate``."""
    if code in fields:
        return code
    for prefix in ("invalid_", "bad_", "unknown_", "wrong_"):
        if code.startswith(prefix) and code[len(prefix):] in fields:
            return code[len(prefix):]
    if code.endswith("_invalid") and code[: -len("_invalid")] in fields:
        return code[: -len("_invalid")]
    return ""


def _sentence(text: str) -> str:
    """The business's reason as a sentence to say."""
    text = " ".join(text.split()).strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."
