"""A Ring's builders: its CassandraDatacenter and Secrets, what cass-operator's objects say, the guards of each scaling
step, the autoscaler's window and its reading of the nodes' metrics, and the login a Dataset's containers get."""

from __future__ import annotations

import copy
import datetime as dt
import math
import re

import pytest

from ringfeed.ring import CredentialsSecret
from ringfeed_operator.builders.datacenter import (
    DELETE_PVC,
    datacenter,
    datacenter_update,
    heap_option,
    node_resources,
    stops_after_gossip,
)
from ringfeed_operator.builders.ring import (
    LATENCY_P99,
    READS_PER_SECOND,
    SECRET_FINALIZER,
    STEP_FROM,
    STEP_REASON,
    STEP_STARTED_AT,
    TRACK_CLEANUP,
    Cleanup,
    NodeLoad,
    Observed,
    Step,
    Window,
    autoscale,
    autoscaling_bounds,
    cleanup_task,
    credentials_secret,
    decide,
    job_login,
    node_load,
    node_selector,
    observe,
    reader_login,
    ring_env,
    ring_load,
    ring_volumes,
    step_annotations,
    step_finished_at,
    step_status,
)
from ringfeed_operator.config import RingsConfig

T0 = dt.datetime(2026, 11, 24, 12, 0, 0, tzinfo=dt.UTC)
RING = {
    "apiVersion": "ringfeed.io/v1alpha1", "kind": "Ring",
    "metadata": {"name": "images", "namespace": "ml", "uid": "7c1d-0001", "generation": 2},
    "spec": {"nodes": 2, "minNodes": 1, "maxNodes": 3, "serverVersion": "5.0.9", "heapSize": "512Mi",
             "storage": {"storageClassName": "local", "size": "20Gi"}, "cooldownSeconds": 60,
             "resources": {"requests": {"cpu": "200m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}},
}
IMAGE = "registry.example/cass-management-api:5.0.9-ubi"
DRAIN_AFTER_GOSSIP = ("sleep 10; exec curl -X POST -s -k --cert /management-api-certs/tls.crt --key "
                      "/management-api-certs/tls.key --cacert /management-api-certs/ca.crt -m 0 -o /dev/null "
                      "--show-error --fail https://localhost:8080/api/v0/ops/node/drain")
RINGS = RingsConfig(image=IMAGE, resources={"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi"}})
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def stamp(seconds: float) -> str:
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- what a Ring is made of -------------------------------------------------------------------------------------------

def test_a_ring_becomes_one_cassandra_datacenter_named_after_it():
    dc = datacenter(RING, RINGS)
    assert dc["metadata"]["name"] == "images" and dc["metadata"]["ownerReferences"][0]["uid"] == "7c1d-0001"
    # ScalingUp lasts until the cleanup is done; the volumes outlive the datacenter (deletionPolicy Retain)
    assert dc["metadata"]["annotations"] == {TRACK_CLEANUP: "true", DELETE_PVC: "false"}
    spec = dc["spec"]
    assert (spec["clusterName"], spec["serverType"], spec["serverVersion"], spec["size"]) == \
        ("images", "cassandra", "5.0.9", 2)
    assert spec["serverImage"] == IMAGE
    assert spec["superuserSecretName"] == "images-superuser"
    assert spec["users"] == [{"secretName": "images-reader", "superuser": False}]
    assert spec["storageConfig"]["cassandraDataVolumeClaimSpec"] == {
        "storageClassName": "local", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}
    assert spec["config"]["jvm-server-options"] == {"initial_heap_size": "512M", "max_heap_size": "512M"}
    assert spec["config"]["cassandra-yaml"]["authorizer"] == "CassandraAuthorizer"  # grants hold on any image
    assert spec["resources"] == RING["spec"]["resources"]
    assert spec["allowMultipleNodesPerWorker"] is False  # one Cassandra node per Kubernetes node unless asked
    assert spec["readOnlyRootFilesystem"] is True
    # the chart's PodMonitor selects the nodes by their Ring; an annotation-driven Prometheus finds the agent's port
    assert spec["podTemplateSpec"]["metadata"] == {
        "labels": {"ringfeed.io/ring": "images"},
        "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9000", "prometheus.io/path": "/metrics"}}
    # the nodes' certificate in the Cassandra container, merged by cass-operator into its own container; both of
    # cass-operator's containers and the Pod under the restricted Pod Security Standard
    assert spec["podTemplateSpec"]["spec"] == {
        "securityContext": {"runAsUser": 999, "runAsGroup": 999, "fsGroup": 999, "runAsNonRoot": True,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "automountServiceAccountToken": False,
        "initContainers": [{"name": "server-config-init-base", "securityContext": RESTRICTED_CONTAINER,
                            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}},
                           {"name": "server-config-init", "resources": {}, "securityContext": RESTRICTED_CONTAINER}],
        "containers": [{"name": "cassandra", "resources": {}, "securityContext": RESTRICTED_CONTAINER,
                        "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", DRAIN_AFTER_GOSSIP]}}},
                        "volumeMounts": [
                            {"name": "ringfeed-node-tls", "mountPath": "/etc/ringfeed/ring-tls", "readOnly": True}]}],
        "volumes": [{"name": "ringfeed-node-tls", "secret": {"secretName": "images-node-tls"}}]}
    own_image = copy.deepcopy(RING)
    own_image["spec"].update(image="mine/cassandra:5.0.9", allowMultipleNodesPerWorker=True)
    own_image["spec"]["storage"] = {}
    del own_image["spec"]["resources"]
    spec = datacenter(own_image, RINGS)["spec"]
    assert spec["serverImage"] == "mine/cassandra:5.0.9" and spec["allowMultipleNodesPerWorker"] is True
    assert "storageClassName" not in spec["storageConfig"]["cassandraDataVolumeClaimSpec"]  # the default class
    assert spec["resources"] == RINGS.resources  # the chart's rings.resources, never BestEffort


