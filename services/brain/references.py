"""Server-issued references: the model sees ``S1``, ``R2``; code keeps the real ids.

References live in the session state, so they are valid only inside their
session: a reference from another session, or one never issued, resolves to
nothing and the tool call comes back to the model as an error.
"""

from __future__ import annotations

from typing import Any

PREFIXES = {"slot": "S", "reservation": "R"}


class References:
    def __init__(self, state: dict[str, Any]) -> None:
        self._refs: dict[str, dict[str, str]] = state.setdefault("refs", {})

    def issue(self, kind: str, internal_id: str, label: str) -> str:
        for ref, entry in self._refs.items():
            if entry["kind"] == kind and entry["id"] == internal_id:
                entry["label"] = label
                return ref
        prefix = PREFIXES[kind]
        number = 1 + sum(1 for ref in self._refs if ref.startswith(prefix))
        ref = f"{prefix}{number}"
        self._refs[ref] = {"kind": kind, "id": internal_id, "label": label}
        return ref

    def resolve(self, ref: str, kind: str) -> str | None:
        entry = self._refs.get(str(ref).strip().upper())
        return entry["id"] if entry and entry["kind"] == kind else None

    def known(self, kind: str, internal_id: str) -> bool:
        return any(e["kind"] == kind and e["id"] == internal_id for e in self._refs.values())

    def labels(self) -> dict[str, str]:
        """What the model may see: reference → label, never the internal id."""
        return {ref: entry["label"] for ref, entry in self._refs.items()}
