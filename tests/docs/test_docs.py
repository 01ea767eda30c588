"""The README is a manual and the docs site builds; the repository points nowhere outside itself.

Checks anyone can run (``pytest tests/docs``), each with a case that shows it can fail:

- ``mkdocs build --strict`` succeeds (a broken link or anchor in docs/ fails it);
- README.md is at most 350 lines, and every relative link in it resolves to a file (and a heading);
- no dated run diaries in README.md or docs/;
- no benchmark module under the product package, no import of ``tests`` from product code;
- no reference to design notes outside the repository;
- every setting of every ``voicebot/*/config.py`` class is in docs/configuration.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 350

# ---- run diaries ------------------------------------------------------------------------------
_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|December|"
           "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec")
_ORDINALS = (r"second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
             r"\w+teenth|twentieth|thirtieth|(?:twenty|thirty)-\w+|\d+(?:st|nd|rd|th)")
DIARY = [
    ("an ISO date", re.compile(r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b")),
    ("a dated day", re.compile(rf"\b(?:{_MONTHS})\.? \d{{1,2}}(?:st|nd|rd|th)?,? (?:19|20)\d\d\b")),
    ("a dated day", re.compile(rf"\b\d{{1,2}} (?:{_MONTHS}) (?:19|20)\d\d\b")),
    ("a numbered session or run", re.compile(rf"\b(?:{_ORDINALS}) (?:session|pass|sitting)\b", re.I)),
    ("a numbered session or run", re.compile(r"\b(?:session|run) (?:#\d+|(?!ID\b|OK\b)[A-Z]{2})\b")),
    ("a numbered session or run",
     re.compile(r"\b(?:session|run) \d+\b(?!\s*(?:s|ms|µs|seconds?|minutes?|hours?|%|turns?|times)\b)")),
    ("a diary word", re.compile(r"\b(?:yesterday|this morning|last night|tried and not kept)\b", re.I)),
]


def diary_marks(text: str) -> list[str]:
    """What in ``text`` reads as a run diary: each hit as 'line N: kind: text'."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for kind, pattern in DIARY:
            match = pattern.search(line)
            if match:
                found.append(f"line {number}: {kind}: {match[0]!r}")
    return found


# ---- links ------------------------------------------------------------------------------------
_INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def github_slug(heading: str) -> str:
    """A heading's anchor as GitHub (and a reader of the raw file) would make it."""
    text = unicodedata.normalize("NFKC", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(markdown: str) -> set[str]:
    text = _FENCE.sub("", markdown)
    return {github_slug(m[1].strip("# ")) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def broken_links(markdown: str, base: Path) -> list[str]:
    """Relative links (and images) in ``markdown`` that name no file under ``base`` (or no heading
    of it); web links and mail are not checked. Code blocks and code spans are not links."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", markdown))
    targets = [m[1] for m in _INLINE_LINK.finditer(text)] + [m[1] for m in _REFERENCE_LINK.finditer(text)]
    broken = []
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path_part, _, fragment = target.partition("#")
        path_part = path_part.split("?")[0]
        file = (base / path_part).resolve() if path_part else None
        if file is not None and not file.exists():
            broken.append(f"{target}: no such file")
            continue
        if fragment and (file is None or file.suffix == ".md"):
            heads = anchors_of(file.read_text() if file is not None else markdown)
            if fragment.lower() not in heads:
                broken.append(f"{target}: no heading #{fragment} there")
    return broken


# ---- files of the repository ------------------------------------------------------------------
_SKIP_DIRS = {".git", ".venv", "site", "__pycache__", ".pytest_cache", ".ruff_cache", ".run", "build"}


def tracked_files() -> list[Path]:
    """The files git tracks (untracked ones too, unless ignored); every file when git is absent."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, check=True).stdout
        return [ROOT / name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in ROOT.rglob("*") if p.is_file() and not _SKIP_DIRS & set(p.relative_to(ROOT).parts)]


# Built from pieces so that this file does not match itself.
OUTSIDE = [
    ("a section of an outside design file", re.compile("DESIGN" + r"(?:\.md)?,? (?:section )?\d")),
    ("the outside design file", re.compile("DESIGN" + r"\.md")),
    ("an outside seed note", re.compile("seed" + r" 0\d\d|" + "seed" + "s/")),
    ("the shared folder outside the repository", re.compile(r"\.\./" + "shared" + r"\b|/" + "shared" + "/")),
    ("a path of the machine it was written on", re.compile("/" + "work/")),
]


def outside_references(text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for kind, pattern in OUTSIDE:
            match = pattern.search(line)
            if match:
                found.append(f"line {number}: {kind}: {match[0]!r}")
    return found


# ---- settings ---------------------------------------------------------------------------------
def settings_classes() -> list[type[BaseSettings]]:
    """Every pydantic-settings class defined in a ``voicebot/*/config.py`` (and
    ``voicebot/common/config.py``), with an env prefix (the prefix-less base is covered through
    the classes that inherit its fields)."""
    classes = []
    for path in sorted((ROOT / "voicebot").glob("*/config.py")):
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, BaseSettings)
                    and value.__module__ == module.__name__ and value.model_config.get("env_prefix")):
                classes.append(value)
    return classes


def env_names(cls: type[BaseSettings]) -> list[str]:
    prefix = cls.model_config.get("env_prefix", "")
    return [f"{prefix}{name}".upper() for name in cls.model_fields]


def missing_settings(names: list[str], text: str) -> list[str]:
    return [name for name in names if not re.search(rf"(?<![A-Z0-9_]){re.escape(name)}(?![A-Z0-9_])", text)]


# ---- the checks -------------------------------------------------------------------------------
def test_the_docs_site_builds_in_strict_mode(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed: it is in the dev extra (pip install -e '.[dev]'); "
                    "the docs site must build for the tests to pass")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "site" / "index.html").exists()


