"""The bot answers only from what the business wrote (voicebot/brain/business/knowledge.py).

A profile's ``knowledge:`` section names FAQ entries and text files; they become passages in a
vector index, and a caller's question finds the passages about it, or nothing. Logic is pinned
with a bag-of-words encoder (tests/fakes/encoders.py: similarity is word overlap); that it
works on real questions is pinned with the packaged all-MiniLM-L6-v2.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from tests.fakes.encoders import BagOfWordsEncoder
from voicebot.brain.business.knowledge import (
    CHUNK_CHARS,
    KnowledgeIndex,
    KnowledgeSettings,
    Passage,
    Prefetcher,
    QdrantKnowledge,
    chunk_text,
    load_passages,
    normalise,
    open_knowledge,
)
from voicebot.brain.business.profile import ProfileError
from voicebot.brain.read.sentence_encoder import EncoderUnavailable, MiniLMEncoder

PETS = "Dogs are welcome on the terrace, and we bring them a bowl of water."
PARKING = "There are two free spaces behind the building."
FAQ = [
    {"q": ["Are pets allowed?", "Do you allow animals in the restaurant?"], "a": PETS},
    {"q": "What are your opening hours?", "a": "We are open from 6 pm to 10 pm every day."},
    {"q": ["Do you have vegetarian dishes?", "Is there food without meat?"],
     "a": "Yes: half of our pizzas and all our starters are vegetarian."},
    {"q": "Where can I park?", "a": PARKING},
]
GUIDE = """\
# Bella Napoli

Family-run since 1987, in the old town.

## Parking

There are two free spaces behind the building. The public garage on Via Roma is two minutes
away. It closes at midnight. On Sundays parking in the street is free.

## Payment

