"""A dedicated Cassandra node for one benchmark (127.0.30.1 unless told), fresh state, stopped by PID and purged
afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from ringfeed.local import LocalRing, RingSettings

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def dedicated_node(name: str, jmx_base: int, address_prefix: str = "127.0.30.",
                   tls: bool = False) -> Iterator[LocalRing]:
    """One node under ``.state/<name>``, whatever a crashed earlier run left there; ``jmx_base`` and
    ``address_prefix`` keep the JMX ports and addresses of concurrent benchmarks apart; with ``tls`` its CQL port
    takes TLS clients as well as plain ones."""
    settings = RingSettings(cluster_name=f"ringfeed-{name}", address_prefix=address_prefix, jmx_base=jmx_base,
                            heap="1G", ring_delay_ms=1000, tls=tls)
    LocalRing(REPO / ".state" / name, settings).down(purge=True)
    ring = LocalRing(REPO / ".state" / name, settings)
    print(f"starting a dedicated Cassandra node on {address_prefix}1 …", flush=True)
    ring.up(1)
    try:
        yield ring
    finally:
        ring.down(purge=True)
