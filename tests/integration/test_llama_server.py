"""llama.cpp's server, built for this CPU when present and from the prebuilt wheel, serves the
packaged model the same way: /health (which the brain's liveness probe reaches as /v1/health),
the slots localllm's command line asks for, drafts and a response schema."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from voicebot import localllm
from voicebot.devstack import Stack, free_port

pytestmark = pytest.mark.integration


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, {}


@pytest.fixture(params=["native", "prebuilt"])
def kind(request) -> str:
    return request.param


@contextlib.contextmanager
def served(tmp_path: Path, threads: int, kind: str) -> Iterator[str]:
    """llama.cpp's server of this kind with the packaged model, small slots: its base URL."""
    if kind == "native" and localllm.server_binary() is None:
        pytest.skip("llama-server is not built for this CPU (the first make run builds it)")
    if kind == "prebuilt" and localllm.prebuilt_server() is None:
        pytest.fail("the prebuilt xllamacpp wheel is not installed (make setup installs it)")
    try:
        localllm.model_path()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.skip(f"no GGUF to serve: {exc}")
    stack = Stack(tmp_path, quiet=True)
    try:
        proc = stack.start_llm(free_port(), n_ctx=512, threads=threads, kind=kind)
        yield f"http://127.0.0.1:{proc.ready['http']}"
    finally:
        stack.stop()


def test_llama_server_serves_health_and_its_slots(tmp_path: Path, kind: str):
    # Small slots and one thread: this checks the wiring, not the speed.
    with served(tmp_path, threads=1, kind=kind) as base:
        assert get(f"{base}/health") == (200, {"status": "ok"})
        assert get(f"{base}/v1/health")[0] == 200  # what the brain's liveness probe asks
        status, models = get(f"{base}/v1/models")
        assert status == 200 and models["data"][0]["id"] == localllm.MODEL_ALIAS
        status, slots = get(f"{base}/slots")
        assert status == 200 and [s["id"] for s in slots] == list(range(localllm.SLOTS))
        assert all(s["n_ctx"] == 512 for s in slots)


def test_llama_server_drafts_a_copied_json_answer_and_keeps_to_its_schema(tmp_path: Path, kind: str):
    """Speculative decoding by n-gram lookup (``localllm.SPECULATIVE``, on by default): an answer
    that repeats the prompt's tokens is drafted from them and checked in batches, and still
    keeps to the response format's schema."""
    with served(tmp_path, threads=2, kind=kind) as base:
        schema = {"type": "object", "additionalProperties": False, "required": ["day", "people", "time"],
                  "properties": {"day": {"type": "string"}, "people": {"type": "integer"},
                                 "time": {"type": "string"}}}
        booking = '{"day": "saturday", "people": 2, "time": "19:00"}'
        body = {"model": localllm.MODEL_ALIAS, "temperature": 0, "max_tokens": 40, "messages": [
            {"role": "system", "content": f"Session state: {booking}"},
            {"role": "user", "content": "Keep it as it is."},
            {"role": "system", "content": "One line of JSON: the booking (day, people, time)."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "b", "schema": schema}}}
        request = urllib.request.Request(f"{base}/v1/chat/completions",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as reply:
            answer = json.loads(reply.read())
        fields = json.loads(answer["choices"][0]["message"]["content"])
        assert set(fields) == {"day", "people", "time"} and isinstance(fields["people"], int)
        timings = answer["timings"]
        assert timings["draft_n"] > 0 and 0 < timings["draft_n_accepted"] <= timings["draft_n"]
