"""What ``make run`` tells the brain about its local LLM server."""

from __future__ import annotations

from services.brain.config import BrainSettings
from voicebot import localllm
from voicebot.devstack import local_llm_brain_env


def test_with_the_native_server_a_required_tool_call_starts_the_models_message(monkeypatch, tmp_path):
    monkeypatch.setenv("LLM_SERVER_BIN", "/bin/true")  # any executable stands for llama-server
    env = local_llm_brain_env()
    assert env["BRAIN_LLM_TOOL_CALL_PREFIX"] == localllm.TOOL_CALL_PREFIX == '<tool_call>\n{"name": "'
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert BrainSettings().llm_tool_call_prefix == localllm.TOOL_CALL_PREFIX  # read back intact


def test_without_it_the_brain_asks_for_tool_choice_required(monkeypatch, tmp_path):
    monkeypatch.delenv("LLM_SERVER_BIN", raising=False)
    monkeypatch.setenv("VOICEBOT_BIN_CACHE", str(tmp_path))  # nothing built there
    monkeypatch.delenv("BRAIN_LLM_TOOL_CALL_PREFIX", raising=False)
    assert local_llm_brain_env() == {}
    assert BrainSettings().llm_tool_call_prefix == ""
