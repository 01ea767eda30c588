"""bench-v2v's client-side measure of a choppy reply: the longest its playback ran dry."""

from bench.v2v import longest_gap

RATE = 16000
FRAME_100MS = RATE // 10 * 2  # bytes of PCM16


def frames(*arrivals: float) -> list[tuple[float, str, int]]:
    return [(at, "audio", FRAME_100MS) for at in arrivals]


def test_audio_that_arrives_before_the_last_frame_ends_plays_without_a_gap():
    assert longest_gap([*frames(0.0, 0.1, 0.15, 0.3), (0.4, "audio.end", 0)], RATE) == 0


def test_a_piece_that_comes_late_is_the_silence_the_caller_hears():
    # "Yes," plays 0.0-0.2; the rest of the sentence comes at 0.45: 250 ms of silence.
    events = [*frames(0.0, 0.1), (0.2, "reply.delta", 0), *frames(0.45, 0.55), (0.7, "audio.end", 0)]
    assert longest_gap(events, RATE) == 250


def test_jitter_below_the_threshold_is_not_a_gap_and_the_next_reply_is_not_counted():
    events = [*frames(0.0, 0.12, 0.24), (0.4, "audio.end", 0), *frames(5.0)]
    assert longest_gap(events, RATE) == 0


def test_the_stt_summary_reads_decodes_by_kind_and_finals_by_source_from_the_metrics_text():
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from bench.v2v import parse_stt_decodes

    registry = CollectorRegistry()
    decode = Histogram("voicebot_stt_decode_seconds", "", ["kind"], registry=registry)
    wait = Histogram("voicebot_stt_decode_wait_seconds", "", ["kind"], registry=registry)
    finals = Counter("voicebot_stt_finals_total", "", ["source"], registry=registry)
    for seconds in (0.2, 0.4):
        decode.labels("speculative").observe(seconds)
    wait.labels("speculative").observe(0.1)
    wait.labels("speculative").observe(0.3)
    finals.labels("reused").inc(3)
    summary = parse_stt_decodes(generate_latest(registry).decode())
    assert summary["by_kind"]["speculative"] == {"decodes": 2, "mean_ms": 300, "mean_wait_ms": 200}
    assert summary["by_kind"]["final"] == {"decodes": 0, "mean_ms": None, "mean_wait_ms": None}
    assert summary["finals_by_source"] == {"reused": 3}


def test_a_turn_counts_as_misheard_when_its_words_differ_and_as_blocked_when_the_guard_sentence_answered():
    from bench.v2v import Turn, summarise

    blocked = "Sorry, I can only help with table reservations here."
    turns = [Turn("q", "Is there parking nearby?", "piper", 900.0, {}, "Yes.", "is there parking nearby"),
             Turn("q", "Can I bring my dog?", "piper", 800.0, {}, blocked, "Can I bring my dog?"),
             Turn("q", "Do you serve breakfast?", "piper", 700.0, {}, "Yes.", "Do you serve a breakfast?")]
    summary = summarise(turns, blocked)
    assert (summary["turns"], summary["misheard"], summary["blocked"]) == (3, 1, 1)


def test_a_reply_counts_as_read_back_when_it_opens_with_the_profiles_confirm_sentence():
    from bench.v2v import Turn, summarise

    turns = [Turn("b", "Make it later", "piper", 900.0, {}, "To confirm: a table at 8 pm. Shall I go ahead?"),
             Turn("b", "One more person", "piper", 800.0, {}, "Sure, what time would you like?")]
    assert summarise(turns, "", "To confirm: ")["read_back"] == 1
    assert summarise(turns)["read_back"] == 0


def test_a_read_back_counts_as_asked_only_when_it_says_the_change_that_was_asked_for():
    from bench.v2v import Turn, summarise

    opening = "To confirm: "
    eight = "Could we do eight instead"
    weekend = "Could we move it to the weekend instead"
    said = [
        (eight, "To confirm: a table for two on Friday, December 4th at eight p m."),
        (eight, "To confirm: a table for eight on Friday, December 4th at seven p m."),
        (weekend, "Sunday works? To confirm."),
        (weekend, "To confirm: a table for one on Saturday, December 5th at eight p m, under Robin."),
        # The weekend, but at the time the first change had replaced: not as asked.
        (weekend, "To confirm: a table for one on Saturday, December 5th at seven p m."),
    ]
    turns = [Turn("b", text, "piper", reply=reply) for text, reply in said]
    summary = summarise(turns, "", opening)
    assert (summary["read_back"], summary["as_asked"]) == (4, 2)


def test_each_case_opens_its_sessions_with_another_question_and_every_question_keeps_its_voice():
    """The same four questions per case, in an order of its own: no case opens with a prompt
    another case left in the LLM server's cache."""
    from bench.v2v import QUESTION_CASES, session_order

    orders = [session_order(8, 4, case) for case in range(len(QUESTION_CASES))]
    assert all(sorted(order) == [8, 9, 10, 11] for order in orders)
    assert len({order[0] for order in orders}) == len(QUESTION_CASES)
    assert session_order(8, 4, 0) == [8, 9, 10, 11]
    assert sorted(session_order(0, 3, 5)) == [0, 1, 2]  # a short last group


