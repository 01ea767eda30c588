"""`make test-compose`: docker compose's cpu profile, its images built on the base made from
Debian's packages (docker/base-image.sh), on the host's network (docker/compose.host.yml: every
service on 127.0.0.1), answers a spoken turn end to end: the e2e test's WAV and checks
(tests/e2e/spoken_turn.py) through the gateway's published port.

Only `make test-compose` runs it (scripts/test-compose.sh sets VOICEBOT_TEST_COMPOSE=1 after it
has made the base and built the images): `make test` skips it, and so does a machine without a
docker daemon or docker compose v2.
"""

from __future__ import annotations

import os
import secrets
import shlex
import socket
import subprocess

import pytest

from tests.conftest import LOG_ROOT
from tests.deploy.support import ROOT
from tests.e2e.spoken_turn import assert_spoken_reply, write_booking_wav

pytestmark = [
    pytest.mark.compose,
    pytest.mark.skipif(os.environ.get("VOICEBOT_TEST_COMPOSE") != "1",
                       reason="docker compose end to end: `make test-compose` runs it (it builds images)"),
    # The first start of the stack (and a build, when the images are not built yet) outlasts the
    # suite's per-test limit.
    pytest.mark.timeout(3600),
]

FILES = ["docker-compose.yml", "docker/compose.offline.yml", "docker/compose.host.yml"]
PROJECT = "voicebot-compose-test"
# What the host network gives the stack: the gateway, the LLM, Redis, each service's gRPC and metrics.
PORTS = (8080, 8000, 6379, 50051, 50052, 50053, 9101, 9102, 9103)
TOKEN = "tok-compose"


def compose_command() -> list[str]:
    """docker compose v2 (`VOICEBOT_COMPOSE`, else `docker compose`); skips when there is none."""
    command = shlex.split(os.environ.get("VOICEBOT_COMPOSE", "docker compose"))
    try:
        version = subprocess.run([*command, "version", "--short"], capture_output=True, text=True,
                                 timeout=30)
    except FileNotFoundError:
        pytest.skip(f"no docker compose ({command[0]} is not installed)")
    if version.returncode != 0 or not version.stdout.strip().lstrip("v").startswith("2."):
        said = (version.stdout + version.stderr).strip()
        pytest.skip(f"no docker compose v2 ({' '.join(command)}: {said})")
    info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                          text=True, timeout=30)
    if info.returncode != 0:
        pytest.skip(f"no docker daemon: {info.stderr.strip()}")
    return [*command, "--project-directory", str(ROOT), "-p", PROJECT,
            *(arg for f in FILES for arg in ("-f", str(ROOT / f)))]


def busy_ports() -> list[int]:
    busy = []
    for port in PORTS:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                busy.append(port)
    return busy


@pytest.fixture(scope="module")
def compose_gateway():
    compose = compose_command()
    if busy := busy_ports():
        pytest.fail(f"ports {busy} are in use on 127.0.0.1 (a `make run`?): the stack needs them",
                    pytrace=False)
    env = {**os.environ, "COMPOSE_PROFILES": "cpu", "GATEWAY_TOKENS": f"{TOKEN}=compose-user",
           "VOICEBOT_INTERNAL_TOKEN": secrets.token_hex(24), "VOICEBOT_REDIS_PASSWORD": secrets.token_hex(24)}
    logs = LOG_ROOT / "compose"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        up = subprocess.run([*compose, "up", "--detach", "--build", "--wait", "--wait-timeout", "900",
                             "gateway", "llm"], env=env, capture_output=True, text=True, timeout=3000)
        (logs / "up.log").write_text(up.stdout + up.stderr)
        if up.returncode != 0:
            state = subprocess.run([*compose, "ps", "--all"], env=env, capture_output=True, text=True)
            pytest.fail(f"docker compose up failed ({logs}/up.log, services.log):\n{state.stdout}\n"
                        f"{up.stderr[-3000:]}", pytrace=False)
        yield "ws://127.0.0.1:8080/v1/call"
    finally:
        services = subprocess.run([*compose, "logs", "--no-color"], env=env, capture_output=True, text=True)
        (logs / "services.log").write_text(services.stdout + services.stderr)
        subprocess.run([*compose, "down", "--volumes", "--timeout", "30"], env=env, capture_output=True)


def test_the_compose_stack_answers_a_spoken_turn(compose_gateway, tmp_path):
    wav = write_booking_wav(tmp_path / "booking.wav")
    print(assert_spoken_reply(compose_gateway, TOKEN, wav, tmp_path / "reply.wav"))
