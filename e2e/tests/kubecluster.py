"""The local cluster as tests see it: API clients, kubectl and helm bound to its kubeconfig, images, waits, dumps."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

from kubernetes import client, config

REPO = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("RINGFEED_CLUSTER_DIR", REPO / ".state" / "cluster"))
CACHE = Path(os.environ.get("RINGFEED_CACHE", REPO / ".cache"))
# The images' tag: the data plane's version (images/build.sh tags them so).
IMAGE_VERSION = tomllib.loads((REPO / "dataplane" / "pyproject.toml").read_text())["project"]["version"]
# Node i of the tests' Cassandra ring (a ring outside the cluster) listens on PREFIX + i: an address of this machine
# that the cluster's Pods reach. Default: the local cluster's node IP, 10.244.0.1, on its bridge.
RING_ADDRESS_PREFIX = os.environ.get("RINGFEED_E2E_RING_PREFIX", "10.244.0.")
# The cluster's image registry (e2e/cluster/cluster.sh registry): every image is pulled from it with PULL_SECRET, a
# Secret made from its login in each namespace that runs Pods; nothing is imported into the node beforehand.
REGISTRY = os.environ.get("RINGFEED_E2E_REGISTRY", "10.244.0.1:5000")
REGISTRY_LOGIN = STATE / "registry-auth.json"
REGISTRY_CA = STATE / "pki" / "ca.crt"
PULL_SECRET = "ringfeed-pull"
# What a Pod spec of the tests' own (not made by the operator) adds to pull its image.
PULL = {"imagePullSecrets": [{"name": PULL_SECRET}]}
# The chart's source (for helm template and lint) and the package `make chart` pushed to the registry, which the
# tests install as a user would: helm install oci://….
CHART = REPO / "charts" / "ringfeed"
CHART_PACKAGE = f"oci://{REGISTRY}/charts/ringfeed"
CHART_INSTALL = (CHART_PACKAGE, "--version", IMAGE_VERSION, "--ca-file", str(REGISTRY_CA))
# The release before this one (`make previous-release` pushes its chart and images from e2e/upgrade/<version>): the
# upgrade e2e installs it, then upgrades to CHART_INSTALL.
PREVIOUS_VERSION = "0.1.0"
PREVIOUS_INSTALL = (CHART_PACKAGE, "--version", PREVIOUS_VERSION, "--ca-file", str(REGISTRY_CA))
LOCAL_VALUES = REPO / "e2e" / "values-local.yaml"
# The cache tiers' FUSE mounts: the local cluster's shared mount (e2e/cluster/cluster.sh makes it).
CACHE_HOST_DIR = os.environ.get("RINGFEED_E2E_CACHE_HOST_DIR", str(STATE / "cache-mounts"))
LOCAL_SETTINGS = ("-f", str(LOCAL_VALUES), "--set", f"cache.hostDir={CACHE_HOST_DIR}")
RELEASE, SYSTEM = "ringfeed", "ringfeed-system"
GROUP, VERSION = "ringfeed.io", "v1alpha1"
CRDS = ("datasets.ringfeed.io", "splits.ringfeed.io", "trainingjobs.ringfeed.io", "rings.ringfeed.io")
# The chart's cass-operator CRDs, kept on uninstall like Ringfeed's own.
CASS_OPERATOR_CRDS = ("cassandradatacenters.cassandra.datastax.com", "cassandratasks.control.k8ssandra.io",
                      "scheduledtasks.control.k8ssandra.io")


def container_pids(container_id: str) -> list[int]:
    """The processes of a container of this machine's node, found by their cgroup."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and container_id in (entry / "cgroup").read_text():
                pids.append(int(entry.name))
        except OSError:
            continue  # ended meanwhile
    return pids


