"""What the bot may say about the business: passages from the profile's ``knowledge:`` section.

A voice agent must not invent opening hours or prices, so answers come only from what the
business wrote: FAQ entries (each phrasing of a question points to the business's own answer)
and text/markdown files cut into voice-sized chunks under their headings. Every passage is
embedded with the packaged sentence encoder (``sentence_encoder.py``) and stored in a Qdrant
collection: embedded in-process by default, or a Qdrant server when ``store_url`` is set.
``search`` returns the passages at or above ``min_score`` cosine similarity, best first, each
answer once however many of its phrasings matched. Encoding is CPU work, so it runs off the
event loop. ``Prefetcher`` lets retrieval start on the speculative (partial) transcript: the
final transcript's search, when it normalises to the same words, awaits that work instead of
repeating it. Read-only MCP tools named in ``tools`` are knowledge too; the caller wires them
and may wrap their results with ``tool_passage``.

The parts: passages.py (settings, loading), chunking.py (files to chunks), knowledge_store.py
(the Qdrant index), prefetch.py (searches started early); this module opens them together.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from voicebot.brain.business.chunking import CHUNK_CHARS, CHUNK_SENTENCES, chunk_text
from voicebot.brain.business.knowledge_store import (
    KnowledgeIndex,
    QdrantKnowledge,
    best_per_answer,
    open_client,
)
from voicebot.brain.business.passages import (
    FaqEntry,
    KnowledgeSettings,
    Passage,
    load_passages,
    tool_passage,
)
from voicebot.brain.business.prefetch import Prefetcher, normalise
from voicebot.brain.read.sentence_encoder import SentenceEncoder

__all__ = [
    "CHUNK_CHARS", "CHUNK_SENTENCES", "FaqEntry", "KnowledgeIndex", "KnowledgeSettings", "Passage",
    "Prefetcher", "QdrantKnowledge", "best_per_answer", "chunk_text", "load_passages", "normalise",
    "open_client", "open_knowledge", "tool_passage",
]


async def open_knowledge(settings: KnowledgeSettings, base_dir: Path, encoder: SentenceEncoder,
                         prefetch_size: int = 32) -> Prefetcher:
    """The brain's index at start: load (ProfileError for a bad file), embed, store, wrap."""
    passages = await asyncio.to_thread(load_passages, settings, base_dir)
    return Prefetcher(await QdrantKnowledge.build(settings, passages, encoder), prefetch_size)
