"""``ringfeed serve``: the loader sidecar of a TrainingJob's Pod (see ``server`` for the handoff, ``endpoints`` for
its HTTP port). A Pod that runs several ranks (torchrun's local ranks) gets one feed per local rank from the same
process; the feeds read through one native session, sharing its connections and decoder threads."""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path

from ringfeed.connection import ClusterAddress
from ringfeed.loader import Loader, LoaderOptions, LoaderSource
from ringfeed.loader.loader import connections_per_node
from ringfeed.serve.endpoints import Endpoints
from ringfeed.serve.server import FeedServer, FeedStatus, wait_for_socket
from ringfeed_client.protocol import local_feed_dir

log = logging.getLogger("ringfeed.serve")

__all__ = ["FeedServer", "FeedStatus", "feed_options", "serve", "wait_for_socket"]


def feed_options(options: LoaderOptions, local_ranks: int) -> list[LoaderOptions]:
    """The loader options of each local rank's feed: `options.rank` is the Pod's index, so local rank i reads rank
    index × local_ranks + i of `options.world_size` (torchrun's numbering)."""
    return [dataclasses.replace(options, rank=options.rank * local_ranks + local_rank)
            for local_rank in range(local_ranks)]


def set_when_all(events: list[threading.Event], done: threading.Event) -> None:
    for event in events:
        event.wait()
    done.set()


def serve(address: ClusterAddress, dataset: str, split: str, part: str, version: int | None, options: LoaderOptions,
          epochs: int, directory: Path, bind: str, port: int, kept_positions: Path | None = None,
          ready: threading.Event | None = None, trainingjob: str = "", control_token: str | None = None,
          local_ranks: int = 1) -> None:
    """Load the split, then feed the Pod's `local_ranks` trainers until the process is stopped (the kubelet stops a
    native sidecar once the trainer has exited); `ready` is set once every feed's socket listens."""
    labels = {"dataset": dataset, "split": split, "part": part, "trainingjob": trainingjob}
    endpoints = Endpoints(bind, port, labels, control_token)
    try:
        source = LoaderSource.from_split(dataset, split, part, address=address, version=version)
        options = LoaderOptions.build(options, with_uuids=True)  # the trainer can always trace a batch back
        # The feeds' memory windows add up on the connections they share.
        session = address.native_session(options.consistency, connections_per_node(
            local_ranks * options.memory_bytes // 2, tls=bool(address.tls_ca_file)))
        servers = []
        for local_rank, rank_options in enumerate(feed_options(options, local_ranks)):
            feed_directory = local_feed_dir(directory, local_rank, local_ranks)
            feed_directory.mkdir(parents=True, exist_ok=True)
            loader = Loader.from_source(source, options=rank_options, session=session)
            servers.append(FeedServer(source, loader, feed_directory, epochs, kept_positions))
    except Exception as error:
        endpoints.failure = str(error)
        endpoints.close()
        raise
    endpoints.servers = servers
    listening = [threading.Event() for _ in servers]
    for server, event in zip(servers[1:], listening[1:], strict=True):
        threading.Thread(target=server.serve_forever, args=(event,), name="ringfeed-feed", daemon=True).start()
    if ready is not None:
        threading.Thread(target=set_when_all, args=(listening, ready), daemon=True).start()
    log.info("feeding %s part %s, rank(s) %s of %d, %d epochs, from %s", source.split, part,
             ", ".join(str(server.loader.options.rank) for server in servers), options.world_size, epochs, directory)
    servers[0].serve_forever(listening[0])
