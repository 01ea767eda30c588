"""A change the rules could not read, asked of the model as the hook's fields: the response
format it is sent, and how its answer is checked."""

from __future__ import annotations

import pytest

from services.brain.change_fields import parse_fields, response_format
from services.brain.hooks import ChangeFields

SPEC = ChangeFields(schema={
    "type": "object",
    "properties": {"time": {"type": "string"}, "day": {"type": "string"}, "people": {"type": "integer"}},
    "required": ["time", "day", "people"],
    "additionalProperties": False,
}, instruction="The booking after the change.")


def test_the_answer_is_asked_for_in_the_hooks_own_order():
    # The order the answer is written in changes what a small model reads into it (see
    # response_format): the hook's, as declared, not the state block's sorted one.
    sent = response_format(SPEC)["json_schema"]
    assert sent["name"] == "change" and sent["schema"] == SPEC.schema
    assert list(sent["schema"]["properties"]) == ["time", "day", "people"]


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
