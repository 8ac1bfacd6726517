"""The README's Kubernetes quickstart, its commands run as they are written, on a cluster set up as a platform team
would have it: Ringfeed installed from the packaged chart with its default registry (ghcr.io, which the local node
reaches through its anonymous read-only mirror of the cluster's registry: no pull Secret anywhere), cass-operator
installed beforehand by someone else (`cassOperator.enabled=false`), and a default StorageClass."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml
from kubernetes import client

from conftest import TEST_STATE
from kubecluster import CASS_OPERATOR_CRDS, CHART_INSTALL, CRDS, LOCAL_SETTINGS, REPO, SYSTEM, Cluster

README = REPO / "README.md"
MARKER = "<!-- e2e: README quickstart"
NAMESPACE = "quickstart"  # the README's
CASS_OPERATOR = "cass-operator"  # the namespace of the cass-operator "already installed"
STORAGE_CLASS = "quickstart-default"
# The chart's cass-operator objects, as whoever installed it before Ringfeed applied them.
CASS_OPERATOR_TEMPLATES = ("crds", "deployment", "rbac", "image-config", "networkpolicy")
# What the cluster's owner sets for this install: the chart's own registry (the node's mirror serves it), no pull
# Secret, the cass-operator of another namespace.
PLATFORM_VALUES = ("--set", "global.imageRegistry=ghcr.io", "--set-json", "global.imagePullSecrets=[]",
                   "--set", "cassOperator.enabled=false",
                   "--set", f"networkPolicy.cassOperator.namespace={CASS_OPERATOR}")


def quickstart_commands() -> str:
    """The bash block that follows the marker in the README."""
    text = README.read_text()
    found = re.search(re.escape(MARKER) + r".*?-->\n```bash\n(.*?)```", text, re.DOTALL)
    assert found, f"no ```bash block after {MARKER!r} in README.md"
    return found[1]


@pytest.fixture(scope="module")
def platform(cluster: Cluster):
    storage = client.StorageV1Api(cluster.api)
    folder = TEST_STATE / "quickstart-volume"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    folder.chmod(0o777)  # Cassandra runs as uid 999
    storage.create_storage_class(client.V1StorageClass(
        metadata=client.V1ObjectMeta(name=STORAGE_CLASS,
                                     annotations={"storageclass.kubernetes.io/is-default-class": "true"}),
        provisioner="kubernetes.io/no-provisioner", volume_binding_mode="WaitForFirstConsumer"))
    cluster.core.create_persistent_volume(client.V1PersistentVolume(
        metadata=client.V1ObjectMeta(name="quickstart-0"),
        spec=client.V1PersistentVolumeSpec(
            capacity={"storage": "2Gi"}, access_modes=["ReadWriteOnce"], storage_class_name=STORAGE_CLASS,
            persistent_volume_reclaim_policy="Delete",
            host_path=client.V1HostPathVolumeSource(path=str(folder), type="Directory"))))
    cluster.kubectl("create", "namespace", CASS_OPERATOR)
    shown = [arg for name in CASS_OPERATOR_TEMPLATES for arg in ("-s", f"templates/cass-operator/{name}.yaml")]
    rendered = cluster.helm("template", "platform", *CHART_INSTALL, "-n", CASS_OPERATOR, *PLATFORM_VALUES[:4],
                            *shown).stdout
    manifest = TEST_STATE / "quickstart-cass-operator.yaml"
    manifest.write_text(rendered)
    cluster.kubectl("apply", "--server-side", "-n", CASS_OPERATOR, "-f", str(manifest))
    cluster.kubectl("rollout", "status", "-n", CASS_OPERATOR, "deployment", "--timeout=120s", timeout=150)
    cluster.kubectl("create", "namespace", SYSTEM)
    cluster.helm("install", "ringfeed", *CHART_INSTALL, "-n", SYSTEM, *LOCAL_SETTINGS, *PLATFORM_VALUES,
                 "--wait", "--timeout", "180s", timeout=240)
    try:
        yield
    finally:
        # The order docs/install.md gives, each gone before the next: a Ring's finalizers need the operator and
        # cass-operator until cass-operator has removed its nodes.
        for kind in ("trainingjobs", "splits", "datasets", "rings"):
            cluster.kubectl("delete", kind, "--all", "-n", NAMESPACE, "--wait=true", "--timeout=600s", check=False,
                            timeout=620)
        cluster.helm("uninstall", "ringfeed", "-n", SYSTEM, "--no-hooks", "--wait", check=False, timeout=180)
        cluster.kubectl("delete", "-f", str(manifest), "--ignore-not-found", "--wait=true", check=False, timeout=180)
        cluster.kubectl("delete", "crd", *CRDS, *CASS_OPERATOR_CRDS, "--ignore-not-found", check=False, timeout=120)
        deleted = {namespace: cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true",
                                              "--timeout=150s", check=False, timeout=180)
                   for namespace in (NAMESPACE, CASS_OPERATOR, SYSTEM)}
        cluster.kubectl("delete", "persistentvolume", "quickstart-0", "--ignore-not-found", check=False)
        storage.delete_storage_class(STORAGE_CLASS)
        shutil.rmtree(folder, ignore_errors=True)
        # Nothing the operator made is left with a finalizer that would hold the README's namespace.
        assert deleted[NAMESPACE].returncode == 0, deleted[NAMESPACE].stderr


def test_the_readme_quickstart_runs_as_written(cluster: Cluster, platform):
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig), PATH=f"{cluster.bin}:{os.environ['PATH']}")
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", quickstart_commands()], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, f"the README's commands failed:\n{result.stdout}\n{result.stderr}"

    # Rank 0's log: one line per epoch, every epoch of the job.
    epochs = [line for line in result.stdout.splitlines() if re.match(r"rank 0 epoch \d+: \d+ images", line)]
    assert len(epochs) == 5, result.stdout
    # `kubectl get ringfeed`: the four objects, each done.
    listed = result.stdout[result.stdout.index("NAME"):]
    for name in ("ring.ringfeed.io/quickstart", "dataset.ringfeed.io/shapes", "split.ringfeed.io/holdout",
                 "trainingjob.ringfeed.io/shapes-softmax"):
        assert name in listed, listed

    # Exactly once per epoch across the two ranks (remainder: uneven): 5 epochs of the 45 training images.
    job = json.loads(cluster.kubectl("get", "trainingjob", "shapes-softmax", "-n", NAMESPACE, "-o", "json").stdout)
    split = json.loads(cluster.kubectl("get", "split", "holdout", "-n", NAMESPACE, "-o", "json").stdout)
    train = next(part for part in split["status"]["parts"] if part["name"] == "train")["samples"]
    assert train == 45, split["status"]["parts"]
    assert job["status"]["epoch"] == 5 and job["status"]["samplesDelivered"] == 5 * train
    dataset = json.loads(cluster.kubectl("get", "dataset", "shapes", "-n", NAMESPACE, "-o", "json").stdout)
    assert dataset["status"]["samples"] == 60

    # The platform's choices held: no pull Secret in any Pod, every image from ghcr.io (the mirror), the Ring's
    # nodes run by the cass-operator of the other namespace.
    pods = cluster.core.list_namespaced_pod(NAMESPACE).items
    assert pods and all(not pod.spec.image_pull_secrets for pod in pods)
    images = {container.image for pod in pods
              for container in [*pod.spec.containers, *(pod.spec.init_containers or [])]}
    assert all(image.startswith("ghcr.io/ringfeed/") for image in images), images
    assert not cluster.apps.list_namespaced_deployment(
        SYSTEM, label_selector="app.kubernetes.io/name=cass-operator").items
    released = yaml.safe_load_all(cluster.helm("get", "manifest", "ringfeed", "-n", SYSTEM).stdout)
    assert not [d["metadata"]["name"] for d in released if d and "cass-operator" in d["metadata"]["name"]]
