"""What the loader sidecars report on their HTTP port (``ringfeed serve``'s ``/status``): the operator reads it
through the Pod network to fill a TrainingJob's status."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from ringfeed_operator.builders.trainingjob import SIDECAR_PORT

TIMEOUT_S = 2.0


def feed_status(pod: dict) -> dict | None:
    """The sidecar's report, or None while it cannot give one (starting, restarting, its Pod gone)."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return None
    try:
        with urllib.request.urlopen(f"http://{ip}:{SIDECAR_PORT}/status", timeout=TIMEOUT_S) as reply:
            report = json.loads(reply.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return report if report.get("ready") else None
