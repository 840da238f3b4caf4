"""The deployment files: docker-compose.yml and the Prometheus configuration and rules.

The compose file is validated by docker-compose 1.29 (Debian's; no Docker engine is needed) and
read back as compose resolves it. The Prometheus files pass promtool. The stack itself runs as
local processes in tests/server/test_compose_stack.py.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import PROMETHEUS_CONFIG, PROMETHEUS_DIR, ROOT, installed

COMPOSE_FILE = ROOT / "docker-compose.yml"
PROMETHEUS_RULES = PROMETHEUS_DIR / "rules.yml"
PROMETHEUS_RULES_TEST = PROMETHEUS_DIR / "rules_test.yml"
GRPC_PORT, METRICS_PORT, HTTP_PORT = 50051, 9400, 8080
SCALED = {
    "ATTNSERVE_GRPC_PORT": "50051-50054",
    "ATTNSERVE_METRICS_PORT": "9400-9403",
    "ATTNSERVE_HTTP_PORT": "8080-8083",
}


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, check=False
    )


def _compose(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """docker-compose on the project's file, blind to the caller's ATTNSERVE_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNSERVE_", "COMPOSE_"))}
    env.update(extra_env or {})
    return _run([installed("docker-compose"), "-f", str(COMPOSE_FILE), *args], env=env)


def _seconds(duration: str | int) -> float:
    """A compose duration ("30s", "1m30s", "1h") in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|m|s)", str(duration))
    assert parts and "".join(n + u for n, u in parts) == str(duration), duration
    return sum(float(n) * units[u] for n, u in parts)


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _host_path(service: dict, container_path: str) -> Path | None:
    """Where a file of a service's container comes from on the host, through a bind mount."""
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume.get("source", ""), volume["target"]
        inside = Path(container_path)
        if source.startswith(("/", ".")) and inside.is_relative_to(target):
            return (ROOT / source / inside.relative_to(target)).resolve()
    return None


@pytest.fixture(scope="module")
def compose() -> dict:
    """The compose file as docker-compose resolves it (anchors merged, variables set)."""
    result = _compose("--profile", "gpu", "config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


# -- docker-compose ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "extra_env"),
    [([], {}), (["--profile", "gpu"], {}), ([], {**SCALED, "ATTNSERVE_WORKERS": "2"})],
    ids=["default", "gpu-profile", "scaled"],
)
def test_compose_file_is_valid(profile, extra_env):
    result = _compose(*profile, "config", "-q", extra_env=extra_env)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr


def test_compose_validation_catches_a_misspelt_option(tmp_path):
    text = COMPOSE_FILE.read_text().replace("stop_grace_period:", "stop_grace_periods:")
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text)
    result = _run([installed("docker-compose"), "-f", str(broken), "config", "-q"])
    assert result.returncode != 0
    assert "stop_grace_periods" in result.stderr


def test_attnserve_publishes_grpc_http_and_metrics(compose):
    service = compose["services"]["attnserve"]
    published = {(str(p["published"]), p["target"]) for p in service["ports"]}
    ports = (GRPC_PORT, METRICS_PORT, HTTP_PORT)
    assert published == {(str(port), port) for port in ports}
    environment = service["environment"]
    assert _port(environment["ATTNSERVE_LISTEN"]) == GRPC_PORT
    assert _port(environment["ATTNSERVE_METRICS_LISTEN"]) == METRICS_PORT
    assert _port(environment["ATTNSERVE_HTTP_LISTEN"]) == HTTP_PORT
    assert environment["ATTNSERVE_DEVICE"] == "cpu"
    assert environment["ATTNSERVE_WORKERS"] is None  # unset: one worker per core
    assert service["build"]["target"] == "runtime"


def test_attnserve_ports_scale_as_host_ranges():
    result = _compose("config", extra_env=SCALED)
    assert result.returncode == 0, result.stderr
    ports = yaml.safe_load(result.stdout)["services"]["attnserve"]["ports"]
    assert {str(p["published"]) for p in ports} == set(SCALED.values())


def test_attnserve_health_check_asks_the_grpc_port(compose):
    service = compose["services"]["attnserve"]
    check = service["healthcheck"]
    assert check["test"][:4] == ["CMD", "attnserve", "health", "--server"]
    assert _port(check["test"][4]) == _port(service["environment"]["ATTNSERVE_LISTEN"])
    assert _seconds(check["timeout"]) < _seconds(check["interval"])
    assert check["retries"] >= 1
    assert _seconds(check["start_period"]) >= 30  # the workers load the model first


