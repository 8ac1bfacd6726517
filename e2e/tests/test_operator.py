"""The chart and the operator on the real local cluster, against a real Cassandra node.

One release of charts/ringfeed (e2e/values-local.yaml: locally built images) serves the module; the Cassandra node
(RING_ADDRESS_PREFIX + 1: the local cluster's node IP 10.244.0.1) is an existing ring outside the cluster, reached by
the operator and its Jobs through the Pod network, and by the tests from the cluster's network namespace. The
samples come from a hostPath folder: a CSV manifest of small JPEGs (6 patients × 2 classes) and one corrupt file.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import time
from pathlib import Path

import yaml
from kubernetes.client.exceptions import ApiException

from probes import check_isolated
from ringfeed.local import LocalRing
from ringfeed.splits import Filter, SplitSpec, load_split
from ringfeed.splits.engine import compute_split

from conftest import PATIENTS, SAMPLES_CLAIM, host_directory_claim
from kubecluster import (
    CHART,
    CHART_INSTALL,
    CRDS,
    GROUP,
    IMAGE_VERSION,
    LOCAL_SETTINGS,
    PULL_SECRET,
    REGISTRY,
    RELEASE,
    REPO,
    SYSTEM,
    VERSION,
    Cluster,
)
from prometheus import lint

# -- helpers -----------------------------------------------------------------------------------------------------

def dataset_manifest(name: str, ring: LocalRing, **spec) -> dict:
    """A Dataset on the external ring, ingesting the module's samples (`source`'s claim in its namespace)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Dataset", "metadata": {"name": name},
        "spec": {
            "storage": {"external": {"contactPoints": list(ring.hosts), "localDatacenter": "datacenter1",
                                     "credentialsSecret": {"name": "ring-credentials"}}},
            "schema": {"naturalKeys": [{"name": "path", "type": "text"}],
                       "metadata": [{"name": "patient_id", "type": "text"}],
                       "encoding": {"kind": "jpeg"}, "labelNames": ["normal", "tumor"]},
            "ingest": {"source": {"volume": {"persistentVolumeClaim": {"claimName": SAMPLES_CLAIM, "readOnly": True}},
                                  "path": "manifest.csv"},
                       "format": "manifest", "workers": 2, "concurrency": 16},
            **spec,
        },
    }


def create(cluster: Cluster, ns: str, plural: str, body: dict) -> dict:
    return cluster.custom.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)


def get(cluster: Cluster, ns: str, plural: str, name: str) -> dict | None:
    try:
        return cluster.custom.get_namespaced_custom_object(GROUP, VERSION, ns, plural, name)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def condition(obj: dict | None, type_: str) -> dict:
    for item in ((obj or {}).get("status") or {}).get("conditions") or ():
        if item["type"] == type_:
            return item
    return {}


def wait_ready(cluster: Cluster, ns: str, plural: str, name: str, timeout_s: float = 180) -> dict:
    def ready():
        obj = get(cluster, ns, plural, name)
        ready_condition = condition(obj, "Ready")
        if ready_condition.get("reason") in ("InvalidSpec", "Failed", "IngestFailed", "SchemaMismatch"):
            raise AssertionError(f"{plural}/{name} failed: {ready_condition}")
        return obj if ready_condition.get("status") == "True" else None
    return cluster.wait(f"{plural}/{name} Ready", ready, timeout_s)


def events(cluster: Cluster, ns: str, name: str) -> list:
    return [e for e in cluster.core.list_namespaced_event(ns).items if e.involved_object.name == name]


