"""Fixtures for tests on the real local Kubernetes cluster (e2e/cluster/cluster.sh).

`cluster` (session): starts the cluster for the session and stops it at the end; with RINGFEED_TEST_CLUSTER=reuse a
cluster already running from .state/cluster is used as it is (and left running). RINGFEED_TEST_KEEP=1 leaves a
started cluster running. Images come from `make images` (imported at cluster start).
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
REUSE = os.environ.get("RINGFEED_TEST_CLUSTER") == "reuse"
KEEP = os.environ.get("RINGFEED_TEST_KEEP") == "1"


def _cluster_script(command: str) -> None:
    env = dict(os.environ, RINGFEED_CACHE=str(CACHE), RINGFEED_CLUSTER_DIR=str(STATE))
    result = subprocess.run([str(CLUSTER_SCRIPT), command], env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"cluster.sh {command} failed:\n{result.stdout}\n{result.stderr}")


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    kubeconfig = STATE / "kubeconfig"
    if REUSE:
        if not kubeconfig.exists():
            pytest.fail("RINGFEED_TEST_CLUSTER=reuse but no cluster state in "
                        f"{STATE}; run: make cluster-up")
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
                 lambda: cluster.core.list_namespaced_service_account(name, field_selector="metadata.name=default").items)
    yield name
    failed = any(getattr(getattr(request.node, f"report_{when}", None), "failed", False)
                 for when in ("setup", "call"))
    if failed:
        cluster.dump(name, ARTIFACTS / request.node.name)
    cluster.core.delete_namespace(name, grace_period_seconds=1)
