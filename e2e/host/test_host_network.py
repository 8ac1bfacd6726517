"""The local cluster adds nothing to the host's network namespace, while it runs and after it is gone.

Runs on the host (not inside the cluster's network): snapshots the host's links, addresses, routes, rules, nftables
and iptables rulesets, ipsets and forwarding sysctls, starts the local cluster with a Pod behind a Service and a
NetworkPolicy (so the bridge, veths, IPAM, kube-proxy's rules and kube-router's rules and ipsets all exist), snapshots
again, stops it, and snapshots a third time.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "e2e" / "cluster" / "cluster.sh"
NETNS = os.environ.get("RINGFEED_NETNS", "ringfeed-cluster")
STATE = Path(os.environ.get("RINGFEED_CLUSTER_DIR", REPO / ".state" / "cluster"))
# Debian's ipset as install-packages.sh unpacks it into the cache (the host has none installed).
IPSET_ROOT = Path(os.environ.get("RINGFEED_CACHE", REPO / ".cache")) / "ipset" / re.search(
    r"^IPSET_VERSION=(\S+)", (REPO / "e2e" / "cluster" / "versions.env").read_text(), re.MULTILINE)[1]

# What could change if anything leaked: (section, command). Counters and link addresses are left out.
SNAPSHOT = (
    ("links", "ip -o link show | sed -E 's/ +link\\/.*//; s/ qlen [0-9]+//' | sort"),
    ("addresses", "ip -o addr show | awk '{print $2, $3, $4}' | sort"),
    ("routes", "ip route show table all | sort"),
    ("ipv6 routes", "ip -6 route show table all | sort"),
    ("rules", "ip rule show; ip -6 rule show"),
    ("nftables", "nft list ruleset"),
    ("iptables", "for tool in iptables-legacy-save ip6tables-legacy-save iptables-nft-save ip6tables-nft-save; do "
                 "echo \"$tool\"; $tool | sed '/^#/d'; done"),
    ("ipsets", f"LD_LIBRARY_PATH=$(echo {IPSET_ROOT}/usr/lib/*-linux-gnu) {IPSET_ROOT}/usr/sbin/ipset list"),
    ("sysctls", "sysctl net.ipv4.ip_forward net.ipv6.conf.all.forwarding net.ipv4.conf.all.forwarding "
                "net.bridge.bridge-nf-call-iptables"),
    ("network namespaces", "ip netns list"),
)

POD_AND_SERVICE = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: web
      image: ghcr.io/ringfeed/dataplane:0.2.0   # from the node's mirror of ghcr.io (the cluster's registry)
      command: [python3, -m, http.server, "8080"]
      readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress: [{from: [{podSelector: {matchLabels: {role: client}}}], ports: [{port: 8080}]}]
"""


def snapshot() -> dict[str, str]:
    sections = {}
    for name, command in SNAPSHOT:
        result = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True)
        assert result.returncode == 0, f"snapshot of {name} failed: {result.stderr}"
        sections[name] = result.stdout
    return sections


def differences(before: dict[str, str], after: dict[str, str], ignore: tuple[str, ...] = ()) -> list[str]:
    return [f"{name}:\n--- before\n{before[name]}--- after\n{after[name]}"
            for name in before if name not in ignore and before[name] != after[name]]


def cluster(*args: str, timeout: float = 300, stdin: str | None = None) -> str:
    result = subprocess.run([str(CLUSTER), *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"cluster.sh {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.skipif(os.environ.get("RINGFEED_TEST_CLUSTER") in ("reuse", "kubeconfig"),
                    reason="checks the host around a cluster it starts and stops itself")
def test_the_host_network_is_unchanged_by_a_running_and_a_stopped_cluster():
    before = snapshot()
    assert NETNS not in before["network namespaces"], f"netns {NETNS} exists: make cluster-down first"
    try:
        cluster("up")
        cluster("exec", "kubectl", "apply", "-f", "-", stdin=POD_AND_SERVICE)
        cluster("exec", "kubectl", "wait", "--for=condition=Ready", "pod/web", "--timeout=120s", timeout=150)
        inside = cluster("exec", "sh", "-c",
                         f"ip -o link show; ip route; nft list ruleset; {STATE}/netpol-bin/ipset list")
        # The Pod network, kube-proxy's rules and kube-router's rules and sets exist, in the cluster's namespace only.
        assert "cni0" in inside and "veth" in inside and "table ip kube-proxy" in inside
        assert "KUBE-ROUTER-FORWARD" in inside and "Type: hash:ip" in inside
        # No route leads out of it: no traffic can leave the namespace.
        routes = cluster("exec", "ip", "route", "show", "table", "all").splitlines()
        assert routes and not [route for route in routes if route.startswith("default")]
        running = snapshot()
        assert running["network namespaces"].split()[:1] == [NETNS]
        assert not differences(before, running, ignore=("network namespaces",)), \
            "\n".join(differences(before, running, ignore=("network namespaces",)))
    finally:
        cluster("down")
    after = snapshot()
    assert not differences(before, after), "\n".join(differences(before, after))
