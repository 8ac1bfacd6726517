"""A TrainingJob's lineage in its status: what it read (the Split version, the Dataset's ingest, the order's
parameters) and, per epoch, the digest of the order its ranks consumed the samples in (``ringfeed.lineage``: every
rank's sidecar computes the same one, so any rank that has finished the epoch attests it)."""

from __future__ import annotations

EPOCHS_KEPT = 1000  # status entries at most; `ringfeed lineage --ids` recomputes any epoch from the plan


def lineage_record(spec: dict, split: dict, dataset: dict, catalog: str) -> dict:
    """What the job reads and the parameters of its order, fixed when its ranks are first made."""
    computed, loader = split.get("status") or {}, spec.get("loader") or {}
    return {
        "dataset": catalog, "split": split["metadata"]["name"], "part": spec["split"].get("part", "train"),
        "splitVersion": computed["version"], "splitId": computed.get("splitId", ""),
        "contentHash": computed["contentHash"],
        "datasetGeneration": ((dataset.get("status") or {}).get("ingest") or {}).get("generation", 0),
        "seed": loader.get("seed", 0), "shuffle": loader.get("shuffle", True),
        "remainder": loader.get("remainder", "pad"),
        "worldSize": spec.get("replicas", 1) * spec.get("ranksPerPod", 1),
    }


def lineage_epochs(recorded: list[dict], ranks: list[dict], reports: dict[int, dict],
                   world: int) -> tuple[list[dict], list[int]]:
    """The epochs every rank has finished, each with the digest the sidecars report for it, added to those recorded
    before (the last EPOCHS_KEPT); and the epochs whose reporting sidecars disagree (left out)."""
    finished = min((item["epoch"] for item in ranks), default=0) if len(ranks) >= world else 0
    known = {item["epoch"]: item for item in recorded}
    attested: dict[int, set[str]] = {}
    for report in reports.values():
        for epoch, digest in (report.get("epoch_digests") or {}).items():
            if str(epoch).isdigit() and int(epoch) < finished and isinstance(digest, str):
                attested.setdefault(int(epoch), set()).add(digest)
    disagreed = []
    for epoch, digests in sorted(attested.items()):
        if epoch in known:
            continue
        if len(digests) == 1:
            known[epoch] = {"epoch": epoch, "digest": digests.pop()}
        else:
            disagreed.append(epoch)
    return [known[epoch] for epoch in sorted(known)][-EPOCHS_KEPT:], disagreed
