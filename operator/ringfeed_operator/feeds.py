"""What the loader sidecars report on their HTTP port (``ringfeed serve``'s ``/status``): the operator reads it
through the Pod network to fill a TrainingJob's status."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from ringfeed_operator.builders.trainingjob import SIDECAR_PORT

TIMEOUT_S = 2.0


def feed_status(pod: dict, pause: bool = False) -> dict | None:
    """The sidecar's report, or None while it cannot give one (starting, restarting, its Pod gone). With `pause`,
    the sidecar first stops handing out batches, so that its position is final (before a suspension)."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return None
    url = f"http://{ip}:{SIDECAR_PORT}/{'pause' if pause else 'status'}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="POST" if pause else "GET"),
                                    timeout=TIMEOUT_S) as reply:
            report = json.loads(reply.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return report if report.get("ready") else None