def expected_counts(source: Path) -> dict[int, int]:
    with open(source / "manifest.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["path"] != "corrupt.jpg"]
    return {label: sum(1 for r in rows if int(r["label"]) == label) for label in (0, 1)}


# -- the chart ---------------------------------------------------------------------------------------------------

# The chart's objects that are not the operator's: cass-operator's, helm test's, the uninstall guard's.
OTHERS = ("cass-operator", "test", "uninstall-guard")


def test_chart_lints_and_renders_least_privilege(cluster: Cluster):
    cluster.helm("lint", "--strict", str(CHART), *LOCAL_SETTINGS)
    rendered = cluster.helm("template", RELEASE, str(CHART), "-n", SYSTEM, *LOCAL_SETTINGS).stdout
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in documents}
    assert {("CustomResourceDefinition", crd) for crd in CRDS} <= kinds
    assert ("Deployment", "ringfeed") in kinds and ("ServiceAccount", "ringfeed") in kinds
    for crd in (d for d in documents if d["kind"] == "CustomResourceDefinition"):
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    operator_roles = [d for d in documents if d["kind"] == "ClusterRole"
                      and d["metadata"]["labels"].get("app.kubernetes.io/component") not in OTHERS]
    granted = {(group, resource, verb) for role in operator_roles
               for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
               for verb in rule["verbs"]}
    watched = ("datasets", "splits", "trainingjobs", "rings")
    needed = {("ringfeed.io", kind, verb) for kind in watched for verb in ("get", "list", "watch", "patch")}
    needed |= {("ringfeed.io", f"{kind}/status", "patch") for kind in watched}
    needed |= {("ringfeed.io", f"{kind}/finalizers", "update") for kind in watched}
    needed |= {("ringfeed.io", "rings/scale", "patch")}
    needed |= {("cassandra.datastax.com", "cassandradatacenters", verb) for verb in ("get", "create", "patch",
                                                                                    "delete")}
    needed |= {("control.k8ssandra.io", "cassandratasks", verb) for verb in ("list", "create")}
    needed |= {("kueue.x-k8s.io", "workloads", "list")}  # why a queued TrainingJob waits
    needed |= {("", "pods", "list"), ("", "pods", "watch"), ("", "pods/log", "get"), ("", "events", "create")}
    needed |= {("", "events", "list")}  # a Pod's Warnings while its containers are not created (FailedMount)
    # Services: a TrainingJob's rendezvous Service (get, create) and a cache tier's master Service (applied: patch,
    # deleted with spec.cache); a cache tier's StatefulSet and DaemonSets likewise; NetworkPolicies (applied).
    needed |= {(group, resource, verb) for group, resource in (("", "services"), ("apps", "statefulsets"),
                                                               ("apps", "daemonsets"),
                                                               ("networking.k8s.io", "networkpolicies"))
               for verb in ("get", "create", "patch", "delete")}
    needed |= {("", "secrets", verb) for verb in ("get", "create", "patch")}
    needed |= {("batch", "jobs", verb) for verb in ("get", "list", "watch", "create", "delete", "patch")}
    needed |= {("apiextensions.k8s.io", "customresourcedefinitions", verb) for verb in ("get", "list", "watch")}
    needed |= {("", "namespaces", verb) for verb in ("get", "list", "watch")}
    assert granted == needed  # exactly what the operator and kopf use: nothing missing, nothing more
    deployment = next(d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "ringfeed")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = deployment["spec"]["template"]["spec"]
    assert "hostNetwork" not in pod
    # Every image from global.imageRegistry, every Pod pulling with global.imagePullSecrets.
    assert f"--job-image={REGISTRY}/ringfeed/dataplane:{IMAGE_VERSION}" in pod["containers"][0]["args"]
    assert f"--ring-image={REGISTRY}/ringfeed/cassandra-maac:5.0.9" in pod["containers"][0]["args"]
    assert f"--image-pull-secrets={PULL_SECRET}" in pod["containers"][0]["args"]
    assert pod["imagePullSecrets"] == [{"name": PULL_SECRET}]
    # cass-operator comes with the chart (its CRDs, Deployment, RBAC, image configuration) unless one exists.
    cass_operator = {(d["kind"], d["metadata"]["name"]) for d in documents
                     if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "cass-operator"}
    assert {("Deployment", "ringfeed-cass-operator"), ("ConfigMap", "ringfeed-cass-operator-images"),
            ("CustomResourceDefinition", "cassandradatacenters.cassandra.datastax.com")} <= cass_operator | kinds
    without = [d for d in yaml.safe_load_all(cluster.helm("template", RELEASE, str(CHART), "-n", SYSTEM, "--set",
                                                          "cassOperator.enabled=false").stdout) if d]
    names = {d["metadata"]["name"] for d in without}
    assert "rings.ringfeed.io" in names  # the Ring CRD stays; cass-operator is someone else's
    assert not {"ringfeed-cass-operator", "cassandradatacenters.cassandra.datastax.com"} & names
    # A namespaced install binds the same rules per watched namespace instead of cluster-wide.
    scoped = cluster.helm("template", RELEASE, str(CHART), "-n", SYSTEM, "--set",
                          "operator.watchNamespaces={team-a,team-b}").stdout
    bindings = [d for d in yaml.safe_load_all(scoped) if d and d["kind"] in ("RoleBinding", "ClusterRoleBinding")
                and d["metadata"]["labels"].get("app.kubernetes.io/component") not in OTHERS]
    assert sorted((d["kind"], d["metadata"].get("namespace", "")) for d in bindings) == [
        ("ClusterRoleBinding", ""), ("RoleBinding", "team-a"), ("RoleBinding", "team-b")]
    for bad_value, field in (("operator.healthPort=0", "healthPort"), ("operator.replicas=2", "replicas"),
                             ("jobs.image.pullPolicy=Sometimes", "pullPolicy")):
        bad = cluster.helm("template", RELEASE, str(CHART), "--set", bad_value, check=False)
        assert bad.returncode != 0 and field in bad.stderr, bad_value  # values.schema.json
    no_metrics = cluster.helm("template", RELEASE, str(CHART), "--set", "operator.metricsPort=0").stdout
    assert "--metrics-port=0" in no_metrics and "kind: Service\n" not in no_metrics


