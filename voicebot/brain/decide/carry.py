"""Values from the call's earlier tasks, for the task at hand.

A task's values are kept when it ends (``SessionState.given``). A later task of the same call
takes the fields its profile lists under ``carry`` (the caller's name) without asking, and any
field when the caller says so: "for the same car and name" takes the fields those words name
(by a field's name, type or question), "the same" or "as before" alone takes every one. The
read-back still says every value, so a carried value is heard before anything runs.
"""

from __future__ import annotations

import functools
import re

from voicebot.brain.business.tasks import FieldSpec, TaskSpec
from voicebot.brain.decide.state import SessionState
from voicebot.brain.lang import pack_or_default


@functools.cache
def _same(language: str) -> tuple[re.Pattern[str], frozenset[str]]:
    """"the same car and name", "same as before", "that day too": values from the call's earlier
    task. The words right after the pack's ``same.word`` name what carries ("car and name"); one
    of its ``same.ends`` ("for Friday") ends them."""
    pack = pack_or_default(language)
    same, phrases = pack.same, pack.phrases
    articles = rf"(?:(?:{phrases(same.articles)})\s+)?" if same.articles else ""
    ends = rf"(?!(?:{phrases(same.ends)})\b)" if same.ends else ""
    pattern = (rf"{articles}{pack.word(re.escape(same.word))}(?P<what>(?:\s+{ends}[^\W\d_][\w']*){{0,4}})"
               rf"|{pack.word(phrases(same.phrases))}")
    return re.compile(pattern, re.I), frozenset(w.lower() for w in same.not_nouns)


def _field_words(item: FieldSpec, language: str = "en") -> set[str]:
    """Words that name a field: its own name's, its type's, and those of its question (less the
    pack's ``same.question_words``)."""
    words = set(item.name.lower().split("_")) | {item.type}
    words |= set(re.findall(r"[a-z]+", f"{item.ask} {item.description}".lower())) - _question_words(language)
    return words


@functools.cache
def _question_words(language: str) -> frozenset[str]:
    return frozenset(w.lower() for w in pack_or_default(language).same.question_words)


def asks_for_the_same(words: str, language: str = "en") -> bool:
    """"The same for Thursday", "same as before": the caller wants the call's last task again."""
    return _same(language)[0].search(words) is not None


def carry_values(state: SessionState, spec: TaskSpec, words: str, language: str = "en") -> list[str]:
    """The fields of ``spec`` filled from earlier tasks (none already given is overwritten)."""
    form = state.form
    if form is None or not state.given:
        return []
    wanted = set(spec.carry)
    pattern, not_nouns = _same(language)
    same = pattern.search(words)
    if same is not None:
        nouns = set(re.findall(r"[^\W\d_]+", (same["what"] or "").lower())) - not_nouns
        named = {f.name for f in spec.fields if nouns & _field_words(f, language)}
        wanted |= named or {f.name for f in spec.fields}
    carried = [name for name in wanted if name in state.given and form.values.get(name) in (None, "")]
    for name in carried:
        form.values[name] = state.given[name]
    return carried
