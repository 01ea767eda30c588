"""The state block is sent only when the state the model sees would change: each block left out
is prompt the LLM server does not prefill at the endpoint."""

from bench.context import build_messages, state_block, state_text
from voicebot.brain.decide.state import SessionState
from voicebot.brain.runtime.session_store import Turn

EMPTY = state_text({"dialog_state": "listen"})
BOOKING = state_text({"collected": {"party_size": 2}, "dialog_state": "collect"})


def turns(*contexts: str) -> list[Turn]:
    return [Turn(f"t{i}", f"caller {i}", f"bot {i}", context=c) for i, c in enumerate(contexts)]


CASES = [
    # (scenario, turns so far, this turn's state, block sent)
    ("a fresh session in the empty state", turns(), EMPTY, ""),
    ("a fresh session that already has state (the call's metadata)", turns(), BOOKING, BOOKING),
    ("the state the last turn showed, unchanged", turns(EMPTY, BOOKING), BOOKING, ""),
    ("unchanged since a block two turns back", turns(BOOKING, ""), BOOKING, ""),
    ("back to the empty state after a booking", turns(BOOKING), EMPTY, EMPTY),
    ("changed from the empty state", turns(EMPTY), BOOKING, BOOKING),
    # Eight turns with recent_turns=2: the first ones are shown as question and answer only, so
    # their block is no longer in the prompt and the state is shown again.
    ("the last block shown is in a collapsed turn", turns(BOOKING, *[""] * 7), BOOKING, BOOKING),
]


def refused(turn: Turn) -> Turn:
    turn.assistant, turn.refused = "I'm sorry, but I can't assist with that.", True
    return turn


CASES.append(  # the only turn carrying the block is a refused one: not shown, so sent again
    ("the last block shown was in a refused turn", [turns(EMPTY)[0], refused(turns("", BOOKING)[1])],
     BOOKING, BOOKING))


def test_state_block_table():
    for scenario, history, state, sent in CASES:
        assert state_block(state, EMPTY, history, recent_turns=2) == sent, scenario


def test_a_left_out_block_leaves_no_message():
    history = turns(BOOKING)
    block = state_block(BOOKING, EMPTY, history)
    messages = build_messages("system", history, "And at eight?", [], block)
    assert block == "" and messages[-1] == {"role": "user", "content": "And at eight?"}
    assert [m["content"] for m in messages if m["role"] == "system"] == ["system", BOOKING]


def test_the_state_block_shows_the_latest_references_and_older_ones_still_resolve():
    """Three lookups in a booking: the block shows what the last one found (a slot seen again
    counts as new), not every slot of the session, so it does not grow with each change."""
    state = SessionState()
    first = [state.issue_ref("slot_id", f"id{n}", f"slot {n}", "S") for n in range(1, 5)]  # S1-S4
    state.issue_ref("slot_id", "id5", "slot 5", "S")
    state.issue_ref("slot_id", "id2", "slot 2", "S")  # found again by the second lookup
    state.issue_ref("slot_id", "id6", "slot 6", "S")
    shown = state.model_view(references=4)["references"]
    assert first == ["S1", "S2", "S3", "S4"]
    assert shown == {"S4": "slot 4", "S5": "slot 5", "S2": "slot 2", "S6": "slot 6"}
    assert state.resolve_ref("S1", "slot_id").id == "id1"  # not shown, still the same slot
    assert len(state.model_view()["references"]) == 6  # no limit given: all of them


def test_a_refused_turn_is_kept_out_of_the_prompt_and_the_next_prompt_starts_the_same_way():
    """Two misheard questions the model refused, then a plain one: the prompt shows the turns
    before and after them, not the refusals, and the prefix is the one the next turn repeats."""
    history = turns(EMPTY, "", "", "")
    refused(history[1]), refused(history[2])
    messages = build_messages("system", history, "Do you have vegan desserts?", [], "")
    said = [m["content"] for m in messages if m["role"] in ("user", "assistant")]
    assert said == ["caller 0", "bot 0", "caller 3", "bot 3", "Do you have vegan desserts?"]
    later = build_messages("system", [*history, turns("", "", "", "", "")[4]], "And takeaway?", [], "")
    assert later[:len(messages) - 1] == messages[:-1]
