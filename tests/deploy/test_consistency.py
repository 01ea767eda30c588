"""Kubernetes, docker compose, the Dockerfiles and the services' own settings agree:
every variable a service reads is set the same way everywhere, and image names,
ports and probe ports match the services' configuration."""

from __future__ import annotations

import importlib
import importlib.util
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.deploy.support import ROOT, Compose, container_ports, read_env_file, seconds

# What a user puts in .env: the secrets compose requires.
VARIABLES = {"GATEWAY_TOKENS": "tok-test=test-user", "VOICEBOT_INTERNAL_TOKEN": "internal-token-for-tests",
             "VOICEBOT_REDIS_PASSWORD": "redis-password-for-tests"}
# Secrets: in Kubernetes from a Secret, in compose from .env.
SECRET_VARS = set(VARIABLES)
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# OpenTelemetry SDK variables (standard names, read by the SDK, not by our settings).
OTEL_VARS = {"OTEL_SERVICE_NAME", "OTEL_EXPORTER_OTLP_ENDPOINT"}
# Set in compose only, with the reason.
COMPOSE_ONLY = {
    # compose ships its own collector; in a cluster, point it at yours (docs/kubernetes.md).
    "OTEL_EXPORTER_OTLP_ENDPOINT",
}


@dataclass(frozen=True)
class Svc:
    name: str  # Deployment, Service and compose host name
    settings: str | None  # "module:Class" of its pydantic settings
    module: str  # what the image runs
    dockerfile: str
    image: str
    ports: dict[str, int]  # container port name -> default port


SERVICES = {
    "gateway": Svc("gateway", "voicebot.gateway.config:GatewaySettings", "voicebot.gateway.app",
                   "docker/gateway.Dockerfile",
                   "voicebot/gateway", {"http": 8080}),
    "stt": Svc("stt", "voicebot.stt.config:SttSettings", "voicebot.stt.server", "docker/stt.Dockerfile",
               "voicebot/stt", {"grpc": 50051, "metrics": 9101}),
    "brain": Svc("brain", "voicebot.brain.config:BrainSettings", "voicebot.brain.server",
                 "docker/brain.Dockerfile", "voicebot/brain", {"grpc": 50052, "metrics": 9102}),
    "tts": Svc("tts", "voicebot.tts.config:TtsSettings", "voicebot.tts.server", "docker/tts.Dockerfile",
               "voicebot/tts", {"grpc": 50053, "metrics": 9103}),
}
STT_CUDA = Svc("stt", "voicebot.stt.config:SttSettings", "voicebot.stt.server", "docker/stt-cuda.Dockerfile",
               "voicebot/stt-cuda", {"grpc": 50051, "metrics": 9101})
LLM_CPU = Svc("llm", None, "/opt/voicebot/bin/llm_server.py", "docker/llm-cpu.Dockerfile", "voicebot/llm-cpu",
              {"http": 8000})
PAIRS = [("cpu", ("cpu",)), ("gpu", ("gpu",))]  # overlay <-> compose profiles


def settings_class(svc: Svc):
    module, _, cls = svc.settings.partition(":")
    return getattr(importlib.import_module(module), cls)


def settings_vars(svc: Svc) -> tuple[str, set[str]]:
    """The service's prefix and every variable it reads: its own settings and the shared VOICEBOT_ ones."""
    cls = settings_class(svc)
    prefix = cls.model_config.get("env_prefix", "")
    return prefix, {prefix + name.upper() for name in cls.model_fields} | shared_vars()


def shared_vars() -> set[str]:
    from voicebot.common.config import SharedSettings

    prefix = SharedSettings.model_config["env_prefix"]
    return {prefix + name.upper() for name in SharedSettings.model_fields}


def llm_vars() -> set[str]:
    found = set()
    for path in (ROOT / "voicebot" / "localllm.py", ROOT / "docker" / "llm_server.py"):
        found |= set(re.findall(r"""(?:environ|env)\.get\(\s*["'](LLM_[A-Z_]+)["']""", path.read_text()))
    return found


