"""The start of the model's text against the profile's confirm sentences: a table of cases.

Each case is the model's text in the pieces it streamed, what may be spoken of it, and whether
it was caught as a read-back of its own."""

from __future__ import annotations

import pytest

from services.brain.mimicry import ReadBackMimicry

TEMPLATES = ["To confirm: {action}. Shall I go ahead?",
             "Just to be sure: {action}. Shall I go ahead? Please say yes or no."]


@pytest.mark.parametrize(("pieces", "spoken", "caught"), [
    # Read-backs of its own: nothing is spoken.
    (["To", " confirm", ":", " a table for two", ". Shall I go ahead?"], "", True),
    (["to confirm: a table for two."], "", True),
    (["Just", " to be", " sure:", " a table"], "", True),
    (["  To  confirm:", " a table"], "", True),
    # Ordinary replies: all of it is spoken, and most at once.
    (["Yes", ",", " we do."], "Yes, we do.", False),
    (["To", " confirm", " your booking", ", I need your name."],
     "To confirm your booking, I need your name.", False),
    (["Tomorrow", " we open at six."], "Tomorrow we open at six.", False),
    (["Just", " a moment."], "Just a moment.", False),
    (["To"], "To", False),  # a reply as short as the start of an opening is still spoken
])
def test_the_start_of_the_models_text(pieces, spoken, caught):
    mimicry = ReadBackMimicry(TEMPLATES)
    said = "".join(mimicry.push(piece) for piece in pieces) + mimicry.flush()
    assert (said, mimicry.caught) == (spoken, caught)


def test_an_ordinary_reply_is_released_at_the_first_piece_that_is_no_opening():
    mimicry = ReadBackMimicry(TEMPLATES)
    assert mimicry.push("Sure") == "Sure"
    assert mimicry.push(", it is.") == ", it is."


def test_a_template_without_an_opening_holds_nothing_back():
    mimicry = ReadBackMimicry(["{action}. Shall I go ahead?"])
    assert mimicry.push("To confirm: a table") == "To confirm: a table" and not mimicry.caught
