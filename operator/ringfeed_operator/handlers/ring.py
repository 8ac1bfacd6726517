"""Rings: the Secrets and the CassandraDatacenter each Ring is made of, the steps that move it to spec.nodes one node
at a time (whoever set spec.nodes: a user, kubectl scale, an HPA, the autoscaler below), the autoscaler, and the
deletion guard."""

from __future__ import annotations

import datetime as dt
import secrets

import kopf

from ringfeed.ring import ProvisionedRing
from ringfeed_operator.builders.datacenter import datacenter, datacenter_update, stops_after_gossip, volume_policy
from ringfeed_operator.builders.network import ring_policy
from ringfeed_operator.builders.ring import (
    DATACENTER_LABEL,
    DC_GROUP,
    DC_PLURAL,
    DC_VERSION,
    LABEL_RING,
    MAAC_METRICS_PORT,
    SECRET_FINALIZER,
    TASK_GROUP,
    TASK_PLURAL,
    TASK_VERSION,
    Decision,
    Observed,
    Step,
    Window,
    autoscale,
    cleanup_task,
    credentials_secret,
    decide,
    format_time,
    node_selector,
    observe,
    parse_time,
    ring_labels,
    step_annotations,
    step_finished_at,
    step_status,
)
from ringfeed_operator.context import Context
from ringfeed_operator.handlers.common import event, give_up
from ringfeed_operator.handlers.ring_tls import ensure_certificates
from ringfeed_operator.kube import ObjectRejected
from ringfeed_operator.status import Conditions

DATACENTERS = (DC_GROUP, DC_VERSION, DC_PLURAL)
# Reasons the change handler gives up with until the spec changes: the timer leaves them in place.
WAITING_FOR_SPEC = frozenset({"InvalidSpec", "DatacenterExists"})
TASKS = (TASK_GROUP, TASK_VERSION, TASK_PLURAL)
DELETION_RETRY_S = 10


def owned_by(obj: dict, owner: dict) -> bool:
    """Whether `owner` (by UID) owns `obj`."""
    return owner["metadata"]["uid"] in {o.get("uid") for o in obj["metadata"].get("ownerReferences") or ()}


def dataset_index(namespace: str, spec: dict, **_) -> dict:
    """The replication factor of each Dataset on a Ring, by (namespace, Ring): the floor of the Ring's size."""
    ring = (spec.get("storage") or {}).get("ring")
    if not ring:
        return {}
    return {(namespace, ring["name"]): (spec.get("replication") or {}).get("replicationFactor", 1)}


