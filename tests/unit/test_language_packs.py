"""Language packs: the words the brain recognises are data, one validated file per language."""

from __future__ import annotations

import ast
import datetime as dt
import re
from pathlib import Path

import pytest
import yaml

from voicebot.brain import lang
from voicebot.brain.act.answers import claims_outcome
from voicebot.brain.business.profile import ProfileError, parse_profile
from voicebot.brain.decide.options import pick_option
from voicebot.brain.decide.state import Option
from voicebot.brain.lang import PACKS_DIR, LanguageError, language_pack, load_pack, pack_or_default
from voicebot.brain.read.codes import parse_code
from voicebot.brain.read.refusals import is_refusal
from voicebot.brain.read.values import parse_date
from voicebot.brain.speak.readback import default_action, join_words, spoken_date, spoken_time

BRAIN = Path(__file__).resolve().parents[2] / "voicebot" / "brain"
BRAIN_MODULES = sorted(str(p.relative_to(BRAIN)) for p in BRAIN.rglob("*.py"))
# Literals the word-list finder shows that are no natural language: (module, what the finder
# shows) -> why. An entry whose literal is gone fails ``test_every_exemption_is_still_in_its_module``.
NOT_WORDS = {
    ("act/mcp_tools.py", "title read_back done only_known errors"): "a tool's profile keys",
    ("act/toolcalls.py", "id name arguments"): "the keys of a streamed OpenAI tool call",
    ("business/passages.py", "faq document tool"): "the kinds of a knowledge passage",
    ("business/profile.py", "date time integer number name text code choice reference"): "field types",
    ("business/profile.py", "refusal field transient unknown"): "the kinds of a tool's error",
    ("business/profile.py", "writing code homework medical or legal advice politics"):
        "the topic guard's default blocked topics: words of its English prompt to the model",
    ("business/translations.py", "title examples ask_any read_back done found"): "a task's profile keys",
    ("business/translations.py", "ask spoken counts said_as words_for more fewer"): "a field's profile keys",
    ("business/translations.py", "name purpose stt_context knowledge"): "a translation's profile keys",
    ("decide/tool_errors.py", "refusal field transient unknown"): "the kinds of a tool's error",
    ("read/guard.py", "writing code homework politics"): "blocked topics in the guard's prompt to the model",
    ("read/multilingual_encoder.py", "ar de en es fr it ja ko nl pl pt ru th tr zh"): "language codes",
    ("read/reading.py", "date time integer number"): "field types: the values a caller takes back",
    ("read/reading.py", "date time integer number name reference code"):
        "field types, keys of the field hints in the reading's prompt to the model",
    ("read/sentence_encoder.py", "query key value"): "weight names of the encoder's attention layers",
    ("read/turn_reading.py", "text answer question closing greeting same"): "a Reading's attribute names",
    ("read/turn_reading.py", "name text code reference"): "field types",
    ("read/turn_reading.py", "text code reference"): "field types",
    ("read/values.py", "null none unknown n/a"): "what the model writes in its JSON for a value not said",
}