def test_attnserve_drains_and_restarts(compose):
    service = compose["services"]["attnserve"]
    assert _seconds(service["stop_grace_period"]) == 30
    assert service.get("stop_signal", "SIGTERM") == "SIGTERM"
    assert service["restart"] in ("always", "unless-stopped")
    assert service["init"] is True


def test_gpu_service_reserves_nvidia_gpus_behind_a_profile(compose):
    service = compose["services"]["attnserve-gpu"]
    assert service["profiles"] == ["gpu"]
    assert service["environment"]["ATTNSERVE_DEVICE"] == "cuda"
    assert service["environment"]["ATTNSERVE_VARIANT"] == "auto"  # certified fp16 where made
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert "attnserve" in service["networks"]["default"]["aliases"]  # scraped with the rest
    assert service["healthcheck"] == compose["services"]["attnserve"]["healthcheck"]
    assert _seconds(service["stop_grace_period"]) == 30


def test_prometheus_runs_the_checked_config(compose):
    service = compose["services"]["prometheus"]
    assert service["image"].startswith("prom/prometheus:")
    flags = dict(arg.split("=", 1) for arg in service["command"] if "=" in arg)
    config_path = Path(flags["--config.file"])
    assert _host_path(service, str(config_path)) == PROMETHEUS_CONFIG
    rules = yaml.safe_load(PROMETHEUS_CONFIG.read_text())["rule_files"]
    for rule_file in rules:  # relative to the config file, in the container as here
        in_container = str(config_path.parent / rule_file)
        assert _host_path(service, in_container) == PROMETHEUS_DIR / rule_file


def test_prometheus_scrapes_every_attnserve_replica(compose):
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "attnserve"]
    assert _seconds(job["scrape_interval"]) == 5
    (discovery,) = job["dns_sd_configs"]
    assert discovery["names"] == ["attnserve"] and "attnserve" in compose["services"]
    assert discovery["type"] == "A" and discovery["port"] == METRICS_PORT


# -- promtool ---------------------------------------------------------------------------------