def test_install_brings_the_operator_up(cluster: Cluster, release):
    status = cluster.helm("status", RELEASE, "-n", SYSTEM).stdout
    assert "STATUS: deployed" in status and "kubectl explain ring.spec" in status  # NOTES.txt
    assert all(f"  {kind} " in status for kind in ("Ring", "Dataset", "Split", "TrainingJob"))
    deployment = cluster.apps.read_namespaced_deployment("ringfeed", SYSTEM)
    assert deployment.status.available_replicas == 1
    # Installed from the packaged chart: every image from the registry, pinned by digest.
    pod = deployment.spec.template.spec
    images = [pod.containers[0].image, *(arg.split("=", 1)[1] for arg in pod.containers[0].args
                                         if arg.split("=")[0] in ("--job-image", "--ring-image", "--cache-image"))]
    assert len(images) == 4 and all(re.fullmatch(rf"{REGISTRY}/ringfeed/[a-z-]+:[0-9.]+@sha256:[0-9a-f]{{64}}", image)
                                    for image in images), images
    # Nothing was imported into the node: what it holds beside its pause image, it pulled from the registry (or from
    # its mirror of ghcr.io, which serves the same images: e2e/host and the quickstart pull from there).
    node_images = {name for image in cluster.core.read_node(cluster.node).status.images for name in image.names
                   if not name.startswith("sha256:")}
    pulled = (f"{REGISTRY}/", "ghcr.io/ringfeed/")  # the registry's: Ringfeed's, and the Kueue test's
    assert {name for name in node_images if not name.startswith(pulled)} == {"localhost/ringfeed/pause:1.0"}
    # helm test: the operator answers, the CRDs are established, each sample passes a server-side dry run.
    tested = cluster.helm("test", RELEASE, "-n", SYSTEM, "--logs", timeout=180).stdout
    assert "PASS operator" in tested and "PASS crds" in tested and "PASS samples" in tested, tested
    assert "FAIL" not in tested, tested
    for crd in CRDS:
        established = cluster.kubectl("get", "crd", crd, "-o",
                                      "jsonpath={.status.conditions[?(@.type=='Established')].status}").stdout
        assert established == "True"
    # The operator's own endpoints answer on its Pod IP, and the metrics through the chart's Service too.
    import urllib.request

    pod = cluster.core.list_namespaced_pod(SYSTEM, label_selector="app.kubernetes.io/component=operator").items[0]
    assert urllib.request.urlopen(f"http://{pod.status.pod_ip}:8080/healthz", timeout=5).status == 200
    service = next(s for s in cluster.core.list_namespaced_service(SYSTEM).items
                   if any(port.port == 9090 for port in s.spec.ports))
    metrics = urllib.request.urlopen(f"http://{service.spec.cluster_ip}:9090/metrics", timeout=5).read().decode()
    assert "ringfeed_operator_reconciles_total" in metrics
    assert lint(metrics) == ""  # Prometheus' own linter
    # The chart's NetworkPolicy: the metrics only for the monitoring namespace (this process is the node: let in).
    check_isolated(cluster, SYSTEM, {"metrics": f"{pod.status.pod_ip}:9090"})
    # The operator's requests (its watches at least) went through the chart's priority level (operator.apiPriority).
    dispatched = re.findall(r'^apiserver_flowcontrol_dispatched_requests_total\{flow_schema="ringfeed-operator",'
                            r'priority_level="([^"]+)"\} (\S+)$', cluster.kubectl("get", "--raw", "/metrics").stdout,
                            re.MULTILINE)
    assert dispatched and {level for level, _ in dispatched} == {"ringfeed-operator"}
    assert sum(float(count) for _, count in dispatched) > 0