We accept:
- Visa
- **Mastercard**
- cash, up to [200 euros](https://example.com/limits)

### Vouchers

Gift vouchers are sold at the bar.
"""


def settings(**fields) -> KnowledgeSettings:
    return KnowledgeSettings.model_validate({"faq": FAQ, **fields})


async def index(encoder, passages: list[Passage] | None = None, **fields) -> QdrantKnowledge:
    config = settings(**fields)
    return await QdrantKnowledge.build(config, passages or load_passages(config, Path(".")), encoder)


# --- the profile's section ----------------------------------------------------------------------


def test_the_section_reads_as_a_business_writes_it():
    section = yaml.safe_load("""
        faq:
          - q:
              - Are pets allowed?
              - Can I bring my dog?
            a: Dogs are welcome on the terrace.
          - q: Do you deliver?
            a: No, we only serve in the restaurant.
        files: [knowledge/menu.md]
        tools: [opening_hours]
    """)
    knowledge = KnowledgeSettings.model_validate(section)
    assert [entry.questions for entry in knowledge.faq] == [
        ["Are pets allowed?", "Can I bring my dog?"], ["Do you deliver?"]]
    assert knowledge.files == ["knowledge/menu.md"] and knowledge.tools == ["opening_hours"]
    assert (knowledge.min_score, knowledge.top_k, knowledge.store_url, knowledge.collection) == (
        0.45, 3, "", "knowledge")


@pytest.mark.parametrize("section", [
    {"faq": [{"q": [], "a": "An answer."}]},
    {"faq": [{"q": "A question?", "a": "  "}]},
    {"faq": [{"question": "A question?", "a": "An answer."}]},
    {"files": ["a.md", "a.md"]},
    {"min_score": 1.5},
    {"top_k": 0},
    {"store_url": "localhost:6333"},
])
def test_a_section_that_cannot_be_meant_is_refused(section):
    with pytest.raises(ValueError, match="validation error"):
        KnowledgeSettings.model_validate(section)


# --- loading ------------------------------------------------------------------------------------


def test_every_phrasing_of_a_question_points_to_the_same_answer():
    passages = load_passages(settings(), Path("."))
    pets = [p for p in passages if p.text == PETS]
    assert [(p.question, p.kind, p.source) for p in pets] == [
        ("Are pets allowed?", "faq", "faq"), ("Do you allow animals in the restaurant?", "faq", "faq")]
    assert pets[0].embedded_text == "Are pets allowed?"  # questions are matched against questions
    assert len(passages) == 6


def test_a_markdown_file_is_cut_into_short_chunks_under_its_headings(tmp_path):
    (tmp_path / "knowledge").mkdir()
    (tmp_path / "knowledge" / "guide.md").write_text(GUIDE)
    passages = load_passages(KnowledgeSettings(files=["knowledge/guide.md"]), tmp_path)
    assert [(p.title, p.text) for p in passages] == [
        ("Bella Napoli", "Family-run since 1987, in the old town."),
        ("Parking", "There are two free spaces behind the building. The public garage on "
                    "Via Roma is two minutes away. It closes at midnight."),
        ("Parking", "On Sundays parking in the street is free."),
        ("Payment", "We accept: Visa. Mastercard. cash, up to 200 euros."),
        ("Vouchers", "Gift vouchers are sold at the bar."),
    ]
    assert {(p.kind, p.source) for p in passages} == {("document", "knowledge/guide.md")}
    assert passages[1].embedded_text.startswith("Parking: There are two")


def test_a_long_paragraph_becomes_voice_sized_chunks():
    sentence = "The terrace has twelve tables under a vine that gives shade from June to September"
    text = ", ".join([sentence] * 12) + ". Heaters are lit in winter."
    chunks = [chunk for _, chunk in chunk_text(text)]
    assert len(chunks) > 3 and all(len(chunk) <= CHUNK_CHARS for chunk in chunks)
    assert " ".join(chunks).split() == text.split()  # nothing lost, nothing added


def test_a_text_file_has_no_headings(tmp_path):
    (tmp_path / "notes.txt").write_text("# not a heading in a text file\nWe close on holidays.\n")
    [passage] = load_passages(KnowledgeSettings(files=["notes.txt"]), tmp_path)
    assert (passage.title, passage.text) == ("", "# not a heading in a text file We close on holidays.")


@pytest.mark.parametrize(("name", "content", "why"), [
    ("missing.md", None, "not found"),
    ("menu.pdf", b"%PDF-1.7", "only .md, .markdown, .txt files are read"),
    ("latin1.md", "Caf\xe9 cr\xe8me".encode("latin-1"), "not UTF-8 text"),
    ("empty.md", b" \n\n", "empty"),
    ("headings.md", b"# Menu\n## Desserts\n", "no text to answer from"),
])
def test_a_file_the_bot_cannot_answer_from_fails_the_profile_naming_it(tmp_path, name, content, why):
    if content is not None:
        (tmp_path / name).write_bytes(content)
    with pytest.raises(ProfileError) as caught:
        load_passages(KnowledgeSettings(files=[name]), tmp_path)
    assert str(caught.value).startswith(f"knowledge file {tmp_path / name}: {why}")


def test_an_unreadable_file_fails_the_profile_naming_it(tmp_path):
    (tmp_path / "folder.md").mkdir()
    with pytest.raises(ProfileError, match=r"knowledge file .*folder\.md: cannot read it"):
        load_passages(KnowledgeSettings(files=["folder.md"]), tmp_path)


# --- searching ----------------------------------------------------------------------------------


async def test_a_question_finds_its_answer_with_where_it_came_from():
    knowledge = await index(BagOfWordsEncoder())
    [found] = await knowledge.search("Where can I park the car?")
    assert (found.text, found.kind, found.source) == (PARKING, "faq", "faq")
    assert found.question == "Where can I park?"
    assert 0.45 <= found.score <= 1.0
    await knowledge.aclose()


async def test_the_same_answer_is_given_once_even_when_several_phrasings_match():
    knowledge = await index(BagOfWordsEncoder(), min_score=0.1)
    # Both pets phrasings share words with this question; the closer one is kept.
    found = await knowledge.search("Do you allow pets or animals in the restaurant?", k=3)
    assert [p.text for p in found].count(PETS) == 1
    assert found[0].text == PETS and found[0].question == "Do you allow animals in the restaurant?"
    assert found == sorted(found, key=lambda p: -p.score)
    await knowledge.aclose()


async def test_nothing_below_min_score_is_returned():
    knowledge = await index(BagOfWordsEncoder())
    assert await knowledge.search("Do you sell car insurance?") == []
    assert await knowledge.search("   ") == []
    await knowledge.aclose()


async def test_document_chunks_are_found_with_their_title(tmp_path):
    (tmp_path / "guide.md").write_text(GUIDE)
    config = KnowledgeSettings(files=["guide.md"], min_score=0.2)
    knowledge = await QdrantKnowledge.build(config, load_passages(config, tmp_path), BagOfWordsEncoder())
    found = await knowledge.search("Are gift vouchers sold?", k=1)
    assert [(p.title, p.source, p.kind) for p in found] == [
        ("Vouchers", "guide.md", "document")]
    await knowledge.aclose()


async def test_encoding_runs_off_the_event_loop():
    encoder = BagOfWordsEncoder()
    knowledge = await index(encoder)
    await knowledge.search("Are pets allowed?")
    assert encoder.threads and "MainThread" not in encoder.threads
    await knowledge.aclose()


async def test_knowledge_with_nothing_to_search_finds_nothing():
    encoder = BagOfWordsEncoder()
    knowledge = await QdrantKnowledge.build(KnowledgeSettings(tools=["opening_hours"]), [], encoder)
    assert await knowledge.search("Are pets allowed?") == [] and encoder.calls == []
    await knowledge.aclose()


async def test_brains_sharing_a_store_share_one_collection_per_profile_version():
    from qdrant_client import AsyncQdrantClient

    store = AsyncQdrantClient(location=":memory:")  # stands in for one Qdrant server
    encoder, config = BagOfWordsEncoder(), settings()
    passages = load_passages(config, Path("."))
    first = await QdrantKnowledge.build(config, passages, encoder, client=store)
    second = await QdrantKnowledge.build(config, passages, encoder, client=store)
    changed = await QdrantKnowledge.build(config, passages[:2], encoder, client=store)
    assert first.collection == second.collection != changed.collection
    assert (await store.count(first.collection)).count == len(passages)  # written again, not twice
    assert [p.text for p in await second.search("Where can I park?")] == [PARKING]
    await store.close()


async def test_open_knowledge_loads_builds_and_wraps(tmp_path):
    (tmp_path / "guide.md").write_text(GUIDE)
    knowledge = await open_knowledge(settings(files=["guide.md"]), tmp_path, BagOfWordsEncoder())
    assert isinstance(knowledge, Prefetcher) and isinstance(knowledge.index, QdrantKnowledge)
    assert knowledge.index.size == 6 + 5
    await knowledge.aclose()


# --- predictive prefetch ------------------------------------------------------------------------


class CountingIndex(KnowledgeIndex):
    """Answers after the test opens ``gate``; the first ``fail`` searches raise."""

    def __init__(self, fail: int = 0) -> None:
        self.calls: list[str] = []
        self.gate = asyncio.Event()
        self.fail = fail
        self.closed = False

    async def search(self, text: str, k: int | None = None) -> list[Passage]:
        self.calls.append(text)
        await self.gate.wait()
        if len(self.calls) <= self.fail:
            raise RuntimeError("store unreachable")
        return [Passage(text=f"about {normalise(text)}", source="faq", kind="faq", score=0.9)]

    async def aclose(self) -> None:
        self.closed = True


def test_the_prefetch_key_is_the_words_alone():
    assert normalise("  Can I bring my DOG?! ") == normalise("can i bring my dog") == "can i bring my dog"


async def test_a_search_for_the_prefetched_words_does_the_work_once():
    encoder = BagOfWordsEncoder()
    knowledge = Prefetcher(await index(encoder))
    encoder.calls.clear()
    knowledge.prefetch("are pets allowed")  # the speculative transcript
    await asyncio.sleep(0)
    found = await knowledge.search("Are pets allowed?")  # the final one: same words
    assert [p.text for p in found] == [PETS]
    assert encoder.calls == [["are pets allowed"]]
    await knowledge.aclose()


async def test_a_search_waits_for_the_prefetch_still_running():
    inner = CountingIndex()
    knowledge = Prefetcher(inner)
    knowledge.prefetch("do you have vegetarian dishes")
    knowledge.prefetch("Do you have vegetarian dishes?")  # the same words again: still one search
    searching = asyncio.create_task(knowledge.search("Do you have vegetarian dishes?"))
    await asyncio.sleep(0.01)
    inner.gate.set()
    assert [p.text for p in await searching] == ["about do you have vegetarian dishes"]
    assert inner.calls == ["do you have vegetarian dishes"]


async def test_other_words_are_searched_anew():
    inner = CountingIndex()
    inner.gate.set()
    knowledge = Prefetcher(inner)
    knowledge.prefetch("do you have")  # the caller went on talking
    await knowledge.search("Do you have a terrace?")
    assert inner.calls == ["do you have", "Do you have a terrace?"]


async def test_a_failed_prefetch_does_not_break_the_search():
    inner = CountingIndex(fail=1)
    knowledge = Prefetcher(inner)
    knowledge.prefetch("are pets allowed")
    await asyncio.sleep(0)
    inner.gate.set()
    found = await knowledge.search("Are pets allowed?")
    assert [p.text for p in found] == ["about are pets allowed"] and len(inner.calls) == 2


async def test_a_cancelled_prefetch_does_not_break_the_search():
    inner = CountingIndex()
    knowledge = Prefetcher(inner)
    knowledge.prefetch("are pets allowed")
    await asyncio.sleep(0)
    searching = asyncio.create_task(knowledge.search("Are pets allowed?"))
    await asyncio.sleep(0)
    for task in list(knowledge._running):  # e.g. the turn's speculation was abandoned
        if not task.done() and task is not searching:
            task.cancel()
    await asyncio.sleep(0)
    inner.gate.set()
    assert [p.text for p in await searching] == ["about are pets allowed"] and len(inner.calls) == 2


async def test_only_the_latest_searches_are_kept():
    inner = CountingIndex()
    inner.gate.set()
    knowledge = Prefetcher(inner, size=2)
    for words in ("one", "two", "three"):
        await knowledge.search(words)
    await knowledge.search("three")
    await knowledge.search("one")  # the oldest was dropped: searched again
    assert inner.calls == ["one", "two", "three", "one"]


async def test_closing_stops_running_prefetches_and_the_index():
    inner = CountingIndex()
    knowledge = Prefetcher(inner)
    knowledge.prefetch("are pets allowed")
    await asyncio.sleep(0)
    await knowledge.aclose()
    assert inner.closed and not knowledge._running


# --- the real encoder ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    try:
        return MiniLMEncoder()
    except EncoderUnavailable as exc:  # the package or the guard extra's libraries are missing
        pytest.skip(f"the packaged all-MiniLM-L6-v2 is not available: {exc}")


async def test_a_question_phrased_otherwise_finds_the_businesss_answer(minilm):
    knowledge = await index(minilm)
    found = await knowledge.search("Can I bring my dog?")
    assert found and found[0].text == PETS, found
    await knowledge.aclose()


async def test_an_unrelated_question_finds_nothing(minilm):
    knowledge = await index(minilm)
    assert await knowledge.search("Do you sell car insurance?") == []
    await knowledge.aclose()


async def test_a_document_answers_a_question_in_the_callers_words(minilm, tmp_path):
    (tmp_path / "guide.md").write_text(GUIDE)
    config = KnowledgeSettings(files=["guide.md"])
    knowledge = await QdrantKnowledge.build(config, load_passages(config, tmp_path), minilm)
    found = await knowledge.search("Which payment methods do you accept?")
    assert found and found[0].title == "Payment", found
    await knowledge.aclose()
