"""How the operator runs the Jobs it creates; set by `ringfeed-operator` options (the Helm chart's values)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class JobSettings:
    """Pod settings shared by every ingest and split Job."""

    image: str = "ghcr.io/ringfeed/dataplane:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    service_account: str = ""  # "" = the namespace's default; Jobs never call the Kubernetes API
    backoff_limit: int = 2
    ttl_seconds_after_finished: int = 86400
    allow_host_path: bool = False  # hostPath ingest sources give a Pod a node's files: off unless the chart says so
    # Default resources per role (ingest, split); spec.ingest.resources overrides the ingest ones.
    resources: dict = dataclasses.field(default_factory=lambda: {
        "ingest": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "split": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "8Gi"}},
    })