def llm_server_module():
    spec = importlib.util.spec_from_file_location("llm_server", ROOT / "docker" / "llm_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_known_variables_are_found():
    """The inventory the other tests rely on is not empty or stale."""
    expected = {"LLM_MODEL_PATH", "LLM_MODEL_CACHE_DIR", "LLM_PORT", "LLM_HOST", "LLM_N_CTX", "LLM_THREADS"}
    assert expected <= llm_vars()
    for svc in SERVICES.values():
        prefix, names = settings_vars(svc)
        assert {f"{prefix}HOST", f"{prefix}PORT", f"{prefix}LOG_JSON"} <= names


@pytest.mark.parametrize("overlay", ["base", "gpu", "cpu"])
def test_manifest_env_is_what_the_services_read(rendered, overlay, monkeypatch):
    r = rendered[overlay]
    for svc in SERVICES.values():
        env = r.env(svc.name)
        prefix, known = settings_vars(svc)
        unknown = set(env) - known - OTEL_VARS
        assert not unknown, f"{overlay}/{svc.name} sets variables nothing reads: {sorted(unknown)}"
        # Listening on all interfaces (the default 127.0.0.1 is unreachable in a pod).
        assert env[f"{prefix}HOST"] == "0.0.0.0"
        assert env[f"{prefix}LOG_JSON"] == "true"
        assert env["OTEL_SERVICE_NAME"] == f"voicebot-{svc.name}"
        # The values parse as the service's settings (types, not just names).
        for key in list(env):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            if value != "<secret>":
                monkeypatch.setenv(key, value)
        settings = settings_class(svc)()
        # Ports: settings == container ports == probes == Service.
        c = r.container(svc.name)
        ports = container_ports(c)
        main = "http" if "http" in svc.ports else "grpc"
        assert settings.port == ports[main] == svc.ports[main], f"{overlay}/{svc.name}"
        if "metrics" in svc.ports:
            assert settings.metrics_port == ports["metrics"] == svc.ports["metrics"]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            spec = c[probe]
            probe_port = (spec.get("grpc") or spec.get("httpGet") or spec.get("tcpSocket"))["port"]
            assert probe_port == settings.port, f"{overlay}/{svc.name} {probe}"
        service_ports = {p["name"]: p for p in r.get("Service", svc.name)["spec"]["ports"]}
        for name, number in svc.ports.items():
            assert service_ports[name]["port"] == number and service_ports[name]["targetPort"] == name
    # The embedded LLM server (overlay cpu): its variables and port.
    if overlay == "cpu":
        env = r.env("llm")
        assert set(env) <= llm_vars(), sorted(set(env) - llm_vars())
        c = r.container("llm")
        assert int(env["LLM_PORT"]) == container_ports(c)["http"] == 8000
        assert env["LLM_HOST"] == "0.0.0.0"
        assert int(env["LLM_THREADS"]) <= float(c["resources"]["limits"]["cpu"])


@pytest.mark.parametrize("overlay", ["base", "gpu", "cpu"])
def test_services_find_each_other(rendered, overlay):
    """Every address a service is given is a Service of this overlay on the right port."""
    r = rendered[overlay]
    gw, brain = r.env("gateway"), r.env("brain")

    def service_port(host: str, port: int) -> None:
        assert r.has("Service", host), f"{overlay}: no Service {host}"
        ports = {p["port"] for p in r.get("Service", host)["spec"]["ports"]}
        assert port in ports, f"{overlay}: {host}:{port}"

    for name in ("stt", "brain", "tts"):
        host, _, port = gw[f"GATEWAY_{name.upper()}_ADDR"].partition(":")
        assert host == name
        service_port(host, int(port))
        assert int(port) == SERVICES[name].ports["grpc"]
    for url in (gw["GATEWAY_REDIS_URL"], brain["BRAIN_REDIS_URL"]):
        parsed = urlparse(url)
        assert parsed.scheme == "redis"
        service_port(parsed.hostname, parsed.port)
    llm = urlparse(brain["BRAIN_LLM_BASE_URL"])
    service_port(llm.hostname, llm.port)
    assert llm.path == "/v1"
    c = r.container("llm")
    assert llm.port == container_ports(c)["http"]
    if c["image"].startswith("vllm/"):
        args = dict(a.removeprefix("--").split("=", 1) for a in c["args"] if "=" in a)
        assert args["served-model-name"] == brain["BRAIN_LLM_MODEL"]
        assert int(args["port"]) == llm.port and args["host"] == "0.0.0.0"
    else:
        from voicebot import localllm

        assert localllm.MODEL_ALIAS == brain["BRAIN_LLM_MODEL"]


def test_the_llm_image_serves_llama_cpps_server_as_make_run_does(tmp_path, monkeypatch):
    """The image's entry point runs the command make run's launcher builds (Stack.start_llm:
    localllm.server_command): llama.cpp's server, from the prebuilt wheel the image installs,
    with the same slots, batching and caches; only the address and the threads differ."""
    from voicebot import localllm

    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("LLM_MODEL_PATH", str(gguf))
    monkeypatch.setenv("VOICEBOT_BIN_CACHE", str(tmp_path / "no-native-build"))  # as in the image
    monkeypatch.delenv("LLM_SERVER_BIN", raising=False)
    argv = llm_server_module().build_command(
        {"LLM_HOST": "0.0.0.0", "LLM_PORT": "8001", "LLM_N_CTX": "2048", "LLM_THREADS": "3"})
    assert argv[1:3] == ["-m", "voicebot.llm_prebuilt"]
    assert localllm.describe(argv) == "llama-server, prebuilt wheel"
    pairs = {flag: value for flag, value in zip(argv, [*argv[1:], ""], strict=True)
             if flag.startswith("--") and not value.startswith("--")}
    assert pairs["--model"] == str(gguf) and pairs["--host"] == "0.0.0.0" and pairs["--port"] == "8001"
    assert pairs["--parallel"] == str(localllm.SLOTS)
    assert pairs["--ctx-size"] == str(2048 * localllm.SLOTS)
    assert pairs["--threads"] == "3" and pairs["--alias"] == "voicebot-llm"
    assert argv == localllm.server_command("0.0.0.0", 8001, n_ctx=2048, threads=3)  # make run's own


def test_the_brain_beside_llama_cpp_pins_its_slots_as_make_run_does():
    """overlays/cpu and the compose cpu profile give the brain the request fields make run gives
    it (each kind of request in its own slot); vLLM's brain (gpu) gets none."""
    import json

    from voicebot import localllm

    fields = {key: json.loads(value) for key, value in
              read_env_file(ROOT / "k8s" / "components" / "llamacpp" / "brain.env").items()}
    assert fields == {"BRAIN_LLM_EXTRA_BODY": localllm.main_request_fields(),
                      "BRAIN_GUARD_EXTRA_BODY": localllm.guard_request_fields(),
                      "BRAIN_SIDE_EXTRA_BODY": localllm.side_request_fields()}
    compose = Compose.load(VARIABLES)
    assert {key: json.loads(compose.env("brain")[key]) for key in fields} == fields
    assert not set(fields) & set(compose.env("brain-gpu"))


# ---------------------------------------------------------------- compose <-> Kubernetes
@pytest.mark.parametrize(("overlay", "profiles"), PAIRS)
def test_compose_sets_the_same_environment_as_kubernetes(rendered, overlay, profiles):
    r = rendered[overlay]
    compose = Compose.load(VARIABLES)
    for name in ("gateway", "stt", "brain", "tts", "llm"):
        service = compose.resolve(name, profiles)
        k8s_env = r.env(name)
        c = r.container(name)
        if c["image"].startswith("vllm/"):
            svc = compose.services[service]
            assert svc["command"] == c["args"], "vLLM arguments differ between compose and k8s/base/llm.yaml"
            assert {k: str(v) for k, v in svc["environment"].items()} == k8s_env
        else:
            compose_env = compose.env(service)
            for key in COMPOSE_ONLY:
                compose_env.pop(key, None)
            for key in SECRET_VARS & set(k8s_env):
                assert k8s_env.pop(key) == "<secret>", f"{name}: {key}"
                assert compose_env.pop(key) == VARIABLES[key], f"{name}: {key}"
            assert compose_env == k8s_env, f"{overlay}/{name} vs compose {service}"
        assert compose.services[service]["image"] == c["image"], f"{name}: image"
    redis = r.container("redis")
    assert compose.services["redis"]["image"] == redis["image"]
    # "$$" is compose's escape for a "$" the container's shell expands.
    assert [arg.replace("$$", "$") for arg in compose.services["redis"]["command"]] == redis["args"]


@pytest.mark.parametrize("missing", sorted(SECRET_VARS))
def test_compose_requires_each_secret(missing):
    with pytest.raises(KeyError, match=missing):
        Compose.load({k: v for k, v in VARIABLES.items() if k != missing}).env("gateway")


@pytest.mark.parametrize(("overlay", "profiles"), PAIRS)
def test_compose_addresses_and_ports(rendered, overlay, profiles):
    """Each address in the environment names a service of that profile that exposes the port."""
    compose = Compose.load(VARIABLES)
    enabled = compose.enabled(profiles)

    def exposes(host: str, port: int) -> None:
        service = compose.resolve(host, profiles)
        exposed = {int(p) for p in enabled[service].get("expose", [])}
        exposed |= {int(str(p).rsplit(":", 1)[-1]) for p in enabled[service].get("ports", [])}
        assert port in exposed, f"{service} does not expose {port}"

    gw, brain = compose.env("gateway"), compose.env("brain")
    for name in ("stt", "brain", "tts"):
        host, _, port = gw[f"GATEWAY_{name.upper()}_ADDR"].partition(":")
        exposes(host, int(port))
    for url in (gw["GATEWAY_REDIS_URL"], brain["BRAIN_REDIS_URL"], brain["BRAIN_LLM_BASE_URL"]):
        parsed = urlparse(url)
        exposes(parsed.hostname, parsed.port)
    for svc in SERVICES.values():
        service = compose.resolve(svc.name, profiles)
        env = compose.env(service)
        prefix, _ = settings_vars(svc)
        for port_name, number in svc.ports.items():
            key = f"{prefix}PORT" if port_name in ("grpc", "http") else f"{prefix}METRICS_PORT"
            assert int(env[key]) == number
            exposes(svc.name, number)
        # Compose stops a container after stop_grace_period: long enough to drain.
        if f"{prefix}DRAIN_SECONDS" in env:
            grace = seconds(enabled[service]["stop_grace_period"])
            assert grace >= float(env[f"{prefix}DRAIN_SECONDS"]) + 5, service
            k8s_grace = rendered[overlay].get("Deployment", svc.name)["spec"]["template"]["spec"][
                "terminationGracePeriodSeconds"]
            assert grace == k8s_grace, f"{service}: compose and Kubernetes stop it differently"
    gpu = "gpu" in profiles
    for service in ("stt", "llm"):
        target = enabled[compose.resolve(service, profiles)]
        reserved = target.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        assert bool(reserved) == gpu, f"{service}: GPU reservation under {profiles}"


# ---------------------------------------------------------------- images
def _dockerfile(path: Path) -> dict:
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    stages = [line for line in lines if line.upper().startswith("FROM ")]
    final = lines[max(i for i, line in enumerate(lines) if line.upper().startswith("FROM ")):]
    env: dict[str, str] = {}
    for line in final:
        if line.upper().startswith("ENV "):
            env.update(dict(re.findall(r"([A-Z_][A-Z0-9_]*)=(\S+)", line)))
    expose = {int(p) for line in final if line.upper().startswith("EXPOSE ") for p in line.split()[1:]}
    users = [line.split()[1] for line in final if line.upper().startswith("USER ")]
    entry = next(line for line in final if line.upper().startswith("ENTRYPOINT "))
    health = next(line for line in final if line.upper().startswith("HEALTHCHECK "))
    copies = [line.split()[1:-1] for line in lines
              if line.upper().startswith("COPY ") and "--from" not in line]
    return {"stages": stages, "env": env, "expose": expose, "users": users, "entry": entry,
            "health": health, "copies": copies}


def _dockerignored(path: str) -> bool:
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    first = path.split("/")[0]
    return any(p in (path, first) for p in patterns)


@pytest.mark.parametrize("svc", [*SERVICES.values(), STT_CUDA, LLM_CPU], ids=lambda s: s.image)
def test_dockerfiles_match_the_services(svc):
    df = _dockerfile(ROOT / svc.dockerfile)
    assert len(df["stages"]) >= 2, "multi-stage: build tools stay out of the runtime image"
    # One base for every stage: the image BASE_IMAGE names (offline, the one made from Debian's
    # packages: docker/base-image.sh), else the official slim Python image at a pinned tag.
    assert all(stage.split()[1] == "${BASE_IMAGE:-python:3.11.11-slim-bookworm}" for stage in df["stages"])
    assert df["users"] and df["users"][-1] == "10001:10001", "runs as non-root"
    assert df["expose"] == set(svc.ports.values())
    assert svc.module in df["entry"]
    for sources in df["copies"]:
        for src in sources:
            assert (ROOT / src).exists(), f"{svc.dockerfile}: COPY {src} does not exist"
            assert not _dockerignored(src), f"{svc.dockerfile}: COPY {src} is excluded by .dockerignore"
    if svc.settings:
        prefix, known = settings_vars(svc)
        image_vars = {k for k in df["env"] if k.startswith(prefix)}
        assert image_vars <= known, sorted(image_vars - known)
        assert df["env"][f"{prefix}HOST"] == "0.0.0.0"
        main = "http" if "http" in svc.ports else "grpc"
        assert int(df["env"][f"{prefix}PORT"]) == svc.ports[main]
        assert f'"{prefix}PORT", "{svc.ports[main]}"' in df["health"]
        # Image defaults agree with the env files that Kubernetes and compose set.
        files = [ROOT / "k8s" / "base" / "env" / f"{svc.name}.env"]
        if svc is STT_CUDA:
            files.append(ROOT / "k8s" / "overlays" / "gpu" / "env" / "stt.env")
        configured: dict[str, str] = {}
        for f in files:
            configured.update(read_env_file(f))
        for key, value in df["env"].items():
            if key in configured:
                assert configured[key] == value, (
                    f"{svc.dockerfile}: {key}={value} but the env files say {configured[key]}")
    else:
        assert set(k for k in df["env"] if k.startswith("LLM_")) <= llm_vars()
        assert '"LLM_PORT", "8000"' in df["health"]


def test_the_package_ships_every_file_the_services_read():
    """The images install voicebot as a package, not from the source tree: a data file that
    pyproject's package-data does not name (a language pack, the page) is missing there only."""
    import fnmatch
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = [f"{package.replace('.', '/')}/{pattern}" for package, patterns in data.items()
               for pattern in patterns]
    files = [p.relative_to(ROOT).as_posix() for p in (ROOT / "voicebot").rglob("*")
             if p.is_file() and p.suffix not in (".py", ".pyc")]
    assert files, "voicebot/ has data files (the language packs, the page)"
    assert [f for f in files if not any(fnmatch.fnmatch(f, pattern) for pattern in shipped)] == []


def test_image_names_and_tags(rendered):
    compose = Compose.load(VARIABLES)
    built = {svc["image"]: svc["build"]["dockerfile"] for svc in compose.services.values() if "build" in svc}
    expected = {s.image: s.dockerfile for s in [*SERVICES.values(), STT_CUDA, LLM_CPU]}
    assert {image.rsplit(":", 1)[0]: df for image, df in built.items()} == expected
    for image in built:
        assert image.endswith(f":{VERSION}"), f"{image}: tag is the project version {VERSION}"
    for r in rendered.values():
        for wl in r.workloads():
            for c in wl["spec"]["template"]["spec"]["containers"]:
                if c["image"].startswith("voicebot/"):
                    assert c["image"] in built, f"{c['image']} is built by no compose service"
