"""The Kubernetes manifests: every overlay renders, validates against the
Kubernetes 1.31+ schemas (strict), and meets the structure the issue asks for."""

from __future__ import annotations

import json
import re

import pytest

from tests.deploy.support import K8S, NAMESPACE, ROOT, container_ports, find_tool, run
from voicebot.devstack import REDIS_EVICTION_POLICY

SERVICES = ("gateway", "stt", "brain", "tts", "llm")
K8S_VERSIONS = ("1.31.0", "1.37.0")  # the oldest we support and the newest the validator ships
CRD_GROUPS = ("monitoring.coreos.com/",)  # Prometheus Operator kinds: no schema in kubernetes-validate
# The metric names the design's contracts promise (docs/design.md; the dashboard may use them before a
# service exports them).
CONTRACT_METRICS = {
    "voicebot_stage_seconds", "voicebot_turns_total", "voicebot_barge_ins_total", "voicebot_active_sessions",
    "voicebot_tool_calls_total", "voicebot_guard_blocks_total", "voicebot_llm_fallbacks_total",
    "voicebot_handoffs_total",
}


def test_every_overlay_has_the_whole_stack(rendered):
    for name, r in rendered.items():
        for svc in SERVICES:
            assert r.has("Deployment", svc), f"{name}: Deployment {svc}"
            assert r.has("Service", svc), f"{name}: Service {svc}"
            assert r.has("PodDisruptionBudget", svc), f"{name}: PodDisruptionBudget {svc}"
        assert r.has("StatefulSet", "redis") and r.has("Service", "redis"), name
        for svc in ("gateway", "stt", "brain", "tts"):
            assert r.has("HorizontalPodAutoscaler", svc), f"{name}: HPA {svc}"
        assert r.has("Namespace", NAMESPACE)
        assert r.of_kind("NetworkPolicy"), name
        for obj in r.objects:
            if obj["kind"] != "Namespace":
                where = f"{name}: {obj['kind']}/{obj['metadata']['name']}"
                assert obj["metadata"].get("namespace") == NAMESPACE, where
        has_monitors = bool(r.of_kind("ServiceMonitor"))
        assert has_monitors == ("monitoring" in name), name


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_kubernetes_validate_strict(rendered, rendered_files, version):
    """Every rendered object of every overlay, strict (unknown fields are errors), offline schemas."""
    files = [str(path) for path in rendered_files.values()]
    result = run([find_tool("kubernetes-validate"), "--strict", "-k", version, *files])
    output = (result.stdout + result.stderr).splitlines()
    assert result.returncode == 0, "\n".join(output)
    for overlay, path in rendered_files.items():
        lines = [line for line in output if f" {path} " in line]
        passed = [line for line in lines if line.startswith("INFO") and " passed for resource " in line]
        # Only custom resources (Prometheus Operator) may lack a schema; nothing else may warn.
        for line in set(lines) - set(passed):
            assert line.startswith("WARN") and "Couldn't find schema" in line and any(
                group in line for group in CRD_GROUPS), line
        # Not a silent pass: every built-in object was validated.
        builtin = [o for o in rendered[overlay].objects
                   if not any(o["apiVersion"].startswith(g) for g in CRD_GROUPS)]
        assert len(passed) == len(builtin), f"{overlay}:\n" + "\n".join(lines)


