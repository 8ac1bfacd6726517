"""The read load of the Rings' nodes, from the metrics endpoint of the Management API agent inside each Cassandra
node (Prometheus text on port 9000 of the Pod), kept between two timer ticks to make rates of its counters."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from ringfeed_operator.builders.ring import MAAC_METRICS_PORT, NodeLoad, node_load, ring_load
from ringfeed_operator.tenant_http import ReplyRefused, request

# A node's whole Prometheus text (every Cassandra table's metrics): a few MB on a ring with many tables.
METRICS_LIMIT_BYTES = 64 * 1024 * 1024


class RingLoads:
    """The last reading of every node of every Ring this operator watches."""

    def __init__(self, timeout_s: float = 10.0):
        self._timeout_s = timeout_s
        self._last: dict[tuple[str, str], dict[str, NodeLoad]] = {}
        self._lock = threading.Lock()

    def measure(self, namespace: str, ring: str, pods: Sequence[dict], metric: str) -> float | None:
        """The autoscaler's metric now, over the Ready nodes that answered now and at the previous call (a node
        that does not answer is left out: its Pod may be on its way in or out)."""
        now = {}
        for pod in pods:
            address = (pod.get("status") or {}).get("podIP")
            if not address:
                continue
            try:
                text = request(f"http://{address}:{MAAC_METRICS_PORT}/metrics", limit_bytes=METRICS_LIMIT_BYTES,
                               timeout_s=self._timeout_s).decode()
            except (OSError, ReplyRefused, UnicodeDecodeError):
                continue
            if load := node_load(text, time.monotonic()):
                now[pod["metadata"]["name"]] = load
        with self._lock:
            before = self._last.get((namespace, ring), {})
            self._last[(namespace, ring)] = now
        return ring_load(metric, before, now)

    def forget(self, namespace: str, ring: str) -> None:
        with self._lock:
            self._last.pop((namespace, ring), None)
