"""Security baseline: checkov over every rendered overlay and the Dockerfiles,
and the NetworkPolicies evaluated flow by flow."""

from __future__ import annotations

import itertools
import json

import pytest
import yaml

from tests.deploy.support import NAMESPACE, ROOT, Peer, find_tool, flow_allowed, run

# Every checkov skip must be one of these, carried as an annotation with its reason.
ALLOWED_SKIPS = {
    "CKV_K8S_43",  # image digests: pinned at release time
    "CKV_K8S_35",  # GATEWAY_TOKENS and the VOICEBOT_ secrets are read from the environment
    "CKV_K8S_15",  # cpu overlay: locally loaded images
}
# Checks that must have run and passed on every workload, so a pass is not vacuous.
MUST_PASS = {
    "CKV_K8S_8", "CKV_K8S_9",  # liveness / readiness probes
    "CKV_K8S_10", "CKV_K8S_11", "CKV_K8S_12", "CKV_K8S_13",  # CPU / memory requests and limits
    "CKV_K8S_20",  # no privilege escalation
    "CKV_K8S_22",  # read-only root filesystem
    "CKV_K8S_23", "CKV_K8S_40",  # non-root, high UID
    "CKV_K8S_28", "CKV_K8S_37",  # capabilities dropped
    "CKV_K8S_31",  # seccomp
    "CKV_K8S_38",  # no service account token
}


def _checkov(*args: str) -> list[dict]:
    result = run([find_tool("checkov"), *args, "--skip-download", "--output", "json"], timeout=300)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    data = json.loads(result.stdout)
    return data if isinstance(data, list) else [data]  # one report per framework


@pytest.fixture(scope="module")
def checkov_k8s(rendered_files) -> list[dict]:
    args = []
    for path in rendered_files.values():
        args += ["-f", str(path)]
    return _checkov(*args, "--framework", "kubernetes")


def test_checkov_kubernetes_baseline(rendered, checkov_k8s):
    for report in checkov_k8s:
        summary = report["summary"]
        failed = report["results"]["failed_checks"]
        assert not failed, "\n".join(f"{f['check_id']} {f['resource']} {f['file_path']}" for f in failed)
        assert summary["parsing_errors"] == 0
        for skipped in report["results"]["skipped_checks"]:
            assert skipped["check_id"] in ALLOWED_SKIPS, skipped["check_id"]
        passed: dict[str, set[str]] = {}
        for check in report["results"]["passed_checks"]:
            passed.setdefault(check["resource"], set()).add(check["check_id"])
        workloads = [f"{o['kind']}.{NAMESPACE}.{o['metadata']['name']}"
                     for r in rendered.values() for o in r.workloads()]
        for resource in {w for w in workloads if w in passed}:
            missing = MUST_PASS - passed[resource]
            assert not missing, f"{resource}: {sorted(missing)} did not run or did not pass"
    checked = {c["resource"] for report in checkov_k8s for c in report["results"]["passed_checks"]}
    assert {"Deployment.voicebot.gateway", "Deployment.voicebot.llm", "StatefulSet.voicebot.redis"} <= checked


def test_every_checkov_skip_is_justified(rendered):
    """Skips live in `checkov.io/skip*` annotations: 'CHECK_ID=reason', the reason a real sentence."""
    for r in rendered.values():
        for obj in r.objects:
            for key, value in (obj["metadata"].get("annotations") or {}).items():
                if key.startswith("checkov.io/skip"):
                    check, _, reason = value.partition("=")
                    assert check in ALLOWED_SKIPS, value
                    assert len(reason.split()) >= 8, f"{obj['metadata']['name']}: justify {check}"


def test_checkov_fails_an_insecure_pod(rendered, tmp_path):
    """The baseline can fail: the gateway with root and a writable root filesystem is rejected."""
    gateway = json.loads(json.dumps(rendered["gpu"].get("Deployment", "gateway")))
    pod = gateway["spec"]["template"]["spec"]
    pod["securityContext"] = {}
    pod["containers"][0]["securityContext"] = {"readOnlyRootFilesystem": False}
    path = tmp_path / "insecure.yaml"
    path.write_text(yaml.safe_dump(gateway))
    [report] = _checkov("-f", str(path), "--framework", "kubernetes")
    failed = {f["check_id"] for f in report["results"]["failed_checks"]}
    assert {"CKV_K8S_22", "CKV_K8S_23", "CKV_K8S_20"} <= failed, failed


def test_checkov_dockerfiles():
    for rep in _checkov("-d", str(ROOT / "docker"), "--framework", "dockerfile"):
        failed = rep["results"]["failed_checks"]
        assert not failed, "\n".join(f"{f['check_id']} {f['file_path']}" for f in failed)
        assert not rep["results"]["skipped_checks"]
        assert rep["summary"]["passed"] > 0
        users = {c["file_path"] for c in rep["results"]["passed_checks"] if c["check_id"] == "CKV_DOCKER_3"}
        assert len(users) == len(list((ROOT / "docker").glob("*.Dockerfile"))), "every image sets USER"


