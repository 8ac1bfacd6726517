"""The cluster enforces NetworkPolicy: a table of source × destination port → verdict.

Two namespaces under the restricted Pod Security level: `server` holds a server Pod (TCP 8080 named `http`, and
9090, both on IPv4 and IPv6), a `friend` and a `stranger`; `client` holds a `friend`, a `stranger`, a `loner` (under
an egress policy) and a `web` server. Every connection of the table is tried before any policy (all of IPv4 open, so
each refusal later is the policies' doing) and again once the policies are in. A refusal is a connection refused or
timed out within a short connect timeout; an allowed connection must succeed, so each row can fail both ways.

The engine is kube-router's firewall (e2e/cluster/cluster.sh, docs/local-cluster.md). The rows name the local
cluster's node IP, and the last two say what it does where NetworkPolicy says nothing (traffic from the node itself,
IPv6 link-local addresses), so the module runs on the local cluster only.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass

import pytest
from kubernetes import client

from probes import BLOCKED, CONNECT_TIMEOUT_S, OPEN, PROBE, SLEEP, connect, verdict

from conftest import ARTIFACTS
from kubecluster import PULL_SECRET, Cluster

pytestmark = pytest.mark.skipif(os.environ.get("RINGFEED_TEST_CLUSTER") == "kubeconfig",
                                reason="the table names the local cluster's node IP and its engine's choices")

NODE_IP = "10.244.0.1"  # the local cluster's node IP: the tests, Prometheus and the external ring run there
APISERVER_PORT = 26443  # where Service kubernetes leads (10.0.0.1:443 → 10.244.0.1:26443)
NAMESPACE_NAME = "kubernetes.io/metadata.name"  # the label every namespace carries

# Listens on [::]:PORT (IPv6 and IPv4) for each port given, accepts and closes.
SERVER = ("import socket, sys, threading\n"
          "def serve(port):\n"
          "    s = socket.socket(socket.AF_INET6)\n"
          "    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n"
          "    s.bind(('::', port)); s.listen(64)\n"
          "    while True: s.accept()[0].close()\n"
          "for port in sys.argv[1:]: threading.Thread(target=serve, args=(int(port),)).start()\n")


@dataclass(frozen=True)
class Row:
    source: str  # "<side>/<pod>", or "node": this test process, on the node IP
    target: str  # "<side>/<pod>", "node", or "<side>/<pod>/ipv6": the Pod's IPv6 link-local address
    port: int
    verdict: str
    why: str


TABLE = (
    Row("server/friend", "server/server", 8080, OPEN, "podSelector of its namespace, named port http"),
    Row("server/friend", "server/server", 9090, BLOCKED, "that rule names port http only"),
    Row("server/stranger", "server/server", 8080, BLOCKED, "default deny: no rule selects it"),
    Row("client/friend", "server/server", 9090, OPEN, "namespaceSelector AND podSelector, ports 9000-9999 (endPort)"),
    Row("client/friend", "server/server", 8080, BLOCKED, "outside 9000-9999; the http rule admits its own namespace"),
    Row("client/stranger", "server/server", 9090, BLOCKED, "its namespace matches, the Pod does not (AND, not OR)"),
    Row("client/stranger", "client/web", 8080, OPEN, "no policy selects either Pod"),
    Row("client/loner", "client/web", 8080, BLOCKED, "egress: the loner may reach the apiserver on the node only"),
    Row("client/loner", "node", APISERVER_PORT, OPEN, "egress ipBlock 10.244.0.1/32, port 26443"),
    # What the local cluster adds to NetworkPolicy: the node's own traffic (kubelet probes, these tests, Prometheus,
    # the external ring) passes ingress policies, and IPv6 (link-local only) never crosses the bridge.
    Row("node", "server/server", 8080, OPEN, "from the node: kube-router lets it pass"),
    Row("server/stranger", "server/server/ipv6", 8080, BLOCKED, "IPv6 link-local: dropped on the bridge"),
)


def policies(sides: dict[str, str]) -> list[dict]:
    def policy(side: str, name: str, spec: dict) -> dict:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": sides[side]}, "spec": spec}

    return [
        policy("server", "default-deny", {"podSelector": {}, "policyTypes": ["Ingress"]}),
        policy("server", "friends-http", {
            "podSelector": {"matchLabels": {"app": "server"}}, "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "friend"}}}],
                         "ports": [{"protocol": "TCP", "port": "http"}]}]}),
        policy("server", "client-friends-range", {
            "podSelector": {"matchLabels": {"app": "server"}}, "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME: sides["client"]}},
                                   "podSelector": {"matchLabels": {"role": "friend"}}}],
                         "ports": [{"protocol": "TCP", "port": 9000, "endPort": 9999}]}]}),
        policy("client", "loner-to-apiserver", {
            "podSelector": {"matchLabels": {"role": "loner"}}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": f"{NODE_IP}/32"}}],
                        "ports": [{"protocol": "TCP", "port": APISERVER_PORT}]}]}),
    ]


# side -> pod -> (labels, ports it serves: the first is named http; none: it only sleeps)
PODS = {
    "server": {"server": ({"app": "server"}, (8080, 9090)),
               "friend": ({"role": "friend"}, ()),
               "stranger": ({"role": "stranger"}, ())},
    "client": {"friend": ({"role": "friend"}, ()),
               "stranger": ({"role": "stranger"}, ()),
               "loner": ({"role": "loner"}, ()),
               "web": ({"app": "web"}, (8080,))},
}


def restricted_pod(cluster: Cluster, name: str, labels: dict[str, str], serves: tuple[int, ...]) -> client.V1Pod:
    """A Pod of the data-plane image that the restricted Pod Security level admits: a server of `serves`, Ready by a
    TCP probe of the first, or a sleeper."""
    command = ["python3", "-c", SERVER, *map(str, serves)] if serves else ["python3", "-c", SLEEP]
    ports = [client.V1ContainerPort(name="http", container_port=serves[0])] if serves else None
    probe = client.V1Probe(tcp_socket=client.V1TCPSocketAction(port=serves[0]), period_seconds=1) if serves else None
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(
            termination_grace_period_seconds=1,
            image_pull_secrets=[client.V1LocalObjectReference(name=PULL_SECRET)],
            security_context=client.V1PodSecurityContext(
                run_as_non_root=True, seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault")),
            containers=[client.V1Container(
                name="main", image=cluster.image("dataplane"), command=command,
                ports=ports, readiness_probe=probe,
                security_context=client.V1SecurityContext(
                    allow_privilege_escalation=False, capabilities=client.V1Capabilities(drop=["ALL"])))]))


class Network:
    """The test's two namespaces, their Pods' addresses, and connection attempts between them."""

    def __init__(self, cluster: Cluster, sides: dict[str, str]):
        self.cluster, self.sides = cluster, sides
        self.addresses = {"node": NODE_IP}
        for side, pods in PODS.items():
            for name in pods:
                self.addresses[f"{side}/{name}"] = cluster.core.read_namespaced_pod(name, sides[side]).status.pod_ip
        # /proc/net/if_inet6: address (32 hex digits), index, prefix length, scope, flags, device.
        link_local = next(fields[0] for line in self.exec("server/server", "print(open('/proc/net/if_inet6').read())")
                          .splitlines() if (fields := line.split()) and fields[5] == "eth0"
                          and fields[0].startswith("fe80"))
        self.addresses["server/server/ipv6"] = ":".join(link_local[i:i + 4] for i in range(0, 32, 4)) + "%eth0"

    def exec(self, pod: str, script: str, *args: str) -> str:
        side, name = pod.split("/")
        return self.cluster.kubectl("exec", "-n", self.sides[side], name, "--", "python3", "-c", script,
                                    *args).stdout

    def attempts(self, rows: tuple[Row, ...]) -> dict[Row, str]:
        """Each row's connection tried once: open, refused, timeout or error N; one exec per source Pod."""
        results: dict[Row, str] = {}
        for source in dict.fromkeys(row.source for row in rows):
            mine = [row for row in rows if row.source == source]
            targets = [f"{self.addresses[row.target]}:{row.port}" for row in mine]
            if source == "node":
                verdicts = {target: connect(target) for target in targets}
            else:
                verdicts = json.loads(self.exec(source, PROBE, str(CONNECT_TIMEOUT_S), *targets))
            results.update({row: verdicts[target] for row, target in zip(mine, targets, strict=True)})
        return results