# -- Dataset and Split -------------------------------------------------------------------------------------------

def test_dataset_ingests_and_becomes_ready(cluster: Cluster, ns: str, ring, store, source):
    """Over TLS: the operator, the ingest Job (and the split Job of the next test) verify the node's certificate."""
    cluster.kubectl("create", "secret", "generic", "ring-credentials", "-n", ns, "--from-literal=username=cassandra",
                    "--from-literal=password=cassandra")
    cluster.kubectl("create", "secret", "generic", "ring-ca", "-n", ns, f"--from-file=ca.crt={ring.tls_ca_file}")
    manifest = dataset_manifest("slides", ring)
    manifest["spec"]["storage"]["external"]["tls"] = {"enabled": True, "caSecret": {"name": "ring-ca"}}
    create(cluster, ns, "datasets", manifest)
    dataset = wait_ready(cluster, ns, "datasets", "slides")
    counts = expected_counts(source)
    status = dataset["status"]
    assert status["keyspace"] == "slides"
    assert status["samples"] == sum(counts.values()) and status["labels"] == 2
    assert status["labelCounts"] == [{"label": 0, "name": "normal", "samples": counts[0]},
                                     {"label": 1, "name": "tumor", "samples": counts[1]}]
    assert status["ingest"]["ingested"] == sum(counts.values()) and status["ingest"]["rejected"] == 1
    assert condition(dataset, "Ingesting")["reason"] == "Completed"
    assert condition(dataset, "Degraded")["status"] == "False"
    # The ring holds what the status says.
    info = store.info("slides")
    assert (info.samples, info.label_counts) == (status["samples"], counts)
    assert store.count_rows("slides", "data_by_uuid") == sum(counts.values())
    reasons = [e.reason for e in events(cluster, ns, "slides")]
    assert {"TablesCreated", "IngestStarted", "IngestSucceeded"} <= set(reasons)
    jobs = cluster.batch.list_namespaced_job(ns, label_selector="ringfeed.io/dataset=slides").items
    assert len(jobs) == 1
    pod = jobs[0].spec.template.spec
    env = {e.name: e for e in pod.containers[0].env}
    assert env["RINGFEED_LOGIN_DIR"].value == "/etc/ringfeed/login"  # the login as files, never variables
    assert not any(e.value_from for e in pod.containers[0].env)
    assert next(v for v in pod.volumes if v.name == "ring-login").secret.secret_name == "ring-credentials"
    assert env["RINGFEED_TLS_CA_FILE"].value == "/etc/ringfeed/tls/ca.crt"
    assert env["RINGFEED_LOCAL_DC"].value == "datacenter1"
    table = cluster.kubectl("get", "datasets", "-n", ns).stdout
    header, row = table.splitlines()[:2]
    assert header.split()[:4] == ["NAME", "READY", "SAMPLES", "LABELS"]
    assert row.split()[:4] == ["slides", "True", str(sum(counts.values())), "2"]