def reconcile(name: str, namespace: str, status: dict, meta: dict, body: dict, memo: Context, patch: kopf.Patch,
              **_) -> None:
    """The Ring's credentials Secrets (made once), its certificates and its CassandraDatacenter exist; the
    datacenter's settings, not its size (the timer's steps change that), follow the spec."""
    generation = meta["generation"]
    conditions = Conditions(status.get("conditions"), generation)
    ring = ProvisionedRing(name)
    for secret, role in ((ring.superuser_secret, ring.superuser_role), (ring.reader_secret, ring.reader_role)):
        if memo.kube.ensure_secret(namespace, credentials_secret(body, secret, role, secrets.token_urlsafe(24))):
            event(body, "SecretCreated", f"Secret {secret}: role {role}")
    ensure_certificates(name, namespace, body, memo)
    if memo.config.network.enabled:
        memo.kube.apply(namespace, ring_policy(body, {"matchLabels": {LABEL_RING: name}}, ring_labels(name),
                                               MAAC_METRICS_PORT, memo.config.network))
    dc = memo.kube.read_custom(DATACENTERS, namespace, ring.datacenter)
    try:
        wanted = datacenter(body, memo.config.rings)
        if dc is None:
            memo.kube.create_custom(DATACENTERS, namespace, wanted)
            event(body, "DatacenterCreated", f"CassandraDatacenter {ring.datacenter}: {wanted['spec']['size']} nodes "
                                             f"of {wanted['spec']['serverImage']}")
        elif not owned_by(dc, body):
            give_up(patch, conditions, generation, "DatacenterExists", f"CassandraDatacenter {ring.datacenter} exists "
                    "and belongs to another object: delete it, or name the Ring otherwise", permanent=True)
        else:
            policy = volume_policy(body)
            if any((dc["metadata"].get("annotations") or {}).get(key) != value for key, value in policy.items()):
                memo.kube.patch_custom(DATACENTERS, namespace, ring.datacenter, {"metadata": {"annotations": policy}})
            settings = datacenter_update(dc["spec"], body, memo.config.rings)
            if settings is not None:
                memo.kube.patch_custom(DATACENTERS, namespace, ring.datacenter, {"spec": settings})
                event(body, "DatacenterUpdated", f"CassandraDatacenter {ring.datacenter}: settings of the spec "
                                                 "applied (cass-operator restarts the nodes one by one)")
    except (ValueError, ObjectRejected) as error:  # a spec the schema let through, or one the datacenter's refuses
        give_up(patch, conditions, generation, "InvalidSpec", f"spec: {error}", permanent=True)
    if conditions.reason("Ready") in WAITING_FOR_SPEC:  # the changed spec is applied: the timer takes over
        conditions.set("Ready", False, "NotServing", "spec applied: waiting for cass-operator's nodes")
        patch.status["conditions"] = conditions.as_list()
    patch.status.update({
        "observedGeneration": generation, "datacenter": ring.datacenter, "service": ring.host(namespace),
        "selector": node_selector(name), "superuserSecret": ring.superuser_secret,
        "readerSecret": ring.reader_secret,
    })


def renew_certificates(name: str, namespace: str, body: dict, memo: Context, **_) -> None:
    """Now and then: renew the certificates due (a third of their validity left)."""
    ensure_certificates(name, namespace, body, memo)


def watch(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict, memo: Context,
          patch: kopf.Patch, datasets_by_ring: kopf.Index, **_) -> None:
    """Every few seconds: observe cass-operator's datacenter, let the autoscaler move spec.nodes, take the next step
    towards spec.nodes when the guards allow it, and say in status and events what happens and what waits."""
    conditions = Conditions(status.get("conditions"), meta["generation"])
    if status.get("observedGeneration") != meta["generation"] or conditions.reason("Ready") in WAITING_FOR_SPEC:
        return  # the change handler has not applied the current spec yet, or the spec must change first
    ring = ProvisionedRing(name)
    dc = memo.kube.read_custom(DATACENTERS, namespace, ring.datacenter)
    if dc is None:
        conditions.set("Ready", False, "DatacenterMissing", f"CassandraDatacenter {ring.datacenter} not found")
        patch.status["conditions"] = conditions.as_list()
        return
    pods = memo.kube.pods(namespace, node_selector(name))
    observed = observe(dc, pods, memo.kube.list_custom(TASKS, namespace, f"{DATACENTER_LABEL}={ring.datacenter}"))
    now = dt.datetime.now(dt.UTC)
    floor = max(datasets_by_ring.get((namespace, name), ()), default=1)
    finished_at = step_finished_at(status.get("lastStep"), observed, now)
    _follow_cleanup(body, namespace, observed, finished_at, memo)
    desired = spec["nodes"]
    autoscaler = status.get("autoscaler") or {}
    reason = autoscaler["reason"] if autoscaler.get("requestedNodes") == desired else f"spec.nodes {desired}"
    if autoscaling := spec.get("autoscaling"):
        desired, why = _autoscale(name, namespace, spec, status, body, autoscaling, observed, pods, floor, now,
                                  memo, patch)
        reason = why or reason
    decision = decide(desired, observed, floor, finished_at, spec.get("cooldownSeconds", 60), now)
    step = observed.step
    if decision.target is not None:
        step = _start_step(name, namespace, body, Step(observed.size, decision.target, now, reason), memo)
        if not step.up and not stops_after_gossip(dc["spec"]):
            event(body, "ScaleDownUnguarded", "this Ring's nodes were made without the stop hook of Ringfeed 0.2 "
                  "(it comes with the next change that restarts them: image, heap, resources): once the step is "
                  "done, check `nodetool status` on a remaining node; a node listed DL is removed with "
                  "`nodetool assassinate <its address>`", warning=True)
        finished_at = None
    finished = _report(status, body, conditions, observed, decision, step, finished_at, floor, patch)
    metrics = memo.metrics
    if finished and step is not None and finished_at is not None:
        metrics.ring_step_duration.labels(namespace, name, "up" if step.up else "down").observe(
            (finished_at - step.started_at).total_seconds())
    metrics.ring_nodes.labels(namespace, name).set(observed.nodes)
    metrics.ring_ready_nodes.labels(namespace, name).set(observed.ready)
    metrics.ring_desired_nodes.labels(namespace, name).set(desired)
    metrics.ring_scaling.labels(namespace, name).set(step is not None and finished_at is None)
    metrics.set_ring_series(metrics.ring_scaling_held, namespace, name, decision.held)
    for direction in ("up", "down"):  # at 0 before the first step, so that the first step is a change of the counter
        metrics.ring_steps.labels(namespace, name, direction)