class Cluster:
    """The running cluster as tests see it: API clients, kubectl and helm bound to its kubeconfig, images."""

    def __init__(self, kubeconfig: Path):
        self.kubeconfig = kubeconfig
        self.bin = CACHE / "k8s" / "bin"
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.node = self.core.list_node().items[0].metadata.name

    @staticmethod
    def image(name: str) -> str:
        """The image as this build pushed it, pinned by its digest (`images/build.sh push` records it): a node that
        pulled an earlier build of the same tag runs this one. Without a record (kind loads images by tag), the
        tag."""
        record = CACHE / "images" / "pushed" / REGISTRY.replace("/", "_") / name
        digest = f"@{record.read_text().split()[1]}" if record.is_file() else ""
        return f"{REGISTRY}/ringfeed/{name}:{IMAGE_VERSION}{digest}"

    def allow_pulls(self, namespace: str) -> None:
        """The registry's login as the namespace's pull Secret (a kubernetes.io/dockerconfigjson), as a platform
        team puts one in each tenant namespace."""
        login = base64.b64encode(REGISTRY_LOGIN.read_bytes()).decode()
        self.core.create_namespaced_secret(namespace, client.V1Secret(
            metadata=client.V1ObjectMeta(name=PULL_SECRET), type="kubernetes.io/dockerconfigjson",
            data={".dockerconfigjson": login}))

    def run(self, tool: str, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        # kubectl's discovery cache is the cluster's: one kept in $HOME outlives it, and a later cluster at the same
        # address would be listed by what an earlier one served (`kubectl get ringfeed` without a kind added since).
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), KUBECACHEDIR=str(STATE / "kube-cache"),
                   HELM_CACHE_HOME=str(STATE / "helm" / "cache"),
                   HELM_CONFIG_HOME=str(STATE / "helm" / "config"), HELM_DATA_HOME=str(STATE / "helm" / "data"),
                   HELM_REGISTRY_CONFIG=str(REGISTRY_LOGIN))
        result = subprocess.run([str(self.bin / tool), *args], env=env, capture_output=True, text=True,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def kubectl(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return self.run("kubectl", *args, **kwargs)

    def helm(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return self.run("helm", *args, **kwargs)

    def wait(self, what: str, predicate: Callable[[], object], timeout_s: float = 90) -> object:
        """Poll predicate until it returns something truthy; fail with `what` after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
            time.sleep(0.2)

    def kill_container(self, namespace: str, pod: str, container: str) -> None:
        """SIGKILL every process of one container, as the kernel's OOM killer would: the kubelet then restarts it by
        the Pod's rules. Only for a cluster on this machine (its processes are ours to see in /proc)."""
        found = self.core.read_namespaced_pod(pod, namespace)
        statuses = (found.status.init_container_statuses or []) + (found.status.container_statuses or [])
        status = next(s for s in statuses if s.name == container)
        assert status.container_id, f"{pod}/{container} has no running container"
        container_id = status.container_id.split("://")[-1]
        victims = container_pids(container_id)
        assert victims, f"no process of {pod}/{container} ({container_id[:12]}) found"
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def replace_pod(self, namespace: str, selector: str) -> None:
        """Delete the one Pod of `selector` at once, as a lost node would, and wait for the Pod its Deployment starts
        instead to be ready."""
        def running():
            pods = self.core.list_namespaced_pod(namespace, label_selector=selector).items
            return next((p for p in pods if not p.metadata.deletion_timestamp), None)
        victim = running().metadata.name
        self.kubectl("delete", "pod", victim, "-n", namespace, "--grace-period=0", "--force", "--wait=false")
        self.wait(f"a new Pod of {selector} ready", lambda: (pod := running()) and pod.metadata.name != victim
                  and pod.status.container_statuses and pod.status.container_statuses[0].ready, timeout_s=120)

    def wait_pod_done(self, namespace: str, name: str, timeout_s: float = 90) -> client.V1Pod:
        def done():
            pod = self.core.read_namespaced_pod(name, namespace)
            return pod if pod.status.phase in ("Succeeded", "Failed") else None

        return self.wait(f"pod {namespace}/{name} to finish", done, timeout_s)

    def dump(self, namespace: str, folder: Path) -> None:
        """Pod logs (every container, previous runs too), events and the YAML of every object of a namespace."""
        folder.mkdir(parents=True, exist_ok=True)
        for pod in self.core.list_namespaced_pod(namespace).items:
            containers = [c.name for c in (pod.spec.init_containers or []) + pod.spec.containers]
            for container in containers:
                for previous in (False, True):
                    try:
                        log = self.core.read_namespaced_pod_log(pod.metadata.name, namespace, container=container,
                                                                previous=previous)
                    except client.ApiException:
                        continue
                    suffix = ".previous" if previous else ""
                    (folder / f"{pod.metadata.name}.{container}{suffix}.log").write_text(log)
        events = self.core.list_namespaced_event(namespace).items
        lines = [f"{e.last_timestamp or e.event_time} {e.type} {e.involved_object.kind}/{e.involved_object.name} "
                 f"{e.reason}: {e.message}" for e in events]
        (folder / "events.txt").write_text("\n".join(lines) + "\n")
        kinds = self.kubectl("api-resources", "--namespaced", "--verbs=list", "-o", "name").stdout.split()
        kinds = [k for k in kinds if k not in ("events", "events.events.k8s.io")]
        objects = self.kubectl("get", ",".join(kinds), "-n", namespace, "-o", "yaml", check=False).stdout
        (folder / "objects.yaml").write_text(objects)
