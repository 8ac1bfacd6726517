"""Dataset: its tables on the ring, its ingest Job, its figures in status, its deletion.

Every step is idempotent (CREATE IF NOT EXISTS, Jobs with deterministic names, catalog reads), so an operator killed
at any point and restarted converges: kopf reruns an unfinished change handler, `resume` re-checks every object, and
the timer is level-based (it looks at the Job and the catalog, not at what happened before). The timer acts only
once the change handler has seen the object's current generation (status.observedGeneration), so the two never
write status from different versions of the spec.
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from collections.abc import Mapping
from typing import Any

import kopf

from ringfeed.errors import DatasetNotFound, RingfeedError, StorageNotSupported
from ringfeed.ring import CredentialsSecret, ProvisionedRing, ring_errors, writer_role, writer_secret
from ringfeed.store import Store
from ringfeed_operator.builders.cache import (
    CACHE_OBJECTS,
    CACHE_TIER_ALLOWED,
    CACHE_TIER_LABEL,
    cache_objects,
    cache_spec,
    cache_status,
    host_dir,
    legacy_object_name,
    object_name,
    pod_selector,
)
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
    writer_secret_manifest,
)
from ringfeed_operator.builders.jobs import LABEL_DATASET, ingest_job, ingest_policy, job_name
from ringfeed_operator.context import Context
from ringfeed_operator.handlers.common import POLL_S, STORE_ERRORS, event, give_up, job_not_starting, open_store
from ringfeed_operator.kube import RINGS, JobRejected, ObjectRejected, SecretNotFound
from ringfeed_operator.status import Conditions, job_state, now_rfc3339
from ringfeed_operator.watched import job_of

PERMANENT_REASONS = frozenset({"InvalidSpec", "StorageNotSupported", "SchemaMismatch"})
WAITING_FOR_SPEC = PERMANENT_REASONS | {"KeyspaceInUse"}
# How often every Dataset is looked at by the slow timer: at rest, its catalog recount (spec.refreshInterval, 60 s by
# default, is honoured to the next look) and its Splits' count. A look every POLL_S at each of 1,000 Datasets was 0.8
# of a core (make bench-operator-scale); the POLL_S timer runs only while something is in progress.
REST_CHECK_S = 30.0
# The POLL_S timer has not looked for this long at a Dataset in progress: kopf lost it (a filtered timer whose filter
# turns false and true again while the timer is still stopping is not started again), and the slow timer looks.
FAST_LOOK_LATE_S = 3 * POLL_S
DROP_ATTEMPTS = 5  # deletionPolicy Delete: after this many failed drops the keyspace is kept and the object goes


def keyspace_index(namespace: str, name: str, spec: dict, status: dict, meta: dict, **_) -> dict:
    """Datasets by the (ring, keyspace) they claim, with their rank as claimants: who owns a keyspace. A Dataset on
    a kind of ring this release cannot reach claims none."""
    try:
        return {ring_keyspace(namespace, name, spec): keyspace_claim(namespace, name, spec, status, meta)}
    except StorageNotSupported:
        return {}


def spec_index(namespace: str, name: str, spec: dict, **_) -> dict:
    """Datasets' specs by (namespace, name): a computed Split looks at its Dataset every DATASET_CHECK_S without a
    request."""
    return {(namespace, name): {"spec": dict(spec)}}


def _keyspace_owner(namespace: str, name: str, spec: dict, status: dict, meta: dict, index: kopf.Index) -> tuple:
    """(namespace, name) of the Dataset owning this one's keyspace on its ring (this one's own claim included, in
    case the index has not seen it yet)."""
    claims = index.get(ring_keyspace(namespace, name, spec), ())
    return keyspace_owner([*claims, keyspace_claim(namespace, name, spec, status, meta)])


def cache_namespace_index(name: str, labels: Mapping, **_) -> dict:
    """The namespaces the cluster admin opted in to cache tiers (their FUSE Pods are privileged)."""
    return {name: True} if labels.get(CACHE_TIER_LABEL) == CACHE_TIER_ALLOWED else {}


def reconcile(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict, memo: Context,
              patch: kopf.Patch, splits_by_dataset: kopf.Index, datasets_by_keyspace: kopf.Index,
              cache_namespaces: kopf.Index, jobs_by_name: kopf.Index, **_) -> None:
    """Tables exist and match the spec; the ingest Job of the current spec.ingest exists."""
    generation = meta["generation"]
    conditions = Conditions(status.get("conditions"), generation)
    try:
        schema = dataset_schema(name, spec)
    except RingfeedError as error:
        give_up(patch, conditions, generation, "InvalidSpec", f"spec.schema: {error}", permanent=True)
    try:
        owner = _keyspace_owner(namespace, name, spec, status, meta, datasets_by_keyspace)
    except StorageNotSupported as error:
        give_up(patch, conditions, generation, "StorageNotSupported", str(error), permanent=True)
    if owner != (namespace, name):  # its deletionPolicy must not drop, nor its ingest write into, another's tables
        patch.status["keyspace"] = None  # no longer holds it: the timer leaves it alone, a deletion drops nothing
        give_up(patch, conditions, generation, "KeyspaceInUse", keyspace_in_use(schema.keyspace, owner),
                permanent=False, delay=30)
    volume = ((spec.get("ingest") or {}).get("source") or {}).get("volume") or {}
    if "hostPath" in volume and not memo.config.jobs.allow_host_path:
        give_up(patch, conditions, generation, "InvalidSpec", "spec.ingest.source.volume.hostPath is not allowed "
                "by this operator (Helm value jobs.allowHostPath); use a persistentVolumeClaim", permanent=True)
    if "ring" in spec["storage"]:
        _require_ring(namespace, spec, memo, patch, conditions, generation)
    store = open_store(memo, namespace, spec["storage"], patch, conditions, generation)
    try:
        with ring_errors(store.address):
            existing = store.info(schema.name)
    except DatasetNotFound:
        existing = None
    except RingfeedError as error:
        memo.rings.forget(store)
        give_up(patch, conditions, generation, "RingUnreachable", str(error), permanent=False)
    if existing is None:
        with ring_errors(store.address, f"creating keyspace {schema.keyspace}"):  # failed: kopf retries
            store.create_dataset(schema)
        event(body, "TablesCreated", f"keyspace {schema.keyspace}: metadata_by_nat, data_by_uuid"
                                     + (", metadata_by_uuid" if schema.with_metadata_by_uuid else ""))
    else:
        differences = same_tables(schema, existing.schema)
        if differences:
            give_up(patch, conditions, generation, "SchemaMismatch",
                    f"dataset {schema.name!r} exists on the ring with another schema: " + "; ".join(differences)
                    + ". Delete this Dataset and create it again with the existing schema, or with spec.keyspace "
                      "naming a new keyspace", permanent=True)
        if status.get("keyspace") != schema.keyspace:
            event(body, "TablesAdopted", f"dataset {schema.name!r} is already on the ring: "
                                         f"{existing.samples:,} samples")
    patch.status["keyspace"] = schema.keyspace
    if "ring" in spec["storage"]:  # an external ring's roles are its admin's
        _grant_read(namespace, CredentialsSecret(ProvisionedRing(spec["storage"]["ring"]["name"]).reader_secret),
                    schema.keyspace, store, memo, patch, conditions, generation)
        _ensure_writer(name, namespace, body, schema.keyspace, store, memo, patch, conditions, generation)
    if spec.get("ingest"):
        _ensure_ingest(name, namespace, spec, status, meta, body, schema.name, memo, patch, conditions)
    _ensure_cache(name, namespace, status, body, schema.name, memo, patch, namespace in cache_namespaces)
    _observe(name, namespace, spec, {**status, **patch.status}, meta, body, store, memo, patch, conditions,
             len(splits_by_dataset.get((namespace, name), ())), namespace in cache_namespaces, jobs_by_name,
             force_refresh=True)


def _require_ring(namespace: str, spec: dict, memo: Context, patch: kopf.Patch, conditions: Conditions,
                  generation: int) -> None:
    """The Ring a Dataset names exists and can hold its replicas; else say so, and look again (the Ring may come,
    or grow its maxNodes)."""
    name = spec["storage"]["ring"]["name"]
    ring = memo.kube.read_custom(RINGS, namespace, name)
    if ring is None:
        give_up(patch, conditions, generation, "RingNotFound", f"Ring {name} does not exist in namespace {namespace}: "
                "create it, or name another Ring in spec.storage.ring.name", permanent=False)
    if message := replicas_beyond_ring(spec, ring):
        give_up(patch, conditions, generation, "RingTooSmall", message, permanent=False, delay=30)


def _grant_read(namespace: str, reader: CredentialsSecret, keyspace: str, store: Store, memo: Context,
                patch: kopf.Patch, conditions: Conditions, generation: int) -> None:
    """The ring's read-only role (a Ring's loaders log in with it) may read the dataset and the catalog."""
    try:
        role, = memo.kube.secret_values(namespace, reader.name, reader.username_key)
        with ring_errors(store.address, f"granting {role} SELECT on {keyspace}"):
            store.grant_read(role, keyspace)
    except SecretNotFound as error:  # the Ring's reconcile makes it: soon
        give_up(patch, conditions, generation, "SecretNotFound", str(error), permanent=False)
    except RingfeedError as error:  # cass-operator creates the role once the ring runs: soon
        give_up(patch, conditions, generation, "RingUnreachable", str(error), permanent=False)


def _ensure_writer(name: str, namespace: str, body: dict, keyspace: str, store: Store, memo: Context,
                   patch: kopf.Patch, conditions: Conditions, generation: int) -> None:
    """A Dataset on a Ring: its writer role, which its ingest and split Jobs log in with (its keyspace and the
    catalog; the superuser stays with the operator), and the Secret holding it."""
    secret = writer_secret(name)
    if memo.kube.ensure_secret(namespace, writer_secret_manifest(body, secret.name, writer_role(keyspace),
                                                                 secrets.token_urlsafe(24))):
        event(body, "SecretCreated", f"Secret {secret.name}: the writer role of keyspace {keyspace}")
    role, password = memo.kube.secret_values(namespace, secret.name, secret.username_key, secret.password_key)
    try:
        with ring_errors(store.address, f"making the writer role {role}"):
            store.ensure_writer(role, password, keyspace)
    except RingfeedError as error:
        give_up(patch, conditions, generation, "RingUnreachable", str(error), permanent=False)


def _ensure_ingest(name, namespace, spec, status, meta, body, catalog: str, memo: Context, patch,
                   conditions: Conditions) -> None:
    """The Job of the current spec.ingest exists, unless it already ran to an end (a finished Job that its TTL
    removed is not run again; a failed one runs again once the spec changes)."""
    recorded = status.get("ingest") or {}
    suffix = ingest_job_suffix(ingest_fingerprint(spec["ingest"]), recorded, meta["generation"])
    if suffix is None:
        return
    wanted = job_name(name, "ingest", suffix)
    if recorded.get("jobName") and recorded["jobName"] != wanted:
        # The spec moved on: one ingest at a time. (A Job has no job-name label, only its Pods have.)
        memo.kube.delete_jobs(namespace, f"{LABEL_DATASET}={name}", fields=f"metadata.name={recorded['jobName']}")
    if memo.config.network.enabled:
        memo.kube.apply(namespace, ingest_policy(body, memo.config.network))
    try:
        _, created = memo.kube.ensure_job(namespace, ingest_job(body, catalog, suffix, memo.config.jobs))
    except JobRejected as error:
        give_up(patch, conditions, meta["generation"], "InvalidSpec", str(error), permanent=True)
    if created:
        memo.metrics.jobs_created.labels("ingest").inc()
        event(body, "IngestStarted", f"Job {wanted}: ringfeed ingest {spec['ingest']['source']['path']}")
    if recorded.get("jobName") != wanted:
        # A merge patch keeps keys it does not name: the previous ingest's figures are cleared explicitly.
        patch.status["ingest"] = {"jobName": wanted, "generation": meta["generation"], "startedAt": now_rfc3339(),
                                  "completedAt": None, "failedAt": None, "ingested": None, "rejected": None,
                                  "rowsPerSecond": None}


def _ensure_cache(name: str, namespace: str, status: dict, body: dict, catalog: str, memo: Context,
                  patch: kopf.Patch, allowed: bool) -> None:
    """The cache tier of spec.cache.alluxio applied as built (a changed spec rolls its Pods); gone without it, or
    where the namespace is not opted in."""
    if cache_spec(body) is None or not allowed:
        removed = [memo.kube.delete_applied(namespace, kind, object_name(name, role)) for kind, role in CACHE_OBJECTS]
        if any(removed):
            why = "spec.cache.alluxio was removed" if cache_spec(body) is None else not_allowed(namespace)
            event(body, "CacheRemoved", f"{why}: the cache tier's master, workers and FUSE mounts are deleted (the "
                                        "ring keeps the data)")
        patch.status["cache"] = None
        return
    if _apply_cache(namespace, body, catalog, memo) is None and not status.get("cache"):
        event(body, "CacheStarting", f"Alluxio master, a worker and a FUSE mount per node; splits under "
                                     f"{host_dir(memo.config.cache, namespace, name)}/mnt on the nodes")


def _apply_cache(namespace: str, body: dict, catalog: str, memo: Context) -> str | None:
    """Apply every object of the tier; → why the API server refused one (also a warning event), or None. Objects a
    0.1.0 operator named otherwise (a long Dataset name) go first: two FUSE DaemonSets would mount the same path."""
    name = body["metadata"]["name"]
    for kind, role in CACHE_OBJECTS:
        if legacy_object_name(name, role) != object_name(name, role):
            memo.kube.delete_applied(namespace, kind, legacy_object_name(name, role))
    try:
        for manifest in cache_objects(body, catalog, memo.config.cache, memo.config.network):
            memo.kube.apply(namespace, manifest)
    except ObjectRejected as error:
        event(body, "CacheRejected", str(error), warning=True)
        return str(error)
    return None


def not_allowed(namespace: str) -> str:
    return (f"namespace {namespace} is not opted in to cache tiers: their FUSE Pods run privileged, so the cluster "
            f"admin labels the namespaces that may run one {CACHE_TIER_LABEL}={CACHE_TIER_ALLOWED} (and lets them run "
            "privileged Pods: docs/security.md)")


def _observe_cache(name: str, namespace: str, spec: dict, status: dict, body: dict, memo: Context,
                   patch: kopf.Patch, conditions: Conditions, allowed: bool) -> None:
    """status.cache and the CacheReady condition from the tier's objects as they are now; an object found missing
    (deleted by hand, refused before, or in a namespace opted in since) is applied again."""
    if cache_spec(body) is None:
        conditions.remove("CacheReady")
        conditions.remove("CacheWarm")
        return
    if not allowed:
        _ensure_cache(name, namespace, status, body, catalog_name(name, spec), memo, patch, allowed)
        conditions.set("CacheReady", False, "NamespaceNotAllowed", not_allowed(namespace))
        conditions.remove("CacheWarm")
        return
    objects = {role: memo.kube.read_applied(namespace, kind, object_name(name, role))
               for kind, role in CACHE_OBJECTS if kind != "Service"}
    refused = None
    if None in objects.values():
        refused = _apply_cache(namespace, body, catalog_name(name, spec), memo)
    preload = bool((cache_spec(body) or {}).get("preload"))
    cache = cache_status(objects["master"], objects["worker"], objects["fuse"],
                         host_dir(memo.config.cache, namespace, name),
                         memo.kube.pods(namespace, pod_selector(name, "fuse")) if preload else None)
    patch.status["cache"] = cache
    message = refused or (f"master {'ready' if cache['masterReady'] else 'starting'}, workers {cache['workers']} "
                          f"ready, FUSE mounts {cache['mounts']} ready at {cache['hostPath']}")
    was_ready = conditions.is_true("CacheReady")
    conditions.set("CacheReady", cache["ready"], "Ready" if cache["ready"] else ("Rejected" if refused else "Starting"),
                   message)
    if cache["ready"] and not was_ready:
        event(body, "CacheReady", message)
    if not preload:
        conditions.remove("CacheWarm")
        return
    warm, was_warm = cache["preload"]["warm"], conditions.is_true("CacheWarm")
    message = (f"every file of the splits was read once through the mount on {cache['preload']['nodes']} node(s): "
               "the first epoch reads the tier warm" if warm else
               f"reading every file of the splits once through each node's mount, from the ring into the tier: "
               f"{cache['preload']['nodes']} node(s) warm")
    conditions.set("CacheWarm", warm, "Preloaded" if warm else "Preloading", message)
    if warm and not was_warm:
        event(body, "CacheWarm", message)


def in_progress(spec: Mapping[str, Any], status: Mapping[str, Any], meta: Mapping[str, Any], body: Mapping[str, Any],
                **_) -> bool:
    """Something the Dataset's timer follows changes by itself soon (the POLL_S timer's filter): this generation or
    its tables not made yet, an ingest not seen ending (its Job made or about to be), a cache tier (its Pods come and
    go). A spec that must change first (InvalidSpec, a keyspace another Dataset holds…) waits at rest. Once a
    generation is handled this stays false until the spec changes: the filter never turns back on by itself."""
    if Conditions(status.get("conditions"), 0).reason("Ready") in WAITING_FOR_SPEC:
        return False
    if status.get("observedGeneration") != meta.get("generation") or not status.get("keyspace"):
        return True
    ingest = status.get("ingest") or {}
    if spec.get("ingest") and not (ingest.get("completedAt") or ingest.get("failedAt")):
        return True
    return cache_spec(body) is not None


def refresh(uid: str, memo: Context, **kwargs) -> None:
    """The slow timer's look: every Dataset at rest, and one in progress whose POLL_S timer is late."""
    looked = memo.dataset_looks.get(uid)
    if in_progress(**kwargs) and looked is not None and time.monotonic() - looked < FAST_LOOK_LATE_S:
        return
    watch(memo=memo, **kwargs)