def test_a_stopping_node_gossips_ten_seconds_then_drains_as_cass_operator_would():
    # cass-operator's own preStop for managementApiAuth manual, with the sleep before it
    command = datacenter(RING, RINGS)["spec"]["podTemplateSpec"]["spec"]["containers"][0]["lifecycle"]["preStop"]
    assert command["exec"]["command"] == ["sh", "-c", DRAIN_AFTER_GOSSIP]


def made_before_the_lifecycle(ring: dict) -> dict:
    spec = copy.deepcopy(datacenter(ring, RINGS)["spec"])
    del spec["podTemplateSpec"]["spec"]["containers"][0]["lifecycle"]
    return spec


def test_a_datacenter_is_patched_only_when_its_nodes_must_change_anyway():
    assert datacenter_update(datacenter(RING, RINGS)["spec"], RING, RINGS) is None
    # made by a release without the preStop: adding it alone would restart every node, so it waits
    assert datacenter_update(made_before_the_lifecycle(RING), RING, RINGS) is None
    # a change that restarts the nodes anyway brings it along, on a datacenter of either kind
    newer = copy.deepcopy(RING)
    newer["spec"]["image"] = "mine/cassandra:5.0.9"
    for current in (made_before_the_lifecycle(RING), datacenter(RING, RINGS)["spec"]):
        settings = datacenter_update(current, newer, RINGS)
        assert settings is not None and settings["serverImage"] == "mine/cassandra:5.0.9"
        assert settings["podTemplateSpec"] == datacenter(newer, RINGS)["spec"]["podTemplateSpec"]
    assert stops_after_gossip(datacenter(RING, RINGS)["spec"])
    assert not stops_after_gossip(made_before_the_lifecycle(RING)) and not stops_after_gossip({})
    # its size is a step's, never a settings patch's
    resized = datacenter(RING, RINGS)["spec"] | {"size": 5}
    assert datacenter_update(resized, RING, RINGS) is None
    # a preStop of someone else's is put back
    edited = copy.deepcopy(datacenter(RING, RINGS)["spec"])
    edited["podTemplateSpec"]["spec"]["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": ["true"]}}}
    assert datacenter_update(edited, RING, RINGS)["podTemplateSpec"] == datacenter(RING, RINGS)["spec"][
        "podTemplateSpec"]


@pytest.mark.parametrize(("policy", "deleted"), [(None, "false"), ("Retain", "false"), ("Delete", "true")])
def test_only_deletion_policy_delete_lets_cass_operator_delete_the_volumes(policy, deleted):
    ring = copy.deepcopy(RING)
    if policy:
        ring["spec"]["deletionPolicy"] = policy
    assert datacenter(ring, RINGS)["metadata"]["annotations"][DELETE_PVC] == deleted


