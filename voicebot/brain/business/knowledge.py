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
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from voicebot.brain.business.errors import ProfileError
from voicebot.brain.read.sentence_encoder import SentenceEncoder

if TYPE_CHECKING:
    from qdrant_client import AsyncQdrantClient

log = logging.getLogger(__name__)

Kind = Literal["faq", "document", "tool"]
TEXT_SUFFIXES = (".md", ".markdown", ".txt")
CHUNK_CHARS = 300  # about two spoken sentences: what a reply can quote without a monologue
CHUNK_SENTENCES = 3
ENCODE_BATCH = 64  # rows per encode call at build: bounded memory for long files
UPSERT_BATCH = 256

_Words = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class _Strict(BaseModel):
    # The same rules as profile.py's models (not imported from there: profile.py imports this module).
    model_config = ConfigDict(extra="forbid", frozen=True)


class FaqEntry(_Strict):
    """One answer in the business's words, and the ways callers ask for it."""

    q: _Words | list[_Words]
    a: _Words  # said as written: already speakable

    @field_validator("q")
    @classmethod
    def _some_question(cls, q: str | list[str]) -> str | list[str]:
        if isinstance(q, list) and not q:
            raise ValueError("give at least one phrasing of the question")
        return q

    @property
    def questions(self) -> list[str]:
        return _questions(self)


def _questions(entry: Any) -> list[str]:
    """An entry's phrasings; duck-typed, so profile.py's own FAQ model (plain ``q``/``a``) works too."""
    return [q.strip() for q in ([entry.q] if isinstance(entry.q, str) else entry.q) if q.strip()]


class KnowledgeSettings(_Strict):
    faq: list[FaqEntry] = Field(default_factory=list)
    # Text or markdown files, relative to the profile file's folder.
    files: list[_Words] = Field(default_factory=list)
    # Read-only MCP tools whose results are knowledge (the caller wires them).
    tools: list[_Words] = Field(default_factory=list)
    # Cosine similarity below which a passage is not about the caller's question.
    min_score: float = Field(0.45, ge=0, le=1)
    top_k: int = Field(3, ge=1, le=20)
    store_url: str = Field("", pattern=r"^(https?://.+)?$")  # empty: an in-process index
    # With a server, the collection's name prefix: a fingerprint of the content follows it.
    collection: str = Field("knowledge", pattern=r"^[A-Za-z0-9_-]+$")

    @field_validator("files", "tools")
    @classmethod
    def _unique(cls, names: list[str]) -> list[str]:
        if len(names) != len(set(names)):
            raise ValueError(f"names must be unique, got {names}")
        return names


@dataclass(frozen=True)
class Passage:
    text: str  # what the bot may say: the business's own words
    source: str  # "faq", the file as the profile names it, or the tool's name
    kind: Kind
    title: str = ""  # the heading a document chunk sits under
    question: str = ""  # FAQ only: the phrasing that was embedded (and matched)
    score: float = 0.0  # cosine similarity to the caller's words; set on search results

    @property
    def embedded_text(self) -> str:
        """What the encoder sees: a question is matched against questions, a chunk with its
        heading so "Parking: two spaces behind the building" is found for "where do I park".
        The nearest heading only: with the document's title and parents before it as well,
        all-MiniLM-L6-v2 scored the right chunk lower ("Is there parking nearby?", "Which payment
        methods do you accept?")."""
        if self.kind == "faq":
            return self.question
        return f"{self.title}: {self.text}" if self.title else self.text


def tool_passage(tool: str, text: str, score: float = 1.0) -> Passage:
    """A read-only tool's result as a passage, so the caller treats all knowledge alike."""
    return Passage(text=text, source=tool, kind="tool", score=score)


# ---------------------------------------------------------------------------------------------
# Loading


def load_passages(settings: KnowledgeSettings, base_dir: Path) -> list[Passage]:
    """Every passage the profile's knowledge holds; a file that cannot be used is a ProfileError
    naming it, so a bad profile fails at start rather than answering from half its knowledge."""
    passages = [Passage(text=entry.a.strip(), source="faq", kind="faq", question=question)
                for entry in settings.faq if entry.a.strip() for question in _questions(entry)]
    for name in settings.files:
        passages += _file_passages(name, Path(base_dir) / name)
    return passages


