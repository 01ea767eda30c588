"""One turn, one trace across the four services; a real Prometheus scrapes every stage.

The services run as real processes exporting OTLP/gRPC to a receiver inside this
test (opentelemetry-proto's trace service); a real Prometheus server, started
here, scrapes their /metrics.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
from concurrent import futures

import grpc
import httpx
import numpy as np
import pytest
import yaml
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.audio import silence, speech
from tests.conftest import LOG_ROOT, TOKENS
from tests.fakes.stack_profile import NEEDS_READING
from voicebot.common.audio import float_to_pcm16, write_wav
from voicebot.devstack import Stack, free_port, start_brain_and_gateway, start_speech
from voicebot.gateway.cli import call

pytestmark = pytest.mark.integration
STAGES = ("endpoint", "stt", "llm_ttft", "first_clause", "tts_ttfa", "voice_to_voice")


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """Collects exported spans as (service, name, trace_id, span_id, parent_id, attributes)."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        self._lock = threading.Lock()

    def Export(self, request, context):
        with self._lock:
            for resource_spans in request.resource_spans:
                service = next(a.value.string_value for a in resource_spans.resource.attributes
                               if a.key == "service.name")
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append({
                            "service": service, "name": span.name, "trace": span.trace_id.hex(),
                            "id": span.span_id.hex(), "parent": span.parent_span_id.hex(),
                            "ms": (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6,
                            "attributes": {a.key: a.value for a in span.attributes}})
        return trace_service_pb2.ExportTraceServiceResponse()

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.spans)


@pytest.fixture(scope="module")
def receiver():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    spans = Receiver()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(spans, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield spans, port
    server.stop(None)


@pytest.fixture(scope="module")
def traced_stack(receiver, redis_url, fake_llm):
    _, port = receiver
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_INSECURE": "true",
           "OTEL_BSP_SCHEDULE_DELAY": "100"}
    stack = Stack(LOG_ROOT / "traced", env=env, quiet=True)
    try:
        stt, tts = start_speech(stack)
        brain, gateway = start_brain_and_gateway(stack, redis_url=redis_url, llm_base_url=fake_llm.base_url,
                                                 tokens=TOKENS, stt=stt, tts=tts)
        yield {"gateway": gateway.ready["http"], "metrics": {
            "gateway": gateway.ready["http"], "stt": stt.ready["metrics"],
            "brain": brain.ready["metrics"], "tts": tts.ready["metrics"]}}
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def spoken_wav(tmp_path_factory):
    path = tmp_path_factory.mktemp("traces") / "question.wav"
    # No question and no task: the brain asks the model for its reading, so the turn has an LLM call.
    write_wav(path, float_to_pcm16(np.concatenate([silence(400), speech(NEEDS_READING),
                                                   silence(300)])), 16000)
    return str(path)