def test_the_paired_overhead_compares_the_same_utterance_with_and_without_the_guard():
    from bench.v2v import Turn, paired_overhead

    off = [Turn("questions, guard off", q, "piper", ms) for q, ms in (("a", 400), ("b", 500), ("c", 600))]
    on = [Turn("questions, guard on", q, "piper", ms) for q, ms in (("c", 650), ("a", 420), ("b", 800))]
    # Differences 50, 20, 300: median 50, over the p50 without the guard (500).
    assert paired_overhead(on, off) == 0.1
    assert paired_overhead([Turn("x", "a", "espeak", 900)], off) is None  # another voice: no pair
    # Asked twice (--rounds 2): each round pairs with its own round.
    twice_off = [*off, Turn("questions, guard off", "a", "piper", 1000)]
    twice_on = [*on, Turn("questions, guard on", "a", "piper", 1100), Turn("x", "c", "piper", 9000)]
    # Differences 50, 20, 300 and 100 (the second "a" against the second "a", the third "c" with
    # nothing to pair); nearest-rank medians: 100 over 600.
    assert paired_overhead(twice_on, twice_off) == round(100 / 600, 3)


def test_the_ratio_of_the_p50s_comes_with_the_interval_it_moves_in_over_the_questions():
    from bench.v2v import Turn, ratio_interval

    off = [Turn("questions, guard off", q, "piper", 400 + 50 * i) for i, q in enumerate("abcdefgh")]
    # Every question 10 % slower with the guard: however the questions are drawn, the ratio is 10 %.
    steady = [Turn("questions, guard on", t.text, "piper", t.v2v_ms * 1.1) for t in off]
    assert ratio_interval(steady, off) == (0.1, 0.1)
    # Two questions 300 ms slower, the rest the same: the ratio depends on the draw.
    mixed = [Turn("questions, guard on", t.text, "piper", t.v2v_ms + (300 if t.text in "gh" else 0))
             for t in off]
    low, high = ratio_interval(mixed, off)
    assert low == 0.0 and high > 0.1
    assert ratio_interval(mixed, off) == (low, high)  # seeded: the same turns, the same interval
    assert ratio_interval([Turn("x", "a", "espeak", 900)], off) is None  # nothing pairs


def test_every_case_samples_its_replies_with_one_seed_on_top_of_the_servers_fields():
    import json

    from bench.v2v import SEED, same_words_env

    body = json.loads(same_words_env({"BRAIN_LLM_EXTRA_BODY": '{"id_slot": 0, "cache_prompt": true}'})[
        "BRAIN_LLM_EXTRA_BODY"])
    assert body == {"id_slot": 0, "cache_prompt": True, "seed": SEED}
    assert json.loads(same_words_env({})["BRAIN_LLM_EXTRA_BODY"]) == {"seed": SEED}  # the fallback server


async def test_each_turn_gets_its_brain_record_in_brief_and_a_case_its_p50s_by_who_judged(redis_url):
    """Two sessions' records in Redis, as the brain stores them: a question the LLM guard judged
    (after a discarded preemptive start of the same turn id) and one the screen passed."""
    import redis.asyncio as aioredis

    from bench.v2v import USER, Turn, attach_records, guard_summary, time_per_turn
    from voicebot.brain.runtime.session_store import SessionStore

    redis = aioredis.Redis.from_url(redis_url)
    store = SessionStore(redis, 60)
    call = {"ttft_ms": 420, "prompt_tokens": 900, "cached_tokens": 889}
    await store.add_record(USER, "s1", {"turn_id": "t1", "outcome": "cancelled", "llm_calls": []})
    await store.add_record(USER, "s1", {"turn_id": "t1", "outcome": "completed", "committed_ms": 180,
                                        "guard": {"by": "llm", "ms": 421}, "llm_calls": [call]})
    await store.add_record(USER, "s2", {"turn_id": "t1", "outcome": "completed", "committed_ms": 190,
                                        "guard": {"by": "screen", "ms": 15},
                                        "llm_calls": [{**call, "ttft_ms": 250}]})
    await redis.aclose()
    judged = Turn("q", "Is there a dress code?", "piper", 800, {"llm_ttft": 240},
                  session_id="s1", turn_id="t1")
    screened = Turn("q", "Can I bring my dog?", "piper", 600, {"llm_ttft": 60}, session_id="s2", turn_id="t1")
    unknown = Turn("q", "Hello?", "piper", None, {}, session_id="s3", turn_id="t9")

    await attach_records(redis_url, [judged, screened, unknown])

    assert judged.record == {"outcome": "completed", "committed_ms": 180, "guard_by": "llm", "guard_ms": 421,
                             "llm_calls": [{"purpose": "reply", "ttft_ms": 420, "new_tokens": 11}]}
    assert screened.record["guard_by"] == "screen" and unknown.record == {}
    summary = guard_summary([judged, screened, unknown])
    assert summary["llm"] == {"turns": 1, "guard_ms_p50": 421, "head_start_ms_p50": 180,
                              "llm_ttft_ms_p50": 240, "first_call_ttft_ms_p50": 420,
                              "first_call_new_tokens_p50": 11}
    assert summary["screen"]["llm_ttft_ms_p50"] == 60 and "none" not in summary
    lines = time_per_turn([judged, screened]).splitlines()
    assert "guard llm: 421" in lines[0] and "reply:11new/420ms" in lines[0]