def follow(uid: str, memo: Context, **kwargs) -> None:
    """The POLL_S timer's look at a Dataset in progress."""
    memo.dataset_looks[uid] = time.monotonic()
    watch(memo=memo, **kwargs)


def watch(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict, memo: Context,
          patch: kopf.Patch, splits_by_dataset: kopf.Index, datasets_by_keyspace: kopf.Index,
          cache_namespaces: kopf.Index, jobs_by_name: kopf.Index, **_) -> None:
    """Follow the ingest Job, refresh the catalog figures every spec.refreshInterval, count the Splits."""
    conditions = Conditions(status.get("conditions"), meta["generation"])
    if (status.get("observedGeneration") != meta["generation"] or not status.get("keyspace")
            or conditions.reason("Ready") in PERMANENT_REASONS):
        return  # the change handler has not handled this generation or its tables yet, or the spec must change
    owner = _keyspace_owner(namespace, name, spec, status, meta, datasets_by_keyspace)
    if owner != (namespace, name):  # another Dataset holds the keyspace too (shared before ownership existed)
        conditions.set("Ready", False, "KeyspaceInUse", keyspace_in_use(status["keyspace"], owner))
        patch.status["conditions"] = conditions.as_list()
        return
    try:
        store = memo.rings.store(namespace, spec["storage"])
    except STORE_ERRORS as error:
        reason = "SecretNotFound" if isinstance(error, SecretNotFound) else "RingUnreachable"
        conditions.set("Degraded", True, reason, str(error))
        patch.status["conditions"] = conditions.as_list()
        return
    _observe(name, namespace, spec, status, meta, body, store, memo, patch, conditions,
             len(splits_by_dataset.get((namespace, name), ())), namespace in cache_namespaces, jobs_by_name)


