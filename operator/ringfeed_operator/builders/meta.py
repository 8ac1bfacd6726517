"""What every object the operator creates carries: its labels and its owner. Pure."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

LABEL_DATASET = "ringfeed.io/dataset"
LABEL_SPLIT = "ringfeed.io/split"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "ringfeed-operator"
MAX_NAME = 63  # a DNS label: Services, and Job names, which become Pod label values


def bounded_name(owner: str, tail: str) -> str:
    """``owner + tail`` in at most 63 characters. An owner name cut short ends in a hash of the whole name, so two
    owners that share a long prefix never share an object."""
    if len(owner) + len(tail) <= MAX_NAME:
        return owner.rstrip("-.") + tail
    digest = "-" + hashlib.sha256(owner.encode()).hexdigest()[:8]
    return owner[: MAX_NAME - len(digest) - len(tail)].rstrip("-.") + digest + tail


def owner_reference(body: dict) -> dict:
    """Deleting the owner deletes the object (a Job and its Pods, a CassandraDatacenter) through the garbage
    collector."""
    return {"apiVersion": body["apiVersion"], "kind": body["kind"], "name": body["metadata"]["name"],
            "uid": body["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def pull_secrets(names: Iterable[str], given: Iterable[dict] = ()) -> dict:
    """A Pod spec's imagePullSecrets: the chart's global.imagePullSecrets after those a template gives; nothing when
    there are none (an unchanged spec, so no rollout)."""
    secrets = list(given)
    secrets += [{"name": name} for name in names if {"name": name} not in secrets]
    return {"imagePullSecrets": secrets} if secrets else {}


def scrape_annotations(port: int) -> dict[str, str]:
    """What a Prometheus that discovers Pods by annotation (the community chart's kubernetes-pods job) scrapes."""
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}