def test_split_is_computed_with_the_engines_figures_and_is_immutable(cluster: Cluster, ns: str, store):
    # Filter values with the characters an option syntax would split or unescape, or Kubernetes expand in a
    # container's arguments, reach the Job unchanged.
    odd_values = ["P,0", "it's \"x\"", "C:\\data\\P01", "k=v (1)", "$(HOME) $$"]
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Split", "metadata": {"name": "by-patient"},
            "spec": {"dataset": "slides", "ratios": [2, 1, 1], "groupBy": ["patient_id"], "seed": 7,
                     "filters": [{"column": "patient_id", "operator": "not in", "values": odd_values}]}}
    create(cluster, ns, "splits", body)
    split = wait_ready(cluster, ns, "splits", "by-patient")
    status = split["status"]
    stored = load_split(store, "slides", "by-patient")
    wanted = SplitSpec(ratios=(2, 1, 1), group_by=("patient_id",), seed=7,
                       filters=(Filter("patient_id", "not in", tuple(odd_values)),))
    assert stored.spec == wanted
    # The engine on the same metadata, here in the test, gives the same assignment.
    table = store.scan("slides", "metadata_by_nat", ["uuid", "label", "sample_bytes", "patient_id"])
    expected = compute_split(table, wanted, ("normal", "tumor"))
    assert status["contentHash"] == stored.content_hash == expected.content_hash
    assert status["version"] == stored.version and status["splitId"] == str(stored.split_id)
    assert status["samples"] == sum(len(p) for p in expected.parts.values())
    assert status["groups"] == expected.stats["groups"] == PATIENTS
    for part, stats in zip(status["parts"], expected.stats["parts"], strict=True):
        assert (part["name"], part["samples"], part["target"], part["groups"], part["bytes"]) == (
            stats["name"], stats["samples"], stats["target"], stats["groups"], stats["bytes"])
        assert {c["name"]: c["samples"] for c in part["labels"]} == {
            ("normal", "tumor")[int(label)]: counts["samples"] for label, counts in stats["labels"].items()}
    assert {e.reason for e in events(cluster, ns, "by-patient")} >= {"SplitStarted", "SplitComputed"}
    # Immutable: the schema refuses an edit of a parameter, with a message saying what to do.
    patch = cluster.kubectl("patch", "split", "by-patient", "-n", ns, "--type=merge", "-p",
                            json.dumps({"spec": {"seed": 8}}), check=False)
    assert patch.returncode != 0 and "immutable" in patch.stderr
    assert get(cluster, ns, "splits", "by-patient")["spec"]["seed"] == 7
    columns = cluster.kubectl("get", "splits", "-n", ns).stdout.splitlines()
    assert columns[0].split()[:5] == ["NAME", "READY", "DATASET", "SAMPLES", "PARTS"]
    assert columns[1].split()[:5] == ["by-patient", "True", "slides", str(status["samples"]), "train,val,test"]
    # The Dataset counts its Splits (the SPLITS column).
    cluster.wait("Dataset slides counts 1 Split",
                 lambda: get(cluster, ns, "datasets", "slides")["status"].get("splits") == 1, 60)


def test_a_ring_certificate_from_another_ca_is_refused(cluster: Cluster, ns: str, ring, source, tmp_path):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other",
                    "-keyout", str(tmp_path / "ca.key"), "-out", str(tmp_path / "ca.crt")], check=True,
                   capture_output=True)
    cluster.kubectl("create", "secret", "generic", "other-ca", "-n", ns, f"--from-file=ca.crt={tmp_path / 'ca.crt'}")
    manifest = dataset_manifest("untrusted", ring)
    manifest["spec"]["storage"]["external"]["tls"] = {"enabled": True, "caSecret": {"name": "other-ca"}}
    create(cluster, ns, "datasets", manifest)
    refused = cluster.wait("Ready=False RingUnreachable", lambda: condition(
        get(cluster, ns, "datasets", "untrusted"), "Ready").get("reason") == "RingUnreachable", timeout_s=60)
    assert refused
    message = condition(get(cluster, ns, "datasets", "untrusted"), "Ready")["message"]
    assert "cannot reach Cassandra" in message and f"{ring.hosts[0]}:9042" in message
    assert "--hosts" not in message and "ringfeed local" not in message  # no CLI hint in a condition
    assert not cluster.batch.list_namespaced_job(ns, label_selector="ringfeed.io/dataset=untrusted").items
    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "datasets", "untrusted")
    cluster.wait("untrusted deleted", lambda: get(cluster, ns, "datasets", "untrusted") is None, timeout_s=60)


