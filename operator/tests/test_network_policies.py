"""The NetworkPolicies of a Ring, a TrainingJob and a cache tier admit exactly who needs each port, and the chart's
networkPolicy value reaches the operator checked: pure, checked without a cluster (the e2e tries them under a real
policy engine)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_builders import DATASET
from test_ring_builders import RING
from test_trainingjob_builders import trainingjob

from ringfeed_operator.builders.cache import tier_selector
from ringfeed_operator.builders.jobs import ingest_policy, split_policy
from ringfeed_operator.builders.network import cache_policy, ring_policy, trainingjob_policy
from ringfeed_operator.cli import main
from ringfeed_operator.config import NetworkConfig, parse_network_policy

NETWORK = NetworkConfig(enabled=True, operator_namespace="ringfeed-system",
                        operator_pods={"app.kubernetes.io/component": "operator"},
                        cass_operator_namespace="cass-system", cass_operator_pods={"app": "cass-operator"},
                        monitoring_namespace="monitoring", ring_clients=({"ipBlock": {"cidr": "10.9.0.0/16"}},))
NODES = {"matchLabels": {"ringfeed.io/ring": "images"}}


def namespace(name: str) -> dict:
    return {"matchLabels": {"kubernetes.io/metadata.name": name}}


def admitted(policy: dict) -> dict[int | None, list[dict]]:
    """Port → the peers admitted to it (None: every port)."""
    ports: dict[int | None, list[dict]] = {}
    for rule in policy["spec"]["ingress"]:
        for port in rule.get("ports") or [{"port": None}]:
            ports.setdefault(port["port"], []).extend(rule["from"])
    return ports


def test_a_rings_cql_admits_ringfeeds_pods_the_operator_and_named_clients_only():
    policy = ring_policy(RING, NODES, {"ringfeed.io/ring": "images"}, 9000, NETWORK)
    assert policy["spec"]["podSelector"] == NODES and policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["metadata"]["ownerReferences"][0]["uid"] == RING["metadata"]["uid"]
    ports = admitted(policy)
    assert ports[9042] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "ringfeed-operator"}}},  # this namespace
        {"namespaceSelector": namespace("ringfeed-system"),
         "podSelector": {"matchLabels": {"app.kubernetes.io/component": "operator"}}},
        {"ipBlock": {"cidr": "10.9.0.0/16"}}]
    assert ports[7000] == ports[7001] == [{"podSelector": NODES}]  # internode: the ring's own nodes
    assert ports[8080] == [{"namespaceSelector": namespace("cass-system"),
                            "podSelector": {"matchLabels": {"app": "cass-operator"}}}]
    assert ports[9000] == [{"namespaceSelector": namespace("ringfeed-system"),  # the autoscaler reads the load
                            "podSelector": {"matchLabels": {"app.kubernetes.io/component": "operator"}}},
                           {"namespaceSelector": namespace("monitoring")}]
    assert set(ports) == {9042, 7000, 7001, 8080, 9000}  # nothing else, no rule for every port


def test_a_trainingjobs_ranks_reach_each_other_and_only_the_operator_and_prometheus_reach_the_sidecar():
    body = trainingjob()
    pods = {"matchLabels": {"ringfeed.io/trainingjob": "resnet-slides"}}
    ports = admitted(trainingjob_policy(body, pods, {}, 8477, NETWORK))
    assert ports[None] == [{"podSelector": pods}]  # rendezvous and the collectives' ports, among the ranks only
    assert ports[8477] == [{"namespaceSelector": namespace("ringfeed-system"),
                            "podSelector": {"matchLabels": {"app.kubernetes.io/component": "operator"}}},
                           {"namespaceSelector": namespace("monitoring")}]
    without_monitoring = NetworkConfig(enabled=True)
    assert len(admitted(trainingjob_policy(body, pods, {}, 8477, without_monitoring))[8477]) == 1


def test_a_cache_tiers_ports_are_its_own_and_its_metrics_prometheus():
    pods = tier_selector("tumour-slides")
    assert pods["matchExpressions"][0]["values"] == ["cache-master", "cache-worker", "cache-fuse"]
    ports = admitted(cache_policy(DATASET, "tumour-slides-cache-tier", pods, {}, NETWORK))
    assert all(ports[port] == [{"podSelector": pods}] for port in (19998, 29999))
    assert ports[19999] == [{"podSelector": pods}, {"namespaceSelector": namespace("monitoring")}]
    assert None not in ports


def test_the_charts_network_policy_value_is_parsed_and_defaults_kept():
    chart = {"enabled": True, "operatorNamespace": "rf", "operatorPods": {"a": "b"}, "cassOperatorNamespace": "rf",
             "cassOperatorPods": {"app.kubernetes.io/name": "cass-operator"}, "monitoringNamespace": "",
             "ringClients": [{"ipBlock": {"cidr": "10.244.0.1/32"}}]}
    network = parse_network_policy(json.dumps(chart))
    assert network.enabled and network.operator_namespace == "rf" and network.monitoring_namespace == ""
    assert network.ring_clients == ({"ipBlock": {"cidr": "10.244.0.1/32"}},)
    assert parse_network_policy("{}") == NetworkConfig()


BAD = [
    ("[]", "give a JSON object with keys among enabled"),
    ('{"enable": true}', "unknown key 'enable'"),
    ('{"enabled": "yes"}', "enabled: give a bool, not 'yes'"),
    ('{"operatorPods": {"a": 1}}', "operatorPods: give labels (strings)"),
    ('{"ringClients": ["10.0.0.0/8"]}', "ringClients: give NetworkPolicyPeers (objects)"),
]


@pytest.mark.parametrize("text,message", BAD, ids=[text for text, _ in BAD])
def test_a_bad_network_policy_value_ends_the_command_with_a_usage_error(text, message):
    result = CliRunner().invoke(main, ["--metrics-port=0", f"--network-policy={text}"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for --network-policy" in result.output and message in " ".join(result.output.split())


def test_ingest_jobs_admit_only_monitoring_to_their_metrics_and_split_jobs_nothing():
    ingest = ingest_policy(DATASET, NETWORK)
    assert ingest["spec"]["podSelector"] == {"matchLabels": {"ringfeed.io/dataset": DATASET["metadata"]["name"],
                                                             "app.kubernetes.io/component": "ingest"}}
    assert admitted(ingest) == {9102: [{"namespaceSelector": namespace("monitoring")}]}
    split = split_policy({"apiVersion": "ringfeed.io/v1alpha1", "kind": "Split",
                          "metadata": {"name": "by-patient", "namespace": "ml", "uid": "9f00aa11-0004"}}, NETWORK)
    assert split["spec"]["ingress"] == [] and split["spec"]["policyTypes"] == ["Ingress"]  # deny every ingress
    assert split["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "split"
    assert split["metadata"]["ownerReferences"][0]["kind"] == "Split"
    assert ingest_policy(DATASET, NetworkConfig(enabled=True))["spec"]["ingress"] == []  # no monitoring: nothing
