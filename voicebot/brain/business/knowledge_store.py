"""The knowledge index: passages embedded with the sentence encoder in a Qdrant collection.

Embedded in-process by default, or a Qdrant server when ``store_url`` is set. ``search`` returns
the passages at or above ``min_score`` cosine similarity, best first, each answer once however
many of its phrasings matched. Encoding is CPU work, so it runs off the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from abc import ABC, abstractmethod
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np

from voicebot.brain.business.passages import KnowledgeSettings, Passage
from voicebot.brain.read.sentence_encoder import SentenceEncoder

if TYPE_CHECKING:
    from qdrant_client import AsyncQdrantClient

log = logging.getLogger(__name__)

ENCODE_BATCH = 64  # rows per encode call at build: bounded memory for long files
UPSERT_BATCH = 256


class KnowledgeIndex(ABC):
    """Passages for a caller's words."""

    @abstractmethod
    async def search(self, text: str, k: int | None = None) -> list[Passage]:
        """The ``k`` (default: the settings' ``top_k``) most relevant passages, best first,
        only those at or above ``min_score``, each answer once."""

    @abstractmethod
    async def aclose(self) -> None: ...


class QdrantKnowledge(KnowledgeIndex):
    """Passages in a Qdrant collection, cosine distance, vectors from the sentence encoder."""

    def __init__(self, client: AsyncQdrantClient, collection: str, encoder: SentenceEncoder,
                 settings: KnowledgeSettings, size: int, per_answer: int) -> None:
        self.client = client
        self.collection = collection
        self.encoder = encoder
        self.min_score, self.top_k = settings.min_score, settings.top_k
        self.size = size  # points in the collection
        # The most points that share one answer: searching k * this many always finds k answers.
        self.per_answer = per_answer

    @classmethod
    async def build(cls, settings: KnowledgeSettings, passages: list[Passage], encoder: SentenceEncoder,
                    client: AsyncQdrantClient | None = None) -> QdrantKnowledge:
        """Embeds the passages and stores them; the collection is named after its content, so
        brains sharing a server with the same profile share it and a changed profile gets its own.
        The index owns ``client`` (default: ``open_client(settings)``) and closes it."""
        client = client if client is not None else open_client(settings)
        try:
            vectors = await asyncio.to_thread(_encode_all, encoder, [p.embedded_text for p in passages])
            name = f"{settings.collection}-{_fingerprint(encoder, passages)}"
            if passages:
                await _ensure_collection(client, name, int(vectors.shape[1]))
                await _upsert(client, name, passages, vectors)
        except BaseException:
            await client.close()
            raise
        groups: dict[str, int] = {}
        for passage in passages:
            groups[passage.text] = groups.get(passage.text, 0) + 1
        log.info("knowledge: %d passages in %s (%s)", len(passages), name,
                 settings.store_url or "in-process")
        return cls(client, name, encoder, settings, len(passages), max(groups.values(), default=1))

    async def search(self, text: str, k: int | None = None) -> list[Passage]:
        k = k or self.top_k
        if not self.size or not text.strip():
            return []
        vector = (await asyncio.to_thread(self.encoder.encode, [text]))[0]
        response = await self.client.query_points(
            self.collection, query=np.asarray(vector, dtype=np.float32).tolist(),
            limit=k * self.per_answer, score_threshold=self.min_score, with_payload=True)
        found = [_passage(point.payload, point.score) for point in response.points]
        return best_per_answer(found, k)

    async def aclose(self) -> None:
        await self.client.close()


def open_client(settings: KnowledgeSettings) -> AsyncQdrantClient:
    """Qdrant's async client: embedded in this process (``:memory:``) or a server's."""
    # Imported here, not at the top: a slow import that every importer of the profile's settings
    # (gateway, tools, tests) would pay, though only a brain with knowledge uses it.
    from qdrant_client import AsyncQdrantClient

    if settings.store_url:
        return AsyncQdrantClient(url=settings.store_url, timeout=10)
    return AsyncQdrantClient(location=":memory:")


def best_per_answer(passages: list[Passage], k: int) -> list[Passage]:
    """Best first, each answer once: several phrasings of one FAQ entry matching a question
    are one answer, kept with its best-scoring phrasing."""
    best: dict[str, Passage] = {}
    for passage in sorted(passages, key=lambda p: -p.score):
        best.setdefault(passage.text, passage)
    return list(best.values())[:k]


def _encode_all(encoder: SentenceEncoder, texts: list[str]) -> np.ndarray:
    parts = [encoder.encode(texts[i:i + ENCODE_BATCH]) for i in range(0, len(texts), ENCODE_BATCH)]
    return np.vstack(parts) if parts else np.zeros((0, 0), dtype=np.float32)


def _fingerprint(encoder: SentenceEncoder, passages: list[Passage]) -> str:
    digest = hashlib.sha256(encoder.name.encode())
    for passage in passages:
        digest.update(json.dumps(_payload(passage), sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _payload(passage: Passage) -> dict[str, Any]:
    payload = asdict(passage)
    del payload["score"]
    return payload


def _passage(payload: dict[str, Any] | None, score: float) -> Passage:
    return Passage(**(payload or {}), score=min(float(score), 1.0))  # float error gave 1.0000000351


async def _ensure_collection(client: AsyncQdrantClient, name: str, width: int) -> None:
    from qdrant_client import models
    from qdrant_client.http.exceptions import UnexpectedResponse

    if await client.collection_exists(name):
        return
    try:
        await client.create_collection(
            name, vectors_config=models.VectorParams(size=width, distance=models.Distance.COSINE))
    except UnexpectedResponse:
        # Another brain with the same profile created it first: the same content, so it's ours too.
        if not await client.collection_exists(name):
            raise


async def _upsert(client: AsyncQdrantClient, name: str, passages: list[Passage], vectors: np.ndarray) -> None:
    """Point ids are positions in the content-named collection: writing them again (a second
    brain, a restart) overwrites the same points with the same values."""
    from qdrant_client import models

    points = [models.PointStruct(id=i, vector=vectors[i].astype(np.float32).tolist(), payload=_payload(p))
              for i, p in enumerate(passages)]
    for start in range(0, len(points), UPSERT_BATCH):
        await client.upsert(name, points=points[start:start + UPSERT_BATCH], wait=True)

