"""What ``voicebot profile check`` found: problems with their YAML lines, and the template rule."""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from voicebot.brain.business.errors import ProfileError

Path_ = tuple[str | int, ...]



@dataclass(frozen=True)
class Problem:
    path: Path_
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = ".".join(str(part) for part in self.path) or "profile"
        return f"line {self.line}: {where}: {self.message}" if self.line else f"{where}: {self.message}"


class ProfileCheckFailed(ProfileError):
    def __init__(self, where: str, problems: list[Problem]) -> None:
        self.problems = problems
        listed = "\n".join(f"  {problem}" for problem in problems)
        super().__init__(f"{where}: {len(problems)} mistake(s):\n{listed}")


@dataclass
class Report:
    """What the check found and what the brain derived from the profile."""

    path: Path
    problems: list[Problem] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the derived view, for people

    def fail(self, path: Path_, message: str) -> None:
        self.problems.append(Problem(path, message))

    def raise_if_failed(self) -> None:
        if self.problems:
            raise ProfileCheckFailed(str(self.path), self.problems)


# ---- lines -------------------------------------------------------------------------------------
def key_lines(text: str) -> dict[Path_, int]:
    """The line (1-based) of every key and list item in the YAML, by its path."""
    lines: dict[Path_, int] = {}

    def walk(node: yaml.Node, path: Path_) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                lines[(*path, key.value)] = key.start_mark.line + 1
                walk(value, (*path, key.value))
        elif isinstance(node, yaml.SequenceNode):
            for index, value in enumerate(node.value):
                lines[(*path, index)] = value.start_mark.line + 1
                walk(value, (*path, index))

    root = yaml.compose(text)
    if root is not None:
        walk(root, ())
    return lines


def with_lines(problems: list[Problem], lines: dict[Path_, int]) -> list[Problem]:
    """Each problem with the line of the longest part of its path the file has."""
    placed = []
    for problem in problems:
        line = next((lines[problem.path[:n]] for n in range(len(problem.path), 0, -1)
                     if problem.path[:n] in lines), None)
        placed.append(Problem(problem.path, problem.message, line))
    return placed


# ---- templates ---------------------------------------------------------------------------------
def placeholders(template: str) -> set[str]:
    """The names a template fills in (``{time:time}`` -> ``time``); ValueError for broken braces."""
    return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}


def check_template(report: Report, path: Path_, template: str | None, allowed: set[str], what: str) -> None:
    if not template:
        return
    try:
        names = placeholders(template)
    except ValueError as exc:
        report.fail(path, f"not a template ({exc}); a literal brace is written {{{{ or }}}}")
        return
    unknown = sorted(names - allowed)
    if unknown:
        shown = ", ".join(f"{{{name}}}" for name in unknown)
        report.fail(path, f"{shown} is not {what}; known here: {', '.join(sorted(allowed)) or 'none'}")
