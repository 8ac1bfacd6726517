"""The NetworkPolicies of what the operator makes, pure: each admits only who needs a port, by Pod and namespace
labels (docs/security.md draws them). Ingress only: a trainer may still reach what it trains with.

- A Ring's nodes: CQL from Ringfeed's Pods of its namespace (ingest and split Jobs, TrainingJob Pods, cache tiers:
  the only namespace whose Datasets may use it) and from the operator; internode traffic from the ring's own nodes;
  the Management API from cass-operator alone (which also holds its only client certificate); the agent's metrics
  from the operator (the autoscaler reads them) and the monitoring namespace.
- A TrainingJob's Pods: every port among the job's own ranks (torch's rendezvous, then the collectives' ports);
  the sidecar's HTTP from the operator (status, pause) and the monitoring namespace.
- A cache tier's Pods: Alluxio's ports among the tier's own Pods; its web ports (metrics) from the monitoring
  namespace. Its posix TrainingJobs read through the node's FUSE mount, not the network.
- Ingest and split Jobs: nothing, but an ingest's metrics from the monitoring namespace.
"""

from __future__ import annotations

from ringfeed.cache.runtime import RPC_PORTS, WEB_PORTS
from ringfeed.ring import DEFAULT_PORT
from ringfeed_operator.builders.meta import LABEL_MANAGED_BY, MANAGER, owner_reference
from ringfeed_operator.config import NetworkConfig

NAMESPACE_NAME = "kubernetes.io/metadata.name"  # the label every namespace carries (Kubernetes 1.22+)
INTERNODE_PORTS = (7000, 7001)  # Cassandra's storage port, and its legacy TLS one
MANAGEMENT_API_PORT = 8080


def _namespace_peer(namespace: str, pods: dict[str, str] | None = None) -> dict:
    peer: dict = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME: namespace}}}
    if pods is not None:
        peer["podSelector"] = {"matchLabels": dict(pods)}
    return peer


def _tcp(*ports: int) -> list[dict]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def _policy(owner: dict, name: str, pods: dict, rules: list[dict], labels: dict[str, str]) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "labels": labels, "ownerReferences": [owner_reference(owner)]},
        "spec": {"podSelector": pods, "policyTypes": ["Ingress"], "ingress": rules},
    }


def _monitoring(network: NetworkConfig, *ports: int) -> list[dict]:
    if not network.monitoring_namespace:
        return []
    return [{"from": [_namespace_peer(network.monitoring_namespace)], "ports": _tcp(*ports)}]


def ring_policy(ring: dict, pods: dict, labels: dict[str, str], metrics_port: int, network: NetworkConfig) -> dict:
    """The NetworkPolicy of a Ring's Cassandra Pods (`pods`: their label selector)."""
    operator = _namespace_peer(network.operator_namespace, network.operator_pods)
    cql_clients = [{"podSelector": {"matchLabels": {LABEL_MANAGED_BY: MANAGER}}}, operator,
                   *network.ring_clients]
    rules = [
        {"from": cql_clients, "ports": _tcp(DEFAULT_PORT)},
        {"from": [{"podSelector": pods}], "ports": _tcp(*INTERNODE_PORTS)},
        {"from": [_namespace_peer(network.cass_operator_namespace, network.cass_operator_pods)],
         "ports": _tcp(MANAGEMENT_API_PORT)},
        {"from": [operator], "ports": _tcp(metrics_port)},  # the autoscaler's reading of the nodes' load
        *_monitoring(network, metrics_port),
    ]
    return _policy(ring, f"{ring['metadata']['name']}-nodes", pods, rules, labels)


def trainingjob_policy(trainingjob: dict, pods: dict, labels: dict[str, str], sidecar_port: int,
                       network: NetworkConfig) -> dict:
    """The NetworkPolicy of a TrainingJob's rank Pods (`pods`: their label selector)."""
    rules = [
        {"from": [{"podSelector": pods}]},
        {"from": [_namespace_peer(network.operator_namespace, network.operator_pods)],
         "ports": _tcp(sidecar_port)},
        *_monitoring(network, sidecar_port),
    ]
    return _policy(trainingjob, trainingjob["metadata"]["name"], pods, rules, labels)


def cache_policy(dataset: dict, name: str, pods: dict, labels: dict[str, str], network: NetworkConfig) -> dict:
    """The NetworkPolicy of a cache tier's Pods (`pods`: the label selector of its master, workers and FUSE
    mounts)."""
    ports = sorted({*RPC_PORTS.values(), *WEB_PORTS.values()})
    rules = [{"from": [{"podSelector": pods}], "ports": _tcp(*ports)},
             *_monitoring(network, *sorted(WEB_PORTS.values()))]
    return _policy(dataset, name, pods, rules, labels)


def job_policy(owner: dict, name: str, pods: dict, labels: dict[str, str], metrics_port: int | None,
               network: NetworkConfig) -> dict:
    """The NetworkPolicy of a Dataset's ingest Jobs or a Split's Job (`pods`): they serve nothing but, for an ingest,
    its metrics to the monitoring namespace."""
    return _policy(owner, name, pods, _monitoring(network, metrics_port) if metrics_port else [], labels)
