"""Rings, pure: a Ring's credentials Secrets and cleanup tasks, what cass-operator's objects say about the ring, the
next scaling step and the autoscaler's window; and a Dataset's ring in its Jobs (the data plane's RingRef as
environment variables, its Secrets as ``secretKeyRef`` variables and a mounted CA certificate). The
CassandraDatacenter is ``builders.datacenter``'s, TLS ``builders.ring_tls``'s; spec.storage itself is read by
``ringfeed.ring``."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ringfeed.connection import CONNECT_RETRY_ENV
from ringfeed.ring import (
    JOB_LOGIN_DIR,
    JOB_TLS_CA_FILE,
    LOGIN_DIR_ENV,
    CredentialsSecret,
    ProvisionedRing,
    RingRef,
    RingSecrets,
    writer_secret,
)
from ringfeed_operator.builders.meta import (
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGER,
    owner_reference,
)
from ringfeed_operator.status import timestamp

CA_VOLUME, LOGIN_VOLUME = "ring-ca", "ring-login"
CONNECT_RETRY_S = 30

DC_GROUP, DC_VERSION, DC_PLURAL = "cassandra.datastax.com", "v1beta1", "cassandradatacenters"
TASK_GROUP, TASK_VERSION, TASK_PLURAL = "control.k8ssandra.io", "v1alpha1", "cassandratasks"
LABEL_RING = "ringfeed.io/ring"
CLUSTER_LABEL = "cassandra.datastax.com/cluster"
DATACENTER_LABEL = "cassandra.datastax.com/datacenter"
NODE_STATE_LABEL = "cassandra.datastax.com/node-state"
# cass-operator keeps ScalingUp until the cleanup it starts after a scale-up has finished on every node.
TRACK_CLEANUP = "cassandra.datastax.com/track-cleanup-tasks"
# A step is recorded on the CassandraDatacenter in the same patch as its size, so that an operator killed between
# the two writes cannot lose it: status.lastStep is read back from these.
STEP_FROM = "ringfeed.io/step-from"
STEP_STARTED_AT = "ringfeed.io/step-started-at"
STEP_REASON = "ringfeed.io/step-reason"
# cass-operator's conditions that mean an operation is under way (or the datacenter is stopped).
BUSY_CONDITIONS = ("ScalingUp", "ScalingDown", "Updating", "ReplacingNodes", "RollingRestart", "Resuming",
                   "ResizingVolumes", "Stopped", "Decommission")
# cass-operator checks the datacenter's Secrets before anything else, its deletion included: a datacenter whose
# Secrets went first (a namespace deleted at once) would never be deleted. The Ring's deletion lifts this once the
# datacenter is gone.
SECRET_FINALIZER = "ringfeed.io/ring-datacenter"


# -- a Dataset's ring in its Jobs -------------------------------------------------------------------------------------

def job_login(dataset: dict) -> CredentialsSecret | None:
    """What a Dataset's ingest and split Jobs log in with: on a Ring, the Dataset's writer role (its keyspace and
    the catalog only; the superuser stays with the operator); on an external ring, its credentials."""
    storage = dataset["spec"]["storage"]
    if "ring" in storage:
        return writer_secret(dataset["metadata"]["name"])
    return RingSecrets.from_spec(storage).credentials


def reader_login(storage: dict) -> CredentialsSecret | None:
    """What a loader (a sidecar) and a cache tier log in with: a Ring's read-only role, or an external ring's
    credentials."""
    return RingSecrets.from_spec(storage).read_only


def ring_env(storage: dict, login: CredentialsSecret | None) -> list[dict]:
    """How a data-plane container finds the ring (``RingRef.from_env`` reads it back) and where its `login` is:
    the folder ``ring_volumes`` mounts (files, not variables)."""
    env: list[dict[str, Any]] = [{"name": name, "value": value}
                                 for name, value in RingRef.from_spec(storage).to_env().items()]
    if login:
        env.append({"name": LOGIN_DIR_ENV, "value": JOB_LOGIN_DIR})
    # A new Pod may be refused until the NetworkPolicy engine admits it: its first connection keeps trying.
    env.append({"name": CONNECT_RETRY_ENV, "value": str(CONNECT_RETRY_S)})
    return env


def ring_volumes(storage: dict, login: CredentialsSecret | None) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts) of the `login` and the ring's CA certificate where the container's environment says
    (JOB_LOGIN_DIR, JOB_TLS_CA_FILE)."""
    volumes, mounts = [], []
    if login:
        items = [{"key": login.username_key, "path": "username"}, {"key": login.password_key, "path": "password"}]
        volumes.append({"name": LOGIN_VOLUME, "secret": {"secretName": login.name, "items": items}})
        mounts.append({"name": LOGIN_VOLUME, "mountPath": JOB_LOGIN_DIR, "readOnly": True})
    if ca := RingSecrets.from_spec(storage).ca_certificate:
        file = PurePosixPath(JOB_TLS_CA_FILE)
        volumes.append({"name": CA_VOLUME, "secret": {"secretName": ca.name,
                                                      "items": [{"key": ca.key, "path": file.name}]}})
        mounts.append({"name": CA_VOLUME, "mountPath": str(file.parent), "readOnly": True})
    return volumes, mounts


