"""Codes read from how people spell them, said back one character at a time; values without the
words around them."""

import pytest

from voicebot.brain.business.profile import Sentences
from voicebot.brain.business.references import References
from voicebot.brain.business.tasks import FieldSpec
from voicebot.brain.decide.form import Forms
from voicebot.brain.decide.state import SessionState
from voicebot.brain.lang import language_pack
from voicebot.brain.read.codes import parse_code, spoken_code, spoken_codes_in, strip_lead


@pytest.mark.parametrize(("said", "code"), [
    ("The plate is MN 7310.", "MN7310"), ("M N seven three one zero", "MN7310"),
    ("M as in Mike, N as in November, 7310", "MN7310"), ("double four seven B", "447B"),
    ("my reference is AB-1234", "AB1234"), ("mn7310", "MN7310"), ("Sure, the code is 4 4 7 1", "4471"),
    ("It is for a sore throat", None), ("", None),
])
def test_a_code_is_read_from_its_spoken_pieces(said, code):
    assert parse_code(said) == code


def test_a_code_that_does_not_fit_the_schemas_pattern_is_no_code():
    assert parse_code("M N seven three one zero", r"^[A-Z]{2}[0-9]{4}$") == "MN7310"
    assert parse_code("M N seven three", r"^[A-Z]{2}[0-9]{4}$") is None


@pytest.mark.parametrize(("said", "value"), [
    ("The plate is MN 7310.", "MN 7310"), ("Oh, it's Alex Morgan", "Alex Morgan"),
    ("Um, Sam Lee", "Sam Lee"), ("My name is Sam Lee", "Sam Lee"),
    ("It's for a sore throat.", "a sore throat"), ("Jordan Blake", "Jordan Blake"), ("Okay", "Okay"),
    ("It's about a leak in the kitchen", "a leak in the kitchen"),
])
def test_only_the_value_is_kept(said, value):
    assert strip_lead(said) == value


def test_codes_are_said_character_by_character_and_small_numbers_stay_numbers():
    assert spoken_code("MN7310") == "M N 7 3 1 0"
    assert spoken_codes_in("MN 7310") == "M N 7 3 1 0"
    assert spoken_codes_in("back pain for 2 weeks") == "back pain for 2 weeks"
    assert spoken_codes_in("ticket number 405") == "ticket number 405"
    assert spoken_codes_in("call me on 5550199") == "call me on 5 5 5 0 1 9 9"


@pytest.mark.parametrize(("said", "language", "reference"), [
    ("It's A4K9T2.", "en", "A4K9T2"), ("The reference is R as in Romeo 4 5 1 2.", "en", "R4512"),
    ("A B one two three", "en", "AB123"), ("A4K9T2", "en", "A4K9T2"),
    ("번호가 R5B80C7E2 예요.", "ko", "R5B80C7E2"),
    ("R9A2E5D13 입니다.", "ko", "R9A2E5D13"), ("It's the one from yesterday.", "en", None),
])
def test_a_reference_the_caller_reads_out_is_only_its_code(said, language, reference):
    """A reference field keeps the code, never the words around it ("It's A4K9T2." is A4K9T2)."""
    field = FieldSpec("reservation_id", "reference", "What is the reference?", True, language=language)
    forms = Forms({}, Sentences(**language_pack("en").sentences), References({}, ()), lambda: None)
    assert forms.value_of(field, said, SessionState()) == reference