def test_a_failed_ingest_and_an_infeasible_split_are_reported_once(cluster: Cluster, ns: str, ring, source):
    # A source volume the kubelet cannot mount leaves the Pod in ContainerCreating; the reason is in its events only.
    unmounted = dataset_manifest("unmounted", ring)
    unmounted["spec"]["ingest"]["source"]["volume"] = {"configMap": {"name": "no-such-manifests"}}
    create(cluster, ns, "datasets", unmounted)
    manifest = dataset_manifest("broken", ring)
    manifest["spec"]["ingest"]["source"]["path"] = "no-such-manifest.csv"
    create(cluster, ns, "datasets", manifest)
    failed = cluster.wait("Ready=False IngestFailed", lambda: (obj := get(cluster, ns, "datasets", "broken"))
                          and condition(obj, "Ready").get("reason") == "IngestFailed" and obj, timeout_s=120)
    degraded = condition(failed, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "IngestFailed"
    assert "no-such-manifest.csv" in degraded["message"]  # the Job's own error, from its log
    assert failed["status"]["ingest"]["failedAt"]
    time.sleep(11)  # two more rounds of the operator's 5 s timer
    # Reported once; not run again until spec.ingest changes.
    assert [e.reason for e in events(cluster, ns, "broken")].count("IngestFailed") == 1
    assert len(cluster.batch.list_namespaced_job(ns, label_selector="ringfeed.io/dataset=broken").items) == 1
    # A change of the spec, its tuning alone (as more memory would be), runs it again as another Job; the failed one
    # goes. It fails again, and is reported again.
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "datasets", "broken",
                                                  {"spec": {"ingest": {"workers": 3}}})
    again = cluster.wait("the ingest run again, failed", lambda: (obj := get(cluster, ns, "datasets", "broken"))
                         and obj["status"]["ingest"]["jobName"].endswith("-g2")
                         and obj["status"]["ingest"].get("failedAt") and obj, timeout_s=120)
    assert again["status"]["ingest"]["jobName"] != failed["status"]["ingest"]["jobName"]
    cluster.wait("the failed Job gone", lambda: [job.metadata.name for job in cluster.batch.list_namespaced_job(
        ns, label_selector="ringfeed.io/dataset=broken").items] == [again["status"]["ingest"]["jobName"]],
                 timeout_s=60)
    cluster.wait("reported again", lambda: [e.reason for e in events(cluster, ns, "broken")].count(
        "IngestFailed") == 2, timeout_s=30)
    # A Pod no node can take says so in the condition, in the scheduler's words, instead of "running".
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "datasets", "broken", {"spec": {"ingest": {
        "resources": {"requests": {"cpu": "5000", "memory": "64Mi"}}}}})
    stuck = cluster.wait("Ingesting PodNotStarting", lambda: (obj := get(cluster, ns, "datasets", "broken"))
                         and condition(obj, "Ingesting").get("reason") == "PodNotStarting" and obj, timeout_s=90)
    message = condition(stuck, "Ingesting")["message"]
    assert stuck["status"]["ingest"]["jobName"].endswith("-g3") and "Unschedulable" in message
    assert "Insufficient cpu" in message, message
    stuck = cluster.wait("Ingesting PodNotStarting FailedMount",
                         lambda: (obj := get(cluster, ns, "datasets", "unmounted"))
                         and condition(obj, "Ingesting").get("reason") == "PodNotStarting" and obj, timeout_s=90)
    message = condition(stuck, "Ingesting")["message"]
    assert "FailedMount" in message and 'configmap "no-such-manifests" not found' in message, message

    create(cluster, ns, "splits", {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Split",
                                   "metadata": {"name": "too-many-parts"},
                                   "spec": {"dataset": "slides", "folds": PATIENTS + 1, "groupBy": ["patient_id"]}})
    split = cluster.wait("Split Ready=False Failed", lambda: (obj := get(cluster, ns, "splits", "too-many-parts"))
                         and condition(obj, "Ready").get("reason") == "Failed" and obj, timeout_s=120)
    assert f"{PATIENTS + 1} parts need at least {PATIENTS + 1} groups of patient_id" in condition(split, "Ready")[
        "message"]
    assert [e.reason for e in events(cluster, ns, "too-many-parts")].count("SplitFailed") == 1
    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "splits", "too-many-parts")
    for name in ("broken", "unmounted"):
        cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "datasets", name)
    cluster.wait("deleted", lambda: get(cluster, ns, "splits", "too-many-parts") is None
                 and get(cluster, ns, "datasets", "broken") is None and get(cluster, ns, "datasets", "unmounted")
                 is None, timeout_s=60)


