"""One turn until the caller has heard the reply (voicebot/gateway/resume.py), as a table: what
speech starting over a reply is, and when its confirmation cancels the reply unheard."""

from __future__ import annotations

import pytest

from voicebot.gateway.resume import Onset, ResumePolicy

UNHEARD = {"spoken_turn": True, "heard": False, "may_write": False}


@pytest.mark.parametrize(("reply", "onset"), [
    (UNHEARD, Onset.RESUME),  # a pause, then more words before the reply was heard: the same turn
    ({**UNHEARD, "heard": True}, Onset.BARGE_IN),  # some of it was heard: a barge-in
    ({**UNHEARD, "may_write": True}, Onset.BARGE_IN),  # it may have written: never sent again
    ({**UNHEARD, "spoken_turn": False}, Onset.BARGE_IN),  # a typed turn is not continued by speech
])
def test_speech_over_a_reply_is_the_same_turn_only_while_none_of_it_was_heard(reply, onset):
    assert ResumePolicy(10.0).onset("t_1", 1, now=100.0, **reply) is onset


def test_a_confirmed_resume_cancels_the_reply_and_a_barge_in_does_not_count_as_one():
    policy = ResumePolicy(10.0)
    policy.onset("t_1", 1, now=100.0, **UNHEARD)
    assert not policy.confirmed("t_1", 2, now=100.3)  # another utterance: a barge-in
    policy.onset("t_1", 3, now=100.5, **UNHEARD)
    assert policy.confirmed("t_1", 3, now=100.7)
    assert not policy.confirmed("t_1", 3, now=100.8)  # once


def test_a_false_start_forgets_the_resume():
    policy = ResumePolicy(10.0)
    policy.onset("t_1", 1, now=100.0, **UNHEARD)
    policy.false_start()
    assert not policy.confirmed("t_1", 1, now=100.2)
    assert policy.onset("t_2", 2, now=100.4, **UNHEARD) is Onset.RESUME  # nothing was cancelled


def test_at_most_one_reply_is_cancelled_unheard_per_interval_then_replies_go_out():
    policy = ResumePolicy(10.0)
    assert policy.onset("t_1", 1, now=100.0, **UNHEARD) is Onset.RESUME
    assert policy.confirmed("t_1", 1, now=100.5)
    assert policy.onset("t_2", 2, now=103.0, **UNHEARD) is Onset.KEEP  # within 10 s of the cancel
    assert policy.waits_for("t_2") and not policy.waits_for("t_1")
    assert policy.onset("t_3", 3, now=109.9, **UNHEARD) is Onset.KEEP
    assert policy.onset("t_4", 4, now=110.5, **UNHEARD) is Onset.RESUME  # the interval is over


def test_a_turn_that_may_write_is_a_barge_in_even_within_the_interval():
    policy = ResumePolicy(10.0)
    policy.onset("t_1", 1, now=100.0, **UNHEARD)
    policy.confirmed("t_1", 1, now=100.5)
    assert policy.onset("t_2", 2, now=101.0, **{**UNHEARD, "may_write": True}) is Onset.BARGE_IN