@pytest.fixture(scope="module")
def network(cluster: Cluster, request):
    suffix = uuid.uuid4().hex[:6]
    sides = {side: f"netpol-{side}-{suffix}" for side in PODS}
    for namespace in sides.values():
        cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace, labels={
            "ringfeed.io/test": "true", "pod-security.kubernetes.io/enforce": "restricted"})))
        cluster.allow_pulls(namespace)
    try:
        for side, pods in PODS.items():
            namespace = sides[side]
            # Pods are admitted only once the namespace's default ServiceAccount exists.
            cluster.wait(f"ServiceAccount default in {namespace}", lambda ns=namespace: cluster.core
                         .list_namespaced_service_account(ns, field_selector="metadata.name=default").items)
            for name, (labels, serves) in pods.items():
                cluster.core.create_namespaced_pod(namespace, restricted_pod(cluster, name, labels, serves))

        def all_ready():
            pods = [cluster.core.read_namespaced_pod(name, sides[side]) for side in PODS for name in PODS[side]]
            return all(any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or ()) for p in pods)

        cluster.wait("the test's Pods Ready", all_ready, timeout_s=120)
        yield Network(cluster, sides)
    finally:
        for namespace in sides.values():
            if request.session.testsfailed:
                cluster.dump(namespace, ARTIFACTS / request.module.__name__ / namespace)
            cluster.core.delete_namespace(namespace, grace_period_seconds=1)