def _follow_cleanup(body: dict, namespace: str, observed: Observed, finished_at: dt.datetime | None,
                    memo: Context) -> None:
    """After a finished scale-up with no successful cleanup (cass-operator's failed, or was not made): start one."""
    step = observed.step
    cleanup = observed.cleanup
    if step is None or not step.up or finished_at is None or cleanup.done_at or cleanup.running or observed.busy:
        return
    task = cleanup_task(body, step.started_at if cleanup.failed is None else dt.datetime.now(dt.UTC))
    if memo.kube.create_custom(TASKS, namespace, task):
        event(body, "CleanupStarted", f"CassandraTask {task['metadata']['name']}: the older nodes drop the ranges "
                                      f"the new node took" + (f" ({cleanup.failed} failed)" if cleanup.failed else ""))


def _autoscale(name: str, namespace: str, spec: dict, status: dict, body: dict, autoscaling: dict,
               observed: Observed, pods: list[dict], floor: int, now: dt.datetime, memo: Context,
               patch: kopf.Patch) -> tuple[int, str]:
    """The autoscaler's turn: measure, move the window, and set spec.nodes (through the scale subresource) when
    the load stayed beyond a bound for the window; → (spec.nodes as it now is, why it was just set or "")."""
    seen = status.get("autoscaler") or {}
    value = memo.loads.measure(namespace, name, [p for p in pods if (p.get("status") or {}).get("podIP")],
                               autoscaling.get("metric", "ReadsPerSecondPerNode"))
    window = Window(parse_time(seen.get("aboveSince")), parse_time(seen.get("belowSince")))
    nodes = spec["nodes"]
    bounds = (max(spec.get("minNodes", 1), floor), spec.get("maxNodes", 3))
    window, wanted, why = autoscale(autoscaling, value, window, nodes, bounds,
                                    observed.settled and observed.size == nodes, now)
    report = {"metric": autoscaling.get("metric", "ReadsPerSecondPerNode"),
              "aboveSince": window.above_since and format_time(window.above_since),
              "belowSince": window.below_since and format_time(window.below_since)}
    if value is not None:
        report.update(value=round(value), observedAt=format_time(now))
        memo.metrics.set_ring_series(memo.metrics.ring_autoscaler_value, namespace, name, report["metric"], value)
    if wanted is not None:
        memo.kube.scale_ring(namespace, name, wanted)
        event(body, "Autoscaled", f"spec.nodes {nodes} → {wanted}: {why}")
        report.update(requestedNodes=wanted, reason=why)
        nodes = wanted
    patch.status["autoscaler"] = {**seen, **report}
    return nodes, why


def _start_step(name: str, namespace: str, body: dict, step: Step, memo: Context) -> Step:
    """Ask cass-operator for one node more or fewer; the step is recorded on the datacenter in the same patch."""
    memo.kube.patch_custom(DATACENTERS, namespace, ProvisionedRing(name).datacenter,
                           {"metadata": {"annotations": step_annotations(step)}, "spec": {"size": step.to}})
    direction = "up" if step.up else "down"
    memo.metrics.ring_steps.labels(namespace, name, direction).inc()
    event(body, f"Scaling{direction.capitalize()}", f"{step.start} → {step.to} nodes ({step.reason})")
    return step


