"""What every handler shares, made once at the operator's start and handed to the handlers as kopf's `memo`."""

from __future__ import annotations

import dataclasses

from ringfeed_operator.acceptor_process import AcceptorProcess
from ringfeed_operator.config import Config
from ringfeed_operator.kube import Kube
from ringfeed_operator.loads import RingLoads
from ringfeed_operator.metrics import Metrics
from ringfeed_operator.rings import Rings


@dataclasses.dataclass(frozen=True)
class Context:
    """The settings, the API client, the open ring connections, the metrics, the writer of new objects' first
    status, the Rings' read load and when each Dataset in progress was last looked at. kopf gives each object a
    shallow copy: the members themselves are shared."""

    config: Config
    kube: Kube
    rings: Rings
    metrics: Metrics
    acceptor: AcceptorProcess | None = None  # None: no first statuses of its own (the handlers' tests)
    loads: RingLoads = dataclasses.field(default_factory=RingLoads)
    dataset_looks: dict[str, float] = dataclasses.field(default_factory=dict)  # uid → when its POLL_S timer last ran
    dataset_recounts: dict[str, str] = dataclasses.field(default_factory=dict)  # uid → its last recount (RFC 3339)

    @classmethod
    def start(cls, config: Config, handler_threads: int) -> Context:
        kube, metrics = Kube.connect(handler_threads), Metrics()
        return cls(config=config, kube=kube, rings=Rings(kube), metrics=metrics,
                   acceptor=AcceptorProcess.connect(metrics, config.watch_namespaces, config.verbose))
