"""gRPC's settings reach every service process, however it is started (voicebot/common/grpc_env.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from voicebot.common.grpc_env import GRPC_EXPERIMENTS
from voicebot.devstack import Stack

ROOT = Path(__file__).resolve().parents[2]
SERVICE_IMAGES = ["gateway", "brain", "stt", "stt-cuda", "tts"]


@pytest.mark.parametrize("image", SERVICE_IMAGES)
def test_every_service_image_starts_its_process_with_the_settings(image):
    dockerfile = (ROOT / "docker" / f"{image}.Dockerfile").read_text()
    assert re.findall(r"GRPC_EXPERIMENTS=(\S+)", dockerfile) == [GRPC_EXPERIMENTS]


def test_the_dev_stack_starts_its_processes_with_the_settings(tmp_path, monkeypatch):
    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)
    assert Stack(tmp_path).env["GRPC_EXPERIMENTS"] == GRPC_EXPERIMENTS


@pytest.mark.parametrize("operator_value", ["", "-event_engine_dns"])
def test_a_value_the_operator_set_wins_even_empty(tmp_path, monkeypatch, operator_value):
    monkeypatch.setenv("GRPC_EXPERIMENTS", operator_value)
    assert Stack(tmp_path).env["GRPC_EXPERIMENTS"] == operator_value