def _report(status: dict, body: dict, conditions: Conditions, observed: Observed, decision: Decision,
            step: Step | None, finished_at: dt.datetime | None, floor: int, patch: kopf.Patch) -> bool:
    """Status from the observation and the decision; events on the transitions (a step done, a step held);
    → whether the step finished just now."""
    previous = status.get("lastStep") or {}
    last_step = None
    finished = False
    if step is not None:
        last_step = step_status(step, finished_at, observed.cleanup)
        finished = bool(finished_at and not previous.get("finishedAt")
                        and previous.get("startedAt") == last_step["startedAt"])
        if finished:
            event(body, "StepFinished", f"{step.start} → {step.to} nodes done"
                  + (" and cleaned up" if last_step["cleanupDoneAt"] else ""))
    if step is not None and finished_at is None:
        conditions.set("Scaling", True, "ScalingUp" if step.up else "ScalingDown",
                       observed.busy or f"{step.start} → {step.to} nodes")
    else:
        conditions.set("Scaling", False, "Settled", f"{observed.size} nodes")
    if decision.held:
        if conditions.reason("ScalingHeld") != decision.held or not conditions.is_true("ScalingHeld"):
            event(body, "ScalingHeld", decision.message)
        conditions.set("ScalingHeld", True, decision.held, decision.message)
    else:
        conditions.set("ScalingHeld", False, "NotHeld", "")
    if observed.serving:
        conditions.set("Ready", True, "Serving", f"{observed.ready} of {observed.size} nodes serve CQL")
    else:
        conditions.set("Ready", False, "NotServing", observed.busy or "no node serves CQL yet")
    patch.status.update({
        "nodes": observed.nodes, "readyNodes": observed.ready, "targetNodes": decision.target or observed.size,
        "replicationFactor": floor, "lastStep": last_step, "conditions": conditions.as_list(),
    })
    return finished


def delete(name: str, namespace: str, body: dict, memo: Context, **_) -> None:
    """Refused while a Dataset of the namespace is on the Ring (its tables would go with the nodes); then the
    CassandraDatacenter goes, and once cass-operator has removed it, the Secrets it needed until then."""
    users = memo.kube.referrers(namespace, "datasets", lambda spec: ((spec.get("storage") or {}).get("ring") or {})
                                .get("name"), name)
    if users:
        message = f"Datasets on the ring: {', '.join(users)}; delete them first"
        event(body, "DeletionBlocked", message, warning=True)
        raise kopf.TemporaryError(message, delay=DELETION_RETRY_S)
    ring = ProvisionedRing(name)
    dc = memo.kube.read_custom(DATACENTERS, namespace, ring.datacenter)
    if dc is not None and owned_by(dc, body):
        if not dc["metadata"].get("deletionTimestamp"):
            # The volumes go or stay as the Ring says now, whatever it said when the datacenter was last patched.
            memo.kube.patch_custom(DATACENTERS, namespace, ring.datacenter,
                                   {"metadata": {"annotations": volume_policy(body)}})
            memo.kube.delete_custom(DATACENTERS, namespace, ring.datacenter)
            volumes = ("go with them" if body["spec"].get("deletionPolicy") == "Delete"
                       else "stay (deletionPolicy Retain): a Ring of the same name finds the data")
            event(body, "DatacenterDeleting", f"CassandraDatacenter {ring.datacenter}: cass-operator removes the "
                                              f"nodes; their volumes {volumes}")
        raise kopf.TemporaryError(f"waiting for cass-operator to remove CassandraDatacenter {ring.datacenter}",
                                  delay=DELETION_RETRY_S)
    for secret in ring.secrets:
        memo.kube.release_secret(namespace, secret, SECRET_FINALIZER)
    memo.loads.forget(namespace, name)
    memo.metrics.forget_ring(namespace, name)