@pytest.mark.parametrize("path", sorted(PACKS_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_pack_validates(path):
    pack = load_pack(path)
    assert pack.language == path.stem
    assert pack.acts.yes and pack.acts.no and pack.acts.person


def test_a_pack_with_an_unquoted_yes_fails_naming_the_file_and_the_key(tmp_path):
    """YAML reads a bare ``yes:`` key as true: the pack then lacks ``acts.yes``, and says so."""
    broken = (PACKS_DIR / "en.yaml").read_text().replace('  "yes": ["yes",', "  yes: [yes,")
    (tmp_path / "xx.yaml").write_text(broken)
    with pytest.raises(LanguageError, match=r"xx\.yaml: .*acts\.yes: Field required"):
        load_pack(tmp_path / "xx.yaml")


def test_an_unknown_key_in_a_pack_fails_naming_it(tmp_path):
    (tmp_path / "xx.yaml").write_text((PACKS_DIR / "en.yaml").read_text() + "\nextra_words: [a]\n")
    with pytest.raises(LanguageError, match="extra_words"):
        load_pack(tmp_path / "xx.yaml")


def test_a_language_without_a_pack_is_named_with_the_packs_there_are():
    with pytest.raises(LanguageError, match=r"no language pack for 'fr' \(packs: en, ko\)"):
        language_pack("fr")
    assert pack_or_default("fr").language == "en"  # mid-call: read as the default, never a crash
    assert language_pack("en-GB").language == "en"


def test_a_profile_naming_a_language_without_a_pack_fails_the_start():
    with pytest.raises(ProfileError, match="no language pack for 'fr'"):
        parse_profile({"name": "Chez Nous", "languages": ["en", "fr"]})
    assert parse_profile({"name": "Hanok", "languages": ["ko", "EN"]}).languages == ["ko", "en"]


def test_english_words_are_read_from_its_pack(tmp_path, monkeypatch):
    """The English rules hold no words: a pack that adds some is read by the same code."""
    raw = yaml.safe_load((PACKS_DIR / "en.yaml").read_text())
    raw["language"] = "xx"
    raw["library_values"]["dates"]["days"]["overmorrow"] = 2
    raw["codes"]["digits"]["niner"] = 9
    raw["claims"]["done"].append("sorted")
    (tmp_path / "xx.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True))
    monkeypatch.setattr(lang, "PACKS_DIR", tmp_path)
    try:
        monday = dt.date(2030, 1, 7)
        assert parse_date("overmorrow", monday, "xx") == dt.date(2030, 1, 9)
        assert parse_date("overmorrow", monday, "en") is None
        assert parse_code("A niner niner", language="xx") == "A99" and parse_code("A niner niner") == "A"
        assert claims_outcome("Your table is sorted.", "xx") and not claims_outcome("Your table is sorted.")
    finally:
        language_pack.cache_clear()


def test_how_english_says_a_value_is_its_packs_too(tmp_path, monkeypatch):
    """Dates, times, lists and a read-back from a tool's title are said by the pack's ``speak``
    forms; a pack that writes no form of a kind says it as English's pack does."""
    raw = yaml.safe_load((PACKS_DIR / "en.yaml").read_text())
    raw["language"] = "xx"
    raw["speak"].update(date="{day} {month_name} {year}", time_with_minutes="{hour}.{minute:02d} {period}",
                        list_and=" & ", action_with="where {values}")
    (tmp_path / "xx.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True))
    del raw["speak"]
    raw["language"] = "yy"
    (tmp_path / "yy.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True))
    (tmp_path / "en.yaml").write_text((PACKS_DIR / "en.yaml").read_text())
    monkeypatch.setattr(lang, "PACKS_DIR", tmp_path)
    language_pack.cache_clear()
    try:
        assert spoken_date("2026-12-04", language="xx") == "4 December 2026"
        assert spoken_time("19:30", "xx") == "7.30 pm" and spoken_time("19:30", "en") == "7:30 pm"
        assert default_action("Open a ticket", {"summary": "jam", "priority": "high"}, language="xx") \
            == "open a ticket where summary jam & priority high"
        assert spoken_date("2026-12-04", language="yy") == "Friday, December 4th"  # English's forms
        assert spoken_time("19:30", "yy") == "7:30 pm" and join_words(["a", "b"], "yy") == "a and b"
    finally:
        language_pack.cache_clear()


def test_korean_reaches_the_same_rules_with_its_own_words():
    assert claims_outcome("네, 예약이 완료되었습니다.", "ko") and claims_outcome("취소해드릴게요.", "ko")
    assert not claims_outcome("테이블은 최대 2주 전까지 예약하실 수 있습니다.", "ko")
    offered = [Option(argument="slot", label=at, item={"time": at}) for at in ("19:00", "19:30", "20:00")]
    assert pick_option("두 번째요", offered, "ko") is offered[1]
    assert pick_option("마지막 걸로 할게요", offered, "ko") is offered[2]
    assert pick_option("두 명이요", offered, "ko") is None
    # The packaged model refuses in English whatever it was asked in.
    assert is_refusal("I'm sorry, but I can't assist with that.", "ko")


# A word, a short phrase or a short sentence of letters ("tomorrow", "o'clock", "as in", "Thank you,
# goodbye."): no digits, no underscores.
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*(?:,? [^\W\d_]+(?:['’-][^\W\d_]+)*){0,7}[.?!]?")


def _is_word(value: object) -> bool:
    """Not an identifier in camelCase either ("FaqEntry")."""
    return isinstance(value, str) and bool(_WORD.fullmatch(value)) and not re.search(r"[a-z][A-Z]", value)


def _strings(nodes: list[ast.expr | None]) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _constant(node: ast.expr) -> bool:
    """A number or a string ("-1" too)."""
    return isinstance(node.operand if isinstance(node, ast.UnaryOp) else node, ast.Constant)


def _split_string(call: ast.Call) -> str | None:
    """The string of ``"...".split()``."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "split" and isinstance(func.value, ast.Constant):
        return func.value.value if isinstance(func.value.value, str) else None
    return None


def word_lists(source: str) -> list[str]:
    """Word lists in code: a string that alternates three or more words ("yes|yeah|sure"); a tuple,
    list or set of three or more words, or a dict of three or more words to constants; three or more
    words in a string split into a list ("a an the".split()). Regex escapes (``\\b``, ``\\s``) are
    no letters; a module's ``__all__`` names code."""
    tree = ast.parse(source)
    names = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            plain = re.sub(r"\\[A-Za-z]", " ", node.value)
            branches = (re.sub(r"^[^\w']+|[^\w']+$", "", b) for b in plain.split("|"))
            if len([b for b in branches if re.fullmatch(r"[^\W\d_][\w' ]*", b)]) >= 3:
                found.append(node.value[:60])
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and id(node) not in names:
            if sum(map(_is_word, strings := _strings(node.elts))) >= 3:
                found.append(" ".join(strings))
        elif isinstance(node, ast.Dict) and all(map(_constant, node.values)):
            if sum(map(_is_word, keys := _strings(node.keys))) >= 3:
                found.append(" ".join(keys))
        elif isinstance(node, ast.Call) and (split := _split_string(node)) is not None:
            if sum(map(_is_word, words := split.split())) >= 3:
                found.append(" ".join(words)[:60])
    return found


def unexplained_word_lists(module: str, source: str) -> list[str]:
    return [found for found in word_lists(source) if (module, found) not in NOT_WORDS]


def test_the_word_list_finder_finds_a_word_list():
    assert word_lists('_YES = re.compile(r"^(?:yes|yeah|sure)$")') == ["^(?:yes|yeah|sure)$"]
    assert word_lists('_DAYS = ("monday", "tuesday", "next week")') == ["monday tuesday next week"]
    assert word_lists('_STOP = frozenset({"a", "an", "the", "it\'s"})') == ["a an the it's"]
    assert word_lists('_FILLER = frozenset("a an the please".split())') == ["a an the please"]
    assert word_lists('_DIGITS = {"one": "1", "two": "2", "three": "3"}') == ["one two three"]


def test_the_word_list_finder_passes_what_is_no_word_list():
    assert word_lists('PATTERN = r"[\\s,.!]+|^$"') == []
    assert word_lists('_MARK = re.compile(r"^\\s*(?:[-*]|\\d+[.)]|#+)\\s+")') == []  # escapes, not "s|d|s"
    assert word_lists('KEYS = ("session_id", "turn_id", "FaqEntry", "n/a", "12:00")') == []
    assert word_lists('__all__ = ["parse", "read", "speak"]') == []
    assert word_lists('SCHEMA = {"type": "object", "properties": {}, "required": []}') == []
    assert word_lists('PAIR = ("yes", "no")') == []


def test_a_word_list_added_to_a_brain_module_fails_the_test():
    module = "read/values.py"
    source = (BRAIN / module).read_text() + '\n_SOON = ("later", "afterwards", "in a bit")\n'
    assert unexplained_word_lists(module, source) == ["later afterwards in a bit"]


@pytest.mark.parametrize("module", BRAIN_MODULES)
def test_no_word_list_in_brain_code(module):
    """Every word the brain recognises or says by itself is in a language pack (``lang/*.yaml``)."""
    assert unexplained_word_lists(module, (BRAIN / module).read_text()) == []


@pytest.mark.parametrize(("module", "found"), sorted(NOT_WORDS), ids=lambda v: v[:40])
def test_every_exemption_is_still_in_its_module(module, found):
    assert found in word_lists((BRAIN / module).read_text())


def words_of_other_scripts(source: str) -> list[str]:
    """String literals (docstrings aside) that hold letters outside the Latin script: a word of a
    language other than English written in code."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node.value[:40] for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and any(ch.isalpha() and not ch.isascii() and ord(ch) > 0x24F for ch in node.value)]


def test_the_other_script_finder_finds_a_korean_word():
    assert words_of_other_scripts('"""내일 is tomorrow."""\nTOMORROW = ("내일", "tomorrow")') == ["내일"]


@pytest.mark.parametrize("module", BRAIN_MODULES)
def test_no_brain_module_holds_a_word_of_another_language(module):
    """Korean (or any language but the English defaults) lives in its pack, never in code."""
    assert words_of_other_scripts((BRAIN / module).read_text()) == []
