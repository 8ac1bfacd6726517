"""The builders: spec → data-plane objects, Job manifests, status from stored results."""

from __future__ import annotations

import copy
import datetime as dt
import re
import uuid

import click
import numpy as np
import pytest

from ringfeed.cli.splits import spec_from_json, split_create
from ringfeed.errors import RingfeedError
from ringfeed.ring import RingRef, RingSecrets
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import SplitSpec
from ringfeed.splits.engine import compute_split
from ringfeed.splits.spec import Filter
from ringfeed.splits.storage import StoredSplit
from ringfeed.store import DatasetInfo
from ringfeed.table import ColumnarTable
from ringfeed_operator.builders.dataset import (
    catalog_name,
    dataset_schema,
    ingest_fingerprint,
    ingest_job_suffix,
    ingest_summary_status,
    keyspace_claim,
    keyspace_in_use,
    keyspace_owner,
    recount_status,
    refresh_due,
    replicas_beyond_ring,
    ring_keyspace,
    same_tables,
    stats_status,
)
from ringfeed_operator.builders.jobs import TTL_SECONDS_AFTER_FINISHED, ingest_job, job_name, split_job
from ringfeed_operator.builders.meta import bounded_name
from ringfeed_operator.builders.ring import ring_env
from ringfeed_operator.builders.split import split_arguments, split_spec, split_status
from ringfeed_operator.config import JobsConfig

DATASET = {
    "apiVersion": "ringfeed.io/v1alpha1", "kind": "Dataset",
    "metadata": {"name": "tumour-slides", "namespace": "ml", "uid": "0b6f1c2e-1111-2222-3333-444455556666",
                 "generation": 3},
    "spec": {
        "storage": {"external": {"contactPoints": ["cass-0.db", "cass-1.db"], "port": 9142,
                                 "credentialsSecret": {"name": "cass", "usernameKey": "user",
                                                       "passwordKey": "pass"}}},
        "schema": {"naturalKeys": [{"name": "patient_id", "type": "text"}, {"name": "slide", "type": "int"}],
                   "metadata": [{"name": "scanner", "type": "text"}],
                   "encoding": {"kind": "jpeg"}, "labelNames": ["normal", "tumor"], "metadataByUuid": True},
        "replication": {"replicationFactor": 2},
        "ingest": {"source": {"volume": {"persistentVolumeClaim": {"claimName": "raw"}}, "path": "slides/v1"},
                   "format": "imagefolder", "workers": 4, "concurrency": 32, "fullDecode": True},
    },
}
SETTINGS = JobsConfig(image="registry.example/ringfeed/dataplane:9")


def test_dataset_spec_becomes_the_data_plane_schema():
    schema = dataset_schema("tumour-slides", DATASET["spec"])
    assert schema == DatasetSchema("tumour_slides", (Column("patient_id", "text"), Column("slide", "int")),
                                   Encoding("jpeg"), (Column("scanner", "text"),), ("normal", "tumor"), True, 2)
    assert catalog_name("tumour-slides", {**DATASET["spec"], "keyspace": "slides_v2"}) == "slides_v2"
    raw = copy.deepcopy(DATASET["spec"])
    raw["schema"]["encoding"] = {"kind": "raw", "dtype": "float32", "shape": [1, 64, 64]}
    assert dataset_schema("t", raw).encoding == Encoding("raw", "float32", (1, 64, 64))
    bad = copy.deepcopy(DATASET["spec"])
    bad["schema"]["naturalKeys"] = [{"name": "score", "type": "double"}]
    with pytest.raises(RingfeedError, match="natural key 'score' must be one of text, int, bigint"):
        dataset_schema("t", bad)


def test_a_local_datacenter_reaches_the_operator_and_the_jobs():
    storage = copy.deepcopy(DATASET["spec"]["storage"])
    assert RingRef.from_spec(storage).local_dc is None
    assert "RINGFEED_LOCAL_DC" not in {e["name"] for e in ring_env(storage, None)}
    storage["external"]["localDatacenter"] = "dc-west"
    assert RingRef.from_spec(storage).local_dc == "dc-west"
    assert {"name": "RINGFEED_LOCAL_DC", "value": "dc-west"} in ring_env(storage, None)