@pytest.fixture(scope="module")
def prometheus(traced_stack, tmp_path_factory):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is missing: apt-get install prometheus (.ci/run installs it)")
    folder = tmp_path_factory.mktemp("prometheus")
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": [
        {"job_name": name, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
        for name, port in traced_stack["metrics"].items()]}
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    process = subprocess.Popen(
        [binary, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=(folder / "prometheus.log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        targets: list[dict] = []
        while time.monotonic() < deadline:  # until every target has been scraped once
            try:
                targets = httpx.get(f"{url}/api/v1/targets", timeout=2).json()["data"]["activeTargets"]
                if len(targets) == 4 and all(t["health"] == "up" for t in targets):
                    break
            except (httpx.HTTPError, ValueError):  # not listening yet, or not ready to answer
                pass
            time.sleep(0.5)
        else:
            errors = [(t["labels"]["job"], t["health"], t["lastError"]) for t in targets or []]
            pytest.fail(f"prometheus did not scrape all targets: {errors}")
        yield url
    finally:
        process.terminate()
        process.wait(10)


async def test_a_spoken_turn_is_one_trace_across_all_four_services(traced_stack, receiver, spoken_wav,
                                                                   scripted_llm):
    spans_of, _ = receiver
    url = f"ws://127.0.0.1:{traced_stack['gateway']}/v1/call"
    result = await call(url, "tok-alice", spoken_wav, fast=True, timeout=90)
    assert result.replies, result.errors
    # The model only reads the caller's words now: the turn's LLM call is its reading.
    wanted = {"turn", "stt.recognize", "brain.respond", "llm.reading", "guard.check", "tts.synthesize"}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        roots = [s for s in spans_of.snapshot() if s["name"] == "turn" and s["attributes"].get(
            "voicebot.turn.outcome") and s["attributes"]["voicebot.turn.outcome"].string_value == "completed"]
        traces = [[s for s in spans_of.snapshot() if s["trace"] == root["trace"]] for root in roots]
        complete = [t for t in traces if wanted <= {s["name"] for s in t}]
        if complete:
            break
        await asyncio.sleep(0.3)
    else:
        pytest.fail(f"no complete trace; spans: {[(s['service'], s['name']) for s in spans_of.snapshot()]}")
    spans = {s["name"]: s for s in complete[0]}
    turn = spans["turn"]
    assert turn["parent"] == "" and turn["service"] == "voicebot-gateway"
    for name, service in (("stt.recognize", "stt"), ("brain.respond", "brain"), ("tts.synthesize", "tts")):
        assert (spans[name]["parent"], spans[name]["service"]) == (turn["id"], f"voicebot-{service}")
    assert spans["llm.reading"]["parent"] == spans["brain.respond"]["id"]
    assert spans["guard.check"]["parent"] == spans["brain.respond"]["id"]
    reading = spans["llm.reading"]["attributes"]
    assert reading["gen_ai.operation.name"].string_value == "chat"
    assert reading["gen_ai.request.max_tokens"].int_value > 0
    assert reading["gen_ai.usage.output_tokens"].int_value > 0
    # Ids, not speech: no attribute carries what was said.
    [heard] = result.transcripts
    # What was heard (Whisper may hear "the chef" as "the shed" in a segment cut on a busy machine).
    assert "cousin" in heard.lower(), heard
    said = " ".join(heard.lower().strip(" .?!").split()[-3:])  # e.g. "to the chef"
    for span in complete[0]:
        assert not any(said in str(value).lower() for value in span["attributes"].values())
    print({name: round(span["ms"]) for name, span in spans.items()})


async def test_prometheus_scrapes_a_quantile_for_every_stage(traced_stack, prometheus, spoken_wav,
                                                             scripted_llm):
    url = f"ws://127.0.0.1:{traced_stack['gateway']}/v1/call"
    for _ in range(2):
        result = await call(url, "tok-alice", spoken_wav, fast=True, timeout=90)
        assert result.metrics, result.errors
    query = "histogram_quantile(0.5, sum by (le, stage) (rate(voicebot_stage_seconds_bucket[2m])))"
    deadline = time.monotonic() + 20
    found: dict[str, float] = {}
    async with httpx.AsyncClient(base_url=prometheus) as http:
        while time.monotonic() < deadline and set(found) != set(STAGES):
            await asyncio.sleep(1.0)
            data = (await http.get("/api/v1/query", params={"query": query})).json()["data"]["result"]
            found = {r["metric"]["stage"]: float(r["value"][1]) for r in data if r["value"][1] != "NaN"}
    assert set(found) == set(STAGES), found
    assert all(value > 0 for value in found.values())
    # A slow bucket links to its trace: exemplars in the OpenMetrics exposition.
    async with httpx.AsyncClient() as http:
        exposition = (await http.get(f"http://127.0.0.1:{traced_stack['gateway']}/metrics",
                                     headers={"Accept": "application/openmetrics-text"})).text
    assert 'voicebot_stage_seconds_bucket{' in exposition and '# {trace_id="' in exposition