def test_promtool_checks_config_and_rules():
    result = _run([installed("promtool"), "check", "config", str(PROMETHEUS_CONFIG)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout
    result = _run([installed("promtool"), "check", "rules", str(PROMETHEUS_RULES)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rules_pass_their_unit_tests():
    result = _run([installed("promtool"), "test", "rules", str(PROMETHEUS_RULES_TEST)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_rejects_a_broken_rule(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text(PROMETHEUS_RULES.read_text().replace("rate(", "rate[", 1))
    result = _run([installed("promtool"), "check", "rules", str(rules)])
    assert result.returncode != 0
    assert "parse error" in result.stdout + result.stderr


def test_every_dashboard_query_of_a_metric_by_model_follows_the_model_variable():
    """Before, the retried calls, the refused versions and the versions served ignored the
    dashboard's `model` variable (the docs say every panel follows it): with `model` set to
    the captioner they still showed the translator's."""
    import importlib.util

    from service.front.metrics import Metrics

    spec = importlib.util.spec_from_file_location("panels", ROOT / "deploy/grafana/panels.py")
    panels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(panels)
    metrics = Metrics()
    by_model = {m._name for m in vars(metrics).values() if "model" in getattr(m, "_labelnames", ())}
    unfiltered = []
    for title, _, targets in panels.PANELS:
        for _, expr in targets:
            for found in re.finditer(r"attnserve_[a-z_]+", expr):
                name = re.sub(r"_(total|bucket|count|sum|info)$", "", found.group())
                if name in by_model and not expr[found.end() :].startswith('{model=~"$model"'):
                    unfiltered.append((title, found.group()))
    assert by_model >= {"attnserve_request_duration_seconds", "attnserve_retried_calls"}
    assert unfiltered == []


KUBERNETES = ROOT / "deploy" / "kubernetes" / "attnserve.yaml"
GPU_KUBERNETES = ROOT / "deploy" / "kubernetes" / "attnserve-gpu.yaml"
# ids: the manifests' names (an id "gpu" would mark the test as one needing CUDA)
DEPLOYMENTS = pytest.mark.parametrize(
    "manifest", [KUBERNETES, GPU_KUBERNETES], ids=["attnserve", "attnserve-gpu"]
)


def _kubernetes_validate(path: Path) -> subprocess.CompletedProcess:
    return _run([installed("kubernetes-validate"), "--strict", "--no-warn", str(path)])


@DEPLOYMENTS
def test_kubernetes_manifests_validate_offline(manifest):
    done = _kubernetes_validate(manifest)
    assert done.returncode == 0, done.stdout + done.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(manifest.read_text())]
    assert kinds == [
        "Deployment",
        "Service",
        "Service",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
    ]


@DEPLOYMENTS
def test_the_headless_service_lists_the_pods_for_client_side_balancing(manifest):
    deployment, service, headless, *_ = yaml.safe_load_all(manifest.read_text())
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == service["spec"]["selector"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert headless["spec"]["selector"].items() <= labels.items()
    assert [p["port"] for p in headless["spec"]["ports"]] == [GRPC_PORT]


RAY_KUBERNETES = ROOT / "deploy" / "kubernetes" / "attnserve-ray.yaml"
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
# The fields of KubeRay's ray.io/v1 RayCluster this manifest may use (its API reference).
RAY_CLUSTER_FIELDS = {
    "spec": {
        "rayVersion",
        "enableInTreeAutoscaling",
        "autoscalerOptions",
        "headGroupSpec",
        "workerGroupSpecs",
    },
    "headGroupSpec": {"rayStartParams", "template", "serviceType"},
    "workerGroupSpec": {
        "groupName",
        "replicas",
        "minReplicas",
        "maxReplicas",
        "rayStartParams",
        "template",
    },
    "autoscalerOptions": {
        "upscalingMode",
        "idleTimeoutSeconds",
        "securityContext",
        "volumeMounts",
    },
}


def test_the_ray_cluster_manifest_validates_offline(tmp_path):
    """The RayCluster's pod templates (as PodTemplates) and the front's Service validate
    strictly; the RayCluster's own fields are KubeRay's."""
    cluster, service = yaml.safe_load_all(RAY_KUBERNETES.read_text())
    assert (cluster["apiVersion"], cluster["kind"]) == ("ray.io/v1", "RayCluster")
    spec = cluster["spec"]
    assert set(spec) <= RAY_CLUSTER_FIELDS["spec"]
    assert set(spec["headGroupSpec"]) <= RAY_CLUSTER_FIELDS["headGroupSpec"]
    assert set(spec["autoscalerOptions"]) <= RAY_CLUSTER_FIELDS["autoscalerOptions"]
    for group in spec["workerGroupSpecs"]:
        assert set(group) <= RAY_CLUSTER_FIELDS["workerGroupSpec"]
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    templates = [("head", spec["headGroupSpec"]["template"])] + [
        (group["groupName"], group["template"]) for group in spec["workerGroupSpecs"]
    ]
    documents = [
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": t}
        for name, t in templates
    ]
    checked = tmp_path / "ray.yaml"
    checked.write_text(yaml.safe_dump_all([*documents, service]))
    done = _kubernetes_validate(checked)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_ray_cluster_runs_the_pinned_ray_and_the_front_on_the_head():
    import argparse
    import tomllib
    from dataclasses import fields

    from attnserve.cli.serve import Serve
    from service.front.config import ServerConfig, load_config

    cluster, service = yaml.safe_load_all(RAY_KUBERNETES.read_text())
    spec = cluster["spec"]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = extras["optional-dependencies"]["ray"][0].split("==")[1]
    assert spec["rayVersion"] == pinned
    head = spec["headGroupSpec"]["template"]
    ray_head, front = head["spec"]["containers"]
    assert head["metadata"]["labels"].items() >= service["spec"]["selector"].items()
    parser = argparse.ArgumentParser()
    Serve().add_arguments(parser)
    flags = parser.parse_args(front["args"][1:])
    overrides = {f.name: getattr(flags, f.name) for f in fields(ServerConfig)}
    args = load_config(None, overrides=overrides)
    assert args.ray == "127.0.0.1:6379" and front["args"][0] == "serve"
    assert args.max_replicas > args.min_replicas  # Ray Serve autoscales them
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # the head: the front's
    # the front is a driver of the head's node: it shares the Ray session's folder
    mounts = [{m["mountPath"] for m in c["volumeMounts"]} for c in (ray_head, front)]
    assert all("/tmp/ray" in m for m in mounts)
    for group in spec["workerGroupSpecs"]:  # a worker pod holds whole replicas
        cpus = float(group["rayStartParams"]["num-cpus"])
        assert cpus >= args.replica_cpus and cpus % args.replica_cpus == 0
    for container in (ray_head, front):
        assert container["image"] == "attnserve:ray"
    assert "AS runtime-ray" in (ROOT / "Dockerfile").read_text()


@DEPLOYMENTS
def test_kubernetes_probes_ask_grpc_health_and_the_pod_outlives_its_drain(manifest):
    from service.front.config import ServerConfig
    from service.front.metrics import Metrics

    deployment, _, _, budget, scaler = yaml.safe_load_all(manifest.read_text())
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    for probe in PROBES:
        assert container[probe]["grpc"]["port"] == GRPC_PORT  # health needs no token
    drain = float(
        next(e["value"] for e in container["env"] if e["name"] == "ATTNSERVE_DRAIN_SECONDS")
    )
    assert drain <= ServerConfig().drain_seconds and pod["terminationGracePeriodSeconds"] > drain
    assert budget["spec"]["minAvailable"] >= 1
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    metric = scaler["spec"]["metrics"][0]["pods"]["metric"]["name"]
    assert metric in {m.name for m in Metrics().registry.collect()}


def test_liveness_asks_whether_the_front_answers_and_readiness_whether_it_serves():
    """Liveness asked the server's health (""), NOT_SERVING while no worker can serve (on
    a Ray cluster, while no replica is ready): Kubernetes restarted a front whose replicas
    were away past the probe's minute, which brings none back. Liveness asks LIVENESS, which
    the front keeps SERVING until its drain; startup and readiness ask ""."""
    from types import SimpleNamespace

    from service.front.config import ServerConfig
    from service.front.metrics import Metrics
    from service.front.state import LIVENESS, Front

    deployment, *_ = yaml.safe_load_all(KUBERNETES.read_text())
    gpu, *_ = yaml.safe_load_all(GPU_KUBERNETES.read_text())
    cluster, _ = yaml.safe_load_all(RAY_KUBERNETES.read_text())
    (one_machine,) = deployment["spec"]["template"]["spec"]["containers"]
    (on_a_gpu,) = gpu["spec"]["template"]["spec"]["containers"]
    _, ray_front = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    no_worker = SimpleNamespace(serving=False)  # the pool while no replica is ready
    front = Front(ServerConfig(), {}, no_worker, Metrics())
    front.serving = True  # started, then the replicas went
    for container in (one_machine, on_a_gpu, ray_front):
        asks = {probe: container[probe]["grpc"].get("service", "") for probe in PROBES}
        assert asks == {"startupProbe": "", "readinessProbe": "", "livenessProbe": LIVENESS}
        assert front.health(asks["livenessProbe"]) and not front.health(asks["readinessProbe"])


def test_the_deployment_runs_the_image_the_docs_build():
    """Before, the Deployment ran attnserve:latest, a tag no build of the docs, the
    Dockerfile or the compose file makes (they tag the runtime target attnserve:cpu): a
    cluster given the image so built found no attnserve:latest and the pods never started."""
    deployment, *_ = yaml.safe_load_all(KUBERNETES.read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    service = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["attnserve"]
    assert service["build"]["target"] == "runtime"
    assert container["image"] == service["image"] == "attnserve:cpu"
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert "--target runtime -t attnserve:cpu ." in docs


def _pod_config(container: dict):
    """The server's configuration from a container's arguments and environment."""
    import argparse
    from dataclasses import fields

    from attnserve.cli.serve import Serve
    from service.front.config import ServerConfig, load_config

    parser = argparse.ArgumentParser()
    Serve().add_arguments(parser)
    flags = parser.parse_args(container["args"][1:])
    overrides = {f.name: getattr(flags, f.name) for f in fields(ServerConfig)}
    environ = {e["name"]: e["value"] for e in container.get("env", [])}
    return load_config(None, environ, overrides)


def _cores(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def test_the_pod_starts_the_workers_its_cpu_request_pays_for(monkeypatch):
    """Before, the pod requested 2 CPUs but set no CPU limit, so its cgroup had no quota and
    the server started a worker per core of the node (with 4 fronts from 16 cores on): on a
    32-core node 32 workers of about 200 MB each, past the 4 GiB memory limit."""
    from service.front import config as server_config

    deployment, *_ = yaml.safe_load_all(KUBERNETES.read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    resources = container["resources"]
    limit = resources["limits"].get("cpu")  # the quota the kubelet writes into cpu.max
    monkeypatch.setattr(server_config.os, "sched_getaffinity", lambda pid: set(range(32)))
    monkeypatch.setattr(server_config, "cpu_quota", lambda: limit and _cores(limit))
    config = _pod_config(container)
    workers, _ = config.worker_choice("cpu")  # the image's ATTNSERVE_DEVICE
    fronts, _ = config.front_choice()
    assert workers + fronts <= _cores(resources["requests"]["cpu"]) + 1, (workers, fronts)


def test_the_gpu_pod_serves_one_gpu_with_the_cuda_image(monkeypatch):
    """The GPU Deployment runs the image the compose file's gpu profile builds, asks the
    device plugin for one GPU (tolerating the taint GPU nodes carry), and its server runs one
    CUDA worker and four fronts, with the cores for them (the worker's loop and its encoder
    thread, a core each) within its CPU limit, whatever the node's cores."""
    from service.front import config as server_config

    deployment, *_ = yaml.safe_load_all(GPU_KUBERNETES.read_text())
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    service = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["attnserve-gpu"]
    assert service["build"]["target"] == "runtime-cuda"
    assert container["image"] == service["image"] == "attnserve:cuda"
    assert "AS runtime-cuda" in (ROOT / "Dockerfile").read_text()
    resources = container["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 1
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    limit = _cores(resources["limits"]["cpu"])
    monkeypatch.setattr(server_config.os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(server_config, "cpu_quota", lambda: limit)
    monkeypatch.setattr(server_config, "visible_gpus", lambda: (8, "nvidia-smi"))  # the node's
    config = _pod_config(container)
    workers, _ = config.worker_choice("cuda")
    fronts, _ = config.front_choice()
    assert (workers, fronts) == (1, 4)
    assert fronts + 2 * workers <= _cores(resources["requests"]["cpu"]) <= limit
    # the device check of fp16 and of the static step's graphs runs before the pod is ready
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
    names = [m["metadata"]["name"] for m in yaml.safe_load_all(GPU_KUBERNETES.read_text())]
    cpu_names = [m["metadata"]["name"] for m in yaml.safe_load_all(KUBERNETES.read_text())]
    assert not set(names) & set(cpu_names)  # both may run in one namespace
    cpu, *_ = yaml.safe_load_all(KUBERNETES.read_text())
    cpu_pods = cpu["spec"]["selector"]["matchLabels"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert not cpu_pods.items() <= labels.items()  # nor select each other's pods


# Volume types the Restricted Pod Security Standard allows.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _restricted_problems(pod: dict, sidecars: tuple = ()) -> list[str]:
    """What keeps a pod out of a namespace that enforces the Restricted Pod Security Standard
    (pod-security.kubernetes.io/enforce: restricted). `sidecars`: (name, securityContext) of
    containers an operator adds to the pod."""
    problems = []
    context = pod.get("securityContext", {})
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            problems.append(f"pod: {key}")
    for volume in pod.get("volumes", []):
        if not set(volume) - {"name"} <= RESTRICTED_VOLUMES:
            problems.append(f"volume {volume['name']}: {sorted(set(volume) - {'name'})}")
    containers = [(c["name"], c.get("securityContext", {})) for c in pod["containers"]]
    for name, own in [*containers, *sidecars]:
        seen = {**context, **own}  # a container's settings win over the pod's
        if seen.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: no seccompProfile RuntimeDefault")
        if seen.get("runAsNonRoot") is not True or seen.get("runAsUser") == 0:
            problems.append(f"{name}: may run as root")
        if own.get("allowPrivilegeEscalation") is not False or own.get("privileged"):
            problems.append(f"{name}: may escalate privileges")
        capabilities = own.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            problems.append(f"{name}: keeps its capabilities")
        if not set(capabilities.get("add", [])) <= {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: adds capabilities")
    return problems


def test_every_pod_meets_the_restricted_pod_security_standard():
    """Before, no pod set a seccomp profile and the Ray cluster's containers neither dropped
    their capabilities nor barred privilege escalation: a namespace enforcing the Restricted
    standard refused every pod of both manifests."""
    for manifest in (KUBERNETES, GPU_KUBERNETES):
        deployment, *_ = yaml.safe_load_all(manifest.read_text())
        assert _restricted_problems(deployment["spec"]["template"]["spec"]) == []
    cluster, _ = yaml.safe_load_all(RAY_KUBERNETES.read_text())
    spec = cluster["spec"]
    # KubeRay adds the autoscaler's container to the head pod, with this securityContext
    autoscaler = ("autoscaler", spec["autoscalerOptions"].get("securityContext", {}))
    assert _restricted_problems(spec["headGroupSpec"]["template"]["spec"], (autoscaler,)) == []
    for group in spec["workerGroupSpecs"]:
        assert _restricted_problems(group["template"]["spec"]) == []


def test_the_restricted_check_finds_what_it_looks_for():
    deployment, *_ = yaml.safe_load_all(KUBERNETES.read_text())
    pod = deployment["spec"]["template"]["spec"]
    pod["hostNetwork"] = True
    pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    pod["securityContext"].pop("seccompProfile", None)
    (container,) = pod["containers"]
    container["securityContext"]["capabilities"] = {"add": ["SYS_ADMIN"]}
    assert _restricted_problems(pod, (("sidecar", {"runAsUser": 0}),)) == [
        "pod: hostNetwork",
        "volume host: ['hostPath']",
        "attnserve: no seccompProfile RuntimeDefault",
        "attnserve: keeps its capabilities",
        "attnserve: adds capabilities",
        "sidecar: no seccompProfile RuntimeDefault",
        "sidecar: may run as root",
        "sidecar: may escalate privileges",
        "sidecar: keeps its capabilities",
    ]


# What the containers write on a read-only root, as Ray 2.60's head and worker nodes, the front
# and its replicas did when run on one (writes traced): Python's temporary files in /tmp (the
# front's folder of HTTP files, multiprocessing's, the Ray dashboard's; without them the front
# and the dashboard end at their start), the Ray session in /tmp/ray (the raylet's sockets, which
# the front as a driver of the head's node connects to) and Ray's object store in /dev/shm (in
# /tmp/ray instead where /dev/shm is smaller than the store: the runtime's own is 64 MiB).
# HOME (/nonexistent) is only read, or tried by onnxruntime and given up without harm.
WRITTEN = "/tmp"
RAY_SESSION, OBJECT_STORE = "/tmp/ray", "/dev/shm"
# The head pod's volume that KubeRay mounts at the autoscaler's /tmp/ray (its pod.go): the
# Ray head reads the autoscaler's logs there.
KUBERAY_RAY_LOGS = "ray-logs"


def _pod_templates() -> list[dict]:
    """The pod templates of the Kubernetes manifests, in order: the CPU Deployment's, the
    Ray cluster's head's and worker groups', the GPU Deployment's."""
    deployment, *_ = yaml.safe_load_all(KUBERNETES.read_text())
    cluster, _ = yaml.safe_load_all(RAY_KUBERNETES.read_text())
    gpu, *_ = yaml.safe_load_all(GPU_KUBERNETES.read_text())
    spec = cluster["spec"]
    templates = [deployment["spec"]["template"], spec["headGroupSpec"]["template"]]
    templates += [group["template"] for group in spec["workerGroupSpecs"]]
    return [*templates, gpu["spec"]["template"]]


def _containers() -> list[tuple[str, dict, dict]]:
    """(name, container, its pod's spec) of the manifests, the autoscaler's container that
    KubeRay adds to the head pod with the autoscalerOptions' securityContext and volumeMounts
    among them."""
    pods = [template["spec"] for template in _pod_templates()]
    found = [(c["name"], c, pod) for pod in pods for c in pod["containers"]]
    cluster, _ = yaml.safe_load_all(RAY_KUBERNETES.read_text())
    autoscaler = {"name": "autoscaler", **cluster["spec"]["autoscalerOptions"]}
    return [*found, ("autoscaler", autoscaler, pods[1])]


def _writable(container: dict, pod: dict) -> dict[str, dict]:
    """{mount path: volume} of a container's writable mounts of emptyDir volumes."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    return {
        m["mountPath"]: volumes[m["name"]]
        for m in container.get("volumeMounts", [])
        if not m.get("readOnly") and "emptyDir" in volumes.get(m["name"], {})
    }


def _bytes(quantity: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    number, unit = re.fullmatch(r"([\d.]+)([A-Za-z]*)", quantity).groups()
    return float(number) * units.get(unit, 1)


def test_every_container_runs_on_a_read_only_root():
    """Before, the Ray cluster's containers (the Ray head, the front beside it, the worker
    group's and the autoscaler KubeRay adds) kept a writable root file system: a policy that
    requires a read-only root, as the plain Deployment's pods have, refused both pods."""
    named = [(name, c.get("securityContext", {})) for name, c, _ in _containers()]
    assert [name for name, _ in named] == [
        "attnserve",
        "ray-head",
        "attnserve",
        "ray-worker",
        "attnserve",
        "autoscaler",
    ]
    assert [name for name, own in named if own.get("readOnlyRootFilesystem") is not True] == []


def test_what_ray_and_the_front_write_is_mounted_writable():
    """With only /tmp/ray mounted, a read-only root left the front no temporary folder
    ("No usable temporary directory found") and the Ray head's dashboard ended at its start:
    every container has a writable /tmp; the Ray head and the front share the Ray session's
    volume, the one KubeRay also mounts in the autoscaler; the object store has a memory
    /dev/shm of at least Ray's default store, 30% of its container's memory."""
    containers = _containers()
    head, sessions = containers[1][2], {}
    for name, container, pod in containers:
        writable = _writable(container, pod)
        assert WRITTEN in writable, name
        if name.startswith("ray-"):
            store = writable[OBJECT_STORE]["emptyDir"]
            memory = _bytes(container["resources"]["limits"]["memory"])
            assert store["medium"] == "Memory" and _bytes(store["sizeLimit"]) >= 0.3 * memory
        if name == "autoscaler" and RAY_SESSION not in writable:
            # KubeRay mounts the head pod's ray-logs volume there
            writable[RAY_SESSION] = {"name": KUBERAY_RAY_LOGS}
        if pod is head:
            sessions[name] = writable.get(RAY_SESSION, {}).get("name")
    assert sessions == {n: KUBERAY_RAY_LOGS for n in ("ray-head", "attnserve", "autoscaler")}


def _down_matchers() -> list[dict[str, str]]:
    """The label matchers of each `up{...}` selector in the AttnserveDown alert."""
    rules = yaml.safe_load(PROMETHEUS_RULES.read_text())
    (expr,) = [
        rule["expr"]
        for group in rules["groups"]
        for rule in group["rules"]
        if rule.get("alert") == "AttnserveDown"
    ]
    return [
        dict(re.findall(r'(\w+)="([^"]*)"', selector))
        for selector in re.findall(r"\bup\{([^}]*)\}", expr)
    ]


def _scraped_pod_templates() -> list[dict]:
    """Every pod template of the Kubernetes manifests that asks to be scraped."""
    return [
        t
        for t in _pod_templates()
        if t["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true"
    ]


def test_the_down_alert_matches_a_replica_of_compose_and_of_kubernetes():
    """AttnserveDown matched job="attnserve" alone, the compose stack's job; on Kubernetes
    pods are scraped by their prometheus.io annotations under the scraper's own job, with each
    pod's labels copied on as Prometheus names them (`labelmap`), so it could never fire
    there. Each scraped pod's labels, and the compose job, now meet one of its selectors."""
    matchers = _down_matchers()
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    (job,) = [j["job_name"] for j in config["scrape_configs"] if "dns_sd_configs" in j]
    assert any(m.items() <= {"job": job}.items() for m in matchers), (matchers, job)
    templates = _scraped_pod_templates()
    assert len(templates) == 3  # the Deployments' pods and the Ray cluster's front
    for template in templates:
        labels = template["metadata"]["labels"]
        as_scraped = {re.sub(r"[^a-zA-Z0-9_]", "_", k): v for k, v in labels.items()}
        assert any(m.items() <= as_scraped.items() for m in matchers), (matchers, labels)


def test_kubernetes_validation_catches_a_misspelt_field(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text(KUBERNETES.read_text().replace("readinessProbe:", "readynessProbe:", 1))
    done = _kubernetes_validate(broken)
    assert done.returncode != 0 and "readynessProbe" in done.stdout + done.stderr