def test_deletion_guards_hold_until_references_are_gone(cluster: Cluster, ns: str, ring, source, store):
    create(cluster, ns, "datasets", dataset_manifest("scratch", ring, deletionPolicy="Delete"))
    wait_ready(cluster, ns, "datasets", "scratch")
    create(cluster, ns, "splits", {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Split",
                                   "metadata": {"name": "scratch-halves"},
                                   "spec": {"dataset": "scratch", "ratios": [1, 1]}})
    wait_ready(cluster, ns, "splits", "scratch-halves")
    trainer = yaml.safe_load((REPO / "crds" / "samples" / "trainingjob.yaml").read_text())
    trainer["metadata"] = {"name": "scratch-trainer"}
    trainer["spec"]["split"] = {"name": "scratch-halves", "part": "train"}
    trainer["spec"]["suspend"] = True  # the guard is under test, not training: no Pods
    create(cluster, ns, "trainingjobs", trainer)

    cluster.kubectl("delete", "dataset", "scratch", "-n", ns, "--wait=false")
    cluster.kubectl("delete", "split", "scratch-halves", "-n", ns, "--wait=false")
    blocked = cluster.wait("DeletionBlocked events", lambda: {
        e.involved_object.name: e.message for e in cluster.core.list_namespaced_event(ns).items
        if e.reason == "DeletionBlocked"}.keys() >= {"scratch", "scratch-halves"}, timeout_s=60)
    assert blocked
    messages = {e.involved_object.name: e.message for e in cluster.core.list_namespaced_event(ns).items
                if e.reason == "DeletionBlocked"}
    assert "used by Split(s) scratch-halves" in messages["scratch"]
    assert "used by TrainingJob(s) scratch-trainer" in messages["scratch-halves"]
    def blocked_count(name):
        return sum(e.count or 1 for e in cluster.core.list_namespaced_event(ns).items
                   if e.reason == "DeletionBlocked" and e.involved_object.name == name)
    cluster.wait("a retried deletion, still blocked", lambda: blocked_count("scratch") >= 2, timeout_s=60)
    assert get(cluster, ns, "datasets", "scratch") and get(cluster, ns, "splits", "scratch-halves")
    assert "scratch" in {i.schema.name for i in store.datasets()}

    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "scratch-trainer")
    cluster.wait("Split and Dataset gone", lambda: get(cluster, ns, "splits", "scratch-halves") is None
                 and get(cluster, ns, "datasets", "scratch") is None, timeout_s=90)
    # deletionPolicy Delete dropped the keyspace and the catalog entry; the other Dataset's tables are untouched.
    assert "scratch" not in {i.schema.name for i in store.datasets()}
    assert store.session.execute("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s",
                                 ("scratch",)).one() is None
    assert store.info("slides").samples == sum(expected_counts(source).values())


def test_a_keyspace_another_dataset_owns_is_left_alone(cluster: Cluster, ns: str, ring, source, store):
    """Same name, another namespace, same ring: the later Dataset neither adopts, ingests into nor drops the earlier
    one's keyspace, even with deletionPolicy Delete."""
    other = f"{ns}-b"
    cluster.kubectl("create", "namespace", other)
    try:
        host_directory_claim(cluster, other, SAMPLES_CLAIM, source)
        create(cluster, other, "datasets", dataset_manifest("slides", ring, deletionPolicy="Delete"))
        cluster.wait("Ready=False KeyspaceInUse", lambda: condition(
            get(cluster, other, "datasets", "slides"), "Ready").get("reason") == "KeyspaceInUse", timeout_s=60)
        message = condition(get(cluster, other, "datasets", "slides"), "Ready")["message"]
        assert f"keyspace slides on this ring belongs to Dataset {ns}/slides" in message
        assert "create it with another spec.keyspace" in message
        time.sleep(6)  # a round of the operator's 5 s timer: it leaves the object alone too
        refused = get(cluster, other, "datasets", "slides")
        assert condition(refused, "Ready")["reason"] == "KeyspaceInUse"
        assert "keyspace" not in refused["status"] and "samples" not in refused["status"]
        assert not cluster.batch.list_namespaced_job(other, label_selector="ringfeed.io/dataset=slides").items
        cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, other, "datasets", "slides")
        cluster.wait("the refused Dataset deleted", lambda: get(cluster, other, "datasets", "slides") is None,
                     timeout_s=60)
        assert store.info("slides").samples == sum(expected_counts(source).values())
        assert condition(get(cluster, ns, "datasets", "slides"), "Ready")["status"] == "True"
    finally:
        cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
        cluster.kubectl("delete", "persistentvolumes", f"{other}-{SAMPLES_CLAIM}", "--wait=false", check=False)


