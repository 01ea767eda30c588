"""What ``make run`` tells the brain about its local LLM server."""

from __future__ import annotations

import json

from voicebot import localllm
from voicebot.devstack import local_llm_brain_env


def test_with_the_native_server_each_kind_of_call_keeps_its_own_slot(monkeypatch):
    monkeypatch.setenv("LLM_SERVER_BIN", "/bin/true")  # any executable stands for llama-server
    env = local_llm_brain_env()
    slots = {name: json.loads(env[name]).get("id_slot") for name in (
        "BRAIN_LLM_EXTRA_BODY", "BRAIN_GUARD_EXTRA_BODY", "BRAIN_SIDE_EXTRA_BODY")}
    assert len(set(slots.values())) == 3
    assert json.loads(env["BRAIN_LLM_EXTRA_BODY"]) == localllm.main_request_fields()


def test_the_prebuilt_server_gets_the_same_fields(monkeypatch, tmp_path):
    monkeypatch.delenv("LLM_SERVER_BIN", raising=False)
    monkeypatch.setenv("VOICEBOT_BIN_CACHE", str(tmp_path))  # nothing built there
    monkeypatch.setattr(localllm.importlib.util, "find_spec",
                        lambda name: object() if name == "xllamacpp" else None)
    assert json.loads(local_llm_brain_env()["BRAIN_GUARD_EXTRA_BODY"]) == localllm.guard_request_fields()


def test_without_llama_cpps_server_the_brain_gets_no_server_specific_fields(monkeypatch, tmp_path):
    monkeypatch.delenv("LLM_SERVER_BIN", raising=False)
    monkeypatch.setenv("VOICEBOT_BIN_CACHE", str(tmp_path))  # nothing built there
    monkeypatch.setattr(localllm.importlib.util, "find_spec", lambda name: None)
    assert local_llm_brain_env() == {}