def test_validator_rejects_an_invalid_object(tmp_path):
    """The strict validation above can fail: an unknown field is an error."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n"
        "spec:\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n"
        "    spec:\n      containers:\n"
        "        - {name: x, image: x:1, readinessProbe: {grpc: {port: 1}, perodSeconds: 5}}\n"
    )
    result = run([find_tool("kubernetes-validate"), "--strict", "-k", K8S_VERSIONS[0], str(bad)])
    assert result.returncode != 0 and "perodSeconds" in result.stdout + result.stderr


def test_pods_are_locked_down(rendered):
    """Non-root, read-only root filesystem, no privilege escalation, no capabilities, seccomp."""
    for name, r in rendered.items():
        for wl in r.workloads():
            where = f"{name}: {wl['kind']}/{wl['metadata']['name']}"
            pod = wl["spec"]["template"]["spec"]
            ctx = pod["securityContext"]
            assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] >= 10000, where
            assert ctx["seccompProfile"]["type"] == "RuntimeDefault", where
            assert pod["automountServiceAccountToken"] is False, where
            assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC"), where
            for c in pod["containers"] + pod.get("initContainers", []):
                sc = c["securityContext"]
                assert sc["readOnlyRootFilesystem"] is True, where
                assert sc["allowPrivilegeEscalation"] is False, where
                assert sc.get("privileged") is not True, where
                assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add"), where
                res = c["resources"]
                for kind in ("requests", "limits"):
                    assert {"cpu", "memory"} <= set(res[kind]), f"{where}: {kind}"
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    assert probe in c, f"{where}: {probe}"
                assert ":" in c["image"] and not c["image"].endswith(":latest"), where


def test_references_resolve(rendered):
    """ConfigMaps, Secrets, PVCs, Service selectors and ports, PDB/HPA targets all exist."""
    for name, r in rendered.items():
        for wl in r.workloads():
            pod = wl["spec"]["template"]["spec"]
            labels = wl["spec"]["template"]["metadata"]["labels"]
            assert all(labels.get(k) == v for k, v in wl["spec"]["selector"]["matchLabels"].items())
            for c in pod["containers"]:
                for src in c.get("envFrom", []):
                    if "configMapRef" in src:
                        assert r.has("ConfigMap", src["configMapRef"]["name"]), f"{name}: {src}"
                    if "secretRef" in src:
                        assert r.has("Secret", src["secretRef"]["name"]), f"{name}: {src}"
                mounts = {m["name"] for m in c.get("volumeMounts", [])}
                volumes = {v["name"] for v in pod.get("volumes", [])}
                claims = {t["metadata"]["name"] for t in wl["spec"].get("volumeClaimTemplates", [])}
                missing = mounts - volumes - claims
                assert not missing, f"{name}: {wl['metadata']['name']} mounts {missing}"
            for v in pod.get("volumes", []):
                if "persistentVolumeClaim" in v:
                    claim = v["persistentVolumeClaim"]["claimName"]
                    assert r.has("PersistentVolumeClaim", claim), f"{name}: PVC {claim}"
        for svc in r.of_kind("Service"):
            selected = [wl for wl in r.workloads() if all(
                wl["spec"]["template"]["metadata"]["labels"].get(k) == v
                for k, v in svc["spec"]["selector"].items())]
            assert selected, f"{name}: Service {svc['metadata']['name']} selects nothing"
            for port in svc["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                for wl in selected:
                    ports = {}
                    for c in wl["spec"]["template"]["spec"]["containers"]:
                        ports.update(container_ports(c))
                    assert (target in ports) if isinstance(target, str) else (target in ports.values()), (
                        f"{name}: Service {svc['metadata']['name']} port {target} "
                        f"not on {wl['metadata']['name']}")
        for pdb in r.of_kind("PodDisruptionBudget"):
            sel = pdb["spec"]["selector"]["matchLabels"]
            assert any(all(wl["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items())
                       for wl in r.workloads()), f"{name}: PDB {pdb['metadata']['name']}"
        for hpa in r.of_kind("HorizontalPodAutoscaler"):
            ref = hpa["spec"]["scaleTargetRef"]
            assert r.has(ref["kind"], ref["name"]), f"{name}: HPA target {ref}"
        for sm in r.of_kind("ServiceMonitor"):
            sel = sm["spec"]["selector"]["matchLabels"]
            services = [s for s in r.of_kind("Service")
                        if all(s["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())]
            assert services, f"{name}: ServiceMonitor {sm['metadata']['name']} selects no Service"
            for ep in sm["spec"]["endpoints"]:
                assert all(ep["port"] in {p["name"] for p in s["spec"]["ports"]} for s in services), ep


def test_every_deployment_spreads_and_survives_disruption(rendered):
    for name, r in rendered.items():
        for wl in r.of_kind("Deployment"):
            spread = wl["spec"]["template"]["spec"].get("topologySpreadConstraints", [])
            where = f"{name}: {wl['metadata']['name']}"
            assert any(t["topologyKey"] == "kubernetes.io/hostname" for t in spread), where
            if wl["metadata"]["name"] != "llm":  # one GPU: Recreate (documented in llm.yaml)
                roll = wl["spec"]["strategy"]["rollingUpdate"]
                assert roll["maxUnavailable"] == 0, f"{name}: {wl['metadata']['name']} must surge, not drop"


def _grpc_probe_ports(container: dict) -> set[int]:
    return {container[p]["grpc"]["port"] for p in ("startupProbe", "livenessProbe", "readinessProbe")
            if "grpc" in container[p]}


def test_grpc_services_use_grpc_health_probes(rendered):
    for name, r in rendered.items():
        for svc in ("stt", "brain", "tts"):
            c = r.container(svc)
            assert _grpc_probe_ports(c) == {container_ports(c)["grpc"]}, f"{name}: {svc}"
            assert all("grpc" in c[p] for p in ("startupProbe", "livenessProbe", "readinessProbe"))


def test_graceful_termination_covers_a_turn(rendered):
    """preStop + the service's drain fit inside terminationGracePeriodSeconds."""
    for name, r in rendered.items():
        for svc, prefix in (("stt", "STT_"), ("brain", "BRAIN_"), ("tts", "TTS_")):
            wl = r.get("Deployment", svc)
            grace = wl["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            drain = float(r.env(svc)[f"{prefix}DRAIN_SECONDS"])
            pre_stop = r.container(svc)["lifecycle"]["preStop"]["exec"]["command"]
            assert pre_stop[0] == "sleep"
            assert grace >= float(pre_stop[1]) + drain + 5, f"{name}: {svc} grace {grace}"
        # A turn: the brain may wait up to the gateway's turn timeout on the LLM.
        assert float(r.env("brain")["BRAIN_DRAIN_SECONDS"]) >= float(r.env("brain")["BRAIN_LLM_DEADLINE_S"])
        assert float(r.env("stt")["STT_DRAIN_SECONDS"]) >= float(r.env("stt")["STT_MAX_UTTERANCE_S"])
        gw = r.get("Deployment", "gateway")["spec"]["template"]["spec"]
        command = gw["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
        assert command[:2] == ["python", "/opt/voicebot/bin/wait_idle.py"]
        max_wait = float(next(a.split("=", 1)[1] for a in command if a.startswith("--max-seconds=")))
        assert gw["terminationGracePeriodSeconds"] >= max_wait + 30
        assert "--metric=voicebot_active_sessions" in command
        assert f"--url=http://127.0.0.1:{r.env('gateway')['GATEWAY_PORT']}/metrics" in command


def _metric_defined(name: str) -> bool:
    sources = [ROOT / "voicebot" / "gateway" / "metrics.py", ROOT / "voicebot" / "common" / "metrics.py",
               *(ROOT / "voicebot").glob("*/metrics.py")]
    return any(re.search(rf"""\(\s*["']{re.escape(name)}["']""", p.read_text()) for p in sources)


def test_autoscalers(rendered):
    adapter = (K8S / "prometheus-adapter" / "values.yaml").read_text()
    for name, r in rendered.items():
        for svc in ("brain", "tts"):
            metrics = r.get("HorizontalPodAutoscaler", svc)["spec"]["metrics"]
            assert [m["resource"]["name"] for m in metrics if m["type"] == "Resource"] == ["cpu"], name
        for svc, metric in (("stt", "voicebot_stt_active_streams"), ("gateway", "voicebot_active_sessions")):
            spec = r.get("HorizontalPodAutoscaler", svc)["spec"]
            pods = [m["pods"]["metric"]["name"] for m in spec["metrics"] if m["type"] == "Pods"]
            assert pods == [metric], f"{name}: {svc}"
            assert _metric_defined(metric), f"{metric} is exported by no service"
            assert f"seriesQuery: '{metric}{{" in adapter and f"as: {metric}" in adapter, metric
            # CPU as a fallback when the adapter is not installed.
            assert any(m["type"] == "Resource" for m in spec["metrics"]), f"{name}: {svc}"
            assert spec["minReplicas"] <= spec["maxReplicas"]
    assert rendered["gpu"].get("HorizontalPodAutoscaler", "stt")["spec"]["metrics"][0]["pods"]["target"][
        "averageValue"] == "24"
    assert rendered["cpu"].get("HorizontalPodAutoscaler", "stt")["spec"]["metrics"][0]["pods"]["target"][
        "averageValue"] == "4"


def test_gpu_overlay_runs_vllm_and_stt_on_gpus(rendered):
    for name in ("base", "gpu", "monitoring"):
        r = rendered[name]
        llm = r.get("Deployment", "llm")
        c = r.container("llm")
        assert c["image"].startswith("vllm/vllm-openai:v")
        assert "--enable-prefix-caching" in c["args"], name
        # The brain sends no tools (its reading is a JSON schema): no tool-call parser to keep in step.
        assert not [a for a in c["args"] if a.startswith(("--tool-call-parser", "--enable-auto-tool"))], name
        model = next(a for a in c["args"] if a.startswith("--model="))
        assert re.fullmatch(r"--model=[\w.-]+/[\w.-]*Instruct[\w.-]*", model), model
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
        pod = llm["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        startup = c["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 600, "model load needs minutes"
        cache = next(v for v in pod["volumes"] if v["name"] == "model-cache")
        assert r.has("PersistentVolumeClaim", cache["persistentVolumeClaim"]["claimName"])
        assert {"name": "HF_HOME", "value": "/model-cache/huggingface"} in c["env"]
        shm = next(v for v in pod["volumes"] if v["name"] == "shm")
        assert shm["emptyDir"]["medium"] == "Memory"
    for name in ("gpu", "monitoring"):
        r = rendered[name]
        stt = r.container("stt")
        assert stt["image"].startswith("voicebot/stt-cuda:")
        assert stt["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert r.get("Deployment", "stt")["spec"]["template"]["spec"]["nodeSelector"] == {
            "nvidia.com/gpu.present": "true"}
        env = r.env("stt")
        assert (env["STT_DEVICE"], env["STT_COMPUTE_TYPE"]) == ("cuda", "float16")


def test_cpu_overlay_needs_no_gpu(rendered):
    for name in ("cpu", "cpu-monitoring"):
        r = rendered[name]
        assert "nvidia.com/gpu" not in r.text
        assert not r.has("PersistentVolumeClaim", "llm-model-cache")
        assert not r.has("NetworkPolicy", "llm-model-download")
        c = r.container("llm")
        assert c["image"].startswith("voicebot/llm-cpu:")
        assert c["readinessProbe"]["httpGet"] == {"path": "/v1/models", "port": 8000}
        env = r.env("stt")
        assert (env["STT_DEVICE"], env["STT_COMPUTE_TYPE"]) == ("cpu", "int8")
        for wl in r.workloads():
            assert "nodeSelector" not in wl["spec"]["template"]["spec"], wl["metadata"]["name"]


def test_gateway_tokens_come_from_a_secret(rendered):
    for name, r in rendered.items():
        assert r.env("gateway")["GATEWAY_TOKENS"] == "<secret>", name
        secret = next(s for s in r.of_kind("Secret") if s["metadata"]["name"].startswith("gateway-tokens"))
        assert secret["data"]["GATEWAY_TOKENS"] == "", "the base ships no token: operators set their own"
        for cm in r.of_kind("ConfigMap"):
            assert "GATEWAY_TOKENS" not in cm.get("data", {}), name


def test_internal_token_and_redis_password_come_from_secrets(rendered):
    for name, r in rendered.items():
        for service in ("gateway", "stt", "brain", "tts"):
            assert r.env(service)["VOICEBOT_INTERNAL_TOKEN"] == "<secret>", f"{name}/{service}"
        for service in ("gateway", "brain"):
            assert r.env(service)["VOICEBOT_REDIS_PASSWORD"] == "<secret>", f"{name}/{service}"
        secrets = (("internal-auth", "VOICEBOT_INTERNAL_TOKEN"), ("redis-auth", "VOICEBOT_REDIS_PASSWORD"))
        for secret, key in secrets:
            found = next(s for s in r.of_kind("Secret") if s["metadata"]["name"].startswith(secret))
            assert found["data"][key] == "", f"{name}: the base ships no {key}: operators set their own"
        for cm in r.of_kind("ConfigMap"):
            assert not {"VOICEBOT_INTERNAL_TOKEN", "VOICEBOT_REDIS_PASSWORD"} & set(cm.get("data", {})), name


def test_redis_is_durable_and_requires_its_password(rendered):
    for name, r in rendered.items():
        redis = r.container("redis")
        env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in redis["env"]}
        assert env["VOICEBOT_REDIS_PASSWORD"]["name"].startswith("redis-auth")
        assert env["REDISCLI_AUTH"] == env["VOICEBOT_REDIS_PASSWORD"]  # the probe authenticates
        script = redis["args"][-1]
        assert script.startswith('test -n "$VOICEBOT_REDIS_PASSWORD" || {')  # no password: no start
        # noeviction, as make run's (voicebot/devstack.py): a full Redis refuses writes; it never
        # evicts a live session (every key has a TTL).
        assert REDIS_EVICTION_POLICY == "noeviction"
        for part in ('--requirepass "$VOICEBOT_REDIS_PASSWORD"', "--appendonly yes", "--appendfsync everysec",
                     "--dir /data", f"--maxmemory-policy {REDIS_EVICTION_POLICY}"):
            assert part in script, f"{name}: {part}"
        sts = r.get("StatefulSet", "redis")
        assert {m["mountPath"]: m["name"] for m in redis["volumeMounts"]}["/data"] == "data"
        [claim] = sts["spec"]["volumeClaimTemplates"]
        assert claim["metadata"]["name"] == "data", name


def test_only_the_gateway_is_exposed(rendered):
    for name, r in rendered.items():
        for svc in r.of_kind("Service"):
            assert svc["spec"].get("type", "ClusterIP") == "ClusterIP", f"{name}: {svc['metadata']['name']}"
        for ing in r.of_kind("Ingress"):
            backends = {p["backend"]["service"]["name"] for rule in ing["spec"]["rules"]
                        for p in rule["http"]["paths"]}
            assert backends == {"gateway"}, name


def test_dashboard_configmap_carries_the_dashboard(rendered):
    dashboard_text = (K8S / "dashboards" / "voicebot.json").read_text()
    dashboard = json.loads(dashboard_text)
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    for metric in ("voicebot_stage_seconds", "voicebot_turns_total", "voicebot_active_sessions"):
        assert metric in exprs, metric
    for metric in set(re.findall(r"\b(voicebot_[a-z_]+?)(?:_bucket|_sum|_count)?\b", exprs)):
        known = _metric_defined(metric) or metric in CONTRACT_METRICS
        assert known, f"dashboard uses {metric}, which no service exports and docs/design.md does not name"
    for name in ("monitoring", "cpu-monitoring"):
        cm = rendered[name].get("ConfigMap", "voicebot-dashboard")
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["data"]["voicebot.json"] == dashboard_text