def test_operator_killed_mid_reconcile_converges(cluster: Cluster, ns: str, ring, source, store):
    """Kill the operator right after the Dataset is created and again while its ingest Job runs: one Job, one
    ingest, the same status as an undisturbed run."""
    create(cluster, ns, "datasets", dataset_manifest("resilient", ring))
    cluster.replace_pod(SYSTEM, "app.kubernetes.io/component=operator")
    cluster.wait("the ingest Job", lambda: cluster.batch.list_namespaced_job(
        ns, label_selector="ringfeed.io/dataset=resilient").items, timeout_s=90)
    cluster.replace_pod(SYSTEM, "app.kubernetes.io/component=operator")
    dataset = wait_ready(cluster, ns, "datasets", "resilient")
    counts = expected_counts(source)
    assert dataset["status"]["samples"] == sum(counts.values())
    assert dataset["status"]["labelCounts"][1]["samples"] == counts[1]
    jobs = cluster.batch.list_namespaced_job(ns, label_selector="ringfeed.io/dataset=resilient").items
    assert len(jobs) == 1, [j.metadata.name for j in jobs]
    # The ingest ran once: one Pod, succeeded (events queued by a killed operator may be lost, Jobs are not).
    assert (jobs[0].status.succeeded, jobs[0].status.failed) == (1, None)
    assert len(cluster.core.list_namespaced_pod(ns, label_selector=f"job-name={jobs[0].metadata.name}").items) == 1
    reasons = [e.reason for e in events(cluster, ns, "resilient")]
    assert reasons.count("IngestStarted") <= 1 and reasons.count("TablesCreated") <= 1
    # kopf recorded the create as handled (no pending progress annotations left).
    annotations = dataset["metadata"].get("annotations") or {}
    assert "operator.ringfeed.io/last-handled-configuration" in annotations
    assert not [key for key in annotations if key.startswith("operator.ringfeed.io/reconcile_dataset")]
    assert store.count_rows("resilient", "data_by_uuid") == sum(counts.values())
    assert dataset["status"]["observedGeneration"] == dataset["metadata"]["generation"]


def test_upgrade_keeps_objects_and_uninstall_removes_the_operator(cluster: Cluster, ns: str, release):
    cluster.helm("upgrade", RELEASE, *CHART_INSTALL, "-n", SYSTEM, *LOCAL_SETTINGS, "--set",
                 "operator.verbose=false", "--wait", "--timeout", "180s", timeout=240)
    assert json.loads(cluster.helm("status", RELEASE, "-n", SYSTEM, "-o", "json").stdout)["version"] == 2
    deployment = cluster.apps.read_namespaced_deployment("ringfeed", SYSTEM)
    assert "--verbose" not in deployment.spec.template.spec.containers[0].args
    assert condition(wait_ready(cluster, ns, "datasets", "slides"), "Ready")["status"] == "True"
    # The new operator resumed every object without starting anything again.
    ingest_jobs = "ringfeed.io/dataset=slides,app.kubernetes.io/component=ingest"
    assert len(cluster.batch.list_namespaced_job(ns, label_selector=ingest_jobs).items) == 1
    assert [e.reason for e in events(cluster, ns, "slides")].count("IngestStarted") == 1

    # While Ringfeed objects remain, uninstalling is refused (their finalizers need the operator), naming them.
    refused = cluster.helm("uninstall", RELEASE, "-n", SYSTEM, "--wait", check=False, timeout=180)
    assert refused.returncode != 0 and "ringfeed-delete-ringfeed-objects-first" in refused.stderr, refused.stderr
    listed = cluster.kubectl("logs", "-n", SYSTEM, "job/ringfeed-delete-ringfeed-objects-first").stdout
    assert f"datasets {ns}/slides" in listed and "--no-hooks" in listed, listed
    assert cluster.apps.read_namespaced_deployment("ringfeed", SYSTEM).status.available_replicas == 1
    # --no-hooks uninstalls all the same, leaving the objects to a reinstall.
    cluster.helm("uninstall", RELEASE, "-n", SYSTEM, "--no-hooks", "--wait", timeout=180)
    assert cluster.apps.list_namespaced_deployment(SYSTEM).items == []
    assert cluster.helm("list", "-n", SYSTEM, "-q").stdout.strip() == ""
    for kind in ("flowschema", "prioritylevelconfiguration"):
        assert cluster.kubectl("get", kind, "ringfeed-operator", check=False).returncode != 0, kind
    # The CRDs, and so every Dataset, stay (resource-policy keep); a reinstall adopts them.
    assert get(cluster, ns, "datasets", "slides") is not None
    cluster.helm("install", RELEASE, *CHART_INSTALL, "-n", SYSTEM, *LOCAL_SETTINGS, "--wait", "--timeout",
                 "180s", timeout=240)
    assert cluster.apps.read_namespaced_deployment("ringfeed", SYSTEM).status.available_replicas == 1
