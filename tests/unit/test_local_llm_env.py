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


def test_the_guard_asks_the_shared_server_after_the_reply_and_other_servers_at_once(monkeypatch, tmp_path):
    monkeypatch.delenv("BRAIN_GUARD_AFTER_REPLY_STARTS", raising=False)
    assert BrainSettings().guard_after_reply_starts is False  # vLLM batches both prompts at once
    monkeypatch.setenv("LLM_SERVER_BIN", "/bin/true")
    for name, value in local_llm_brain_env().items():
        monkeypatch.setenv(name, value)
    assert BrainSettings().guard_after_reply_starts is True  # make run's llama-server shares its cores
