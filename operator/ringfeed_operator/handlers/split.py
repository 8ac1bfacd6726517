"""Split: its split Job once the Dataset is Ready, the stored result in status, its readiness while the Dataset
lasts, its deletion. A Split's spec never changes (the schema forbids it), so a Split is computed once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from ringfeed.errors import DatasetNotFound, RingfeedError
from ringfeed.ring import ring_errors
from ringfeed.splits import SplitSpec
from ringfeed.splits.spec import SplitError
from ringfeed.splits.storage import SplitNotFound, get_split, list_splits
from ringfeed_operator.builders.dataset import catalog_name
from ringfeed_operator.builders.jobs import split_job, split_policy
from ringfeed_operator.builders.split import (
    computed_message,
    split_arguments,
    split_readiness,
    split_spec,
    split_status,
)
from ringfeed_operator.context import Context
from ringfeed_operator.handlers.common import POLL_S, STORE_ERRORS, event, give_up, job_not_starting, open_store
from ringfeed_operator.kube import JobRejected
from ringfeed_operator.status import Conditions, job_state
from ringfeed_operator.watched import job_of

DATASET_CHECK_S = 30.0  # how often a computed Split checks that its Dataset and stored version are still there


def dataset_index(namespace: str, name: str, spec: dict, **_) -> dict:
    """Split names by (namespace, dataset), kept from the watch: the Dataset timer counts them without a LIST."""
    return {(namespace, spec.get("dataset")): name}


def job_in_progress(status: Mapping[str, Any], **_) -> bool:
    """The split Job was launched and has not ended yet (the Job timer's filter)."""
    reason = Conditions(status.get("conditions"), 0).reason("Ready")
    return bool(status.get("jobName")) and not status.get("contentHash") and reason != "Failed"


def computed(status: Mapping[str, Any], **_) -> bool:
    """The split is stored and its figures are in status (the Dataset check's filter)."""
    return bool(status.get("contentHash"))


def _ready_dataset(namespace: str, split_spec_: dict, memo: Context, patch: kopf.Patch, conditions: Conditions,
                   generation: int) -> dict:
    dataset = memo.kube.read_object(namespace, "datasets", split_spec_["dataset"])
    if dataset is None:
        give_up(patch, conditions, generation, "DatasetNotFound", f"Dataset {split_spec_['dataset']} does not "
                f"exist in namespace {namespace}", permanent=False, delay=10)
    ready = Conditions((dataset.get("status") or {}).get("conditions"), 0)
    if not ready.is_true("Ready"):
        give_up(patch, conditions, generation, "DatasetNotReady", f"waiting for Dataset {split_spec_['dataset']} "
                f"to be Ready ({ready.reason('Ready') or 'not reconciled yet'})", permanent=False, delay=10)
    return dataset


def reconcile(namespace: str, spec: dict, status: dict, meta: dict, body: dict, memo: Context, patch: kopf.Patch,
              **_) -> None:
    """Launch the split Job once the Dataset is Ready."""
    conditions = Conditions(status.get("conditions"), meta["generation"])
    if status.get("contentHash") or conditions.reason("Ready") == "Failed":
        return  # computed, or refused by the engine: both final
    try:
        parameters = split_spec(spec)
    except SplitError as error:
        give_up(patch, conditions, meta["generation"], "InvalidSpec", str(error), permanent=True)
    _ensure_split_job(namespace, spec, body, parameters, memo, patch, conditions, meta["generation"])
    patch.status["observedGeneration"] = meta["generation"]


def _ensure_split_job(namespace: str, spec: dict, body: dict, parameters: SplitSpec, memo: Context,
                      patch: kopf.Patch, conditions: Conditions, generation: int) -> None:
    dataset = _ready_dataset(namespace, spec, memo, patch, conditions, generation)
    manifest = split_job(body, dataset, catalog_name(dataset["metadata"]["name"], dataset["spec"]),
                         split_arguments(parameters), memo.config.jobs)
    if memo.config.network.enabled:
        memo.kube.apply(namespace, split_policy(body, memo.config.network))
    try:
        _, created = memo.kube.ensure_job(namespace, manifest)
    except JobRejected as error:
        give_up(patch, conditions, generation, "InvalidSpec", str(error), permanent=True)
    if created:
        memo.metrics.jobs_created.labels("split").inc()
        event(body, "SplitStarted", f"Job {manifest['metadata']['name']}: {parameters.describe()}")
    patch.status["jobName"] = manifest["metadata"]["name"]
    conditions.set("Ready", False, "Computing", f"Job {manifest['metadata']['name']} is computing the split")
    patch.status["conditions"] = conditions.as_list()


def watch_job(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict, memo: Context,
              patch: kopf.Patch, jobs_by_name: kopf.Index, **_) -> None:
    """When the split Job ends: the stored split's figures into status, or why it failed (final either way)."""
    generation = meta["generation"]
    conditions = Conditions(status.get("conditions"), generation)
    job = job_of(jobs_by_name, namespace, status["jobName"]) or memo.kube.read_job(namespace, status["jobName"])
    state = job_state(job)
    if state == "failed" and job is not None:  # failed: read from the Job, so it exists
        message = memo.kube.job_failure(namespace, job)
        event(body, "SplitFailed", message, warning=True)
        memo.metrics.job_outcomes.labels("split", "failed").inc()
        conditions.set("Ready", False, "Failed", f"Job {status['jobName']} failed: {message}")
    elif state == "missing":  # deleted by hand before it finished: made again
        _ensure_split_job(namespace, spec, body, split_spec(spec), memo, patch, conditions, generation)
    elif state == "running" and job is not None:
        stuck = job_not_starting(memo, namespace, job)
        if stuck:
            conditions.set("Ready", False, "PodNotStarting", f"Job {status['jobName']} cannot start: {stuck}")
        else:
            conditions.set("Ready", False, "Computing", f"Job {status['jobName']} is computing the split")
    elif state == "succeeded":
        dataset = memo.kube.read_object(namespace, "datasets", spec["dataset"])
        if dataset is None:
            conditions.set("Ready", False, "DatasetNotFound", f"Dataset {spec['dataset']} was deleted")
        else:
            store = open_store(memo, namespace, dataset["spec"]["storage"], patch, conditions, generation)
            parameters = split_spec(spec)
            try:
                with ring_errors(store.address):
                    versions = [s for s in list_splits(store, catalog_name(spec["dataset"], dataset["spec"]), name)
                                if s.spec == parameters]
            except RingfeedError as error:
                memo.rings.forget(store)
                raise kopf.TemporaryError(f"cannot read the stored split: {error}", delay=POLL_S) from None
            if not versions:
                conditions.set("Ready", False, "Failed", "the Job succeeded but no stored split matches the spec")
            else:
                stored = max(versions, key=lambda s: s.version)
                patch.status.update(split_status(stored))
                for part, samples in stored.part_sizes.items():
                    memo.metrics.split_samples.labels(namespace, name, part).set(samples)
                conditions.set("Ready", True, "Computed", computed_message(stored))
                memo.metrics.job_outcomes.labels("split", "succeeded").inc()
                event(body, "SplitComputed", ", ".join(f"{p} {n:,}" for p, n in stored.part_sizes.items()))
    patch.status["conditions"] = conditions.as_list()
    patch.status["observedGeneration"] = generation


def watch_dataset(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict, memo: Context,
                  patch: kopf.Patch, dataset_specs: kopf.Index, **_) -> None:
    """A computed Split is Ready only while its Dataset, and its stored version made from that dataset, exist."""
    conditions = Conditions(status.get("conditions"), meta["generation"])
    dataset = next(iter(dataset_specs.get((namespace, spec["dataset"]), ())), None)  # the Dataset as last watched
    on_ring = stored = None
    if dataset is not None:
        catalog = catalog_name(spec["dataset"], dataset["spec"])
        try:
            store = memo.rings.store(namespace, dataset["spec"]["storage"])
        except STORE_ERRORS:
            return  # the Dataset reports why its ring cannot be reached; look again at the next tick
        try:
            with ring_errors(store.address):
                on_ring = store.info(catalog)
                stored = get_split(store, catalog, name, status["version"])
        except (DatasetNotFound, SplitNotFound):
            pass
        except RingfeedError:
            memo.rings.forget(store)
            return
    ready, reason, message = split_readiness(spec["dataset"], dataset is not None, on_ring, stored)
    if not ready and conditions.reason("Ready") != reason:
        event(body, reason, message, warning=True)
    conditions.set("Ready", ready, reason, message)
    patch.status["conditions"] = conditions.as_list()


def delete(name: str, namespace: str, body: dict, memo: Context, **_) -> None:
    """Refuse while TrainingJobs use the Split. Stored versions stay in the ring (immutable, small, reproducible)."""
    jobs = memo.kube.referrers(namespace, "trainingjobs", lambda s: (s.get("split") or {}).get("name"), name)
    if jobs:
        message = f"Split {name} is used by TrainingJob(s) {', '.join(jobs)}: delete them first"
        event(body, "DeletionBlocked", message, warning=True)
        raise kopf.TemporaryError(message, delay=10)
