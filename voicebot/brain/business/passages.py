"""The business's knowledge as passages: the profile's ``knowledge:`` settings and what they load.

FAQ entries (each phrasing of a question points to the business's own answer) and text/markdown
files cut into voice-sized chunks under their headings (``chunking.py``); a file that cannot be
used fails the start naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from voicebot.brain.business.chunking import chunk_text
from voicebot.brain.business.errors import ProfileError

Kind = Literal["faq", "document", "tool"]
TEXT_SUFFIXES = (".md", ".markdown", ".txt")

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

