"""Dataset objects ↔ the data plane: spec → DatasetSchema and keyspace claim, catalog → status. Pure."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable, Mapping

from ringfeed.ring import RingRef
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.store import DatasetInfo
from ringfeed_operator.builders.meta import LABEL_COMPONENT, LABEL_DATASET, LABEL_MANAGED_BY, MANAGER, owner_reference


def catalog_name(name: str, spec: dict) -> str:
    """The dataset's name in the ring's catalog and its keyspace: spec.keyspace, else the object's name."""
    return spec.get("keyspace") or name.replace("-", "_")


def ring_keyspace(namespace: str, name: str, spec: dict) -> tuple:
    """The (ring, keyspace) a Dataset's tables live in, as far as specs tell rings apart (a Ring by its namespace
    and name); StorageNotSupported for a ring this release cannot reach (no tables of it live anywhere)."""
    return RingRef.from_spec(spec["storage"], namespace).identity, catalog_name(name, spec)


def keyspace_claim(namespace: str, name: str, spec: dict, status: dict, meta: dict) -> tuple:
    """How a Dataset ranks among those claiming its keyspace on its ring: one that holds it (its tables were
    reconciled) before one that does not, then the earliest created, then by namespace and name."""
    holds = status.get("keyspace") == catalog_name(name, spec)
    return (0 if holds else 1, meta["creationTimestamp"], namespace, name)


def keyspace_owner(claims: Iterable[tuple]) -> tuple[str, str]:
    """(namespace, name) of the Dataset that owns a keyspace, from the ``keyspace_claim`` of each claimant: a
    newcomer never takes over a keyspace another Dataset holds."""
    *_, namespace, name = min(claims)
    return namespace, name


def keyspace_in_use(keyspace: str, owner: tuple[str, str]) -> str:
    """The Ready message of a Dataset whose keyspace another Dataset owns."""
    return (f"keyspace {keyspace} on this ring belongs to Dataset {owner[0]}/{owner[1]}; nothing is read, written or "
            "dropped there. Delete this Dataset and create it with another spec.keyspace (spec.keyspace is "
            "immutable), or wait: it takes the keyspace over once the other Dataset is gone")


def replicas_beyond_ring(spec: dict, ring: dict) -> str | None:
    """Why a Ring cannot hold the Dataset's replicas (a replica per node, and the Ring never grows past
    spec.maxNodes), or None."""
    factor = (spec.get("replication") or {}).get("replicationFactor", 1)
    most = ring["spec"].get("maxNodes", 3)
    if factor <= most:
        return None
    return (f"spec.replication.replicationFactor {factor} needs {factor} nodes, and Ring {ring['metadata']['name']} "
            f"has at most {most} (its spec.maxNodes): raise the Ring's maxNodes, or make this Dataset again with a "
            "lower factor (it is immutable)")


def dataset_schema(name: str, spec: dict) -> DatasetSchema:
    """The data plane's schema for a Dataset spec; raises RingfeedError with a message naming the problem."""
    schema = spec["schema"]
    encoding = schema["encoding"]
    return DatasetSchema(
        name=catalog_name(name, spec),
        natural_keys=tuple(Column(c["name"], c["type"]) for c in schema["naturalKeys"]),
        encoding=Encoding(encoding["kind"], encoding.get("dtype"),
                          tuple(encoding["shape"]) if encoding.get("shape") else None),
        metadata=tuple(Column(c["name"], c["type"]) for c in schema.get("metadata") or ()),
        label_names=tuple(schema.get("labelNames") or ()),
        with_metadata_by_uuid=schema.get("metadataByUuid", True),
        replication_factor=(spec.get("replication") or {}).get("replicationFactor", 1),
    )


def same_tables(declared: DatasetSchema, stored: DatasetSchema) -> list[str]:
    """Differences that matter between the spec and an existing catalog entry (label names may grow by ingest)."""
    differences = []
    for field in ("natural_keys", "encoding", "metadata", "with_metadata_by_uuid", "keyspace"):
        if getattr(declared, field) != getattr(stored, field):
            differences.append(f"{field}: spec {getattr(declared, field)} vs ring {getattr(stored, field)}")
    if stored.label_names[: len(declared.label_names)] != declared.label_names:
        differences.append(f"label names: spec {list(declared.label_names)} vs ring {list(stored.label_names)}")
    return differences


