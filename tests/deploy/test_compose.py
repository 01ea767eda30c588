"""docker-compose.yml: valid against the compose-spec schema, both profiles
complete, observability wired to the same dashboard as Kubernetes."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.deploy.support import COMPOSE_FILE, ROOT, Compose, find_tool, read_env_file, run

VARIABLES = {"GATEWAY_TOKENS": "tok-test=test-user", "VOICEBOT_INTERNAL_TOKEN": "internal-token-for-tests",
             "VOICEBOT_REDIS_PASSWORD": "redis-password-for-tests"}


def test_compose_file_validates_against_the_compose_spec():
    result = run([find_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                  str(COMPOSE_FILE)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_spec_validation_can_fail(tmp_path):
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(COMPOSE_FILE.read_text().replace("stop_grace_period: 30s", "stop_grace_perod: 30s"))
    result = run([find_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(bad)])
    assert result.returncode != 0 and "stop_grace_perod" in result.stdout


def test_cpu_is_the_default_profile():
    """`docker compose up` reads COMPOSE_PROFILES from .env in the project directory."""
    env_file = ROOT / ".env"
    assert env_file.exists(), ".env (COMPOSE_PROFILES=cpu) makes `docker compose up` start the cpu profile"
    assert read_env_file(env_file).get("COMPOSE_PROFILES") == "cpu"


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_each_profile_runs_the_whole_stack(profile):
    compose = Compose.load(VARIABLES)
    enabled = compose.enabled([profile])
    for host in ("gateway", "stt", "brain", "tts", "llm", "redis", "otel-collector", "prometheus", "grafana"):
        compose.resolve(host, [profile])  # exactly one service answers to each name
    # Nothing of the other profile runs.
    other = "gpu" if profile == "cpu" else "cpu"
    assert not [n for n, s in enabled.items() if other in s.get("profiles", [])]
    # Only the gateway (and the observability UIs, on loopback) are published.
    for name, svc in enabled.items():
        for port in svc.get("ports", []):
            assert name == "gateway" or str(port).startswith("127.0.0.1:"), f"{name} publishes {port}"
    for dep, cond in enabled["gateway"]["depends_on"].items():
        assert cond["condition"] == "service_healthy"
        assert dep in compose.services


def test_voicebot_containers_are_locked_down():
    compose = Compose.load(VARIABLES)
    for name in ("gateway", "stt", "stt-gpu", "brain", "brain-gpu", "tts", "llm"):
        svc = compose.services[name]
        assert svc["read_only"] is True and svc["user"] == "10001:10001", name
        assert svc["cap_drop"] == ["ALL"] and "no-new-privileges:true" in svc["security_opt"], name
        assert any(t.startswith("/tmp") for t in svc["tmpfs"]), name


def test_prometheus_scrapes_every_metrics_port():
    compose = Compose.load(VARIABLES)
    config = yaml.safe_load((ROOT / "docker" / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    expected = {"gateway:8080", "stt:9101", "brain:9102", "tts:9103", "llm:8000"}
    assert expected <= targets
    for profile in ("cpu", "gpu"):
        for target in targets:
            host, port = target.split(":")
            service = compose.resolve(host, [profile])
            svc = compose.services[service]
            exposed = {str(p) for p in svc.get("expose", [])}
            exposed |= {str(p).rsplit(":", 1)[-1] for p in svc.get("ports", [])}
            if host not in ("prometheus",):
                assert port in exposed, f"{target} under {profile}"
    mounts = compose.services["prometheus"]["volumes"]
    assert "./docker/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts


def test_grafana_provisions_the_kubernetes_dashboard():
    compose = Compose.load(VARIABLES)
    grafana = compose.services["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"] if v.startswith("./"))
    assert mounts["./k8s/dashboards"] == "/var/lib/grafana/dashboards/voicebot"
    provisioning = ROOT / mounts["./docker/grafana/provisioning"].replace(
        "/etc/grafana/provisioning", "docker/grafana/provisioning")
    assert provisioning.is_dir()
    providers = yaml.safe_load((ROOT / "docker/grafana/provisioning/dashboards/voicebot.yml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards/voicebot"
    datasources = yaml.safe_load(
        (ROOT / "docker/grafana/provisioning/datasources/prometheus.yml").read_text())
    source = datasources["datasources"][0]
    assert source["uid"] == "prometheus" and source["url"] == "http://prometheus:9090"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith("/var/lib/grafana/dashboards/voicebot/")
    assert (ROOT / "k8s" / "dashboards" / home.rsplit("/", 1)[1]).is_file()


def test_otel_collector_receives_what_the_services_send():
    compose = Compose.load(VARIABLES)
    config = yaml.safe_load((ROOT / "docker" / "otel-collector" / "config.yaml").read_text())
    grpc_endpoint = config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    port = grpc_endpoint.rsplit(":", 1)[1]
    assert port in compose.services["otel-collector"]["expose"]
    for name in ("gateway", "stt", "stt-gpu", "brain", "brain-gpu", "tts"):
        assert compose.env(name)["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://otel-collector:{port}"
    for pipeline in config["service"]["pipelines"].values():
        assert set(pipeline["receivers"]) <= set(config["receivers"])
        assert set(pipeline["exporters"]) <= set(config["exporters"])


def _overlay(name: str) -> dict:
    """docker/NAME, an overlay compose merges over docker-compose.yml; its `!reset` (drop the
    base file's value) reads as None."""
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!reset", lambda loader, node: None)
    return yaml.load((ROOT / "docker" / name).read_text(), Loader=Loader)["services"]


def test_offline_redis_is_built_from_debians_packages_and_runs_the_same_script():
    """docker/compose.offline.yml builds Redis on BASE_IMAGE instead of pulling it, and leaves its
    start script, environment and health check to docker-compose.yml (the same as Kubernetes')."""
    redis = _overlay("compose.offline.yml")["redis"]
    assert set(redis) == {"build", "image"}
    assert redis["build"]["dockerfile"] == "docker/redis.Dockerfile"
    assert redis["build"]["args"] == ["BASE_IMAGE"]
    dockerfile = (ROOT / "docker" / "redis.Dockerfile").read_text()
    assert "FROM ${BASE_IMAGE:-python:3.11.11-slim-bookworm}" in dockerfile
    assert "redis-server redis-tools" in dockerfile
    assert "USER 999:1000" in dockerfile and Compose.load(VARIABLES).services["redis"]["user"] == "999:1000"


def test_the_host_network_overlay_keeps_the_stack_on_loopback():
    """docker/compose.host.yml (make test-compose): every service the cpu profile starts is on the
    host's network, listens on 127.0.0.1 only (Redis: its start script is Kubernetes', see
    docs/operations.md), publishes nothing, and finds the others by the names the env files use."""
    compose = Compose.load(VARIABLES)
    host = _overlay("compose.host.yml")
    started = {name for name, svc in compose.enabled(["cpu"]).items() if "build" in svc} | {"redis"}
    assert set(host) == started
    for name in started:
        svc = host[name]
        assert svc["network_mode"] == "host" and svc["build"] == {"network": "host"}, name
        resolved = dict(entry.split(":", 1) for entry in svc["extra_hosts"])
        for value in compose.env(name).values():
            for other in re.findall(r"(?:^|//)([a-z][a-z-]*):\d+", value):
                if other in started:
                    assert resolved.get(other) == "127.0.0.1", f"{name} reaches {other} at {value}"
        listens = {key: value for key, value in compose.env(name).items() if key.endswith("_HOST")}
        for key in listens:
            assert svc["environment"][key] == "127.0.0.1", f"{name}: {key}"
    assert "ports" in host["gateway"] and host["gateway"]["ports"] is None  # !reset: nothing published
