"""Deterministic sample UUIDs: the same dataset and natural key always give the same UUID, so ingest is idempotent."""

from __future__ import annotations

import json
import uuid

# uuid5(NAMESPACE_URL, "https://ringfeed.io/sample"), fixed forever: changing it would re-key every dataset.
SAMPLE_NAMESPACE = uuid.UUID("aaf64ee3-aeca-5861-be74-d570cdf24049")


def sample_uuid(dataset: str, natural_key: tuple) -> uuid.UUID:
    """UUIDv5 of the dataset name and the typed natural-key values (``1`` and ``"1"`` differ)."""
    canonical = json.dumps([dataset, *natural_key], separators=(",", ":"), ensure_ascii=False)
    return uuid.uuid5(SAMPLE_NAMESPACE, canonical)