def _file_passages(name: str, path: Path) -> list[Passage]:
    chunks = list(chunk_text(_read_text(path), markdown=path.suffix.lower() != ".txt"))
    if not chunks:
        raise _file_error(path, "no text to answer from (only headings)")
    return [Passage(text=text, source=name, kind="document", title=title) for title, text in chunks]


def _file_error(path: Path, why: str) -> Exception:
    return ProfileError(f"knowledge file {path}: {why}")


def _read_text(path: Path) -> str:
    def fail(why: str) -> Exception:
        return _file_error(path, why)

    if path.suffix.lower() not in TEXT_SUFFIXES:
        raise fail(f"only {', '.join(TEXT_SUFFIXES)} files are read (convert it to text first)")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise fail("not found") from None
    except OSError as exc:
        raise fail(f"cannot read it ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")  # a BOM from Windows editors is not text
    except UnicodeDecodeError as exc:
        raise fail(f"not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise fail("empty")
    return text


# ---------------------------------------------------------------------------------------------
# Chunking: headings start a section; paragraphs and list items become chunks of 1-3 sentences.

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+(.*)$")
_RULE = re.compile(r"^\s*([-*_=])(?:\s*\1){2,}\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?[\s:|-]+\|[\s:|-]*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MARKUP = re.compile(r"\*\*|__|`")


@dataclass
class _Unit:
    """A paragraph or a list item (a table row counts as one) within one section."""

    title: str
    text: str
    item: bool


def chunk_text(text: str, markdown: bool = True) -> Iterator[tuple[str, str]]:
    """(title, chunk) pairs in file order. A paragraph starts a new chunk; list items and table
    rows join the chunk before them (a list reads as one answer, with its lead-in line); no
    chunk spans a heading, so each chunk's title says where it was written."""
    chunk: list[str] = []
    title = ""
    for unit in _units(text, markdown):
        if chunk and (unit.title != title or not unit.item):
            yield title, " ".join(chunk)
            chunk = []
        title = unit.title
        for sentence in _sentences(_speakable_item(unit.text) if unit.item else unit.text):
            # Prose is cut after a few sentences; list items are short, so only length cuts them.
            if chunk and ((not unit.item and len(chunk) >= CHUNK_SENTENCES)
                          or sum(len(s) + 1 for s in chunk) + len(sentence) > CHUNK_CHARS):
                yield title, " ".join(chunk)
                chunk = []
            chunk.append(sentence)
    if chunk:
        yield title, " ".join(chunk)


def _units(text: str, markdown: bool) -> Iterator[_Unit]:
    title = ""
    current: _Unit | None = None
    for raw in text.splitlines():
        line = raw.strip().removeprefix(">").strip() if markdown else raw.strip()
        heading = _HEADING.match(line) if markdown else None
        item = _ITEM.match(line)
        ends_unit = (not line or heading or item or _RULE.match(line)
                     or (markdown and (_FENCE.match(line) or line.startswith("|"))))
        if ends_unit and current:
            yield current
            current = None
        if heading:
            title = _clean(heading[2])
        elif item:
            current = _Unit(title, _clean(item[1]), item=True)
        elif markdown and line.startswith("|") and not _TABLE_SEPARATOR.match(line):
            cells = [_clean(cell) for cell in line.strip("|").split("|")]
            yield _Unit(title, ", ".join(c for c in cells if c), item=True)
        elif not ends_unit:
            if current:
                current.text += " " + _clean(line)
            else:
                current = _Unit(title, _clean(line), item=False)
    if current:
        yield current


def _clean(text: str) -> str:
    """Markdown markup is not said aloud: a link's words stay, its address goes."""
    return " ".join(_MARKUP.sub("", _LINK.sub(r"\1", text)).split())


def _speakable_item(text: str) -> str:
    # "Visa" then "Mastercard" joined as "Visa. Mastercard." reads as two short sentences.
    return text if not text or text[-1] in ".!?:;," else text + "."


def _sentences(text: str) -> Iterator[str]:
    for sentence in _SENTENCE_END.split(text):
        while len(sentence) > CHUNK_CHARS:  # a run-on sentence is cut at a word boundary
            cut = sentence.rfind(" ", 0, CHUNK_CHARS)
            cut = cut if cut > 0 else CHUNK_CHARS
            yield sentence[:cut].strip()
            sentence = sentence[cut:].strip()
        if sentence:
            yield sentence


# ---------------------------------------------------------------------------------------------
# Searching


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


# ---------------------------------------------------------------------------------------------
# Predictive prefetch

_NOT_WORD = re.compile(r"[^\w\s]")


def normalise(text: str) -> str:
    """What a partial and a final transcript of the same words have in common."""
    return " ".join(_NOT_WORD.sub("", text.casefold()).split())


class Prefetcher(KnowledgeIndex):
    """An index that can start searching on the speculative transcript.

    ``prefetch`` starts a search and keeps its task under the normalised text; ``search`` for
    the same words awaits that task (or takes its result) rather than encoding again. The last
    ``size`` searches are kept. A prefetch that failed or was cancelled is searched again.
    """

    def __init__(self, index: KnowledgeIndex, size: int = 32) -> None:
        self.index = index
        self.size = size
        self._tasks: OrderedDict[tuple[str, int | None], asyncio.Task[list[Passage]]] = OrderedDict()
        self._running: set[asyncio.Task[list[Passage]]] = set()  # evicted ones too, until done

    def prefetch(self, text: str, k: int | None = None) -> None:
        """Starts the search for these words unless it is running or done; returns at once."""
        key = (normalise(text), k)
        if key[0] and key not in self._tasks:
            self._start(key, text, k)
        elif key in self._tasks:
            self._tasks.move_to_end(key)

    async def search(self, text: str, k: int | None = None) -> list[Passage]:
        key = (normalise(text), k)
        if not key[0]:
            return []
        task = self._tasks.get(key)
        if task is not None:
            self._tasks.move_to_end(key)
            found = await self._outcome(task)
            if found is not None:
                return list(found)  # a copy: the kept result is shared by every search for it
        # Shielded: a caller cancelled mid-search (barge-in) leaves the result for the next one.
        return list(await asyncio.shield(self._start(key, text, k)))

    async def aclose(self) -> None:
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        self._tasks.clear()
        await self.index.aclose()

    def _start(self, key: tuple[str, int | None], text: str, k: int | None) -> asyncio.Task[list[Passage]]:
        task = asyncio.create_task(self.index.search(text, k), name=f"knowledge search {key[0][:40]!r}")
        self._tasks[key] = task
        self._tasks.move_to_end(key)
        while len(self._tasks) > self.size:
            self._tasks.popitem(last=False)
        self._running.add(task)
        task.add_done_callback(lambda done: self._finished(key, done))
        return task

    def _finished(self, key: tuple[str, int | None], task: asyncio.Task[list[Passage]]) -> None:
        self._running.discard(task)
        failed = task.cancelled() or task.exception() is not None  # retrieved: no "never retrieved"
        if failed and self._tasks.get(key) is task:
            del self._tasks[key]  # the next search for these words starts afresh

    @staticmethod
    async def _outcome(task: asyncio.Task[list[Passage]]) -> list[Passage] | None:
        """The task's passages, or None when it failed or was cancelled (not us)."""
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                return None
            raise  # this search itself was cancelled
        except Exception as exc:  # noqa: BLE001 -- a failed prefetch is only a missed head start
            log.warning("knowledge prefetch failed (%s); searching again", exc)
            return None


async def open_knowledge(settings: KnowledgeSettings, base_dir: Path, encoder: SentenceEncoder,
                         prefetch_size: int = 32) -> Prefetcher:
    """The brain's index at start: load (ProfileError for a bad file), embed, store, wrap."""
    passages = await asyncio.to_thread(load_passages, settings, base_dir)
    return Prefetcher(await QdrantKnowledge.build(settings, passages, encoder), prefetch_size)