@pytest.fixture(scope="module")
def baseline(network: Network) -> dict[Row, str]:
    """Every row tried before any policy exists."""
    return network.attempts(TABLE)


@pytest.fixture(scope="module")
def enforced(network: Network, baseline) -> Network:
    """The policies created in order; returns once the last one is in force. The engine sees them in the order they
    were made (one watch), so the others are in force then too."""
    networking = client.NetworkingV1Api(network.cluster.api)
    started = time.monotonic()
    for policy in policies(network.sides):
        networking.create_namespaced_network_policy(policy["metadata"]["namespace"], policy)
    last = next(row for row in TABLE if row.source == "client/loner" and row.verdict == BLOCKED)
    network.cluster.wait("the last policy in force (does a NetworkPolicy engine run? docs/local-cluster.md)",
                         lambda: verdict(network.attempts((last,))[last]) == BLOCKED, timeout_s=30)
    print(f"policies in force {time.monotonic() - started:.2f} s after the first was created")
    return network


def test_before_any_policy_every_pod_reaches_every_ipv4_port(network: Network, baseline):
    expected = {row: BLOCKED if row.target.endswith("/ipv6") else OPEN for row in TABLE}
    wrong = [f"{row.source} → {row.target}:{row.port}: {baseline[row]}, expected {want}"
             for row, want in expected.items() if verdict(baseline[row]) != want]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("row", TABLE, ids=lambda row: f"{row.source}->{row.target}:{row.port}-{row.verdict}")
def test_policy_verdict(enforced: Network, row: Row):
    attempt = enforced.attempts((row,))[row]
    assert verdict(attempt) == row.verdict, f"{attempt}, expected {row.verdict}: {row.why}"
