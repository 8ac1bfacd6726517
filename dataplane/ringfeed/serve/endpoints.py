"""The sidecar's HTTP port, one for the Pod's feeds: probes for the kubelet, ``/status`` for the operator (a report
per feed, under ``feeds``), ``/metrics`` for Prometheus (a series per rank), all read-only; and the control path,
``POST /pause`` (before a suspension; with a body ``{"epoch": E, "offset": O}``, after handing out batches up to
that position: the ranks of a resize meet there) and ``POST /resume`` of every feed, which answers only a request
that carries the TrainingJob's control token (``Authorization: Bearer``), a Secret only the operator and this
container hold."""

from __future__ import annotations

import dataclasses
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest

from ringfeed.metrics import NO_WINDOW, PathCollector, PathFigures
from ringfeed.serve.server import Batch, FeedServer


def feed_figures(server: FeedServer) -> PathFigures:
    """The sidecar's figures: what it handed to the trainer, and its producers' native reader."""
    status, loader = server.status, server.producer.loader
    window = loader.window_stats() or NO_WINDOW
    return PathFigures(samples=status.samples_served, batches=status.batches_served, bytes=status.bytes_served,
                       trainer_wait_s=status.trainer_wait_s, retries=server.retries(),
                       skipped={"missing": server.missing(), "corrupt": server.corrupt()}, epoch=status.epoch,
                       position_samples=server.samples_delivered(), native=server.metrics.snapshot(),
                       window_bytes=window["window_bytes"], in_flight_bytes=window["in_flight_bytes"],
                       queued_batches=sum(isinstance(item, Batch) for item in list(server.producer.items)),
                       trainer_stage=(status.trainer_asked, status.trainer_found_ready))


def feed_report(server: FeedServer) -> dict:
    """One feed's part of ``/status``: its rank's position and figures."""
    report = dataclasses.asdict(server.status)
    report.update(ready=server.producer.connected.is_set(), samples_delivered=server.samples_delivered(),
                  corrupt=server.corrupt(), missing=server.missing(), paused=server.holding(),
                  position=server.loop_position,  # the trainer's loop's: what a suspension or a resize keeps
                  epoch_digests=server.epoch_digests(), uptime_s=round(time.monotonic() - report.pop("started"), 3))
    return report


def pause_target(body: bytes) -> tuple[int, int] | None:
    """A pause's optional body, ``{"epoch": E, "offset": O}``: the position to stop at (a resize), else None (stop
    now); ValueError for anything else."""
    if not body.strip():
        return None
    try:
        target = json.loads(body)
        epoch, offset = target["epoch"], target["offset"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f'a pause takes {{"epoch": E, "offset": O}} or nothing: {error}') from error
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (epoch, offset)):
        raise ValueError("a pause's epoch and offset are whole numbers, zero or more")
    return epoch, offset


class Endpoints:
    """Serves the port in a thread; ``servers`` (one per local rank) are set once the split is loaded and the feeds
    are up."""

    def __init__(self, bind: str, port: int, labels: dict[str, str], control_token: str | None = None):
        self.servers: list[FeedServer] = []
        self.failure: str | None = None
        registry = CollectorRegistry()
        registry.register(PathCollector(lambda: [({"rank": str(server.loader.options.rank)}, feed_figures(server))
                                                 for server in self.servers], labels))
        endpoints = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # the name http.server calls
                path = self.path.split("?")[0]
                if path == "/healthz":
                    self._reply(200 if endpoints.failure is None else 500, endpoints.failure or "ok")
                elif path == "/readyz":
                    ready = endpoints.ready()
                    self._reply(200 if ready else 503, "ready" if ready else "loading the split")
                elif path == "/status":
                    self._reply(200, json.dumps(endpoints.status()), "application/json")
                elif path == "/metrics":
                    self._reply(200, generate_latest(registry).decode(), "text/plain; version=0.0.4")
                else:
                    self._reply(404, "not found")

            def do_POST(self):  # the name http.server calls
                path = self.path.split("?")[0]
                if path not in ("/pause", "/resume"):
                    self._reply(404, "not found")
                elif control_token is None:
                    self._reply(403, "no control token: this sidecar takes no commands")
                elif not hmac.compare_digest(self.headers.get("Authorization", "").encode(),
                                             f"Bearer {control_token}".encode()):
                    self._reply(401, "the control token is missing or wrong")
                elif not endpoints.servers:
                    self._reply(503, "loading the split")
                else:
                    try:
                        at = pause_target(self._body()) if path == "/pause" else None
                    except ValueError as error:
                        self._reply(400, str(error))
                        return
                    for server in endpoints.servers:
                        server.pause(at) if path == "/pause" else server.resume()
                    self._reply(200, json.dumps(endpoints.status()), "application/json")

            def _body(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(min(length, 4096)) if length > 0 else b""

            def _reply(self, code: int, body: str, kind: str = "text/plain") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # probes every few seconds: not worth a log line each
                pass

        self._http = ThreadingHTTPServer((bind, port), Handler)
        self.port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, name="ringfeed-http", daemon=True).start()

    def ready(self) -> bool:
        servers = self.servers
        return bool(servers) and all(server.producer.connected.is_set() for server in servers)

    def status(self) -> dict:
        servers = self.servers
        if not servers:
            return {"ready": False, "error": self.failure}
        return {"ready": self.ready(), "paused": all(server.holding() for server in servers),
                "feeds": [feed_report(server) for server in servers]}

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
