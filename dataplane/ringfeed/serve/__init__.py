"""``ringfeed serve``: the loader sidecar of a TrainingJob's rank (see ``server`` for the handoff, ``endpoints`` for
its HTTP port)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ringfeed.connection import ClusterAddress
from ringfeed.loader import Loader, LoaderOptions, LoaderSource
from ringfeed.serve.endpoints import Endpoints
from ringfeed.serve.server import FeedServer, FeedStatus, wait_for_socket

log = logging.getLogger("ringfeed.serve")

__all__ = ["FeedServer", "FeedStatus", "serve", "wait_for_socket"]


def serve(address: ClusterAddress, dataset: str, split: str, part: str, version: int | None, options: LoaderOptions,
          epochs: int, directory: Path, bind: str, port: int, kept_positions: Path | None = None,
          ready: threading.Event | None = None, trainingjob: str = "", control_token: str | None = None) -> None:
    """Load the split, then feed the trainer until the process is stopped (the kubelet stops a native sidecar once
    the trainer has exited)."""
    labels = {"dataset": dataset, "split": split, "part": part, "rank": str(options.rank), "trainingjob": trainingjob}
    endpoints = Endpoints(bind, port, labels, control_token)
    try:
        source = LoaderSource.from_split(dataset, split, part, address=address, version=version)
        options = LoaderOptions.build(options, with_uuids=True)  # the trainer can always trace a batch back
        directory.mkdir(parents=True, exist_ok=True)
        server = FeedServer(source, Loader.from_source(source, options=options), directory, epochs, kept_positions)
    except Exception as error:
        endpoints.failure = str(error)
        endpoints.close()
        raise
    endpoints.server = server
    log.info("feeding %s part %s, rank %d of %d, %d epochs, from %s", source.split, part, options.rank,
             options.world_size, epochs, directory)
    server.serve_forever(ready)