def test_a_keyspace_belongs_to_the_earliest_dataset_claiming_it_on_that_ring():
    spec = DATASET["spec"]
    claimed = ring_keyspace("ml", "tumour-slides", spec)
    assert claimed == ((("cass-0.db", "cass-1.db"), 9142), "tumour_slides")
    reordered = copy.deepcopy(spec)
    reordered["storage"]["external"]["contactPoints"].reverse()
    assert ring_keyspace("ml", "tumour-slides", reordered) == claimed  # same ring, same keyspace
    assert ring_keyspace("ml", "renamed", {**spec, "keyspace": "tumour_slides"}) == claimed
    elsewhere = copy.deepcopy(spec)
    elsewhere["storage"]["external"]["port"] = 9042
    assert ring_keyspace("ml", "tumour-slides", elsewhere) != claimed
    def claim(namespace, name, created, holds=False, keyspace=None):
        spec_ = {**spec, "keyspace": keyspace} if keyspace else spec
        return keyspace_claim(namespace, name, spec_, {"keyspace": "tumour_slides"} if holds else {},
                              {"creationTimestamp": created})
    newcomers = [claim("b", "tumour-slides", "2026-11-22T10:00:05Z"),
                 claim("z", "tumour-slides", "2026-11-22T10:00:01Z"),
                 claim("a", "older", "2026-11-22T10:00:01Z", keyspace="tumour_slides")]
    assert keyspace_owner(newcomers) == ("a", "older")  # earliest, then by namespace and name
    assert keyspace_owner(newcomers[:1] * 2) == ("b", "tumour-slides")  # a Dataset's own claim may come twice
    # One whose tables were reconciled keeps the keyspace against any newcomer, however old.
    holder = claim("c", "tumour-slides", "2026-11-22T11:00:00Z", holds=True)
    assert keyspace_owner([*newcomers, holder]) == ("c", "tumour-slides")
    assert keyspace_owner([holder, claim("a", "tumour-slides", "2026-11-22T09:00:00Z", holds=True)]) == (
        "a", "tumour-slides")  # two holders (shared before ownership existed): the earliest


@pytest.mark.parametrize(("factor", "max_nodes", "refused"), [
    (None, None, False), (1, 1, False), (3, 3, False), (2, 1, True), (3, None, False), (4, None, True), (5, 4, True)])
def test_a_ring_that_cannot_grow_to_the_replication_factor_is_named(factor, max_nodes, refused):
    spec = {"storage": {"ring": {"name": "images"}}}
    if factor is not None:
        spec["replication"] = {"replicationFactor": factor}
    ring = {"metadata": {"name": "images"}, "spec": {} if max_nodes is None else {"maxNodes": max_nodes}}
    message = replicas_beyond_ring(spec, ring)
    assert (message is not None) == refused
    if refused:
        assert f"replicationFactor {factor} needs {factor} nodes" in message and "Ring images" in message


def ran(suffix: str, generation: int, end: str | None = None) -> dict:
    recorded = {"jobName": f"slides-ingest-{suffix}", "generation": generation}
    if end:
        recorded[end] = "2026-11-30T06:00:00Z"
    return recorded


@pytest.mark.parametrize(("recorded", "generation", "wanted"), [
    ({}, 1, "f1"),                                            # the first ingest
    (ran("f1", 1), 1, "f1"),                                  # running: the same Job
    (ran("f1", 1, "completedAt"), 2, None),                   # done; a tuning change runs nothing
    (ran("f1", 1, "failedAt"), 1, None),                      # failed; nothing changed since: it waits
    (ran("f1", 1, "failedAt"), 2, "f1-g2"),                   # failed, then more memory: run again, another Job
    (ran("f1-g2", 2), 2, "f1-g2"),                            # that run again, running
    (ran("f1-g2", 2, "failedAt"), 2, None),                   # failed again; nothing changed since
    (ran("f1-g2", 2, "failedAt"), 4, "f1-g4"),                # failed again, changed again
    (ran("f1-g2", 2, "completedAt"), 5, None),                # the run again done; tuning changes run nothing
    (ran("f0", 1, "failedAt"), 2, "f1"),                      # other inputs after a failure
    (ran("f0-g3", 3, "completedAt"), 4, "f1"),                # other inputs after a done run again
])
def test_a_failed_ingest_runs_again_once_the_spec_changes_and_a_done_one_never(recorded, generation, wanted):
    assert ingest_job_suffix("f1", recorded, generation) == wanted