# ---------------------------------------------------------------- NetworkPolicies
def _peers(r) -> dict[str, Peer]:
    ns_labels = (("kubernetes.io/metadata.name", NAMESPACE),)
    peers = {}
    for wl in r.workloads():
        labels = tuple(sorted(wl["spec"]["template"]["metadata"]["labels"].items()))
        peers[wl["metadata"]["name"]] = Peer(wl["metadata"]["name"], NAMESPACE, labels, ns_labels)
    peers["outside"] = Peer("outside", None)
    peers["prometheus"] = Peer("prometheus", "monitoring", (("app.kubernetes.io/name", "prometheus"),),
                               (("kubernetes.io/metadata.name", "monitoring"),))
    peers["other-app"] = Peer("other-app", "default", (("app", "x"),),
                              (("kubernetes.io/metadata.name", "default"),))
    peers["kube-dns"] = Peer("kube-dns", "kube-system", (("k8s-app", "kube-dns"),),
                             (("kubernetes.io/metadata.name", "kube-system"),))
    return peers


SERVICE_PORTS = {"gateway": [8080], "stt": [50051, 9101], "brain": [50052, 9102], "tts": [50053, 9103],
                 "llm": [8000], "redis": [6379]}
ALLOWED = {
    ("outside", "gateway", 8080), ("other-app", "gateway", 8080), ("prometheus", "gateway", 8080),
    ("gateway", "stt", 50051), ("gateway", "brain", 50052), ("gateway", "tts", 50053),
    ("gateway", "redis", 6379),  # session ownership (GATEWAY_REDIS_URL)
    ("brain", "llm", 8000), ("brain", "redis", 6379),
}
SCRAPED = {("prometheus", svc, port) for svc, port in
           (("gateway", 8080), ("stt", 9101), ("brain", 9102), ("tts", 9103), ("llm", 8000))}


@pytest.mark.parametrize("overlay", ["base", "gpu", "cpu", "monitoring", "cpu-monitoring"])
def test_network_policies_allow_exactly_the_call_path(rendered, overlay):
    r = rendered[overlay]
    policies = r.of_kind("NetworkPolicy")
    peers = _peers(r)
    expected = ALLOWED | (SCRAPED if "monitoring" in overlay else set())
    sources = ["outside", "prometheus", "other-app", *SERVICE_PORTS]
    for src, dst in itertools.product(sources, SERVICE_PORTS):
        for port in SERVICE_PORTS[dst]:
            allowed = flow_allowed(policies, peers[src], peers[dst], port)
            want = (src, dst, port) in expected
            assert allowed == want, f"{overlay}: {src} -> {dst}:{port} allowed={allowed}"
    for name in SERVICE_PORTS:
        assert flow_allowed(policies, peers[name], peers["kube-dns"], 53, "UDP"), f"{name} needs DNS"
        # Nothing but the LLM (model download) leaves the cluster.
        leaves = flow_allowed(policies, peers[name], peers["outside"], 443)
        assert leaves == (name == "llm" and overlay in ("base", "gpu", "monitoring")), f"{overlay}: {name}"


def test_network_policy_evaluator_denies_by_default():
    """The evaluator itself: with default-deny only, nothing flows; without policies, everything does."""
    a = Peer("a", NAMESPACE, (("app", "a"),), (("kubernetes.io/metadata.name", NAMESPACE),))
    b = Peer("b", NAMESPACE, (("app", "b"),), (("kubernetes.io/metadata.name", NAMESPACE),))
    deny = {"metadata": {"name": "d", "namespace": NAMESPACE},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}
    assert flow_allowed([], a, b, 80)
    assert not flow_allowed([deny], a, b, 80)
    allow_in = {"metadata": {"name": "i", "namespace": NAMESPACE},
                "spec": {"podSelector": {"matchLabels": {"app": "b"}}, "policyTypes": ["Ingress"],
                         "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "a"}}}],
                                      "ports": [{"port": 80}]}]}}
    assert not flow_allowed([deny, allow_in], a, b, 80), "egress of a is still denied"
    allow_out = {"metadata": {"name": "o", "namespace": NAMESPACE},
                 "spec": {"podSelector": {"matchLabels": {"app": "a"}}, "policyTypes": ["Egress"],
                          "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "b"}}}]}]}}
    assert flow_allowed([deny, allow_in, allow_out], a, b, 80)
    assert not flow_allowed([deny, allow_in, allow_out], a, b, 81)
    assert not flow_allowed([deny, allow_in, allow_out], b, a, 80)