@pytest.mark.parametrize(("quantity", "option"), [("1Gi", "1G"), ("512Mi", "512M"), ("2097152Ki", "2048M"),
                                                  (1073741824, "1024M"), ("4G", "3814M"), ("1.5Gi", "1536M"),
                                                  ("0", None), ("-1Gi", None), ("4 GB", None), ("NaN", None)])
def test_heap_sizes_become_jvm_options(quantity, option):
    if option is None:
        with pytest.raises(ValueError):
            heap_option(quantity)
    else:
        assert heap_option(quantity) == option


@pytest.mark.parametrize(("resources", "refused"), [
    ({}, None),
    ({"requests": {"cpu": "2", "memory": "4Gi"}}, None),  # no limits: nothing to exceed
    ({"requests": {"memory": "4Gi"}, "limits": {"memory": "4096Mi"}}, None),  # equal, spelt otherwise
    ({"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}}, None),
    ({"requests": {"memory": "4Gi"}, "limits": {"memory": "2Gi"}}, "requests.memory (4Gi) is above"),
    ({"requests": {"cpu": "1500m"}, "limits": {"cpu": "1"}}, "requests.cpu (1500m) is above"),
    ({"requests": {"ephemeral-storage": "2G"}, "limits": {"ephemeral-storage": "1Gi"}}, "ephemeral-storage"),
])
def test_a_node_request_above_its_limit_is_refused(resources, refused):
    ring = copy.deepcopy(RING)
    ring["spec"]["resources"] = resources
    if refused:
        with pytest.raises(ValueError, match=re.escape(refused)):
            datacenter(ring, RINGS)
    else:
        assert node_resources(resources) == resources
        assert datacenter(ring, RINGS)["spec"]["resources"] == (resources or RINGS.resources)


def test_secrets_and_cleanup_tasks_belong_to_the_ring():
    secret = credentials_secret(RING, "images-reader", "images_reader", "pw")
    assert secret["stringData"] == {"username": "images_reader", "password": "pw"}
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "Ring"
    assert secret["metadata"]["finalizers"] == [SECRET_FINALIZER]  # kept until the datacenter is gone
    task = cleanup_task(RING, at(0))
    assert task["metadata"]["name"] == f"images-cleanup-{int(T0.timestamp())}"  # one per step
    assert task["metadata"]["labels"]["cassandra.datastax.com/datacenter"] == "images"
    assert task["metadata"]["ownerReferences"][0]["uid"] == "7c1d-0001"  # goes with the Ring
    assert task["spec"] == {"datacenter": {"name": "images", "namespace": "ml"},
                            "jobs": [{"name": "cleanup-images", "command": "cleanup"}]}
    assert node_selector("images") == "cassandra.datastax.com/cluster=images,cassandra.datastax.com/datacenter=images"


def test_a_ring_speaks_only_tls_and_its_management_api_only_mutual_tls():
    spec = datacenter(RING, RINGS)["spec"]
    yaml = spec["config"]["cassandra-yaml"]
    client = yaml["client_encryption_options"]
    assert client["enabled"] is True and client["optional"] is False  # a plaintext client is refused
    assert client["keystore"] == "/etc/ringfeed/ring-tls/node.pem"
    internode = yaml["server_encryption_options"]
    assert internode["internode_encryption"] == "all" and internode["require_client_auth"] is True
    assert internode["truststore"] == "/etc/ringfeed/ring-tls/ca.crt"
    assert spec["managementApiAuth"] == {"manual": {"clientSecretName": "images-maac-client",
                                                    "serverSecretName": "images-maac-server"}}


def test_jobs_verify_a_rings_nodes_against_its_ca_and_service_name():
    storage = {"ring": {"name": "images"}}
    env = {e["name"]: e.get("value") for e in ring_env(storage, reader_login(storage))}
    assert env["RINGFEED_TLS_CA_FILE"] == "/etc/ringfeed/tls/ca.crt"
    assert env["RINGFEED_TLS_SERVER_NAME"] == env["RINGFEED_HOSTS"] == "images-images-service"
    volumes, mounts = ring_volumes(storage, reader_login(storage))
    assert volumes[1:] == [{"name": "ring-ca", "secret": {"secretName": "images-ca",
                                                          "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]
    assert mounts[1:] == [{"name": "ring-ca", "mountPath": "/etc/ringfeed/tls", "readOnly": True}]


def test_loaders_read_with_the_reader_and_jobs_write_with_their_datasets_writer_role():
    storage = {"ring": {"name": "images"}}
    dataset = {"metadata": {"name": "slides"}, "spec": {"storage": storage}}
    assert job_login(dataset) == CredentialsSecret("slides-writer")  # never the Ring's superuser
    external = {"metadata": {"name": "slides"}, "spec": {"storage": {"external": {
        "contactPoints": ["db"], "credentialsSecret": {"name": "cass"}}}}}
    assert job_login(external) == CredentialsSecret("cass") == reader_login(external["spec"]["storage"])
    external["spec"]["storage"]["external"]["readCredentialsSecret"] = {"name": "cass-ro", "passwordKey": "pw"}
    assert reader_login(external["spec"]["storage"]) == CredentialsSecret("cass-ro", "username", "pw")
    assert job_login(external) == CredentialsSecret("cass")  # ingest and split still write
    for login, secret in ((reader_login(storage), "images-reader"), (job_login(dataset), "slides-writer")):
        env = {e["name"]: e.get("value") for e in ring_env(storage, login)}
        assert env["RINGFEED_LOGIN_DIR"] == "/etc/ringfeed/login"
        assert not any(name in env for name in ("RINGFEED_USERNAME", "RINGFEED_PASSWORD"))  # files, not variables
        volumes, mounts = ring_volumes(storage, login)
        assert volumes[0] == {"name": "ring-login", "secret": {"secretName": secret, "items": [
            {"key": "username", "path": "username"}, {"key": "password", "path": "password"}]}}
        assert mounts[0] == {"name": "ring-login", "mountPath": "/etc/ringfeed/login", "readOnly": True}
    assert ring_volumes({"external": {"contactPoints": ["db"]}}, None) == ([], [])  # no login, no TLS: nothing
    assert {"name": "RINGFEED_HOSTS", "value": "images-images-service"} in ring_env(storage, None)
    assert {"name": "RINGFEED_LOCAL_DC", "value": "images"} in ring_env(storage, None)


# -- what cass-operator says --------------------------------------------------------------------------------------

def dc_object(size: int = 2, conditions: dict | None = None, progress: str = "Ready", generation: int = 4,
              observed_generation: int = 4, step: Step | None = None) -> dict:
    annotations = {TRACK_CLEANUP: "true", **(step_annotations(step) if step else {})}
    conditions = {"Ready": "True", "ScalingUp": "False", "ScalingDown": "False", **(conditions or {})}
    return {"metadata": {"name": "images", "generation": generation, "annotations": annotations},
            "spec": {"size": size},
            "status": {"observedGeneration": observed_generation, "cassandraOperatorProgress": progress,
                       "conditions": [{"type": t, "status": s} for t, s in conditions.items()]}}


def pod(index: int, state: str = "Started", ready: bool = True) -> dict:
    return {"metadata": {"name": f"images-images-default-sts-{index}",
                         "labels": {"cassandra.datastax.com/node-state": state}},
            "status": {"podIP": f"10.244.0.{20 + index}",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def task(name: str, created: float, completed: float | None = None, failed: int = 0, command: str = "cleanup") -> dict:
    status = {"failed": failed} if completed is None else {"completionTime": stamp(completed), "failed": failed}
    return {"metadata": {"name": name, "creationTimestamp": stamp(created)},
            "spec": {"jobs": [{"name": f"{command}-images", "command": command}]}, "status": status}


def test_a_settled_datacenter_is_observed_as_such():
    observed = observe(dc_object(), [pod(0), pod(1)], [])
    assert observed == Observed(size=2, nodes=2, ready=2, busy=None, step=None, cleanup=Cleanup(), serving=True)
    assert observed.settled


@pytest.mark.parametrize(("dc", "pods", "tasks", "busy"), [
    (dc_object(observed_generation=3), [pod(0), pod(1)], [], "has not yet acted on the CassandraDatacenter"),
    (dc_object(conditions={"ScalingUp": "True"}), [pod(0), pod(1)], [], "cass-operator reports ScalingUp"),
    (dc_object(conditions={"ScalingDown": "True", "Updating": "True"}), [pod(0), pod(1)], [],
     "cass-operator reports ScalingDown, Updating"),
    (dc_object(progress="Updating"), [pod(0), pod(1)], [], "cass-operator is updating"),
    (dc_object(), [pod(0), pod(1, "Starting", ready=False)], [], "images-images-default-sts-1 is Starting"),
    (dc_object(size=1), [pod(0), pod(1, "Decommissioning")], [], "images-images-default-sts-1 is Decommissioning"),
    (dc_object(size=3), [pod(0), pod(1)], [], "2 of 3 nodes are in the ring"),
    (dc_object(), [pod(0), pod(1, ready=False)], [], "1 of 2 nodes are not Ready"),
    (dc_object(), [pod(0), pod(1)], [task("cleanup-17", 0)], "CassandraTask cleanup-17 runs"),
], ids=["generation", "scaling-up", "two-conditions", "progress", "bootstrap", "decommission", "missing-node",
        "not-ready", "cleanup-task"])
def test_whatever_cass_operator_is_doing_keeps_a_step_from_starting(dc, pods, tasks, busy):
    observed = observe(dc, pods, tasks)
    assert observed.busy is not None and busy in observed.busy and not observed.settled


def test_the_last_step_and_its_cleanup_are_read_from_the_datacenter_and_its_tasks():
    up = Step(1, 2, at(0), "spec.nodes 2")
    dc = dc_object(step=up)
    assert dc["metadata"]["annotations"][STEP_FROM] == "1" and dc["metadata"]["annotations"][STEP_REASON]
    assert dc["metadata"]["annotations"][STEP_STARTED_AT] == stamp(0)
    tasks = [task("cleanup-old", -500, -400), task("restart", 10, 20, command="restart")]
    observed = observe(dc, [pod(0), pod(1)], tasks)
    assert observed.step == up and observed.cleanup == Cleanup()  # an older cleanup does not count
    running = observe(dc, [pod(0), pod(1)], [*tasks, task("cleanup-1", 30)]).cleanup
    assert running == Cleanup(running="cleanup-1")
    failed = observe(dc, [pod(0), pod(1)], [*tasks, task("cleanup-1", 30, 90, failed=1)]).cleanup
    assert failed == Cleanup(failed="cleanup-1")
    done = observe(dc, [pod(0), pod(1)], [*tasks, task("cleanup-1", 30, 90, failed=1), task("cleanup-2", 100, 150)])
    assert done.cleanup.done_at == at(150)
    down = observe(dc_object(size=1, step=Step(2, 1, at(0), "spec.nodes 1")), [pod(0)], [])
    assert down.step.up is False and down.cleanup == Cleanup()  # no cleanup to wait for after a scale-down


# -- the guards of a step ---------------------------------------------------------------------------------------------

NO_CLEANUP = Cleanup()
UP = Step(1, 2, at(0), "spec.nodes 2")
CLEANED = Cleanup(done_at=at(120))


def observed_ring(size: int = 2, busy: str | None = None, step: Step | None = None,
                  cleanup: Cleanup = NO_CLEANUP) -> Observed:
    return Observed(size=size, nodes=size, ready=size, busy=busy, step=step, cleanup=cleanup, serving=True)


@pytest.mark.parametrize(("desired", "observed", "floor", "finished", "now", "target", "held"), [
    (2, observed_ring(2), 1, None, 0, None, None),
    (3, observed_ring(2), 1, None, 0, 3, None),
    (3, observed_ring(2, busy="cass-operator reports ScalingUp"), 1, None, 0, None, "DatacenterBusy"),
    (1, observed_ring(2, busy="CassandraTask cleanup-1 runs"), 1, None, 0, None, "DatacenterBusy"),
    (3, observed_ring(2, step=UP, cleanup=CLEANED), 1, at(100), 130, None, "Cooldown"),
    (3, observed_ring(2, step=UP, cleanup=CLEANED), 1, at(100), 160, 3, None),
    (1, observed_ring(2), 2, None, 0, None, "ReplicationFactor"),
    (1, observed_ring(3), 2, None, 0, 2, None),
    (1, observed_ring(2, step=UP), 1, at(100), 200, None, "CleanupPending"),
    (1, observed_ring(2, step=UP, cleanup=Cleanup(running="cleanup-1")), 1, at(100), 200, None, "CleanupPending"),
    (1, observed_ring(2, step=UP, cleanup=CLEANED), 1, at(100), 200, 1, None),
    (1, observed_ring(3, step=Step(3, 2, at(0), "down")), 1, at(100), 200, 2, None),
    (5, observed_ring(1), 1, None, 0, 2, None),
], ids=["at-size", "up", "busy-up", "busy-down", "cooldown", "after-cooldown", "replication-factor",
        "above-replication-factor", "cleanup-not-started", "cleanup-running", "cleaned-up", "down-after-down",
        "one-node-at-a-time"])
def test_a_step_is_taken_only_when_every_guard_allows_it(desired, observed, floor, finished, now, target, held):
    decision = decide(desired, observed, floor, finished, 60, at(now))
    assert (decision.target, decision.held) == (target, held)
    assert bool(decision.message) == bool(held)


def test_a_step_finishes_once_the_ring_settles_and_keeps_its_time_across_restarts():
    settled = observed_ring(2, step=UP)
    assert step_finished_at(None, settled, at(90)) == at(90)
    recorded = {"startedAt": stamp(0), "finishedAt": stamp(80)}
    assert step_finished_at(recorded, settled, at(90)) == at(80)
    assert step_finished_at({"startedAt": stamp(-999), "finishedAt": stamp(-900)}, settled, at(90)) == at(90)
    assert step_finished_at(None, observed_ring(2, busy="ScalingUp", step=UP), at(90)) is None
    assert step_finished_at(None, observed_ring(2), at(90)) is None


# -- the autoscaler ---------------------------------------------------------------------------------------------------

AUTOSCALING = {"metric": READS_PER_SECOND, "scaleUpAbove": 1000, "scaleDownBelow": 100, "windowSeconds": 60}


def test_the_load_must_stay_beyond_a_bound_for_the_window():
    window, wanted, _ = autoscale(AUTOSCALING, 1500, Window(), 1, (1, 3), True, at(0))
    assert window == Window(above_since=at(0)) and wanted is None
    window, wanted, _ = autoscale(AUTOSCALING, 1500, window, 1, (1, 3), True, at(30))
    assert window.above_since == at(0) and wanted is None
    # A dip below the bound starts the window again.
    window, wanted, _ = autoscale(AUTOSCALING, 900, window, 1, (1, 3), True, at(45))
    assert window == Window() and wanted is None
    window, _, _ = autoscale(AUTOSCALING, 1500, window, 1, (1, 3), True, at(50))
    window, wanted, why = autoscale(AUTOSCALING, 1500, window, 1, (1, 3), True, at(110))
    assert wanted == 2 and window == Window() and "1500 above 1000 for 60 s" in why


def test_the_autoscaler_stays_within_bounds_and_waits_for_a_settled_ring():
    window = Window(below_since=at(0))
    assert autoscale(AUTOSCALING, 10, window, 2, (1, 3), True, at(60))[1] == 1
    assert autoscale(AUTOSCALING, 10, window, 2, (2, 3), True, at(60))[1] is None  # the floor: min or RF
    assert autoscale(AUTOSCALING, 5000, Window(above_since=at(0)), 3, (1, 3), True, at(60))[1] is None
    unsettled = autoscale(AUTOSCALING, 10, window, 2, (1, 3), False, at(60))
    assert unsettled[1] is None and unsettled[0] == window  # the window goes on while the ring moves
    assert autoscale(AUTOSCALING, None, window, 2, (1, 3), True, at(60)) == (window, None, "")


def test_absent_bounds_are_the_defaults_of_reads_per_second():
    defaults = {"metric": READS_PER_SECOND, "windowSeconds": 60}  # what the apiserver stores: no bounds given
    assert autoscaling_bounds(defaults) == (477, 191)
    assert autoscaling_bounds(AUTOSCALING) == (1000, 100)
    assert autoscaling_bounds({"scaleUpAbove": 900}) == (900, 191)
    _, wanted, why = autoscale(defaults, 500, Window(above_since=at(0)), 1, (1, 3), True, at(60))
    assert wanted == 2 and "500 above 477 for 60 s" in why
    _, wanted, why = autoscale(defaults, 150, Window(below_since=at(0)), 2, (1, 3), True, at(60))
    assert wanted == 1 and "150 below 191 for 60 s" in why
    assert autoscale(defaults, 300, Window(), 2, (1, 3), True, at(60)) == (Window(), None, "")  # between the two


METRICS = """# TYPE org_apache_cassandra_metrics_client_request_latency histogram
org_apache_cassandra_metrics_client_request_latency_bucket{host="h",pod_name="p",request_type="Write",le="35",} 7.0
org_apache_cassandra_metrics_client_request_latency_count{host="h",pod_name="p",request_type="Write",} 7.0
org_apache_cassandra_metrics_client_request_latency_bucket{host="h",pod_name="p",request_type="Read",le="103",} {a}
org_apache_cassandra_metrics_client_request_latency_bucket{host="h",pod_name="p",request_type="Read",le="1597",} {b}
org_apache_cassandra_metrics_client_request_latency_bucket{host="h",pod_name="p",request_type="Read",le="+Inf",} {c}
org_apache_cassandra_metrics_client_request_latency_sum{host="h",pod_name="p",request_type="Read",} 1916.0
org_apache_cassandra_metrics_client_request_latency_count{host="h",pod_name="p",request_type="Read",} {c}
org_apache_cassandra_metrics_client_request_latency_read_one_count{host="h",pod_name="p",} 2.0
"""


def metrics(a: float, b: float, c: float) -> str:
    return METRICS.replace("{a}", str(a)).replace("{b}", str(b)).replace("{c}", str(c))


def test_the_nodes_read_rate_and_p99_come_from_their_read_histogram():
    before = {"sts-0": node_load(metrics(10, 10, 10), 100.0), "sts-1": node_load(metrics(0, 0, 0), 100.0)}
    assert before["sts-0"].reads == 10 and before["sts-0"].buckets[0] == (103.0, 10.0)
    now = {"sts-0": node_load(metrics(1000, 2010, 2010), 110.0), "sts-1": node_load(metrics(500, 1000, 1000), 110.0),
           "sts-2": node_load(metrics(5, 5, 5), 110.0)}  # a new node: no rate yet
    assert ring_load(READS_PER_SECOND, before, now) == pytest.approx((200 + 100) / 2)
    assert ring_load(LATENCY_P99, before, now) == 1597.0  # half of sts-0's reads took more than 103 µs
    restarted = {"sts-0": node_load(metrics(3, 3, 3), 120.0)}
    assert ring_load(READS_PER_SECOND, now, restarted) is None  # its counters started again
    assert node_load("# nothing yet\n", 0.0) is None


def test_a_node_reading_is_the_read_histogram_whatever_else_the_text_holds():
    """prometheus_client parses the read histogram's lines; other families (a node's text has every table's
    metrics), even lines it would refuse, are left aside, and a broken read sample gives no reading."""
    other = ('# HELP org_apache_cassandra_metrics_table_live_ss_table_count "Live \\"SSTables\\"\n'
             "org_apache_cassandra_metrics_table_live_ss_table_count{keyspace=\"k\",table=\"t\",} 4.0\n"
             "this line is not Prometheus text {{{\n")
    load = node_load(other + metrics(1, 2, 3) + other, 5.0)
    assert load == NodeLoad(5.0, 3.0, ((103.0, 1.0), (1597.0, 2.0), (math.inf, 3.0)))
    broken = metrics(1, 2, 3).replace("} 3", "} three", 1)
    assert node_load(broken, 5.0) is None


def test_last_step_status_has_times_or_nulls_never_booleans():
    down = step_status(Step(2, 1, at(0), "spec.nodes 1"), None, Cleanup(done_at=at(-30)))
    assert down == {"from": 2, "to": 1, "startedAt": stamp(0), "reason": "spec.nodes 1", "finishedAt": None,
                    "cleanupDoneAt": None}  # a scale-down has no cleanup of its own
    up = step_status(Step(1, 2, at(0), "spec.nodes 2"), at(120), Cleanup(done_at=at(110)))
    assert up["finishedAt"] == stamp(120) and up["cleanupDoneAt"] == stamp(110)
    assert step_status(Step(1, 2, at(0), "x"), None, Cleanup())["cleanupDoneAt"] is None