def _observe(name, namespace, spec, status, meta, body, store: Store, memo: Context, patch, conditions: Conditions,
             splits: int, cache_allowed: bool, jobs_by_name: kopf.Index, force_refresh: bool = False) -> None:
    recorded = dict(status.get("ingest") or {})
    job = recorded.get("jobName")
    state = "none"
    job_body = None  # the Job as read now, unless status already records how it ended
    if spec.get("ingest") and job:
        if recorded.get("completedAt"):
            state = "succeeded"
        elif recorded.get("failedAt"):
            state = "failed"
        else:
            job_body = job_of(jobs_by_name, namespace, job) or memo.kube.read_job(namespace, job)
            state = job_state(job_body)
    elif spec.get("ingest"):
        state = "pending"  # the change handler has not made the Job yet (it retries: a Secret or the ring missing)
    if state == "missing":  # deleted by hand before it finished: made again (ingest is idempotent)
        _ensure_ingest(name, namespace, spec, {}, meta, body, catalog_name(name, spec), memo, patch, conditions)
    just_finished = state == "succeeded" and not recorded.get("completedAt")

    if state in ("running", "missing"):
        stuck = job_not_starting(memo, namespace, job_body) if job_body is not None else None
        if stuck:
            conditions.set("Ingesting", True, "PodNotStarting", f"Job {job} cannot start: {stuck}")
        else:
            conditions.set("Ingesting", True, "JobRunning",
                           f"Job {job} is ingesting {spec['ingest']['source']['path']}")
        conditions.set("Ready", False, "Ingesting", "waiting for the ingest Job to finish")
    elif state == "pending":
        conditions.set("Ingesting", True, "JobPending", "the ingest Job is not made yet")
        conditions.set("Ready", False, "Ingesting", "waiting for the ingest Job to be made")
    elif state == "failed":
        if job_body is not None and not recorded.get("failedAt"):  # reported once per Job, from the Job just read
            message = memo.kube.job_failure(namespace, job_body)
            event(body, "IngestFailed", f"Job {job}: {message}", warning=True)
            memo.metrics.job_outcomes.labels("ingest", "failed").inc()
            conditions.set("Degraded", True, "IngestFailed", f"Job {job} failed: {message}")
            patch.status["ingest"] = {**recorded, "failedAt": now_rfc3339()}
        conditions.set("Ingesting", False, "JobFailed", f"Job {job} failed; change the spec (spec.ingest: its "
                       "inputs, resources, workers, …) to run it again")
        conditions.set("Ready", False, "IngestFailed", "the ingest Job failed; see the Degraded condition")
    else:
        conditions.set("Ingesting", False, "Completed" if state == "succeeded" else "NoIngest",
                       f"Job {job} completed" if state == "succeeded" else "spec.ingest is not set")
        refresh = _refresh_stats(name, namespace, spec, status, meta["uid"], store, memo, patch, conditions,
                                 force_refresh or just_finished, recorded if just_finished else None)
        if refresh != "failed":
            conditions.set("Degraded", False, "AsExpected", "")
            samples = patch.status.get("samples", status.get("samples")) or 0
            conditions.set("Ready", True, "Ready", f"{samples:,} samples in keyspace {status.get('keyspace')}")
        if just_finished and refresh == "done":
            memo.metrics.job_outcomes.labels("ingest", "succeeded").inc()
            event(body, "IngestSucceeded", f"Job {job}: {patch.status['ingest'].get('ingested') or 0:,} samples "
                                           "written")

    _observe_cache(name, namespace, spec, status, body, memo, patch, conditions, cache_allowed)
    patch.status["splits"] = splits
    patch.status["conditions"] = conditions.as_list()
    patch.status["observedGeneration"] = meta["generation"]
    memo.metrics.dataset_ready.labels(namespace, name).set(1 if conditions.is_true("Ready") else 0)