def test_existing_tables_match_when_only_class_names_grew():
    declared = dataset_schema("tumour-slides", DATASET["spec"])
    grown = DatasetSchema(declared.name, declared.natural_keys, declared.encoding, declared.metadata,
                          ("normal", "tumor", "stroma"), True, 1)
    assert same_tables(declared, grown) == []  # labels appended by an ingest; RF is the keyspace's business
    renumbered = DatasetSchema(declared.name, declared.natural_keys, declared.encoding, declared.metadata,
                               ("tumor", "normal"))
    assert same_tables(declared, renumbered) == ["label names: spec ['normal', 'tumor'] vs ring ['tumor', 'normal']"]
    other_keys = DatasetSchema(declared.name, declared.natural_keys[:1], declared.encoding, declared.metadata)
    assert same_tables(declared, other_keys)[0].startswith("natural_keys:")


def test_ingest_fingerprint_changes_with_what_is_ingested_only():
    ingest = DATASET["spec"]["ingest"]
    assert len(ingest_fingerprint(ingest)) == 8
    # Tuning, and defaults written out by the API server, start no new ingest.
    for same in ({**ingest, "workers": 5, "concurrency": 8, "consistency": "QUORUM", "resources": {"limits": {}}},
                 {**ingest, "pathColumn": "path", "labelColumn": "label", "maxSampleMB": 64}):
        assert ingest_fingerprint(same) == ingest_fingerprint(ingest)
    for other in ({**ingest, "format": "manifest"}, {**ingest, "fullDecode": False}, {**ingest, "maxSampleMB": 8},
                  {**ingest, "source": {**ingest["source"], "path": "slides/v2"}}):
        assert ingest_fingerprint(other) != ingest_fingerprint(ingest)


