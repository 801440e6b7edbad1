"""The Helm chart (deploy/helm/edgegw) as rendered by `helm template`: probes, drain timing,
security context, secrets by reference only, the config file, the optional parts; and the
rendered config file and environment read by edgegw's own Settings.load with no warning.

Needs helm on PATH (`bash .ci/helm` in the venv builds it and links it there); without it
these tests are skipped, and under CI they fail instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgegw.providers import PROVIDERS
from edgegw.settings import Settings

CHART = Path(__file__).resolve().parent.parent / "deploy" / "helm" / "edgegw"
ALL_ON = CHART / "ci" / "all-on-values.yaml"
# edgegw/server.py DRAIN_MARGIN_S: after SERVER_GRACEFUL_TIMEOUT the workers end what still
# runs and exit within this.
DRAIN_MARGIN_S = 5

Doc = dict[str, Any]


def _helm() -> str:
    helm = shutil.which("helm")
    if helm is None:
        reason = "helm is not installed: `bash .ci/helm` in the venv builds it"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return helm


def _run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_helm(), "template", "edgegw", str(CHART), *args],
        capture_output=True,
        text=True,
        timeout=50,
    )


def render(*args: str) -> dict[str, Doc]:
    """The rendered manifests by kind (the chart renders at most one of each)."""
    done = _run_helm(*args)
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    kinds = [d["kind"] for d in docs]
    assert len(kinds) == len(set(kinds)), kinds
    return {d["kind"]: d for d in docs}


def refusal(*args: str) -> str:
    done = _run_helm(*args)
    assert done.returncode != 0, done.stdout
    return done.stderr


@pytest.fixture(scope="module")
def default() -> dict[str, Doc]:
    return render()


@pytest.fixture(scope="module")
def all_on() -> dict[str, Doc]:
    return render("--values", str(ALL_ON))


def pod_of(manifests: dict[str, Doc]) -> Doc:
    spec: Doc = manifests["Deployment"]["spec"]["template"]["spec"]
    return spec


def container_of(manifests: dict[str, Doc]) -> Doc:
    (container,) = pod_of(manifests)["containers"]
    return container


def env_of(container: Doc) -> dict[str, Doc]:
    return {e["name"]: e for e in container["env"]}


def port_number(container: Doc, port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    return int(number)


def seconds(duration: str) -> int:
    assert duration.endswith("s"), duration
    return int(duration[:-1])


@pytest.mark.parametrize("values", ["default", "all_on"])
def test_probes_ask_health_and_ready_on_the_served_port(values: str, request: Any) -> None:
    container = container_of(request.getfixturevalue(values))
    served = int(env_of(container)["SERVER_PORT"]["value"])
    assert served == 8080
    live, ready = container["livenessProbe"], container["readinessProbe"]
    assert live["httpGet"]["path"] == "/health"
    assert ready["httpGet"]["path"] == "/ready"
    for probe in (live, ready):
        assert port_number(container, probe["httpGet"]["port"]) == served
    # Listening on the pod's network, not edgegw's loopback default.
    assert env_of(container)["SERVER_HOST"]["value"] == "0.0.0.0"


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("drain.gracefulTimeoutSeconds=120", "drain.preStopSleepSeconds=10"),
        ("drain.gracefulTimeoutSeconds=0", "drain.preStopSleepSeconds=1"),
    ],
)
def test_the_drain_ends_before_the_kill(sets: tuple[str, ...]) -> None:
    manifests = render(*(a for s in sets for a in ("--set", s)))
    pod, container = pod_of(manifests), container_of(manifests)
    graceful = seconds(env_of(container)["SERVER_GRACEFUL_TIMEOUT"]["value"])
    # Kubernetes' sleep action (>= 1.30): no shell needed in the image.
    pre_stop = container["lifecycle"]["preStop"]
    assert set(pre_stop) == {"sleep"}
    sleep = pre_stop["sleep"]["seconds"]
    assert sleep > 0
    assert pod["terminationGracePeriodSeconds"] > sleep + graceful + DRAIN_MARGIN_S


@pytest.mark.parametrize("values", ["default", "all_on"])
def test_runs_unprivileged_on_a_read_only_root(values: str, request: Any) -> None:
    manifests = request.getfixturevalue(values)
    pod, container = pod_of(manifests), container_of(manifests)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert "add" not in sc["capabilities"]
    # The one writable path, /tmp, is an emptyDir.
    volumes = {v["name"]: v for v in pod["volumes"]}
    (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert "emptyDir" in volumes[tmp["name"]]
    # No API token, and no service links: they would add EDGEGW_* and SERVER_* variables.
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False


def test_keys_come_from_secrets_by_reference(all_on: dict[str, Doc]) -> None:
    assert "Secret" not in all_on
    container = container_of(all_on)
    env = env_of(container)
    keyed = {n for n in env if n.endswith("_API_KEY")}
    assert keyed == {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OLLAMA_CLOUD_API_KEY"}
    for name in keyed:
        assert "value" not in env[name]
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "edgegw-provider-keys", "key": name}
    assert env["OLLAMA_API_URL"]["value"] == "http://ollama.models:11434/v1"
    # Client keys: a file from a Secret, the whole directory mounted (a subPath mount would
    # never see the kubelet's updates, and edgegw re-reads the file when it changes).
    assert "EDGEGW_API_KEYS" not in env
    keys_file = Path(env["EDGEGW_API_KEYS_FILE"]["value"])
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(keys_file.parent)]
    assert "subPath" not in mount
    (volume,) = [v for v in pod_of(all_on)["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "edgegw-client-keys"
    assert volume["secret"]["items"] == [{"key": "keys", "path": keys_file.name}]
    # Nor does the config file hold one.
    config = yaml.safe_load(all_on["ConfigMap"]["data"]["config.yaml"])
    assert not [k for k in config if "KEY" in k.upper()]


def test_a_key_in_the_values_is_refused() -> None:
    for key in ("OPENAI_API_KEY", "edgegw_api_keys"):
        assert f"config.{key}" in refusal("--set", f"config.{key}=sk-not-a-real-key")


def test_the_config_map_is_mounted_and_passed_with_config(all_on: dict[str, Doc]) -> None:
    container, pod = container_of(all_on), pod_of(all_on)
    args = container["args"]
    assert container["command"] == ["edgegw"]
    assert args[0] == "serve"
    path = args[args.index("--config") + 1]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == path]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    config_map = all_on["ConfigMap"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert mount["subPath"] in config_map["data"]
    config = yaml.safe_load(config_map["data"][mount["subPath"]])
    assert config["LOG_FORMAT"] == "json"
    assert [m["name"] for m in config["local_models"]] == ["qwen3-8b"]


def test_a_changed_config_rolls_the_pods(default: dict[str, Doc]) -> None:
    changed = render("--set", "config.LOG_LEVEL=DEBUG")
    annotations = [
        m["Deployment"]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        for m in (default, changed)
    ]
    assert annotations[0] != annotations[1]


def test_edgegw_reads_the_rendered_settings_without_a_warning(
    all_on: dict[str, Doc], tmp_path: Path
) -> None:
    """What the pod would start with, loaded by Settings.load as `edgegw serve` does: every
    variable and config key the chart sets is one edgegw honours."""
    container = container_of(all_on)
    args = container["args"]
    config_file = tmp_path / "config.yaml"
    config_file.write_text(all_on["ConfigMap"]["data"]["config.yaml"], encoding="utf-8")
    keys_file = tmp_path / "keys"
    keys_file.write_text("client-key-1\n", encoding="utf-8")
    environ = {}
    for name, e in env_of(container).items():
        environ[name] = e["value"] if "value" in e else f"from-secret-{name}"
    environ["EDGEGW_API_KEYS_FILE"] = str(keys_file)
    assert args == ["serve", "--config", args[2]]
    s = Settings.load(environ=environ, config_file=config_file)
    assert s.start_warnings == ()
    assert (s.host, s.port, s.workers) == ("0.0.0.0", 8080, 2)
    assert s.graceful_timeout_s == 30
    assert (s.telemetry_enabled, s.telemetry_metrics_port) == (True, 9464)
    assert s.api_keys == (b"client-key-1",)
    assert set(s.providers) == {"openai", "anthropic", "ollama_cloud", "ollama"}
    assert [m.name for m in s.local_models] == ["qwen3-8b"]
    assert s.log_format == "json"
    assert s.enable_vision is True


def test_optional_parts_only_when_switched_on(
    default: dict[str, Doc], all_on: dict[str, Doc]
) -> None:
    assert set(default) == {"ConfigMap", "Service", "Deployment"}
    assert set(all_on) == set(default) | {
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "ServiceMonitor",
    }
    labels = all_on["Deployment"]["spec"]["template"]["metadata"]["labels"]
    name = all_on["Deployment"]["metadata"]["name"]
    # The HPA owns the replica count.
    assert "replicas" in default["Deployment"]["spec"]
    assert "replicas" not in all_on["Deployment"]["spec"]
    hpa = all_on["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    assert hpa["minReplicas"] <= hpa["maxReplicas"]
    pdb = all_on["PodDisruptionBudget"]["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    # The ServiceMonitor scrapes the Service's metrics port, which reaches TELEMETRY_METRICS_PORT.
    container = container_of(all_on)
    monitor = all_on["ServiceMonitor"]["spec"]
    service = all_on["Service"]["spec"]
    assert (
        monitor["selector"]["matchLabels"].items()
        <= all_on["Service"]["metadata"]["labels"].items()
    )
    assert service["selector"].items() <= labels.items()
    (endpoint,) = monitor["endpoints"]
    assert endpoint["path"] == "/metrics"
    (port,) = [p for p in service["ports"] if p["name"] == endpoint["port"]]
    metrics_port = int(env_of(container)["TELEMETRY_METRICS_PORT"]["value"])
    assert port_number(container, port["targetPort"]) == metrics_port
    assert [p["name"] for p in default["Service"]["spec"]["ports"]] == ["http"]


def test_a_service_monitor_needs_metrics() -> None:
    assert "metrics.enabled" in refusal("--set", "metrics.serviceMonitor.enabled=true")


@pytest.mark.parametrize("values", ["default", "all_on"])
def test_resource_requests_are_set(values: str, request: Any) -> None:
    resources = container_of(request.getfixturevalue(values))["resources"]
    assert resources["requests"]["cpu"]
    assert resources["requests"]["memory"]
    assert resources["limits"]["memory"]


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        # Reserved for the tenants feature: edgegw reads no Redis URL yet.
        (("redis.url=redis://redis:6379/0",), "tenants"),
        (("providers.opneai.secretName=keys", "providers.opneai.secretKey=k"), "providers.opneai"),
        (("providers.openai.secretName=keys",), "secretKey"),
        (("config.SERVER_GRACEFUL_TIMEOUT=60s",), "config.SERVER_GRACEFUL_TIMEOUT"),
        (("config.SERVER_SHUTDOWN_DELAY=5s",), "config.SERVER_SHUTDOWN_DELAY"),
        (("config.server_port=9000",), "config.server_port"),
        (("autoscaling.enabled=true", "resources.requests.cpu=null"), "resources.requests.cpu"),
        (("replicas=3",), "replicas"),  # a misspelt value (the schema's closed keys)
    ],
)
def test_values_that_would_do_nothing_are_refused(sets: tuple[str, ...], named: str) -> None:
    assert named in refusal(*(a for s in sets for a in ("--set", s)))


def test_the_chart_knows_edgegws_providers() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text(encoding="utf-8")
    found = re.search(r'define "edgegw.providerIds" -}}\n(.*)\n', helpers)
    assert found is not None
    assert found.group(1).split() == list(PROVIDERS)
