"""Split objects ↔ the data plane: spec → SplitSpec and `ringfeed split create` arguments, stored split → status.
Pure."""

from __future__ import annotations

from ringfeed.splits import SplitSpec
from ringfeed.splits.spec import Filter, parse_scalar
from ringfeed.splits.storage import StoredSplit
from ringfeed.store import DatasetInfo


def split_spec(spec: dict) -> SplitSpec:
    """The engine's parameters for a Split spec; raises SplitError with a message naming the problem."""
    balance = spec.get("balance") or {}
    mode = balance.get("mode", "natural")
    return SplitSpec(
        ratios=tuple(spec.get("ratios") or ()),
        folds=spec.get("folds") or 0,
        names=tuple(spec.get("names") or ()),
        group_by=tuple(spec.get("groupBy") or ()),
        balance=tuple(sorted((str(k), v) for k, v in balance["weights"].items())) if mode == "weights" else mode,
        max_samples=spec.get("maxSamples", 0),
        max_per_part=tuple(sorted((spec.get("maxPerPart") or {}).items())),
        filters=tuple(Filter(f["column"], f["operator"], tuple(parse_scalar(v) for v in f["values"]))
                      for f in spec.get("filters") or ()),
        seed=spec.get("seed", 0),
    )


def split_arguments(spec: SplitSpec) -> list[str]:
    """`ringfeed split create` options that reproduce ``spec`` exactly: JSON, which any label or filter value
    survives (option syntax splits weights on ',' and '=')."""
    return [f"--spec-json={spec.to_json()}"]


def split_status(stored: StoredSplit) -> dict:
    """Status fields of a computed split: per part and class counts, groups, hash and version."""
    stats = stored.stats
    label_names = stats.get("label_names", {})
    parts = [{
        "name": part["name"], "samples": part["samples"], "target": part["target"], "ratio": part["ratio"],
        "groups": part["groups"], "bytes": part["bytes"],
        "labels": [{"label": int(label), "name": label_names.get(label, label), "samples": counts["samples"],
                    "target": counts["target"]} for label, counts in part["labels"].items()],
    } for part in stats["parts"]]
    return {
        "version": stored.version, "splitId": str(stored.split_id), "contentHash": stored.content_hash,
        "computedAt": stored.created_at.strftime("%Y-%m-%dT%H:%M:%SZ") if stored.created_at else None,
        "samples": stored.samples, "scanned": stats["scanned"], "selected": stats["selected"],
        "groups": stats["groups"], "parts": parts, "partNames": ",".join(p["name"] for p in parts),
    }


def computed_message(stored: StoredSplit) -> str:
    """The Ready message of a computed Split."""
    return f"version {stored.version}: {stored.samples:,} samples, hash {stored.content_hash[:12]}"


def split_readiness(dataset: str, dataset_exists: bool, on_ring: DatasetInfo | None,
                    stored: StoredSplit | None) -> tuple[bool, str, str]:
    """(ready, reason, message) of a computed Split from what is left of its Dataset: whether the object exists, the
    dataset in the ring's catalog (None: not there) and the stored version the Split's status names (None: gone).
    A split is loaded only into the dataset it was made from, so a Dataset dropped, or dropped and created again,
    leaves the Split not Ready."""
    if not dataset_exists:
        return False, "DatasetNotFound", (f"Dataset {dataset} no longer exists, so this split cannot be loaded: delete "
                                          "this Split, or create the Dataset again if its tables were retained")
    if on_ring is not None and on_ring.dataset_id is None:
        return False, "DatasetNeedsMigration", (f"Dataset {dataset}'s tables were written by an earlier Ringfeed and "
                                                "must be migrated before this split is loaded (docs/datasets.md, "
                                                "Migrating a dataset)")
    if stored is None or on_ring is None or stored.dataset_id != on_ring.dataset_id:
        return False, "DatasetReplaced", (f"Dataset {dataset}'s data on the ring was dropped or made again since this "
                                          "split was computed, and the split went with it: delete this Split and "
                                          "create it again")
    return True, "Computed", computed_message(stored)