def test_ingest_job_runs_ringfeed_ingest_with_the_spec_and_the_secret():
    job = ingest_job(DATASET, "tumour_slides", "abcd1234", SETTINGS)
    assert job["metadata"]["name"] == "tumour-slides-ingest-abcd1234"
    assert job["metadata"]["ownerReferences"][0] == {
        "apiVersion": "ringfeed.io/v1alpha1", "kind": "Dataset", "name": "tumour-slides",
        "uid": DATASET["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    pod = job["spec"]["template"]["spec"]
    assert "hostNetwork" not in pod and pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    assert container["image"] == "registry.example/ringfeed/dataplane:9"
    assert container["args"] == ["ingest", "tumour_slides", "/data/slides/v1", "--format=imagefolder",
                                 "--path-column=path", "--label-column=label", "--workers=4", "--concurrency=32",
                                 "--max-sample-mb=64", "--consistency=ONE", "--metrics-port=9102", "--full-decode"]
    # its progress and rejects, for Prometheus while it runs
    assert container["ports"] == [{"name": "metrics", "containerPort": 9102}]
    assert job["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9102"
    env = {e["name"]: e for e in container["env"]}
    assert env["RINGFEED_HOSTS"]["value"] == "cass-0.db,cass-1.db" and env["RINGFEED_PORT"]["value"] == "9142"
    assert env["RINGFEED_LOGIN_DIR"]["value"] == "/etc/ringfeed/login"  # files, never variables
    assert not any("valueFrom" in e for e in container["env"])
    assert {"name": "ring-login", "secret": {"secretName": "cass", "items": [
        {"key": "user", "path": "username"}, {"key": "pass", "path": "password"}]}} in pod["volumes"]
    assert {"name": "ring-login", "mountPath": "/etc/ringfeed/login", "readOnly": True} in container["volumeMounts"]
    assert {"name": "source", "persistentVolumeClaim": {"claimName": "raw"}} in pod["volumes"]
    assert {"name": "source", "mountPath": "/data", "readOnly": True} in container["volumeMounts"]
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]  # read-only root file system
    assert container["resources"] == SETTINGS.resources["ingest"]  # the operator's default: spec sets none
    with_resources = copy.deepcopy(DATASET)
    with_resources["spec"]["ingest"]["resources"] = {"requests": {"cpu": "4"}}
    assert ingest_job(with_resources, "t", "x", SETTINGS)["spec"]["template"]["spec"]["containers"][0][
        "resources"] == {"requests": {"cpu": "4"}}


@pytest.mark.parametrize("length", [40, 50, 55, 62, 63])
def test_names_cut_short_fit_a_label_value_and_stay_apart(length):
    """Two 63-character owners differing only at the end never share a Job or a NetworkPolicy."""
    first, second = "d" * (length - 1) + "a", "d" * (length - 1) + "b"
    for make in (lambda owner: job_name(owner, "ingest", "abcd1234-g12"), lambda owner: bounded_name(owner, "-split")):
        names = make(first), make(second)
        assert all(len(n) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n) for n in names)
        assert names[0] != names[1]
    assert job_name("a-b-", "split", "x") == "a-b-split-x"  # a name that fits is kept whole


SPLIT = {"dataset": "tumour-slides", "ratios": [7, 2, 1], "names": ["train", "val", "test"],
         "groupBy": ["patient_id"], "balance": {"mode": "weights", "weights": {"tumor": 2, "normal": 1}},
         "maxSamples": 1000, "maxPerPart": {"val": 100, "test": 50},
         "filters": [{"column": "scanner", "operator": "in", "values": ["aperio", "leica gt450"]},
                     {"column": "slide", "operator": "<", "values": ["5"]}],
         "seed": 42}


@pytest.mark.parametrize("spec", [
    SPLIT,
    {"dataset": "d", "folds": 5, "groupBy": ["patient_id"], "balance": {"mode": "equal"}},
    {"dataset": "d", "ratios": [8, 2]},
    {"dataset": "d", "ratios": [1], "filters": [{"column": "scanner", "operator": "==", "values": ["it's"]}]},
    {"dataset": "d", "ratios": [1], "filters": [
        {"column": "path", "operator": "in", "values": ["C:\\data\\a", "'both' \"quotes\"", "a, b", "(x)"]},
        {"column": "site", "operator": "!=", "values": ["'007'"]},
        {"column": "note", "operator": "==", "values": ["ünïcödé ✓"]}]},
    {"dataset": "d", "ratios": [1], "balance": {"mode": "weights", "weights": {"a,b": 1, "k=v": 2, " padded ": 3}}},
    {"dataset": "d", "ratios": [1], "filters": [
        {"column": "note", "operator": "in",
         "values": ["$(HOME)", "a$$b", "cost $5", "$", "$(", "$(RINGFEED_HOSTS)"]}]},
], ids=["everything", "folds", "defaults", "quote-in-value", "backslash-quotes-commas", "separators-in-labels",
        "dollars"])
def test_split_job_options_reproduce_the_spec_exactly(spec):
    """The Job's `ringfeed split create` arguments, as the container gets them (Kubernetes' $(VAR) expansion) and
    parsed by the real CLI, give the operator's SplitSpec: whatever characters its labels and filter values hold."""
    wanted = split_spec(spec)
    split = {"apiVersion": "ringfeed.io/v1alpha1", "kind": "Split",
             "metadata": {"name": "s", "uid": "9f00aa11-2222-3333-4444-555566667777"}, "spec": SPLIT}
    container = split_job(split, DATASET, "tumour_slides", split_arguments(wanted), SETTINGS)["spec"]["template"][
        "spec"]["containers"][0]
    env = {"HOME": "/home/ringfeed", "RINGFEED_HOSTS": "ring-0"}
    arguments = [kubernetes_expansion(argument, env) for argument in container["args"]]
    assert arguments[:2] == ["split", "create"]
    context = split_create.make_context("create", arguments[2:])
    assert spec_from_json(context, context.params["spec_json"]) == wanted


def kubernetes_expansion(text: str, env: dict[str, str]) -> str:
    """What the kubelet makes of a container argument (k8s.io/kubernetes third_party/forked/golang/expansion):
    $(NAME) becomes the variable's value (left as written when there is none), $$ becomes $."""
    out, at = [], 0
    while at < len(text):
        if text[at] == "$" and at + 1 < len(text):
            following = text[at + 1]
            close = text.find(")", at + 2) if following == "(" else -1
            if following == "$":
                out.append("$")
            elif close != -1:
                name = text[at + 2:close]
                out.append(env.get(name, f"$({name})"))
                at = close + 1
                continue
            else:
                out.append("$" + following)
            at += 2
            continue
        out.append(text[at])
        at += 1
    return "".join(out)


def test_an_ingest_source_path_reaches_the_job_as_written():
    dataset = copy.deepcopy(DATASET)
    dataset["spec"]["ingest"]["source"]["path"] = "runs/$(date)/cost$$/manifest.csv"
    arguments = ingest_job(dataset, "tumour_slides", "abcd1234", SETTINGS)["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert kubernetes_expansion(arguments[2], {"date": "2026-12-07"}) == "/data/runs/$(date)/cost$$/manifest.csv"


def test_split_spec_json_stands_alone():
    context = split_create.make_context("create", ["dataset", "name", "--seed=3", "--spec-json={}"])
    with pytest.raises(click.UsageError, match="leave out --seed"):
        spec_from_json(context, "{}")


def test_split_spec_values_take_their_written_types():
    spec = split_spec(SPLIT)
    assert spec.filters == (Filter("scanner", "in", ("aperio", "leica gt450")), Filter("slide", "<", (5,)))
    assert spec.balance == (("normal", 1), ("tumor", 2)) and spec.max_per_part == (("test", 50), ("val", 100))
    assert split_spec({"dataset": "d", "folds": 3}).names == ("fold0", "fold1", "fold2")


def test_split_job_is_owned_by_the_split_and_reads_the_dataset_ring():
    split = {"apiVersion": "ringfeed.io/v1alpha1", "kind": "Split",
             "metadata": {"name": "by-patient", "uid": "9f00aa11-2222-3333-4444-555566667777"}, "spec": SPLIT}
    job = split_job(split, DATASET, "tumour_slides", ["--ratios=7,2,1"], SETTINGS)
    assert job["metadata"]["name"] == "by-patient-split-9f00aa11"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "Split"
    assert job["metadata"]["labels"]["ringfeed.io/dataset"] == "tumour-slides"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["split", "create", "tumour_slides", "by-patient", "--ratios=7,2,1"]
    assert {e["name"] for e in container["env"]} == {"RINGFEED_HOSTS", "RINGFEED_PORT", "RINGFEED_LOGIN_DIR",
                                                     "RINGFEED_CONNECT_RETRY_S"}
    assert container["resources"]["requests"]["memory"] == SETTINGS.resources["split"]["requests"]["memory"]


def test_split_status_carries_the_engines_figures():
    rng = np.random.default_rng(0)
    uuids = np.frombuffer(b"".join(uuid.UUID(int=int(i) + 1).bytes for i in range(200)), np.uint8).reshape(-1, 16)
    table = ColumnarTable({"uuid": uuids, "label": rng.integers(0, 2, 200), "sample_bytes": np.full(200, 10),
                           "patient_id": np.array([f"p{i % 20}" for i in range(200)], dtype=object)})
    spec = SplitSpec(ratios=(7, 2, 1), group_by=("patient_id",), seed=1)
    result = compute_split(table, spec, ("normal", "tumor"))
    stored = StoredSplit("d", "s", 2, uuid.uuid4(), dt.datetime(2026, 11, 21, 12, 0, 5), spec, result.stats,
                         result.content_hash, {k: len(v) for k, v in result.parts.items()})
    status = split_status(stored)
    assert status["version"] == 2 and status["contentHash"] == result.content_hash
    assert status["computedAt"] == "2026-11-21T12:00:05Z" and status["samples"] == 200 == status["scanned"]
    assert [p["name"] for p in status["parts"]] == ["train", "val", "test"]
    assert status["partNames"] == "train,val,test"  # the Parts printer column
    assert sum(p["groups"] for p in status["parts"]) == 20 == status["groups"]
    for part, stats in zip(status["parts"], result.stats["parts"], strict=True):
        assert part["samples"] == len(result.parts[part["name"]]) == stats["samples"]
        assert part["bytes"] == 10 * part["samples"]
        assert {(c["name"], c["samples"]) for c in part["labels"]} == {
            (("normal", "tumor")[int(label)], counts["samples"]) for label, counts in stats["labels"].items()}


def test_dataset_status_from_the_catalog():
    schema = dataset_schema("tumour-slides", DATASET["spec"])
    info = DatasetInfo(schema, None, 30, 3000, {0: 10, 1: 20}, {0: 1000, 1: 2000}, None,
                       {"written": 30, "rejected": {"truncated": 2, "unreadable": 1}, "seconds": 2.0})
    assert stats_status(info) == {"samples": 30, "bytes": 3000, "labels": 2, "labelCounts": [
        {"label": 0, "name": "normal", "samples": 10}, {"label": 1, "name": "tumor", "samples": 20}]}
    assert ingest_summary_status(info.last_ingest) == {"ingested": 30, "rejected": 3, "rowsPerSecond": 15.0}
    assert ingest_summary_status(None) == {}


def test_tls_puts_the_ca_secret_where_the_data_plane_reads_it():
    dataset = copy.deepcopy(DATASET)
    dataset["spec"]["storage"]["external"]["tls"] = {"enabled": True, "caSecret": {"name": "ring-ca", "key": "ca.pem"}}
    for job in (ingest_job(dataset, "tumour_slides", "abcd1234", SETTINGS),
                split_job({"apiVersion": "ringfeed.io/v1alpha1", "kind": "Split",
                           "metadata": {"name": "s", "uid": "12345678-0000"}, "spec": SPLIT},
                          dataset, "tumour_slides", [], SETTINGS)):
        pod = job["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert {"name": "RINGFEED_TLS_CA_FILE", "value": "/etc/ringfeed/tls/ca.crt"} in container["env"]
        ca_items = [{"key": "ca.pem", "path": "ca.crt"}]
        ca_volume = {"name": "ring-ca", "secret": {"secretName": "ring-ca", "items": ca_items}}
        assert ca_volume in pod["volumes"]
        assert {"name": "ring-ca", "mountPath": "/etc/ringfeed/tls", "readOnly": True} in container["volumeMounts"]
    plain = ingest_job(DATASET, "tumour_slides", "abcd1234", SETTINGS)["spec"]["template"]["spec"]
    assert "RINGFEED_TLS_CA_FILE" not in {e["name"] for e in plain["containers"][0]["env"]}
    dataset["spec"]["storage"]["external"]["tls"]["enabled"] = False
    storage = dataset["spec"]["storage"]
    assert not RingRef.from_spec(storage).tls and RingSecrets.from_spec(storage).ca_certificate is None


def test_a_dataset_refused_its_keyspace_is_told_whose_it_is_and_what_to_do():
    message = keyspace_in_use("slides", ("team-a", "slides"))
    assert message.startswith("keyspace slides on this ring belongs to Dataset team-a/slides;")
    assert "another spec.keyspace" in message


@pytest.mark.parametrize("last,interval,due", [
    (None, "60s", True),
    ("2026-11-22T10:00:00Z", "60s", False),
    ("2026-11-22T09:59:00Z", "60s", True),
    ("2026-11-22T09:58:00Z", "5m", False),
    ("2026-11-22T08:59:00Z", "1h", True),
    ("2026-11-22T09:58:30Z", "1m30s", True),
    ("2026-11-22T09:59:30Z", "often", False),   # unreadable: 60 s
    ("2026-11-22T09:59:30Z", "0s", False),   # zero: 60 s too
], ids=["never-read", "just-read", "interval-passed", "minutes", "hours", "compound", "unreadable", "zero"])
def test_catalog_figures_are_refreshed_once_older_than_the_refresh_interval(last, interval, due):
    now = dt.datetime(2026, 11, 22, 10, 0, 0, tzinfo=dt.UTC)
    assert refresh_due(last, interval, now) is due


def test_finished_jobs_stay_a_day():
    job = ingest_job(DATASET, "tumour_slides", "abcd1234", SETTINGS)
    assert job["spec"]["ttlSecondsAfterFinished"] == TTL_SECONDS_AFTER_FINISHED == 86400
    assert job["spec"]["backoffLimit"] == SETTINGS.backoff_limit == 2


FIGURES = {"samples": 30, "bytes": 3000, "labels": 2, "labelCounts": [{"label": 0, "name": "a", "samples": 30}]}
RECOUNTED = "2026-11-29T09:00:00Z"


@pytest.mark.parametrize(("status", "forced", "writes"), [
    ({**FIGURES, "lastRefreshTime": "2026-11-29T08:59:00Z"}, False, False),  # at rest: nothing to write
    ({**FIGURES, "lastRefreshTime": "2026-11-29T08:59:00Z"}, True, True),  # an ingest just ended
    ({**FIGURES, "samples": 29, "lastRefreshTime": "2026-11-29T08:59:00Z"}, False, True),  # more samples
    ({**FIGURES, "labelCounts": [], "lastRefreshTime": "2026-11-29T08:59:00Z"}, False, True),  # labels changed
    ({**FIGURES}, False, True),  # never recounted into status
    ({}, False, True),  # a new Dataset
])
def test_a_recount_writes_status_only_when_its_figures_changed(status, forced, writes):
    assert recount_status(status, FIGURES, RECOUNTED, forced) == (
        {**FIGURES, "lastRefreshTime": RECOUNTED} if writes else {})

