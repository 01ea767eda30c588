"""Language packs: the words the brain recognises are data, one validated file per language."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from voicebot.brain.business.profile import ProfileError, parse_profile
from voicebot.brain.lang import PACKS_DIR, LanguageError, language_pack, load_pack, pack_or_default

BRAIN = Path(__file__).resolve().parents[2] / "voicebot" / "brain"
# The modules whose words live in the packs: a word list added back in code fails the test below.
# (The rest follow as their words move: values, codes, reading's field rules, answers.)
FREE_OF_WORD_LISTS = ["read/confirm.py", "read/dialog.py", "read/turn_reading.py", "read/numbers.py",
                      "read/numerals.py", "read/pack_values.py", "read/clock.py", "decide/carry.py",
                      "decide/conversation.py", "decide/decisions.py", "lang/__init__.py"]


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


def word_lists(source: str) -> list[str]:
    """String literals that are alternations of three or more words: a word list in code."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            branches = (re.sub(r"^[^\w']+|[^\w']+$", "", b) for b in node.value.split("|"))
            words = [b for b in branches if re.fullmatch(r"[^\W\d_][\w' ]*", b)]
            if len(words) >= 3:
                found.append(node.value[:60])
    return found


def test_the_word_list_finder_finds_a_word_list():
    assert word_lists('_YES = re.compile(r"^(?:yes|yeah|sure)$")') == ["^(?:yes|yeah|sure)$"]
    assert word_lists('PATTERN = r"[\\s,.!]+|^$"') == []


@pytest.mark.parametrize("module", FREE_OF_WORD_LISTS)
def test_no_word_list_in_code_whose_words_are_in_the_packs(module):
    assert word_lists((BRAIN / module).read_text()) == []


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


@pytest.mark.parametrize("module", sorted(str(p.relative_to(BRAIN)) for p in BRAIN.rglob("*.py")))
def test_no_brain_module_holds_a_word_of_another_language(module):
    """Korean (or any language but the English defaults) lives in its pack, never in code."""
    assert words_of_other_scripts((BRAIN / module).read_text()) == []