def test_the_readme_is_a_manual_of_at_most_350_lines() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_every_relative_link_in_the_readme_resolves() -> None:
    assert broken_links(README.read_text(), ROOT) == []


def test_no_run_diaries_in_the_readme_or_the_docs() -> None:
    found = {str(p.relative_to(ROOT)): diary_marks(p.read_text())
             for p in [README, *sorted(DOCS.rglob("*.md"))]}
    assert {name: marks for name, marks in found.items() if marks} == {}


def test_no_benchmark_module_in_the_product_package() -> None:
    found = [str(p.relative_to(ROOT)) for p in (ROOT / "voicebot").rglob("bench*")
             if "__pycache__" not in p.parts and (p.is_dir() or p.suffix == ".py")]
    assert found == [], "benchmarks live in bench/, not in the product package"


def test_product_code_does_not_import_the_tests() -> None:
    pattern = re.compile(r"^\s*(?:import\s+tests\b|from\s+tests\b)", re.M)
    found = [str(p.relative_to(ROOT)) for folder in ("voicebot", "examples")
             for p in (ROOT / folder).rglob("*.py") if pattern.search(p.read_text())]
    assert found == []


def test_nothing_refers_to_files_outside_the_repository() -> None:
    found = {}
    for path in tracked_files():
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue  # binary
        marks = outside_references(text)
        if marks:
            found[str(path.relative_to(ROOT))] = marks
    assert found == {}, "the project carries its own design document: docs/design.md"


def test_every_setting_is_in_the_configuration_reference() -> None:
    classes = settings_classes()
    assert {cls.model_config["env_prefix"] for cls in classes} >= {"GATEWAY_", "STT_", "BRAIN_", "TTS_",
                                                                    "VOICEBOT_"}
    text = (DOCS / "configuration.md").read_text()
    missing = {cls.__name__: missing_settings(env_names(cls), text) for cls in classes}
    assert {name: names for name, names in missing.items() if names} == {}, \
        "add a row for each to docs/configuration.md"


def rows_without_a_setting(text: str, classes: list[type[BaseSettings]]) -> list[str]:
    """Table rows naming a variable with a service's prefix that no settings class has: a setting
    that was retired, or a typo. (``VOICEBOT_`` also names variables read outside the classes.)"""
    known = {name for cls in classes for name in env_names(cls)}
    prefixes = tuple(p for cls in classes if (p := cls.model_config["env_prefix"]) != "VOICEBOT_")
    rows = re.findall(r"^\| `([A-Z][A-Z0-9_]+)`", text, re.M)
    return [name for name in rows if name.startswith(prefixes) and name not in known]


def test_the_configuration_reference_names_no_setting_that_is_gone() -> None:
    text = (DOCS / "configuration.md").read_text()
    assert rows_without_a_setting(text, settings_classes()) == [], "remove the rows, or restore the settings"


# ---- the checks can fail ----------------------------------------------------------------------
def test_the_diary_check_sees_dates_and_numbered_sessions() -> None:
    text = ("p50 538 ms (measured 2026-12-03)\nthe eighth session moved it\nrun EE: 41 ms\n"
            "on December 3rd, 2026 it was\nA session resumes with its id.\nthe session ID\nrun 60 s\n")
    assert [mark.split(":")[0] for mark in diary_marks(text)] == ["line 1", "line 2", "line 3", "line 4"]


def test_the_link_check_sees_missing_files_and_headings(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Metrics and traces\n")
    text = ("[ok](docs/a.md) [ok](docs/a.md#metrics-and-traces) [web](https://example.com/x)\n"
            "[gone](docs/b.md) [bad anchor](docs/a.md#nope) ![img](docs/img/x.png) `[code](no.md)`\n"
            "[own](#a-heading)\n\n## A heading\n")
    assert broken_links(text, tmp_path) == [
        "docs/b.md: no such file", "docs/a.md#nope: no heading #nope there", "docs/img/x.png: no such file"]


def test_the_outside_reference_check_sees_them() -> None:
    text = "\n".join(["see " + "DESIGN" + " 4.1", "the loop " + "(seed" + " 002)",
                      "cat ../" + "shared" + "/x", "fine: a design document in docs/design.md"])
    assert len(outside_references(text)) == 3


def test_the_settings_check_sees_a_missing_row() -> None:
    class Example(BaseSettings):
        model_config = {"env_prefix": "EXAMPLE_"}
        port: int = 1
        max_streams: int = 2

    assert env_names(Example) == ["EXAMPLE_PORT", "EXAMPLE_MAX_STREAMS"]
    assert missing_settings(env_names(Example), "| `EXAMPLE_PORT` | 1 |\n| `EXAMPLE_MAX_STREAMS_X` |") == [
        "EXAMPLE_MAX_STREAMS"]
    assert rows_without_a_setting("| `EXAMPLE_PORT` | 1 |\n| `EXAMPLE_LOOP` | auto |\n| `OTHER_X` | 1 |",
                                  [Example]) == ["EXAMPLE_LOOP"]
