"""Server-issued references: the model sees ``S1``, ``R2``; code keeps the real ids.

The profile says which id fields of tool results are entities (``slot_id`` →
prefix ``S``, label "Friday, December 4th at 7 pm") and which fields the model
never sees (phone numbers). Results are rewritten on the way to the model;
arguments naming a reference are resolved on the way to the tool. References
live in the session state, so a reference from another session, or one never
issued, resolves to nothing and the call comes back to the model as an error.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from voicebot.brain.decide.state import SessionState
from voicebot.brain.speak.readback import render

IDEMPOTENCY_KEY = "idempotency_key"


class UnknownReference(LookupError):
    pass


class References:
    def __init__(self, kinds: Mapping[str, Any] | None = None, hidden: list[str] | None = None) -> None:
        # kinds: id field -> object with .prefix and .label (profile.ReferenceKind)
        self.kinds = dict(kinds or {})
        self.hidden = set(hidden or ()) | {IDEMPOTENCY_KEY}

    # ---- results, on their way to the model ------------------------------
    def present(self, value: Any, state: SessionState) -> Any:
        if isinstance(value, list):
            return [self.present(item, state) for item in value]
        if not isinstance(value, dict):
            return value
        shown: dict[str, Any] = {}
        for key, item in value.items():
            if key in self.hidden:
                continue
            if key in self.kinds and isinstance(item, str | int) and str(item):
                kind = self.kinds[key]
                shown[key] = state.issue_ref(key, str(item), render(kind.label, value), kind.prefix)
            else:
                shown[key] = self.present(item, state)
        return shown

    def only_known(self, value: Any, field: str, state: SessionState) -> Any:
        """Drop list items whose ``field`` is not an entity this conversation already knows
        (a lookup by name must not reveal other people's records)."""
        if isinstance(value, list):
            return [self.only_known(v, field, state) for v in value
                    if not (isinstance(v, dict) and field in v and not state.knows(field, str(v[field])))]
        if isinstance(value, dict):
            return {k: self.only_known(v, field, state) for k, v in value.items()}
        return value

    # ---- arguments, on their way to the tool -----------------------------
    def resolve(self, args: dict[str, Any], state: SessionState) -> dict[str, Any]:
        """Real ids for reference arguments; raises UnknownReference for one not issued here."""
        resolved = dict(args)
        for key, value in args.items():
            if key in self.kinds and value not in (None, ""):
                entry = state.resolve_ref(value, key)
                if entry is None:
                    raise UnknownReference(
                        f"{key}: {value!r} is not a reference from this conversation; use one "
                        f"like {self.kinds[key].prefix}1 from an earlier tool result")
                resolved[key] = entry.id
        return resolved

    def labels(self, args: dict[str, Any], state: SessionState) -> dict[str, Any]:
        """Arguments as the caller understands them: a reference reads as its label."""
        shown = {}
        for key, value in args.items():
            entry = state.resolve_ref(value, key) if key in self.kinds else None
            shown[key] = entry.label if entry is not None else value
        return shown

    def model_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The input schema as offered to the model: reference fields say what they take."""
        schema = copy.deepcopy(schema)
        for key, prop in (schema.get("properties") or {}).items():
            if key in self.kinds and isinstance(prop, dict):
                hint = f"a reference like {self.kinds[key].prefix}1 from an earlier tool result"
                prop["description"] = f"{prop.get('description', '').rstrip('.')}; {hint}".lstrip("; ")
        return schema
