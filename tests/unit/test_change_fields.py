"""A change the rules could not read, asked of the model as the hook's fields: the response
format it is sent, and how its answer is checked."""

from __future__ import annotations

import json

import pytest

from services.brain.change_fields import parse_fields, response_format
from services.brain.context import state_text
from services.brain.hooks import ChangeFields

SPEC = ChangeFields(schema={
    "type": "object",
    "properties": {"time": {"type": "string"}, "day": {"type": "string"}, "people": {"type": "integer"}},
    "required": ["time", "day", "people"],
    "additionalProperties": False,
}, instruction="The booking after the change.")


def test_the_answer_is_asked_for_in_the_order_the_state_block_shows_the_fields():
    sent = response_format(SPEC)["json_schema"]["schema"]
    assert list(sent["properties"]) == ["day", "people", "time"]
    # Written in that order, the answer is a run of the state block's own tokens.
    collected = {"time": "19:00", "people": 2, "day": "saturday"}
    answer = json.dumps({name: collected[name] for name in sent["properties"]})
    assert answer[1:-1] in state_text({"collected": collected})
    # Nothing else of the hook's schema changes, and the hook's own spec is left as declared.
    assert {k: v for k, v in sent.items() if k != "properties"} == {
        k: v for k, v in SPEC.schema.items() if k != "properties"}
    assert sent["properties"] == SPEC.schema["properties"]
    assert list(SPEC.schema["properties"]) == ["time", "day", "people"]


def test_a_schema_without_properties_is_sent_as_declared():
    spec = ChangeFields(schema={"type": "object"}, instruction="")
    assert response_format(spec)["json_schema"]["schema"] == {"type": "object"}


@pytest.mark.parametrize(("text", "error"), [
    ('{"day": "monday", "time": "19:00"}', "outside the schema"),   # a field missing
    ('{"day": "monday", "time": "19:00", "people": "two"}', "outside the schema"),
    ("eight people", "Expecting value"),                             # not JSON
])
def test_an_answer_outside_the_schema_is_refused(text, error):
    with pytest.raises(ValueError, match=error):
        parse_fields(text, SPEC)


def test_an_answer_in_any_order_is_read():
    assert parse_fields('{"people": 8, "day": "monday", "time": "19:00"}', SPEC) == {
        "day": "monday", "people": 8, "time": "19:00"}
