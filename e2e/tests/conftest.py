"""Fixtures for tests on a real Kubernetes cluster.

`cluster` (session), by RINGFEED_TEST_CLUSTER:
- unset: starts the local cluster (e2e/cluster/cluster.sh) for the session and stops it at the end
  (RINGFEED_TEST_KEEP=1 leaves it running). The tests run inside its network namespace: `make test-e2e`, or
  `e2e/cluster/cluster.sh run .venv/bin/python -m pytest e2e/tests`.
- `reuse`: the local cluster already running from .state/cluster (`make cluster-up`), left running.
- `kubeconfig`: any cluster named by $KUBECONFIG (kind: `make kind-up`), with the images already loaded.
Images come from `make images` (imported into the local cluster at its start).
`namespace` (function): a fresh namespace per test, deleted afterwards; when the test fails, pod logs, events and
every object's YAML are written to artifacts/<test>/ first.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from kubecluster import CACHE, REPO, STATE, Cluster

CLUSTER_SCRIPT = REPO / "e2e" / "cluster" / "cluster.sh"
ARTIFACTS = Path(os.environ.get("RINGFEED_ARTIFACTS", REPO / "artifacts"))
MODE = os.environ.get("RINGFEED_TEST_CLUSTER", "local")
KEEP = os.environ.get("RINGFEED_TEST_KEEP") == "1"
NETNS = os.environ.get("RINGFEED_NETNS", "ringfeed-cluster")


def _cluster_script(command: str) -> None:
    env = dict(os.environ, RINGFEED_CACHE=str(CACHE), RINGFEED_CLUSTER_DIR=str(STATE))
    result = subprocess.run([str(CLUSTER_SCRIPT), command], env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"cluster.sh {command} failed:\n{result.stdout}\n{result.stderr}")


def _inside_cluster_network() -> bool:
    result = subprocess.run(["ip", "netns", "identify", str(os.getpid())], capture_output=True, text=True)
    return result.stdout.strip() == NETNS


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    if MODE == "kubeconfig":
        if not os.environ.get("KUBECONFIG"):
            pytest.fail("RINGFEED_TEST_CLUSTER=kubeconfig needs KUBECONFIG naming the cluster to test")
        yield Cluster(Path(os.environ["KUBECONFIG"]))
        return
    if MODE not in ("local", "reuse"):
        pytest.fail(f"RINGFEED_TEST_CLUSTER={MODE!r}: expected unset (local), 'reuse' or 'kubeconfig'")
    if not _inside_cluster_network():
        pytest.fail(f"the e2e tests run inside the local cluster's network namespace {NETNS}: "
                    "make test-e2e, or e2e/cluster/cluster.sh run .venv/bin/python -m pytest e2e/tests")
    kubeconfig = STATE / "kubeconfig"
    if MODE == "reuse":
        if not kubeconfig.exists():
            pytest.fail(f"RINGFEED_TEST_CLUSTER=reuse but no cluster state in {STATE}; run: make cluster-up")
        yield Cluster(kubeconfig)
        return
    _cluster_script("up")
    try:
        yield Cluster(kubeconfig)
    finally:
        if not KEEP:
            _cluster_script("down")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def namespace(cluster: Cluster, request) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].rstrip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace(client.V1Namespace(
        metadata=client.V1ObjectMeta(name=name, labels={"ringfeed.io/test": "true"})))
    # Pods are admitted only once the namespace's default ServiceAccount exists.
    cluster.wait(f"ServiceAccount default in {name}",
                 lambda: cluster.core.list_namespaced_service_account(
                     name, field_selector="metadata.name=default").items)
    yield name
    failed = any(getattr(getattr(request.node, f"report_{when}", None), "failed", False)
                 for when in ("setup", "call"))
    if failed:
        cluster.dump(name, ARTIFACTS / request.node.name)
    cluster.core.delete_namespace(name, grace_period_seconds=1)
