"""kopf registrations: thin handlers that read the object, call the data plane and the pure builders, and write
status through one Conditions helper.

Every step is idempotent (CREATE IF NOT EXISTS, Jobs with deterministic names, catalog reads), so an operator killed
at any point and restarted converges: kopf reruns an unfinished change handler, `resume` re-checks every object, and
the timers are level-based (they look at the Job and the catalog, not at what happened before). A timer acts only
once the change handler has seen the object's current generation (status.observedGeneration), so the two never
write status from different versions of the spec.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re

import kopf
from cassandra import DriverException, OperationTimedOut
from cassandra.cluster import NoHostAvailable

from ringfeed.errors import DatasetNotFound, RingfeedError
from ringfeed.splits.spec import SplitError
from ringfeed.splits.storage import SplitNotFound, get_split, list_splits

from ringfeed_operator import kube, metrics
from ringfeed_operator.conditions import Conditions, now_rfc3339
from ringfeed_operator.datasets import (catalog_name, dataset_schema, ingest_fingerprint, ingest_summary_status,
                                        keyspace_claim, keyspace_owner, ring_keyspace, same_tables, stats_status)
from ringfeed_operator.manifests import GROUP, LABEL_DATASET, VERSION, ingest_job, job_name, split_job
from ringfeed_operator.rings import Rings, StorageNotSupported
from ringfeed_operator.splits import computed_message, split_arguments, split_readiness, split_spec, split_status

DATASETS = (GROUP, VERSION, "datasets")
SPLITS = (GROUP, VERSION, "splits")
# Annotations and the finalizer carry Ringfeed's domain.
ANNOTATION_PREFIX = "operator.ringfeed.io"
FINALIZER = "ringfeed.io/protect"
POLL_S = 5.0  # how often Jobs and the catalog are looked at
DATASET_CHECK_S = 30.0  # how often a computed Split checks that its Dataset and stored version are still there
PERMANENT_REASONS = frozenset({"InvalidSpec", "StorageNotSupported", "SchemaMismatch"})
# A ring that cannot answer: the data plane's errors and the Python driver's own.
RING_ERRORS = (RingfeedError, DriverException, NoHostAvailable, OperationTimedOut)
DROP_ATTEMPTS = 5  # deletionPolicy Delete: after this many failed drops the keyspace is kept and the object goes


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.finalizer = FINALIZER
    # kopf's own events: warnings and errors only (its INFO "Timer succeeded" would be an event per object every
    # POLL_S). Ringfeed's events go through `_event`, which is not filtered.
    settings.posting.level = logging.WARNING
    memo.rings = Rings()


@kopf.on.cleanup()
def close_connections(memo: kopf.Memo, **_) -> None:
    memo.rings.close()


def counted(kind: str):
    """Count handler runs by result in ringfeed_operator_reconciles_total."""
    def decorate(handler):
        @functools.wraps(handler)
        def run(*args, **kwargs):
            try:
                result = handler(*args, **kwargs)
            except kopf.TemporaryError:
                metrics.RECONCILES.labels(kind, handler.__name__, "retry").inc()
                raise
            except Exception:
                metrics.RECONCILES.labels(kind, handler.__name__, "error").inc()
                raise
            metrics.RECONCILES.labels(kind, handler.__name__, "ok").inc()
            return result
        return run
    return decorate


def _event(body, reason: str, message: str, warning: bool = False) -> None:
    kopf.event(body, type="Warning" if warning else "Normal", reason=reason, message=message[:1024])


def _give_up(patch, conditions: Conditions, generation: int, reason: str, message: str, permanent: bool,
             delay: float = 15):
    """Record why the object is not Ready and end the handler: permanently (the spec must change) or to retry."""
    conditions.set("Ready", False, reason, message)
    patch.status["conditions"] = conditions.as_list()
    patch.status["observedGeneration"] = generation
    if permanent:
        raise kopf.PermanentError(message)
    raise kopf.TemporaryError(message, delay=delay)


def _open_store(memo, namespace: str, storage: dict, patch, conditions: Conditions, generation: int):
    try:
        return memo.rings.store(namespace, storage)
    except StorageNotSupported as error:
        _give_up(patch, conditions, generation, "StorageNotSupported", str(error), permanent=True)
    except kube.SecretNotFound as error:
        _give_up(patch, conditions, generation, "SecretNotFound", str(error), permanent=False)
    except RING_ERRORS as error:
        _give_up(patch, conditions, generation, "RingUnreachable", str(error), permanent=False)


# -- Dataset ---------------------------------------------------------------------------------------------------------

@kopf.index(*DATASETS)
def datasets_by_keyspace(namespace: str, name: str, spec: dict, status: dict, meta: dict, **_) -> dict:
    """Datasets by the (ring, keyspace) they claim, with their rank as claimants: who owns a keyspace."""
    return {ring_keyspace(namespace, name, spec): keyspace_claim(namespace, name, spec, status, meta)}


def _keyspace_owner(namespace: str, name: str, spec: dict, status: dict, meta: dict, index: kopf.Index) -> tuple:
    """(namespace, name) of the Dataset owning this one's keyspace on its ring (this one's own claim included, in
    case the index has not seen it yet)."""
    claims = index.get(ring_keyspace(namespace, name, spec), ())
    return keyspace_owner([*claims, keyspace_claim(namespace, name, spec, status, meta)])


def _keyspace_in_use(keyspace: str, owner: tuple) -> str:
    return (f"keyspace {keyspace} on this ring belongs to Dataset {owner[0]}/{owner[1]}; nothing is read, written or "
            "dropped there. Delete this Dataset and create it with another spec.keyspace (spec.keyspace is "
            "immutable), or wait: it takes the keyspace over once the other Dataset is gone")


@kopf.index(*SPLITS)
def splits_by_dataset(namespace: str, name: str, spec: dict, **_) -> dict:
    """Split names by (namespace, dataset), kept from the watch: the Dataset timer counts them without a LIST."""
    return {(namespace, spec.get("dataset")): name}


@kopf.on.create(*DATASETS)
@kopf.on.update(*DATASETS, field="spec")
@kopf.on.resume(*DATASETS)
@counted("Dataset")
def reconcile_dataset(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict,
                      memo: kopf.Memo, patch: kopf.Patch, splits_by_dataset: kopf.Index,
                      datasets_by_keyspace: kopf.Index, **_) -> None:
    """Tables exist and match the spec; the ingest Job of the current spec.ingest exists."""
    generation = meta["generation"]
    conditions = Conditions(status.get("conditions"), generation)
    try:
        schema = dataset_schema(name, spec)
    except RingfeedError as error:
        _give_up(patch, conditions, generation, "InvalidSpec", f"spec.schema: {error}", permanent=True)
    owner = _keyspace_owner(namespace, name, spec, status, meta, datasets_by_keyspace)
    if owner != (namespace, name):  # its deletionPolicy must not drop, nor its ingest write into, another's tables
        patch.status["keyspace"] = None  # no longer holds it: the timer leaves it alone, a deletion drops nothing
        _give_up(patch, conditions, generation, "KeyspaceInUse", _keyspace_in_use(schema.keyspace, owner),
                 permanent=False, delay=30)
    volume = ((spec.get("ingest") or {}).get("source") or {}).get("volume") or {}
    if "hostPath" in volume and not memo.jobs.allow_host_path:
        _give_up(patch, conditions, generation, "InvalidSpec", "spec.ingest.source.volume.hostPath is not allowed "
                 "by this operator (Helm value jobs.allowHostPath); use a persistentVolumeClaim", permanent=True)
    store = _open_store(memo, namespace, spec["storage"], patch, conditions, generation)
    try:
        existing = store.info(schema.name)
    except DatasetNotFound:
        existing = None
    except RING_ERRORS as error:
        memo.rings.forget(store)
        _give_up(patch, conditions, generation, "RingUnreachable", str(error), permanent=False)
    if existing is None:
        store.create_dataset(schema)
        _event(body, "TablesCreated", f"keyspace {schema.keyspace}: metadata_by_nat, data_by_uuid"
                                      + (", metadata_by_uuid" if schema.with_metadata_by_uuid else ""))
    else:
        differences = same_tables(schema, existing.schema)
        if differences:
            _give_up(patch, conditions, generation, "SchemaMismatch",
                     f"dataset {schema.name!r} exists on the ring with another schema: " + "; ".join(differences)
                     + ". Delete this Dataset and create it again with the existing schema, or with spec.keyspace "
                       "naming a new keyspace", permanent=True)
        if status.get("keyspace") != schema.keyspace:
            _event(body, "TablesAdopted", f"dataset {schema.name!r} is already on the ring: "
                                          f"{existing.samples:,} samples")
    patch.status["keyspace"] = schema.keyspace
    if spec.get("ingest"):
        _ensure_ingest(name, namespace, spec, status, meta, body, schema.name, memo, patch, conditions)
    _observe_dataset(name, namespace, spec, {**status, **patch.status}, meta, body, store, memo, patch, conditions,
                     len(splits_by_dataset.get((namespace, name), ())), force_refresh=True)


def _ensure_ingest(name, namespace, spec, status, meta, body, catalog: str, memo, patch, conditions) -> None:
    """The Job of the current spec.ingest exists, unless it already ran to an end (a finished Job that its TTL
    removed is not run again; a failed one is retried only by changing spec.ingest)."""
    fingerprint = ingest_fingerprint(spec["ingest"])
    wanted = job_name(name, "ingest", fingerprint)
    recorded = status.get("ingest") or {}
    if recorded.get("jobName") == wanted and (recorded.get("completedAt") or recorded.get("failedAt")):
        return
    if recorded.get("jobName") and recorded["jobName"] != wanted:
        kube.delete_jobs(namespace, f"job-name={recorded['jobName']}")  # the spec moved on: one ingest at a time
    try:
        _, created = kube.ensure_job(namespace, ingest_job(body, catalog, fingerprint, memo.jobs))
    except kube.JobRejected as error:
        _give_up(patch, conditions, meta["generation"], "InvalidSpec", str(error), permanent=True)
    if created:
        metrics.JOBS_CREATED.labels("ingest").inc()
        _event(body, "IngestStarted", f"Job {wanted}: ringfeed ingest {spec['ingest']['source']['path']}")
    if recorded.get("jobName") != wanted:
        # A merge patch keeps keys it does not name: the previous ingest's figures are cleared explicitly.
        patch.status["ingest"] = {"jobName": wanted, "generation": meta["generation"], "startedAt": now_rfc3339(),
                                  "completedAt": None, "failedAt": None, "ingested": None, "rejected": None,
                                  "rowsPerSecond": None}


@kopf.timer(*DATASETS, interval=POLL_S, initial_delay=POLL_S)
@counted("Dataset")
def watch_dataset(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict,
                  memo: kopf.Memo, patch: kopf.Patch, splits_by_dataset: kopf.Index, datasets_by_keyspace: kopf.Index,
                  **_) -> None:
    """Follow the ingest Job, refresh the catalog figures every spec.refreshInterval, count the Splits."""
    conditions = Conditions(status.get("conditions"), meta["generation"])
    if (status.get("observedGeneration") != meta["generation"] or not status.get("keyspace")
            or conditions.reason("Ready") in PERMANENT_REASONS):
        return  # the change handler has not handled this generation or its tables yet, or the spec must change
    owner = _keyspace_owner(namespace, name, spec, status, meta, datasets_by_keyspace)
    if owner != (namespace, name):  # another Dataset holds the keyspace too (shared before ownership existed)
        conditions.set("Ready", False, "KeyspaceInUse", _keyspace_in_use(status["keyspace"], owner))
        patch.status["conditions"] = conditions.as_list()
        return
    try:
        store = memo.rings.store(namespace, spec["storage"])
    except (kube.SecretNotFound, StorageNotSupported, *RING_ERRORS) as error:
        reason = "SecretNotFound" if isinstance(error, kube.SecretNotFound) else "RingUnreachable"
        conditions.set("Degraded", True, reason, str(error))
        patch.status["conditions"] = conditions.as_list()
        return
    _observe_dataset(name, namespace, spec, status, meta, body, store, memo, patch, conditions,
                     len(splits_by_dataset.get((namespace, name), ())))


def _observe_dataset(name, namespace, spec, status, meta, body, store, memo, patch, conditions: Conditions,
                     splits: int, force_refresh: bool = False) -> None:
    recorded = dict(status.get("ingest") or {})
    job = recorded.get("jobName")
    state = "none"
    if spec.get("ingest") and job:
        if recorded.get("completedAt"):
            state = "succeeded"
        elif recorded.get("failedAt"):
            state = "failed"
        else:
            state = kube.job_state(kube.read_job(namespace, job))
    if state == "missing":  # deleted by hand before it finished: made again (ingest is idempotent)
        _ensure_ingest(name, namespace, spec, {}, meta, body, catalog_name(name, spec), memo, patch, conditions)
    just_finished = state == "succeeded" and not recorded.get("completedAt")

    if state in ("running", "missing"):
        conditions.set("Ingesting", True, "JobRunning", f"Job {job} is ingesting {spec['ingest']['source']['path']}")
        conditions.set("Ready", False, "Ingesting", "waiting for the ingest Job to finish")
    elif state == "failed":
        if not recorded.get("failedAt"):  # reported once per Job
            message = kube.job_failure(namespace, kube.read_job(namespace, job))
            _event(body, "IngestFailed", f"Job {job}: {message}", warning=True)
            conditions.set("Degraded", True, "IngestFailed", f"Job {job} failed: {message}")
            patch.status["ingest"] = {**recorded, "failedAt": now_rfc3339()}
        conditions.set("Ingesting", False, "JobFailed", f"Job {job} failed; change spec.ingest to run another")
        conditions.set("Ready", False, "IngestFailed", "the ingest Job failed; see the Degraded condition")
    else:
        conditions.set("Ingesting", False, "Completed" if state == "succeeded" else "NoIngest",
                       f"Job {job} completed" if state == "succeeded" else "spec.ingest is not set")
        refresh = _refresh_stats(name, namespace, spec, status, store, memo, patch, conditions,
                                 force_refresh or just_finished, recorded if just_finished else None)
        if refresh != "failed":
            conditions.set("Degraded", False, "AsExpected", "")
            samples = patch.status.get("samples", status.get("samples")) or 0
            conditions.set("Ready", True, "Ready", f"{samples:,} samples in keyspace {status.get('keyspace')}")
        if just_finished and refresh == "done":
            _event(body, "IngestSucceeded", f"Job {job}: {patch.status['ingest'].get('ingested') or 0:,} samples "
                                            "written")

    patch.status["splits"] = splits
    patch.status["conditions"] = conditions.as_list()
    patch.status["observedGeneration"] = meta["generation"]
    metrics.DATASET_READY.labels(namespace, name).set(1 if conditions.is_true("Ready") else 0)


def _refresh_stats(name, namespace, spec, status, store, memo, patch, conditions: Conditions, force: bool,
                   finished_ingest: dict | None) -> str:
    """Catalog figures into status when forced or older than spec.refreshInterval → done | skipped | failed."""
    last = status.get("lastRefreshTime")
    if not force and last and (dt.datetime.now(dt.timezone.utc) - _parse_time(last)).total_seconds() < \
            _seconds(spec.get("refreshInterval", "60s")):
        return "skipped"
    try:
        info = store.info(catalog_name(name, spec))
    except RING_ERRORS as error:
        memo.rings.forget(store)
        conditions.set("Degraded", True, "RingUnreachable", f"cannot read the catalog: {error}")
        return "failed"
    patch.status.update(stats_status(info))
    patch.status["lastRefreshTime"] = now_rfc3339()
    if finished_ingest is not None:
        patch.status["ingest"] = {**finished_ingest, "completedAt": now_rfc3339(),
                                  **ingest_summary_status(info.last_ingest)}
    metrics.DATASET_SAMPLES.labels(namespace, name).set(info.samples)
    metrics.DATASET_BYTES.labels(namespace, name).set(info.bytes)
    return "done"


@kopf.on.delete(*DATASETS)
@counted("Dataset")
def delete_dataset(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict, memo: kopf.Memo,
                   retry: int, datasets_by_keyspace: kopf.Index, **_) -> None:
    """Refuse while Splits use the Dataset; stop its Jobs; drop the tables when deletionPolicy is Delete."""
    splits = kube.referrers(namespace, "splits", lambda s: s.get("dataset"), name)
    if splits:
        message = f"Dataset {name} is used by Split(s) {', '.join(splits)}: delete them first"
        _event(body, "DeletionBlocked", message, warning=True)
        raise kopf.TemporaryError(message, delay=10)
    selector = f"{LABEL_DATASET}={name}"
    kube.delete_jobs(namespace, selector)
    if pods := kube.pods_left(namespace, selector):  # an ingest still writing would recreate what is dropped
        raise kopf.TemporaryError(f"waiting for Pod(s) {', '.join(pods)} to stop", delay=3)
    metrics.forget_dataset(namespace, name)
    if spec.get("deletionPolicy", "Retain") != "Delete" or not status.get("keyspace"):
        return
    owner = _keyspace_owner(namespace, name, spec, status, meta, datasets_by_keyspace)
    if owner != (namespace, name):
        _event(body, "TablesKept", f"deletionPolicy Delete: keyspace {status['keyspace']} belongs to Dataset "
                                   f"{owner[0]}/{owner[1]}, not dropped", warning=True)
        return
    try:
        # force: its stored splits go with it (the Split objects, the guard above, are gone already).
        memo.rings.store(namespace, spec["storage"]).drop_dataset(catalog_name(name, spec), force=True)
    except DatasetNotFound:
        return
    except (kube.SecretNotFound, StorageNotSupported, *RING_ERRORS) as error:
        message = f"deletionPolicy Delete: cannot drop keyspace {status['keyspace']}: {error}"
        if retry + 1 >= DROP_ATTEMPTS:  # never hold the object (and its namespace) forever
            _event(body, "DeleteFailed", f"{message}; giving up after {DROP_ATTEMPTS} attempts, the keyspace stays",
                   warning=True)
            return
        _event(body, "DeleteFailed", message, warning=True)
        raise kopf.TemporaryError(message, delay=15)
    _event(body, "TablesDropped", f"keyspace {status['keyspace']} dropped (deletionPolicy Delete)")


# -- Split -----------------------------------------------------------------------------------------------------------

def _ready_dataset(namespace: str, split_spec_: dict, patch, conditions: Conditions, generation: int) -> dict:
    dataset = kube.read_object(namespace, "datasets", split_spec_["dataset"])
    if dataset is None:
        _give_up(patch, conditions, generation, "DatasetNotFound", f"Dataset {split_spec_['dataset']} does not "
                 f"exist in namespace {namespace}", permanent=False, delay=10)
    ready = Conditions((dataset.get("status") or {}).get("conditions"), 0)
    if not ready.is_true("Ready"):
        _give_up(patch, conditions, generation, "DatasetNotReady", f"waiting for Dataset {split_spec_['dataset']} "
                 f"to be Ready ({ready.reason('Ready') or 'not reconciled yet'})", permanent=False, delay=10)
    return dataset


@kopf.on.create(*SPLITS)
@kopf.on.resume(*SPLITS)
@counted("Split")
def reconcile_split(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict,
                    memo: kopf.Memo, patch: kopf.Patch, **_) -> None:
    """Launch the split Job once the Dataset is Ready (a Split's spec never changes: the schema forbids it)."""
    conditions = Conditions(status.get("conditions"), meta["generation"])
    if status.get("contentHash") or conditions.reason("Ready") == "Failed":
        return  # computed, or refused by the engine: both final
    try:
        parameters = split_spec(spec)
    except SplitError as error:
        _give_up(patch, conditions, meta["generation"], "InvalidSpec", str(error), permanent=True)
    _ensure_split_job(namespace, spec, body, parameters, memo, patch, conditions, meta["generation"])
    patch.status["observedGeneration"] = meta["generation"]


def _ensure_split_job(namespace, spec, body, parameters, memo, patch, conditions: Conditions,
                      generation: int) -> None:
    dataset = _ready_dataset(namespace, spec, patch, conditions, generation)
    manifest = split_job(body, dataset, catalog_name(dataset["metadata"]["name"], dataset["spec"]),
                         split_arguments(parameters), memo.jobs)
    try:
        _, created = kube.ensure_job(namespace, manifest)
    except kube.JobRejected as error:
        _give_up(patch, conditions, generation, "InvalidSpec", str(error), permanent=True)
    if created:
        metrics.JOBS_CREATED.labels("split").inc()
        _event(body, "SplitStarted", f"Job {manifest['metadata']['name']}: {parameters.describe()}")
    patch.status["jobName"] = manifest["metadata"]["name"]
    conditions.set("Ready", False, "Computing", f"Job {manifest['metadata']['name']} is computing the split")
    patch.status["conditions"] = conditions.as_list()


def _split_in_progress(status, **_) -> bool:
    reason = Conditions(status.get("conditions"), 0).reason("Ready")
    return bool(status.get("jobName")) and not status.get("contentHash") and reason != "Failed"


@kopf.timer(*SPLITS, interval=POLL_S, initial_delay=POLL_S, when=_split_in_progress)
@counted("Split")
def watch_split(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict, memo: kopf.Memo,
                patch: kopf.Patch, **_) -> None:
    """When the split Job ends: the stored split's figures into status, or why it failed (final either way)."""
    generation = meta["generation"]
    conditions = Conditions(status.get("conditions"), generation)
    job = kube.read_job(namespace, status["jobName"])
    state = kube.job_state(job)
    if state == "failed":
        message = kube.job_failure(namespace, job)
        _event(body, "SplitFailed", message, warning=True)
        conditions.set("Ready", False, "Failed", f"Job {status['jobName']} failed: {message}")
    elif state == "missing":  # deleted by hand before it finished: made again
        _ensure_split_job(namespace, spec, body, split_spec(spec), memo, patch, conditions, generation)
    elif state == "succeeded":
        dataset = kube.read_object(namespace, "datasets", spec["dataset"])
        if dataset is None:
            conditions.set("Ready", False, "DatasetNotFound", f"Dataset {spec['dataset']} was deleted")
        else:
            store = _open_store(memo, namespace, dataset["spec"]["storage"], patch, conditions, generation)
            parameters = split_spec(spec)
            try:
                versions = [s for s in list_splits(store, catalog_name(spec["dataset"], dataset["spec"]), name)
                            if s.spec == parameters]
            except RING_ERRORS as error:
                memo.rings.forget(store)
                raise kopf.TemporaryError(f"cannot read the stored split: {error}", delay=POLL_S) from None
            if not versions:
                conditions.set("Ready", False, "Failed", "the Job succeeded but no stored split matches the spec")
            else:
                stored = max(versions, key=lambda s: s.version)
                patch.status.update(split_status(stored))
                for part, samples in stored.part_sizes.items():
                    metrics.SPLIT_SAMPLES.labels(namespace, name, part).set(samples)
                conditions.set("Ready", True, "Computed", computed_message(stored))
                _event(body, "SplitComputed", ", ".join(f"{p} {n:,}" for p, n in stored.part_sizes.items()))
    patch.status["conditions"] = conditions.as_list()
    patch.status["observedGeneration"] = generation


def _split_computed(status, **_) -> bool:
    return bool(status.get("contentHash"))


@kopf.timer(*SPLITS, interval=DATASET_CHECK_S, initial_delay=DATASET_CHECK_S, when=_split_computed)
@counted("Split")
def watch_split_dataset(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict,
                        memo: kopf.Memo, patch: kopf.Patch, **_) -> None:
    """A computed Split is Ready only while its Dataset, and its stored version made from that dataset, exist."""
    conditions = Conditions(status.get("conditions"), meta["generation"])
    dataset = kube.read_object(namespace, "datasets", spec["dataset"])
    on_ring = stored = None
    if dataset is not None:
        catalog = catalog_name(spec["dataset"], dataset["spec"])
        try:
            store = memo.rings.store(namespace, dataset["spec"]["storage"])
        except (kube.SecretNotFound, StorageNotSupported, *RING_ERRORS):
            return  # the Dataset reports why its ring cannot be reached; look again at the next tick
        try:
            on_ring = store.info(catalog)
            stored = get_split(store, catalog, name, status["version"])
        except (DatasetNotFound, SplitNotFound):
            pass
        except RING_ERRORS:
            memo.rings.forget(store)
            return
    ready, reason, message = split_readiness(spec["dataset"], dataset is not None, on_ring, stored)
    if not ready and conditions.reason("Ready") != reason:
        _event(body, reason, message, warning=True)
    conditions.set("Ready", ready, reason, message)
    patch.status["conditions"] = conditions.as_list()


@kopf.on.delete(*SPLITS)
@counted("Split")
def delete_split(name: str, namespace: str, body: dict, **_) -> None:
    """Refuse while TrainingJobs use the Split. Stored versions stay in the ring (immutable, small, reproducible)."""
    jobs = kube.referrers(namespace, "trainingjobs", lambda s: (s.get("split") or {}).get("name"), name)
    if jobs:
        message = f"Split {name} is used by TrainingJob(s) {', '.join(jobs)}: delete them first"
        _event(body, "DeletionBlocked", message, warning=True)
        raise kopf.TemporaryError(message, delay=10)


# -- helpers ---------------------------------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+)(h|m|s)")


def _seconds(duration: str) -> float:
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[unit] for n, unit in _DURATION.findall(duration)) or 60


def _parse_time(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