# -- what a Ring is made of -------------------------------------------------------------------------------------------

def ring_labels(name: str) -> dict[str, str]:
    return {LABEL_RING: name, LABEL_COMPONENT: "ring", LABEL_MANAGED_BY: MANAGER}


def node_selector(name: str) -> str:
    """The label selector of the ring's Cassandra Pods (cass-operator's labels)."""
    ring = ProvisionedRing(name)
    return f"{CLUSTER_LABEL}={ring.name},{DATACENTER_LABEL}={ring.datacenter}"


def ring_secret(ring: dict, name: str, data: Mapping[str, str], kind: str = "Opaque") -> dict:
    """One of a Ring's Secrets (credentials, certificates): deleted with the Ring, and never before its
    CassandraDatacenter (see SECRET_FINALIZER)."""
    return {
        "apiVersion": "v1", "kind": "Secret", "type": kind,
        "metadata": {"name": name, "labels": ring_labels(ring["metadata"]["name"]),
                     "ownerReferences": [owner_reference(ring)], "finalizers": [SECRET_FINALIZER]},
        "stringData": dict(data),
    }


def credentials_secret(ring: dict, name: str, username: str, password: str) -> dict:
    """A Secret with a role's username and password, as cass-operator reads them."""
    return ring_secret(ring, name, {"username": username, "password": password})


def cleanup_task(ring: dict, step_started_at: dt.datetime) -> dict:
    """A CassandraTask that removes from every node the ranges it no longer owns, named after the step it follows
    (one per step, however often it is asked for)."""
    name = ring["metadata"]["name"]
    datacenter_name = ProvisionedRing(name).datacenter
    return {
        "apiVersion": f"{TASK_GROUP}/{TASK_VERSION}", "kind": "CassandraTask",
        "metadata": {"name": f"{name}-cleanup-{int(step_started_at.timestamp())}",
                     "labels": {**ring_labels(name), DATACENTER_LABEL: datacenter_name},
                     "ownerReferences": [owner_reference(ring)]},
        "spec": {"datacenter": {"name": datacenter_name, "namespace": ring["metadata"]["namespace"]},
                 "jobs": [{"name": f"cleanup-{datacenter_name}", "command": "cleanup"}]},
    }


# -- what cass-operator says --------------------------------------------------------------------------------------

def parse_time(text: str | None) -> dt.datetime | None:
    return timestamp(text) if text else None


def format_time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class Step:
    """One node more or fewer: asked of cass-operator at `started_at` because of `reason`."""

    start: int
    to: int
    started_at: dt.datetime
    reason: str

    @property
    def up(self) -> bool:
        return self.to > self.start


@dataclasses.dataclass(frozen=True)
class Cleanup:
    """After a scale-up: the cleanup of the older nodes, as the CassandraTasks since the step tell it."""

    done_at: dt.datetime | None = None  # a cleanup that completed on every node without a failure
    running: str | None = None  # the name of a cleanup task still running
    failed: str | None = None  # the name of the latest cleanup task that failed