def _refresh_stats(name, namespace, spec, status, uid: str, store: Store, memo: Context, patch,
                   conditions: Conditions, force: bool, finished_ingest: dict | None) -> str:
    """Catalog figures into status when forced or older than spec.refreshInterval → done | skipped | failed. The last
    recount is status.lastRefreshTime or, where it found nothing changed (and wrote nothing), the operator's memory
    of it; RFC 3339 times in UTC order as strings."""
    last = max(filter(None, (status.get("lastRefreshTime"), memo.dataset_recounts.get(uid))), default=None)
    if not force and not refresh_due(last, spec.get("refreshInterval", "60s"), dt.datetime.now(dt.UTC)):
        return "skipped"
    try:
        with ring_errors(store.address):
            info = store.info(catalog_name(name, spec))
    except RingfeedError as error:
        memo.rings.forget(store)
        conditions.set("Degraded", True, "RingUnreachable", f"cannot read the catalog: {error}")
        return "failed"
    now = now_rfc3339()
    memo.dataset_recounts[uid] = now
    patch.status.update(recount_status(status, stats_status(info), now, force or finished_ingest is not None))
    if finished_ingest is not None:
        patch.status["ingest"] = {**finished_ingest, "completedAt": now,
                                  **ingest_summary_status(info.last_ingest)}
    memo.metrics.dataset_samples.labels(namespace, name).set(info.samples)
    memo.metrics.dataset_bytes.labels(namespace, name).set(info.bytes)
    return "done"


