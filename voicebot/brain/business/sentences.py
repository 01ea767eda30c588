"""What code says in its own words: the keys of a profile's ``sentences``, every one of them given
by the profile's first language's pack (``lang/<language>.yaml``) under the profile's own."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Sentences(BaseModel):
    """What code says in its own words, in the profile's language: the language pack's
    ``sentences`` (``lang/<language>.yaml``) under the profile's own. ``{action}`` is a read-back
    of the pending action; docs/add-a-business.md lists every key and its placeholders."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fallback: str
    blocked: str
    handoff: str
    unknown_outcome: str
    confirm: str
    confirm_again: str
    ask_what_to_change: str
    done: str
    refused: str
    tool_unavailable: str
    unknown_fact: str
    can_help: str
    hello: str
    ask_again: str
    alternatives: str
    nothing_free: str
    offer: str
    not_found: str
    nothing_done: str
    anything_else: str
    goodbye: str
    not_done: str
    found_items: str
    field_again: str
    still_working: str
