"""The gateway's modules form no import cycle, and the pure ones stay pure."""

from __future__ import annotations

import ast
from pathlib import Path

GATEWAY = Path(__file__).resolve().parents[2] / "voicebot" / "gateway"
PACKAGE = "voicebot.gateway"


def gateway_imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in GATEWAY.glob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == PACKAGE:
                    names |= {alias.name for alias in node.names}
                elif node.module.startswith(PACKAGE + "."):
                    names.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                names |= {a.name.split(".")[2] for a in node.names if a.name.startswith(PACKAGE + ".")}
        graph[path.stem] = names
    return graph


def test_no_import_cycles_in_the_gateway():
    graph = gateway_imports()
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(graph.get(module, ())):
            assert state.get(imported) != "open", "import cycle: " + " -> ".join([*path, imported])
            if imported not in state:
                visit(imported, [*path, imported])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_decision_modules_import_nothing_of_the_gateway():
    graph = gateway_imports()
    for leaf in ("bargein", "resume", "spoken", "phrases", "origin"):
        assert graph[leaf] == set(), f"gateway/{leaf}.py should stay a leaf: {graph[leaf]}"


def test_the_codecs_know_no_conversation_and_the_conversation_no_codec_or_socket():
    graph = gateway_imports()
    for codec in ("codec_v1", "codec_realtime", "codec_twilio"):
        assert not graph[codec] & {"conversation", "active_turn", "transport", "ws_direct"}, codec
    wire = {"codec_v1", "codec_realtime", "codec_twilio", "transport", "ws_direct"}
    for stage in CONVERSATION_STAGES:
        assert not graph[stage] & wire, stage


# The conversation as stages: the session, the speech input, the turn driver (and what they share).
CONVERSATION_STAGES = ("conversation", "speech_input", "turn_driver", "call_state")


def test_each_stage_of_the_conversation_reads_in_one_sitting():
    for stage in CONVERSATION_STAGES:
        lines = len((GATEWAY / f"{stage}.py").read_text().splitlines())
        assert lines < 400, f"gateway/{stage}.py has {lines} lines"


def test_the_stages_depend_one_way_session_then_speech_input_then_turn_driver():
    graph = gateway_imports()
    assert "conversation" not in graph["speech_input"] | graph["turn_driver"] | graph["call_state"]
    assert "speech_input" not in graph["turn_driver"] | graph["call_state"]
    assert "turn_driver" not in graph["call_state"]
