"""Split objects ↔ the data plane: spec → SplitSpec and `ringfeed split create` arguments, stored split → status.
Pure."""

from __future__ import annotations

from ringfeed.splits import SplitSpec
from ringfeed.splits.spec import Filter, parse_scalar
from ringfeed.splits.storage import StoredSplit


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
    """`ringfeed split create` options that reproduce ``spec`` exactly."""
    arguments = [f"--folds={spec.folds}"] if spec.folds else ["--ratios=" + ",".join(map(str, spec.ratios))]
    arguments += ["--names=" + ",".join(spec.names), f"--seed={spec.seed}"]
    arguments += [f"--group-by={column}" for column in spec.group_by]
    arguments.append("--balance=" + (spec.balance if isinstance(spec.balance, str)
                                     else ",".join(f"{label}={weight}" for label, weight in spec.balance)))
    if spec.max_samples:
        arguments.append(f"--max-samples={spec.max_samples}")
    if spec.max_per_part:
        arguments.append("--max-per-part=" + ",".join(f"{part}={cap}" for part, cap in spec.max_per_part))
    arguments += [f"--where={f}" for f in spec.filters]
    return arguments


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