def delete(name: str, namespace: str, spec: dict, status: dict, meta: dict, body: dict, memo: Context, retry: int,
           datasets_by_keyspace: kopf.Index, **_) -> None:
    """Refuse while Splits use the Dataset; stop its Jobs; drop the tables when deletionPolicy is Delete."""
    splits = memo.kube.referrers(namespace, "splits", lambda s: s.get("dataset"), name)
    if splits:
        message = f"Dataset {name} is used by Split(s) {', '.join(splits)}: delete them first"
        event(body, "DeletionBlocked", message, warning=True)
        raise kopf.TemporaryError(message, delay=10)
    selector = f"{LABEL_DATASET}={name}"
    memo.kube.delete_jobs(namespace, selector)
    # The cache tier goes first too: its FUSE Pods unmount before the Dataset is gone.
    for kind, role in CACHE_OBJECTS:
        memo.kube.delete_applied(namespace, kind, object_name(name, role))
    if pods := memo.kube.pods_left(namespace, selector):  # an ingest still writing would recreate what is dropped
        raise kopf.TemporaryError(f"waiting for Pod(s) {', '.join(pods)} to stop", delay=3)
    memo.metrics.forget_dataset(namespace, name)
    memo.dataset_looks.pop(meta["uid"], None)
    memo.dataset_recounts.pop(meta["uid"], None)
    if spec.get("deletionPolicy", "Retain") != "Delete" or not status.get("keyspace"):
        return
    try:
        owner = _keyspace_owner(namespace, name, spec, status, meta, datasets_by_keyspace)
    except StorageNotSupported as error:  # spec.storage moved to a ring this release cannot reach
        event(body, "TablesKept", f"deletionPolicy Delete: keyspace {status['keyspace']} not dropped: {error}",
              warning=True)
        return
    if owner != (namespace, name):
        event(body, "TablesKept", f"deletionPolicy Delete: keyspace {status['keyspace']} belongs to Dataset "
                                  f"{owner[0]}/{owner[1]}, not dropped", warning=True)
        return
    try:
        # force: its stored splits go with it (the Split objects, the guard above, are gone already).
        store = memo.rings.store(namespace, spec["storage"])
        with ring_errors(store.address):
            store.drop_dataset(catalog_name(name, spec), force=True)
    except DatasetNotFound:
        return
    except STORE_ERRORS as error:
        message = f"deletionPolicy Delete: cannot drop keyspace {status['keyspace']}: {error}"
        if retry + 1 >= DROP_ATTEMPTS:  # never hold the object (and its namespace) forever
            event(body, "DeleteFailed", f"{message}; giving up after {DROP_ATTEMPTS} attempts, the keyspace stays",
                  warning=True)
            return
        event(body, "DeleteFailed", message, warning=True)
        raise kopf.TemporaryError(message, delay=15) from error
    event(body, "TablesDropped", f"keyspace {status['keyspace']} dropped (deletionPolicy Delete)")