@dataclasses.dataclass(frozen=True)
class Observed:
    """The ring as cass-operator runs it."""

    size: int  # the CassandraDatacenter's spec.size: where the ring is going
    nodes: int  # Pods whose node is in the ring (started, not leaving)
    ready: int  # Pods Ready (serving CQL)
    busy: str | None  # why cass-operator is not idle, None when it is
    step: Step | None  # the last step Ringfeed asked for
    cleanup: Cleanup  # of the last step, when it was a scale-up
    serving: bool  # cass-operator says the datacenter is Ready and a node serves

    @property
    def settled(self) -> bool:
        return self.busy is None and self.nodes == self.size


def _condition(obj: dict, type_: str) -> str | None:
    return next((c.get("status") for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == type_),
                None)


def _pod_ready(pod: dict) -> bool:
    return _condition(pod, "Ready") == "True" and not pod["metadata"].get("deletionTimestamp")


def recorded_step(dc: dict) -> Step | None:
    annotations = dc["metadata"].get("annotations") or {}
    if STEP_STARTED_AT not in annotations:
        return None
    return Step(int(annotations[STEP_FROM]), dc["spec"]["size"], timestamp(annotations[STEP_STARTED_AT]),
                annotations.get(STEP_REASON, ""))


def _task_failed(task: dict) -> bool:
    status = task.get("status") or {}
    return bool(status.get("failed")) or _condition(task, "Failed") == "True"


def cleanup_state(tasks: Iterable[dict], since: dt.datetime) -> Cleanup:
    """The cleanup since `since` (a scale-up's start): done by a task that completed without failure."""
    cleanups = sorted((t for t in tasks
                       if any(j.get("command") == "cleanup" for j in (t.get("spec") or {}).get("jobs") or ())
                       and timestamp(t["metadata"]["creationTimestamp"]) >= since.replace(microsecond=0)),
                      key=lambda t: t["metadata"]["creationTimestamp"])
    done = running = failed = None
    for task in cleanups:
        completed = parse_time((task.get("status") or {}).get("completionTime"))
        if completed is None:
            running = task["metadata"]["name"]
        elif _task_failed(task):
            failed = task["metadata"]["name"]
        else:
            done = completed
    return Cleanup(done, running, failed)


