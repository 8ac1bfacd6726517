"""TrainingJob: its ranks as an Indexed Job with the loader sidecar injected and a headless Service to rendezvous
through, once its Split is computed; its progress from the Job and the sidecars; suspend and resume; a resize
(spec.replicas changed) through one position where the ranks meet (builders/rescale.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import secrets
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from ringfeed_operator.builders.cache import cache_spec
from ringfeed_operator.builders.dataset import catalog_name
from ringfeed_operator.builders.lineage import lineage_epochs, lineage_record
from ringfeed_operator.builders.network import trainingjob_policy
from ringfeed_operator.builders.queue import JOB_UID_LABEL, WORKLOADS, admission, queue_name
from ringfeed_operator.builders.rescale import all_at, meeting_point, resized_positions
from ringfeed_operator.builders.ring import LABEL_RING
from ringfeed_operator.builders.trainingjob import (
    CONTROL_KEY,
    LABEL_TRAININGJOB,
    SIDECAR_PORT,
    control_secret,
    control_secret_name,
    decode_mismatch,
    job_pods,
    labels_of,
    phase,
    pod_ready,
    rank_job,
    rank_not_starting,
    rank_progress,
    rendezvous_service,
    running_pods,
    summary,
    world_size,
)
from ringfeed_operator.context import Context
from ringfeed_operator.feeds import by_rank, command_all, pod_feeds, rank_reports
from ringfeed_operator.handlers.common import creation_warning, event, give_up
from ringfeed_operator.isolation import dataset_secret_names, isolation_breaches, refusal, secret_references
from ringfeed_operator.kube import JobRejected
from ringfeed_operator.status import Conditions, job_state, now_rfc3339
from ringfeed_operator.watched import job_of, rank_pods_of

FINAL_PHASES = ("Succeeded", "Failed")
# Status fields written only along with a change of another: when the figures were read (the samples rate is over
# the time since).
INCIDENTAL_STATUS = ("observedAt",)


def in_progress(status: Mapping[str, Any], **_) -> bool:
    """The Job was made and has not ended (the progress timer's filter)."""
    return bool(status.get("jobName")) and status.get("phase") not in FINAL_PHASES


def reconcile(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict, memo: Context,
              patch: kopf.Patch, **_) -> None:
    """Make the rank Job and its Service once the Split is computed; then follow spec.suspend."""
    generation = meta["generation"]
    conditions = Conditions(status.get("conditions"), generation)
    if status.get("phase") in FINAL_PHASES:
        return
    split_name, part = spec["split"]["name"], spec["split"].get("part", "train")
    split = memo.kube.read_object(namespace, "splits", split_name)
    if split is None:
        give_up(patch, conditions, generation, "SplitNotFound", f"Split {split_name} does not exist in namespace "
                f"{namespace}", permanent=False, delay=10)
    computed = split.get("status") or {}
    if not computed.get("contentHash"):
        give_up(patch, conditions, generation, "SplitNotReady", f"waiting for Split {split_name} to be computed",
                permanent=False, delay=10)
    parts = [p["name"] for p in computed.get("parts") or ()]
    if part not in parts:
        give_up(patch, conditions, generation, "PartNotFound", f"Split {split_name} has no part {part!r} (its "
                f"parts: {', '.join(parts)})", permanent=True)
    dataset_name = split["spec"]["dataset"]
    dataset = memo.kube.read_object(namespace, "datasets", dataset_name)
    if dataset is None:
        give_up(patch, conditions, generation, "DatasetNotFound", f"Dataset {dataset_name} of Split {split_name} "
                "does not exist", permanent=False, delay=10)
    if message := decode_mismatch(spec, dataset):
        give_up(patch, conditions, generation, "InvalidSpec", message, permanent=True)
    template = spec["template"].get("spec") or {}
    references = secret_references(template)
    forbidden = _forbidden_secrets(name, namespace, dataset, references, memo)
    if message := refusal(isolation_breaches(template), forbidden, references):
        give_up(patch, conditions, generation, "TrainerNotIsolated", message, permanent=True)
    if spec.get("access", "sidecar") == "posix" and not status.get("jobName"):  # a made Job is not held back
        _require_cache(dataset, patch, conditions, generation)
    job = rank_job(body, dataset, catalog_name(dataset_name, dataset["spec"]), computed["version"], memo.config.jobs,
                   memo.config.cache, status.get("ranks"))
    if memo.config.network.enabled:
        memo.kube.apply(namespace, trainingjob_policy(body, {"matchLabels": {LABEL_TRAININGJOB: name}},
                                                      labels_of(name), SIDECAR_PORT, memo.config.network))
    memo.kube.ensure_service(namespace, rendezvous_service(body))
    if spec.get("access", "sidecar") == "sidecar":
        memo.kube.ensure_secret(namespace, control_secret(body, secrets.token_urlsafe(32)))
    suspended, queued = bool(spec.get("suspend")), queue_name(spec) is not None
    try:
        # A suspended queued job has no Job: it leaves the queue (builders.queue).
        existing, created = ((memo.kube.read_job(namespace, name), False) if queued and suspended
                             else memo.kube.ensure_job(namespace, job))
    except JobRejected as error:
        give_up(patch, conditions, generation, "InvalidSpec", str(error), permanent=True)
    resize = status.get("resize")
    if created and resize:
        event(body, "Resized", f"{resize['from']} → {resize['to']} ranks: the new ranks start at epoch "
                               f"{resize['epoch']} position {resize['offset']}")
        patch.status["resize"] = None
        conditions.remove("Resizing")
        patch.status["conditions"] = conditions.as_list()
    elif created and status.get("phase") == "Suspended":
        event(body, "Resumed", "ranks start again from their kept positions")
    elif created:
        memo.metrics.jobs_created.labels("trainer").inc()
        event(body, "Started", f"Job {name}: {world_size(spec)} rank(s) in {spec.get('replicas', 1)} Pod(s) on Split "
              f"{split_name} part {part} (version {computed['version']}), {spec.get('epochs', 1)} epoch(s)")
    elif queued and suspended:
        if existing is not None and not existing["metadata"].get("deletionTimestamp"):
            _suspend(name, namespace, status, body, memo, patch)
    # A queued Job's spec.suspend is Kueue's: it un-suspends the Job when it admits it.
    elif not queued and existing is not None and bool(existing["spec"].get("suspend")) != suspended:
        if suspended:
            _suspend(name, namespace, status, body, memo, patch)
        elif not (existing.get("status") or {}).get("startTime"):
            memo.kube.patch_job(namespace, name, {"spec": {"suspend": False}})  # created suspended, never run
        else:
            # A started Job's Pod template cannot change: the Job is made again with the kept positions.
            memo.kube.delete_jobs(namespace, f"{LABEL_TRAININGJOB}={name}")
            raise kopf.TemporaryError("making the Job again with the ranks' kept positions", delay=2)
    elif existing is not None and existing["spec"].get("completions") != spec.get("replicas", 1):
        _resize(name, namespace, spec, status, body, existing, memo, patch, conditions, generation)
    elif resize and existing is not None and not existing["metadata"].get("deletionTimestamp"):
        _call_off_resize(name, namespace, body, existing, resize, memo, patch, conditions)
    patch.status.update(jobName=name, splitVersion=computed["version"])
    if not (status.get("lineage") or {}).get("contentHash"):
        patch.status["lineage"] = lineage_record(spec, split, dataset, catalog_name(dataset_name, dataset["spec"]))
    if not status.get("phase"):
        patch.status["phase"] = "Pending"
        conditions.set("Ready", False, "Starting",
                       f"starting {world_size(spec)} rank(s) in {spec.get('replicas', 1)} Pod(s)")
        patch.status["conditions"] = conditions.as_list()
    patch.status["observedGeneration"] = generation


def _forbidden_secrets(name: str, namespace: str, dataset: dict, references: Mapping[str, list[str]],
                       memo: Context) -> dict[str, str]:
    """The Secrets among `references` (and this job's own) that the trainer must not name, each with whose it is: its
    Dataset's ring's, the control token's, any Ring's or TrainingJob's (by their labels), any other Dataset's ring
    login. Reads only what the template names: a template that names no Secret costs no request."""
    dataset_name = dataset["metadata"]["name"]
    forbidden = {secret: f"the ring login of Dataset {dataset_name}" for secret in dataset_secret_names(dataset)}
    forbidden[control_secret_name(name)] = "this TrainingJob's control token"
    for secret_name in sorted(set(references) - set(forbidden)):
        labels = (((memo.kube.read_secret(namespace, secret_name) or {}).get("metadata") or {}).get("labels") or {})
        if LABEL_RING in labels:
            forbidden[secret_name] = f"Ring {labels[LABEL_RING]}'s"
        elif LABEL_TRAININGJOB in labels:
            forbidden[secret_name] = f"the control token of TrainingJob {labels[LABEL_TRAININGJOB]}"
    if unknown := set(references) - set(forbidden):
        for other in memo.kube.list_objects(namespace, "datasets"):
            for secret_name in dataset_secret_names(other) & unknown:
                forbidden[secret_name] = f"the ring login of Dataset {other['metadata']['name']}"
    return forbidden


def _require_cache(dataset: dict, patch: kopf.Patch, conditions: Conditions, generation: int) -> None:
    """access: posix reads the Dataset's cache tier: it must have one, serving on every node, and warm on every
    node when it preloads."""
    name = dataset["metadata"]["name"]
    tier = cache_spec(dataset)
    if tier is None:
        give_up(patch, conditions, generation, "NoCacheTier", f"access posix reads files from the cache tier of "
                f"Dataset {name}, which has none: add spec.cache.alluxio to it, or use access sidecar",
                permanent=False, delay=15)
    cache = (dataset.get("status") or {}).get("cache") or {}
    if not cache.get("ready"):
        give_up(patch, conditions, generation, "CacheNotReady", f"waiting for the cache tier of Dataset {name} "
                f"(workers {cache.get('workers', '?')}, FUSE mounts {cache.get('mounts', '?')} ready)",
                permanent=False, delay=10)
    if tier.get("preload") and not (cache.get("preload") or {}).get("warm"):
        give_up(patch, conditions, generation, "CacheNotWarm", f"waiting for the preload of Dataset {name}'s cache "
                f"tier: {(cache.get('preload') or {}).get('nodes', '?')} node(s) warm (spec.cache.alluxio.preload)",
                permanent=False, delay=10)


def _suspend(name: str, namespace: str, status: dict, body: dict, memo: Context, patch: kopf.Patch) -> None:
    """Stop the sidecars handing out batches, keep their final positions, then stop the Pods."""
    pods = memo.kube.pods(namespace, f"{LABEL_TRAININGJOB}={name}")
    token = (memo.kube.secret_values(namespace, control_secret_name(name), CONTROL_KEY)[0]
             if body["spec"].get("access", "sidecar") == "sidecar" else None)
    reports = asyncio.run(rank_reports(pods, token)) if token else {}
    ranks = rank_progress(status.get("ranks") or [], reports)
    patch.status["ranks"] = ranks
    if queue_name(body["spec"]):
        memo.kube.delete_jobs(namespace, f"{LABEL_TRAININGJOB}={name}")  # its Workload and quota go with it
        patch.status["phase"] = "Suspended"
    else:
        memo.kube.patch_job(namespace, name, {"spec": {"suspend": True}})
    event(body, "Suspended", "ranks stopped at " + (", ".join(f"rank {r['rank']} epoch {r['epoch']} offset "
                                                               f"{r['offset']}" for r in ranks) or "the start"))


def _resize(name: str, namespace: str, spec: dict, status: dict, body: dict, job: dict, memo: Context,
            patch: kopf.Patch, conditions: Conditions, generation: int) -> None:
    """spec.replicas changed: the Job is made again at the new size, its ranks starting where the old ones stopped.
    A running job's sidecars first go on to one position where every rank stops (the first pass pauses them where
    they stand, then tells them where to meet); each step retries until done."""
    selector = f"{LABEL_TRAININGJOB}={name}"
    old, new = job["spec"]["completions"] * spec.get("ranksPerPod", 1), world_size(spec)
    if job["metadata"].get("deletionTimestamp"):
        raise kopf.TemporaryError("waiting for the Job of the old size to go", delay=2)
    started = bool((job.get("status") or {}).get("startTime")) and not job["spec"].get("suspend")
    if spec.get("access", "sidecar") == "posix" or not started:
        # No sidecar keeps a position (posix: the trainers shard the files themselves), or no rank has run since
        # the Job was made or suspended: made again at once, from the positions kept (all at one, or none).
        kept = [item["position"] for item in status.get("ranks") or () if item.get("position")]
        at = _kept_meeting_point(kept, new) if kept else (0, 0)
        if at is None:
            where = ", ".join(f"epoch {position['epoch']} offset {position['offset']}" for position in kept)
            give_up(patch, conditions, generation, "ResizeRefused", f"the ranks were suspended at {where}, not one "
                    f"position that {new} rank(s) can start from: resume the job, then change spec.replicas while "
                    "it runs", permanent=False, delay=30)
        if kept:
            patch.status["ranks"] = resized_positions(kept, at, new)
        _start_resize(body, patch, conditions, old, new, at)
        memo.kube.delete_jobs(namespace, selector)
        raise kopf.TemporaryError(f"making the Job again at {new} rank(s)", delay=2)
    token = memo.kube.secret_values(namespace, control_secret_name(name), CONTROL_KEY)[0]
    pods = running_pods(memo.kube.pods(namespace, selector), job)
    resize = status.get("resize") or {}
    if resize.get("to") != new:
        frozen = asyncio.run(rank_reports(pods, token))  # every rank stops where it stands first
        if sorted(frozen) != list(range(old)):
            asyncio.run(command_all(pods, token, "/resume"))  # not all answered: the others go on meanwhile
            raise kopf.TemporaryError(f"waiting for the sidecars of all {old} rank(s) to answer", delay=5)
        positions = [frozen[rank]["position"] for rank in range(old)]
        at = meeting_point(positions, new)
        if at is None:
            give_up(patch, conditions, generation, "ResizeRefused", "a rank delivered batches out of order (its "
                    "position skips some): the job cannot be resized", permanent=False, delay=60)
        asyncio.run(command_all(pods, token, "/pause", {"epoch": at[0], "offset": at[1]}))
        _start_resize(body, patch, conditions, old, new, at)
        raise kopf.TemporaryError(f"the ranks go on to epoch {at[0]} position {at[1]}", delay=2)
    at = (resize["epoch"], resize["offset"])
    feeds_by_pod = asyncio.run(pod_feeds(pods))  # one /status read per sidecar
    reports = by_rank(feeds_by_pod)
    if any((report["epoch"], report["offset"]) > at for report in reports.values()):
        # A sidecar that restarted meanwhile forgot where to stop and went past it: meet again, further on.
        event(body, "ResizeRetried", f"a rank went past epoch {at[0]} position {at[1]}: the ranks meet again",
              warning=True)
        patch.status["resize"] = None
        raise kopf.TemporaryError("the ranks meet again", delay=2)
    # Again for a sidecar that restarted: idempotent.
    if unpaused := [pod for pod, feeds in feeds_by_pod if any(not feed.get("paused") for feed in feeds)]:
        asyncio.run(command_all(unpaused, token, "/pause", {"epoch": at[0], "offset": at[1]}))
    positions = [reports[rank]["position"] for rank in range(old) if rank in reports]
    # Met: every rank at the position, its trainer done with its last batch (asking for the next: its checkpoint,
    # taken after a step, is at the position too).
    if len(positions) < old or not all_at(positions, at) or not all(report.get("trainer_held") for report in
                                                                     reports.values()):
        behind = [f"rank {rank} at epoch {report['epoch']} offset {report['offset']}"
                  for rank, report in sorted(reports.items())
                  if (report["epoch"], report["offset"]) != at or not report.get("trainer_held")]
        conditions.set("Resizing", True, "Draining", f"{old} → {new} ranks: waiting for every rank to reach epoch "
                       f"{at[0]} position {at[1]}" + (f" ({', '.join(behind)})" if behind else ""))
        patch.status["conditions"] = conditions.as_list()
        raise kopf.TemporaryError("waiting for the ranks to meet", delay=2)
    patch.status["ranks"] = resized_positions(positions, at, new)
    conditions.set("Resizing", True, "Restarting", f"every rank stopped at epoch {at[0]} position {at[1]}: the Job "
                   f"is made again at {new} rank(s)")
    patch.status["conditions"] = conditions.as_list()
    memo.kube.delete_jobs(namespace, selector)
    raise kopf.TemporaryError(f"making the Job again at {new} rank(s)", delay=2)


def _call_off_resize(name: str, namespace: str, body: dict, job: dict, resize: dict, memo: Context,
                     patch: kopf.Patch, conditions: Conditions) -> None:
    """spec.replicas went back to the Job's size before it was made again: its ranks go on from where they are."""
    token = memo.kube.secret_values(namespace, control_secret_name(name), CONTROL_KEY)[0]
    asyncio.run(command_all(running_pods(memo.kube.pods(namespace, f"{LABEL_TRAININGJOB}={name}"), job), token,
                            "/resume"))
    patch.status["resize"] = None
    conditions.remove("Resizing")
    patch.status["conditions"] = conditions.as_list()
    event(body, "ResizeCalledOff", f"spec.replicas is back to {resize['from']} rank(s): the ranks go on")


def _kept_meeting_point(kept: list[dict], new: int) -> tuple[int, int] | None:
    """Suspended ranks resize only where they all stopped at one position that the new size divides (or between
    epochs)."""
    if not all_at(kept, (kept[0]["epoch"], kept[0]["offset"])) or any(p.get("skip") for p in kept):
        return None
    at = (kept[0]["epoch"], kept[0]["offset"])
    return at if at[1] % new == 0 else None


def _start_resize(body: dict, patch: kopf.Patch, conditions: Conditions, old: int, new: int,
                  at: tuple[int, int]) -> None:
    patch.status["resize"] = {"from": old, "to": new, "epoch": at[0], "offset": at[1], "startedAt": now_rfc3339()}
    message = f"{old} → {new} ranks: every rank goes on to epoch {at[0]} position {at[1]}, then the Job is made again"
    conditions.set("Resizing", True, "Draining", message)
    patch.status["conditions"] = conditions.as_list()
    event(body, "Resizing", message)


async def watch(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict, memo: Context,
                patch: kopf.Patch, jobs_by_name: kopf.Index, rank_pods: kopf.Index, **_) -> None:
    """The Job's state and every rank's position, epoch and samples into status; an event per phase change.

    Asynchronous: the Job and its Pods come from the watches (watched.py), the sidecars are asked at once, and the
    rare calls to the API server (a Job the watch has not seen, Kueue's Workloads, why a Job failed) run in threads,
    so a tick holds no thread of kopf's pool while sidecars answer."""
    conditions = Conditions(status.get("conditions"), meta["generation"])
    job = (job_of(jobs_by_name, namespace, status["jobName"])
           or await asyncio.to_thread(memo.kube.read_job, namespace, status["jobName"]))
    state = job_state(job)
    if job is None:
        return  # deleted by hand, or not made yet: reconcile (on resume) makes it again
    replicas, epochs = spec.get("replicas", 1), spec.get("epochs", 1)
    pods = rank_pods_of(rank_pods, namespace, name)
    live = running_pods(pods, job)
    ready = [p for p in live if pod_ready(p)]
    sidecars = spec.get("access", "sidecar") == "sidecar"
    reports = await rank_reports(live) if sidecars else {}  # posix: the trainers read files, nothing reports
    # Ranks of the world as it is: a resize's old ranks go with their Job.
    ranks = [item for item in rank_progress(status.get("ranks") or [], reports) if item["rank"] < world_size(spec)]
    recorded = (status.get("lineage") or {}).get("epochs") or []
    lineage, disagreed = lineage_epochs(recorded, ranks, reports, world_size(spec))
    if lineage != recorded:
        patch.status["lineage"] = {"epochs": lineage}
    if disagreed:
        event(body, "LineageMismatch", f"the ranks report different orders for epoch(s) {disagreed}: they do not "
              "read the same Split version with the same seed", warning=True)
    figures = summary(ranks, world_size(spec), epochs)
    now = now_rfc3339()
    rate = _rate(status, figures["samplesDelivered"], now)
    held = bool(job["spec"].get("suspend"))
    queue = queue_name(spec)
    if queue is not None and state == "running":
        workloads = await asyncio.to_thread(_workloads, namespace, job, memo) if held else None
        _admission(body, queue, job, workloads, conditions)
    # A queued Job is suspended by Kueue only: it waits for admission.
    current = phase(state, held and queue is None, len(live))
    if current != status.get("phase"):
        failure = await asyncio.to_thread(memo.kube.job_failure, namespace, job) if current == "Failed" else ""
        _phase_changed(body, current, failure, memo, conditions, patch, now)
    conditions.set("Running", current == "Running", current)
    all_ready = current == "Running" and len(ready) == replicas
    if current not in FINAL_PHASES:
        readiness = f"{len(ready)} of {replicas} Pod(s) ready, epoch {figures['epoch']} of {epochs}"
        stuck = None
        if not (all_ready or held):
            stuck = rank_not_starting(pods, job) or await asyncio.to_thread(
                creation_warning, memo.kube, namespace, job_pods(pods, job))
        if stuck:
            conditions.set("Ready", False, "PodNotStarting", f"{readiness}; {stuck}")
        else:
            conditions.set("Ready", all_ready, "AllRanksFed" if all_ready else current, readiness)
    patch.status.update(phase=current, ranks=ranks, replicasReady=len(ready), samplesPerSecond=rate,
                        observedAt=now, conditions=conditions.as_list(), **figures)
    if current == "Running" and not status.get("startTime"):
        patch.status["startTime"] = now


def _workloads(namespace: str, job: dict, memo: Context) -> list[dict] | None:
    """Kueue's Workloads of a Job waiting for admission; None when the cluster serves no Kueue API."""
    try:
        return memo.kube.list_custom(WORKLOADS, namespace, f"{JOB_UID_LABEL}={job['metadata']['uid']}")
    except ApiException as error:
        if error.status != 404:
            raise
        return None


def _admission(body: dict, queue: str, job: dict, workloads: list[dict] | None, conditions: Conditions) -> None:
    """The Admitted condition from Kueue's Workload of the Job; an event when it changes."""
    admitted, reason, message = admission(queue, job, workloads)
    if conditions.reason("Admitted") != reason:
        event(body, "Admitted" if admitted else "Queued", message, warning=reason == "KueueNotInstalled")
    conditions.set("Admitted", admitted, reason, message)


def _rate(status: dict, samples: int, now: str) -> int:
    """Samples per second over the last tick (all ranks)."""
    before, when = status.get("samplesDelivered"), status.get("observedAt")
    if before is None or not when:
        return 0
    seconds = (dt.datetime.fromisoformat(now) - dt.datetime.fromisoformat(when)).total_seconds()
    return max(0, round((samples - before) / seconds)) if seconds > 0 else status.get("samplesPerSecond", 0)


def _phase_changed(body: dict, current: str, failure: str, memo: Context, conditions: Conditions,
                   patch: kopf.Patch, now: str) -> None:
    if current == "Succeeded":
        conditions.set("Succeeded", True, "AllEpochsDelivered", "every rank finished")
        conditions.set("Ready", False, "Succeeded", "the job has finished")
        patch.status["completionTime"] = now
        memo.metrics.job_outcomes.labels("trainer", "succeeded").inc()
        event(body, "Succeeded", "every rank finished")
    elif current == "Failed":
        conditions.set("Failed", True, "JobFailed", failure)
        conditions.set("Ready", False, "Failed", failure)
        patch.status["completionTime"] = now
        memo.metrics.job_outcomes.labels("trainer", "failed").inc()
        event(body, "Failed", failure, warning=True)
    elif current == "Running":
        event(body, "Running", "ranks are running")