# What an ingest writes depends on these fields only; tuning (workers, concurrency, resources, consistency) does not
# start a new ingest, and neither does a default added to the schema later.
INGEST_DEFAULTS = {"format": "auto", "pathColumn": "path", "labelColumn": "label", "maxSampleMB": 64,
                   "fullDecode": False}


def ingest_fingerprint(ingest: dict) -> str:
    """One ingest Job per distinct source and reading of it."""
    identity = {"source": ingest["source"], **{k: ingest.get(k, d) for k, d in INGEST_DEFAULTS.items()}}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]


def ingest_job_suffix(fingerprint: str, recorded: Mapping, generation: int) -> str | None:
    """The suffix of the ingest Job the spec wants, or None where none is wanted: an ingest of these inputs already
    ran to an end and nothing asks for it again. A failed one runs again once the spec changed after it started (its
    tuning, say more memory, as much as its inputs); a run again is named by its generation, so it is another Job."""
    ran = recorded.get("jobName") or ""
    last = next((suffix for suffix in (fingerprint, f"{fingerprint}-g{recorded.get('generation')}")
                 if ran.endswith(f"-ingest-{suffix}")), None)  # the last Job's suffix, if it ingested these inputs
    if last is None:
        return fingerprint
    if recorded.get("completedAt"):
        return None
    if recorded.get("failedAt"):
        return f"{fingerprint}-g{generation}" if generation > recorded.get("generation", generation) else None
    return last  # running


def stats_status(info: DatasetInfo) -> dict:
    """The status fields read from the catalog."""
    schema = info.schema
    return {
        "samples": info.samples,
        "bytes": info.bytes,
        "labels": len(info.label_counts),
        "labelCounts": [{"label": label, "name": schema.label_name(label), "samples": count}
                        for label, count in sorted(info.label_counts.items())],
    }


def recount_status(status: Mapping, figures: dict, now: str, forced: bool) -> dict:
    """What a recount of the catalog writes into status: its figures and `lastRefreshTime` when the figures changed,
    were never written, or the recount is forced (an ingest just ended); nothing when they are what status shows,
    so that a thousand Datasets at rest cost the API server no write a minute (the recount's time stays in the
    operator's memory then: Context.dataset_recounts)."""
    if forced or not status.get("lastRefreshTime") or any(status.get(key) != value for key, value in figures.items()):
        return {**figures, "lastRefreshTime": now}
    return {}


def ingest_summary_status(summary: dict | None) -> dict:
    """The last ingest's figures as `ringfeed ingest` recorded them in the catalog."""
    if not summary:
        return {}
    return {
        "ingested": summary.get("written", 0),
        "rejected": sum((summary.get("rejected") or {}).values()),
        "rowsPerSecond": round(summary.get("written", 0) / max(summary.get("seconds", 0), 1e-9), 1),
    }


_DURATION = re.compile(r"(\d+)(h|m|s)")


def refresh_due(last_refresh: str | None, refresh_interval: str, now: dt.datetime) -> bool:
    """Whether the catalog figures, last read at status.lastRefreshTime, are older than spec.refreshInterval (a
    duration such as 90s, 5m or 1h30m; unreadable or zero: 60 s)."""
    if not last_refresh:
        return True
    read_at = dt.datetime.strptime(last_refresh, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    interval = sum(int(n) * {"h": 3600, "m": 60, "s": 1}[unit] for n, unit in _DURATION.findall(refresh_interval))
    return (now - read_at).total_seconds() >= (interval or 60)


def writer_secret_manifest(dataset: dict, name: str, role: str, password: str) -> dict:
    """The Secret of the Dataset's writer role on its Ring (its ingest and split Jobs' login); deleted with the
    Dataset."""
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "labels": {LABEL_DATASET: dataset["metadata"]["name"],
                                              LABEL_COMPONENT: "ring-login", LABEL_MANAGED_BY: MANAGER},
                     "ownerReferences": [owner_reference(dataset)]},
        "stringData": {"username": role, "password": password},
    }