def observe(dc: dict, pods: Sequence[dict], tasks: Sequence[dict]) -> Observed:
    """What the CassandraDatacenter, its Pods and its CassandraTasks say; `busy` names the first thing that keeps
    a step from starting."""
    status = dc.get("status") or {}
    size = dc["spec"]["size"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    states = {p["metadata"]["name"]: (p["metadata"].get("labels") or {}).get(NODE_STATE_LABEL, "") for p in live}
    nodes = sum(state == "Started" for state in states.values())
    ready = sum(_pod_ready(p) for p in live)
    busy = None
    if status.get("observedGeneration", 0) < dc["metadata"].get("generation", 0):
        busy = "cass-operator has not yet acted on the CassandraDatacenter's latest spec"
    elif busy_conditions := [c for c in BUSY_CONDITIONS if _condition(dc, c) == "True"]:
        busy = f"cass-operator reports {', '.join(busy_conditions)}"
    elif status.get("cassandraOperatorProgress") != "Ready":
        busy = f"cass-operator is {str(status.get('cassandraOperatorProgress') or 'starting').lower()}"
    elif unsettled := sorted(f"{pod} is {state or 'starting'}" for pod, state in states.items() if state != "Started"):
        busy = "; ".join(unsettled)
    elif nodes != size:
        busy = f"{nodes} of {size} nodes are in the ring"
    elif ready < nodes:
        busy = f"{nodes - ready} of {nodes} nodes are not Ready"
    elif running := sorted(t["metadata"]["name"] for t in tasks if not (t.get("status") or {}).get("completionTime")):
        busy = f"CassandraTask {', '.join(running)} runs"
    step = recorded_step(dc)
    cleanup = cleanup_state(tasks, step.started_at) if step and step.up else Cleanup()
    serving = _condition(dc, "Ready") == "True" and ready > 0
    return Observed(size, nodes, ready, busy, step, cleanup, serving)


# -- the next step ----------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Decision:
    """What to do now: move the datacenter to `target` (None: nothing), or say why a wanted step waits (`held`, a
    reason in CamelCase, and `message`)."""

    target: int | None = None
    held: str | None = None
    message: str = ""


def decide(desired: int, observed: Observed, floor: int, finished_at: dt.datetime | None, cooldown_s: int,
           now: dt.datetime) -> Decision:
    """The next step towards `desired` nodes: one node at a time, none while cass-operator is busy (a step, a
    bootstrap, a decommission, a cleanup, anything else), none in the cooldown after the last one, never below
    `floor` (the replication factor of the ring's Datasets), and no scale-down before the cleanup that follows a
    scale-up has finished on every older node (else a later decommission streams their stale copies back, and
    deleted rows with them)."""
    size = observed.size
    if desired == size:
        return Decision()
    direction = "up" if desired > size else "down"
    if observed.busy:
        return Decision(held="DatacenterBusy", message=f"scaling {direction} to {desired} waits: {observed.busy}")
    if finished_at is not None and (remaining := cooldown_s - (now - finished_at).total_seconds()) > 0:
        return Decision(held="Cooldown", message=f"scaling {direction} to {desired} waits {remaining:.0f} s more: "
                                                 f"spec.cooldownSeconds {cooldown_s} after the last step")
    if desired > size:
        return Decision(target=size + 1)
    if size - 1 < floor:
        return Decision(held="ReplicationFactor", message=f"{size} nodes: a Dataset on the ring keeps "
                                                           f"{floor} replicas of each row, so the ring keeps {floor}")
    step = observed.step
    if step is not None and step.up and observed.cleanup.done_at is None:
        running = observed.cleanup.running
        return Decision(held="CleanupPending",
                        message=f"scaling down waits for the cleanup after the scale-up to {step.to} "
                                + (f"(CassandraTask {running} runs)" if running else "(not started yet)"))
    return Decision(target=size - 1)


def step_finished_at(previous: Mapping | None, observed: Observed, now: dt.datetime) -> dt.datetime | None:
    """When the recorded step finished: as status.lastStep already says for that step, else now if the ring has
    settled at its size (observed again after a restart: a little later, never earlier)."""
    step = observed.step
    if step is None:
        return None
    previous = previous or {}
    if parse_time(previous.get("startedAt")) == step.started_at.replace(microsecond=0) and previous.get("finishedAt"):
        return parse_time(previous["finishedAt"])
    return now if observed.settled else None


def step_status(step: Step, finished_at: dt.datetime | None, cleanup: Cleanup) -> dict:
    """status.lastStep: times as RFC 3339 or null (the schema's date-time fields take nothing else)."""
    cleaned = cleanup.done_at if step.up else None
    return {"from": step.start, "to": step.to, "startedAt": format_time(step.started_at), "reason": step.reason,
            "finishedAt": format_time(finished_at) if finished_at else None,
            "cleanupDoneAt": format_time(cleaned) if cleaned else None}


def step_annotations(step: Step) -> dict[str, str]:
    return {STEP_FROM: str(step.start), STEP_STARTED_AT: format_time(step.started_at), STEP_REASON: step.reason}


# -- the autoscaler ---------------------------------------------------------------------------------------------------

READS_PER_SECOND = "ReadsPerSecondPerNode"
LATENCY_P99 = "ReadLatencyP99Micros"
# ReadsPerSecondPerNode's bounds where spec.autoscaling leaves them out: 3/4 and 3/10 of the 637 reads/s of a
# saturated node (2 CPUs, TLS, 20 kB samples; benchmarks/capacity_model.py's autoscaling_bounds(), docs/capacity.md).
# The CRD says the same in its descriptions and its CEL rule, and requires both bounds for ReadLatencyP99Micros.
DEFAULT_SCALE_UP_ABOVE = 477
DEFAULT_SCALE_DOWN_BELOW = 191
# MAAC's metrics endpoint (port 9000): Cassandra's ClientRequest latency histogram of the reads each node
# coordinated, cumulative since the node started, in microseconds.
READ_LATENCY = "org_apache_cassandra_metrics_client_request_latency"
MAAC_METRICS_PORT = 9000  # the agent's metrics endpoint (cass-operator names the container port "metrics")


@dataclasses.dataclass(frozen=True)
class NodeLoad:
    """One node's reads at one moment: how many it has coordinated since its start, and how many of them took at
    most each bucket's bound (microseconds)."""

    at: float  # seconds (monotonic)
    reads: float
    buckets: tuple[tuple[float, float], ...]  # (bound, cumulative count), ascending


def node_load(metrics: str, at: float) -> NodeLoad | None:
    """The reads of a node's Prometheus text (parsed by prometheus_client); None when it has no read histogram
    (yet), or when its lines do not parse."""
    # Only the read histogram's lines (samples, TYPE and HELP) go to the parser: a node's text holds the metrics of
    # every table (megabytes), and a line of another family that the parser refuses must not hide this one.
    text = "".join(line + "\n" for line in metrics.splitlines() if READ_LATENCY in line)
    reads = None
    buckets = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("request_type") != "Read":
                    continue
                if sample.name == f"{READ_LATENCY}_count":
                    reads = float(sample.value)
                elif sample.name == f"{READ_LATENCY}_bucket" and "le" in sample.labels:
                    buckets.append((float(sample.labels["le"]), float(sample.value)))
    except ValueError:  # a malformed sample of the read histogram: no reading this time
        return None
    if reads is None:
        return None
    return NodeLoad(at, reads, tuple(sorted(buckets)))


def p99_micros(before: NodeLoad, now: NodeLoad) -> float | None:
    """The 99th percentile of the reads between two readings (the upper bound of its bucket); None without reads."""
    earlier = dict(before.buckets)
    counts = [(bound, count - earlier.get(bound, 0.0)) for bound, count in now.buckets if bound != math.inf]
    total = now.reads - before.reads
    if total <= 0 or not counts:
        return None
    return next((bound for bound, count in counts if count >= 0.99 * total), counts[-1][0])  # beyond: the last


def ring_load(metric: str, before: Mapping[str, NodeLoad], now: Mapping[str, NodeLoad]) -> float | None:
    """The autoscaler's metric between two readings, over the nodes read at both (a restarted node, whose counters
    started again, is left out): reads per second per node (the mean), or the highest p99 read latency; None
    without any such node."""
    pairs = [(before[pod], load) for pod, load in now.items()
             if pod in before and load.at > before[pod].at and load.reads >= before[pod].reads]
    if metric == LATENCY_P99:
        return max((p for old, new in pairs if (p := p99_micros(old, new)) is not None), default=None)
    rates = [(new.reads - old.reads) / (new.at - old.at) for old, new in pairs]
    return sum(rates) / len(rates) if rates else None


@dataclasses.dataclass(frozen=True)
class Window:
    """Since when the metric has stayed above the scale-up bound, or below the scale-down bound."""

    above_since: dt.datetime | None = None
    below_since: dt.datetime | None = None


def autoscaling_bounds(autoscaling: Mapping) -> tuple[int, int]:
    """(scaleUpAbove, scaleDownBelow), the defaults where absent."""
    return (autoscaling.get("scaleUpAbove", DEFAULT_SCALE_UP_ABOVE),
            autoscaling.get("scaleDownBelow", DEFAULT_SCALE_DOWN_BELOW))


def autoscale(autoscaling: Mapping, value: float | None, window: Window, nodes: int, bounds: tuple[int, int],
              settled: bool, now: dt.datetime) -> tuple[Window, int | None, str]:
    """(the window, the node count to ask for or None, why). One node more once the metric has stayed above
    scaleUpAbove for windowSeconds, one fewer once below scaleDownBelow as long, within `bounds` (min, max); only
    while the ring is `settled` at spec.nodes, and a new window starts after each request."""
    if value is None:
        return window, None, ""
    up, down = autoscaling_bounds(autoscaling)
    above = window.above_since or now if value > up else None
    below = window.below_since or now if value < down else None
    window = Window(above, below)
    seconds = autoscaling.get("windowSeconds", 120)
    metric = autoscaling.get("metric", READS_PER_SECOND)
    low, high = bounds
    if not settled:
        return window, None, ""
    if above is not None and (now - above).total_seconds() >= seconds and nodes < high:
        return Window(), nodes + 1, f"Autoscaler: {metric} {value:.0f} above {up} for {seconds} s"
    if below is not None and (now - below).total_seconds() >= seconds and nodes > low:
        return Window(), nodes - 1, f"Autoscaler: {metric} {value:.0f} below {down} for {seconds} s"
    return window, None, ""
