"""How the operator runs the Jobs it creates; set by `ringfeed-operator` options (the Helm chart's values)."""

from __future__ import annotations

import dataclasses
import json
import re

JOB_ROLES = ("ingest", "split")
# The sections of a core ResourceRequirements a Job container can use (its Pod has no resourceClaims).
RESOURCE_SECTIONS = ("limits", "requests")
# The API server's own pattern for a resource quantity (500m, 2, 4Gi, 1e3).
QUANTITY = re.compile(r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                      r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


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


def parse_job_resources(text: str, defaults: dict) -> dict:
    """The resources per role that `--job-resources` gives: a JSON object whose keys are roles (ingest, split) and
    whose values are ResourceRequirements (limits, requests); a role given replaces that role's defaults, a role
    left out keeps them. Raises ValueError naming the problem, so that a bad chart value stops the operator at its
    start instead of failing every Job it creates."""
    try:
        overrides = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error})") from None
    if not isinstance(overrides, dict):
        raise ValueError(f"give a JSON object with keys among {', '.join(JOB_ROLES)}, not {text!r}")
    for role, requirements in overrides.items():
        if role not in JOB_ROLES:
            raise ValueError(f"unknown role {role!r}: the roles are {', '.join(JOB_ROLES)}")
        if not isinstance(requirements, dict):
            raise ValueError(f"{role}: give an object with {' and/or '.join(RESOURCE_SECTIONS)}")
        for section, quantities in requirements.items():
            if section not in RESOURCE_SECTIONS:
                raise ValueError(f"{role}: unknown field {section!r} (fields: {', '.join(RESOURCE_SECTIONS)})")
            if not isinstance(quantities, dict):
                raise ValueError(f"{role}.{section}: give an object of resource quantities, e.g. {{\"memory\": "
                                 "\"4Gi\"}")
            for resource, quantity in quantities.items():
                if isinstance(quantity, bool) or not QUANTITY.match(str(quantity)):
                    raise ValueError(f"{role}.{section}.{resource}: {quantity!r} is not a quantity (e.g. 500m, 2, "
                                     "4Gi)")
    return {**defaults, **overrides}
