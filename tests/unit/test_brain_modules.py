"""The brain reads in sittings: no module over 400 lines, no import cycle, and decide stays pure.

The import graph is read from the source with ``ast``: every import a module runs when it is
loaded or called counts, except those under ``if TYPE_CHECKING:`` (never run). A package's
``__init__`` that re-exports its modules is a node like any other; importing ``a.b`` is not
counted as importing ``a`` (Python runs ``a/__init__`` first, but a facade importing its own
parts back is not a cycle that can break an import).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BRAIN = ROOT / "voicebot" / "brain"
PACKAGE = "voicebot.brain"
MAX_LINES = 400

# What decide (a pure function of state and reading: tests/unit/test_decide.py) must not import.
IMPURE_FOR_DECIDE = ("voicebot.brain.runtime", "voicebot.brain.act", "voicebot.brain.llm",
                     "redis", "grpc", "httpx")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def brain_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(BRAIN.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_imports(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module name ``source`` imports when it runs (``from a import b`` gives ``a`` and
    ``a.b``: ``b`` may be a module); imports under ``if TYPE_CHECKING:`` are left out."""
    found: set[str] = set()
    here = module.split(".") if is_package else module.split(".")[:-1]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package upwards
                anchor = here[:len(here) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Brain module -> the brain modules it imports at run time (names resolved to modules)."""
    graph = {}
    for name, path in modules.items():
        imported = runtime_imports(path.read_text(), name, path.name == "__init__.py")
        graph[name] = {target for target in imported if target in modules and target != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as the path that closes it (first module repeated at the end), or None."""
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = "open"
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == "open":
                return [*path[path.index(imported):], imported]
            if imported not in state:
                cycle = visit(imported, [*path, imported])
                if cycle:
                    return cycle
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module, [module])
            if cycle:
                return cycle
    return None


def too_long(modules: dict[str, Path], limit: int = MAX_LINES) -> dict[str, int]:
    counts = {name: len(path.read_text().splitlines()) for name, path in modules.items()}
    return {name: lines for name, lines in counts.items() if lines > limit}


def impure_imports(source: str, module: str) -> set[str]:
    return {name for name in runtime_imports(source, module)
            if any(name == bad or name.startswith(bad + ".") for bad in IMPURE_FOR_DECIDE)}


# ---- the brain as it is ------------------------------------------------------------------------

def test_every_brain_module_reads_in_one_sitting():
    assert too_long(brain_modules()) == {}


def test_the_brain_modules_import_one_another_without_a_cycle():
    graph = import_graph(brain_modules())
    assert "voicebot.brain.decide.conversation" in graph  # the walk found the stages
    assert find_cycle(graph) is None


@pytest.mark.parametrize("name", sorted(m for m in brain_modules() if m.startswith(PACKAGE + ".decide")))
def test_decide_imports_no_runtime_no_actions_no_model_and_no_io(name):
    assert impure_imports(brain_modules()[name].read_text(), name) == set()


# ---- the checks themselves fail on what they are there to catch -------------------------------

def test_the_line_limit_names_a_module_over_it(tmp_path):
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_LINES + 1))
    short = tmp_path / "short.py"
    short.write_text("x = 1\n" * MAX_LINES)
    assert too_long({"long": long, "short": short}) == {"long": MAX_LINES + 1}


def test_the_cycle_finder_finds_a_cycle_through_several_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) is None


def test_an_import_under_type_checking_is_no_edge_but_one_in_a_function_is():
    source = (
        "from typing import TYPE_CHECKING\n"
        "import voicebot.brain.act.tools\n"
        "if TYPE_CHECKING:\n"
        "    from voicebot.brain.runtime.agent import Agent\n"
        "else:\n"
        "    from voicebot.brain.speak import readback\n"
        "def later():\n"
        "    from voicebot.brain.llm import OpenAIChatClient\n"
    )
    imported = runtime_imports(source, "voicebot.brain.decide.example")
    assert "voicebot.brain.runtime.agent" not in imported
    assert {"voicebot.brain.act.tools", "voicebot.brain.speak.readback", "voicebot.brain.llm"} <= imported


def test_a_relative_import_resolves_against_the_module_s_package():
    imported = runtime_imports("from .state import SessionState\nfrom ..act import tools\n",
                               "voicebot.brain.decide.form")
    assert {"voicebot.brain.decide.state", "voicebot.brain.act.tools"} <= imported


def test_the_purity_check_names_what_decide_must_not_import():
    source = ("import httpx\nfrom redis.asyncio import Redis\n"
              "from voicebot.brain.act.tools import ToolResult\n"
              "from voicebot.brain.decide.state import SessionState\n")
    assert impure_imports(source, "voicebot.brain.decide.example") == {
        "httpx", "redis.asyncio", "redis.asyncio.Redis", "voicebot.brain.act.tools",
        "voicebot.brain.act.tools.ToolResult"}
