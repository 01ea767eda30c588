"""What a caller hears of a tool's error in each language: the server's own sentence is in the
business's first language, so a call in another language hears the profile's translated sentence
for that error, or none, never the server's words (``decide/tool_errors.py``)."""

from __future__ import annotations

import pytest

from tests.unit.test_agent import PROFILE
from voicebot.brain.act.tools import ToolResult
from voicebot.brain.business.profile import ErrorRule, ProfileError, parse_profile
from voicebot.brain.decide.tool_errors import classify, said_in

TOO_MANY = ToolResult(None, "failed", {"error": "refused: our largest table seats 4 people"})
FIELDS = ["day", "people"]


def test_a_refusal_in_the_servers_words_is_said_only_in_the_businesss_own_language():
    problem = classify(TOO_MANY, FIELDS)
    assert problem.kind == "refusal" and problem.from_server
    assert said_in(problem, server_words=True) == "Our largest table seats 4 people."
    assert said_in(problem, server_words=False) == ""


def test_a_refusal_rule_without_a_sentence_keeps_the_servers_and_one_with_a_sentence_is_the_profiles():
    kept = classify(TOO_MANY, FIELDS, {"largest table": ErrorRule(kind="refusal")})
    assert (kept.code, kept.say, kept.from_server) == ("largest table", "Our largest table seats 4 people.",
                                                       True)
    korean = "가장 큰 테이블은 네 분까지."
    own = classify(TOO_MANY, FIELDS, {"largest table": ErrorRule(kind="refusal", say=korean)})
    assert said_in(own, server_words=False) == korean and not own.from_server


def test_a_refusal_code_with_a_note_says_nothing_of_the_note():
    problem = classify(ToolResult(None, "failed", {"error": "refused: slot_taken: no table left"}), FIELDS)
    assert (problem.kind, problem.code, problem.say) == ("refusal", "slot_taken", "")


SERVER = {"name": "bookings", "url": "http://127.0.0.1:1/mcp",
          "tools": {"book": {"errors": {"largest table": {"kind": "refusal"}}}}}


def test_a_translation_gives_an_error_rule_its_sentence_in_that_language():
    profile = parse_profile({**PROFILE, "languages": ["en", "ko"], "mcp_servers": [SERVER], "translations": {
        "ko": {"tool_errors": {"book": {"largest table": "네 분까지만 예약할 수 있어요."}}}}})
    assert profile.mcp_servers[0].tools["book"].errors["largest table"].say is None
    korean = profile.in_language("ko")
    assert korean.mcp_servers[0].tools["book"].errors["largest table"].say == "네 분까지만 예약할 수 있어요."


@pytest.mark.parametrize(("said", "error"), [
    ({"book": {"too many": "많아요"}}, r"translations.ko.tool_errors.book: 'too many' is not an error rule"),
    ({"dance": {"largest table": "춤"}}, r"translations.ko.tool_errors.dance: 'largest table'"),
])
def test_a_translated_error_the_profile_does_not_have_fails_the_start_naming_it(said, error):
    with pytest.raises(ProfileError, match=error):
        parse_profile({**PROFILE, "languages": ["en", "ko"], "mcp_servers": [SERVER],
                       "translations": {"ko": {"tool_errors": said}}})
