"""A new object's first status: the acceptor lists and watches each kind, and PATCHes the status subresource of an
object without one, tested against the resourceVersion its event carried. The server here is an HTTP server on
loopback answering as the API server would (the e2e runs the acceptor against the real one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client
from loopback_http import Replies, serving
from prometheus_client import CollectorRegistry

from ringfeed_operator.acceptor import KINDS, PATCHERS, Acceptor, first_status_ops
from ringfeed_operator.acceptor_process import AcceptorProcess, parse_report, recorded_in, report_line
from ringfeed_operator.metrics import Metrics

READY = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "observedGeneration": 1,
         "lastTransitionTime": "2026-11-28T10:00:00Z"}
DATASET, SPLIT, TRAININGJOB, RING = KINDS
BASE = "/apis/ringfeed.io/v1alpha1"


def body(name: str, resource_version: str = "7", status: dict | None = None, deleting: bool = False,
         created: str = "2026-11-28T10:00:00Z", namespace: str = "ml") -> dict:
    meta = {"name": name, "namespace": namespace, "resourceVersion": resource_version, "generation": 1,
            "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-28T10:01:00Z"
    return {"metadata": meta, "spec": {}, **({"status": status} if status is not None else {})}


@pytest.mark.parametrize("status, path", [(None, "/status"), ({}, "/status"),
                                          ({"lineage": {"split": "v1"}}, "/status/conditions"),
                                          ({"conditions": []}, "/status/conditions")])
def test_an_object_without_conditions_gets_accepted_if_unchanged_since_its_event(status, path):
    test, write = first_status_ops(body("images", "41", status), "making its tables on the ring")
    assert test == {"op": "test", "path": "/metadata/resourceVersion", "value": "41"}
    assert (write["op"], write["path"]) == ("add", path)
    [ready] = write["value"]["conditions"] if path == "/status" else write["value"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "Accepted")
    assert ready["message"] == "seen by the operator; making its tables on the ring"
    assert "observedGeneration" not in write["value"]  # the reconcile's to say: the timers wait for it


@pytest.mark.parametrize("kwargs", [{"status": {"conditions": [READY]}}, {"deleting": True},
                                    {"status": {"conditions": [READY]}, "deleting": True}])
def test_an_object_with_a_condition_or_going_away_is_left_alone(kwargs):
    assert first_status_ops(body("images", **kwargs), "anything") is None


class ApiServer(Replies):
    """Lists `listed[plural]` (after refusing with the codes of `list_refusals[plural]`, one per list); streams
    `events[plural]` to the first watch of a kind, then holds every watch open until the test ends; records every
    request, and answers a PATCH with the codes scripted for its path in turn (200 once they run out)."""

    protocol_version = "HTTP/1.1"
    listed: dict = {}
    list_refusals: dict = {}
    events: dict = {}
    script: dict = {}
    gets: list = []
    patches: list = []
    streamed: set = set()
    ended = threading.Event()
    lock = threading.Lock()

    def do_GET(self):
        url = urlparse(self.path)
        plural = url.path.rsplit("/", 1)[1]
        with self.lock:
            self.gets.append(self.path)
        if parse_qs(url.query).get("watch") != ["true"]:
            with self.lock:
                refusals = self.list_refusals.get(plural, [])
                code = refusals.pop(0) if refusals else 200
            if code != 200:
                self.reply(code, b'{"kind": "Status", "reason": "Forbidden"}')
                return
            self.reply(200, json.dumps({"items": self.listed.get(plural, []),
                                        "metadata": {"resourceVersion": "100"}}).encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")  # as the API server streams: an event per chunk
        self.end_headers()
        with self.lock:
            first = plural not in self.streamed
            self.streamed.add(plural)
        for kind, obj in self.events.get(plural, []) if first else []:
            line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
        self.ended.wait(20)
        self.wfile.write(b"0\r\n\r\n")

    def do_PATCH(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            self.patches.append((self.path, self.headers["Content-Type"], payload))
            codes = self.script.get(self.path, [])
            code = codes.pop(0) if codes else 200
        self.reply(code, b"{}")


@pytest.fixture()
def api_server():
    ApiServer.listed, ApiServer.list_refusals, ApiServer.events, ApiServer.script = {}, {}, {}, {}
    ApiServer.gets, ApiServer.patches, ApiServer.streamed = [], [], set()
    ApiServer.ended.clear()
    with serving(ApiServer) as server:
        yield server
        ApiServer.ended.set()


def accept(server, expected: int, namespaces: tuple[str, ...] = (), offers: tuple = ()) -> tuple[dict, Metrics]:
    """Offer `offers`, start an acceptor against `server`, wait for `expected` results and a watch of each kind in
    each namespace; → the results by (kind, result), and the metrics."""
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_port}"
    metrics = Metrics(CollectorRegistry())
    acceptor = Acceptor(client.ApiClient(configuration), recorded_in(metrics), namespaces, patchers=2)

    def results() -> dict:
        return {(s.labels["kind"], s.labels["result"]): s.value for s in metrics.first_statuses.collect()[0].samples
                if s.name.endswith("_total")}

    for kind, obj in offers:
        acceptor.offer(kind, obj)
    acceptor.start()
    deadline = time.monotonic() + 20
    watches = len(KINDS) * max(1, len(namespaces))
    while ((sum(results().values()) < expected or len([p for p in ApiServer.gets if "watch=true" in p]) < watches)
           and time.monotonic() < deadline):
        time.sleep(0.02)
    time.sleep(0.2)  # anything more would show
    acceptor.close()
    return results(), metrics


def test_listed_and_watched_objects_without_a_status_get_one_patch_each(api_server):
    ApiServer.listed = {"datasets": [body("images", "10")], "splits": [body("folds", "11", {"conditions": [READY]})]}
    ApiServer.events = {"trainingjobs": [("ADDED", body("train", "12")), ("BOOKMARK", {"metadata": {
                            "resourceVersion": "13"}})],
                        "rings": [("DELETED", body("old", "14")), ("MODIFIED", body("leaving", "15", deleting=True)),
                                  ("MODIFIED", body("main", "16", {"conditions": [READY]}))],
                        "splits": [("MODIFIED", body("folds", "17"))]}  # its status went (an edit)
    results, _ = accept(api_server, expected=3)
    assert results == {("Dataset", "written"): 1, ("TrainingJob", "written"): 1, ("Split", "written"): 1}
    sent = {path: (content_type, payload[0]["value"]) for path, content_type, payload in ApiServer.patches}
    assert sent == {f"{BASE}/namespaces/ml/datasets/images/status": ("application/json-patch+json", "10"),
                    f"{BASE}/namespaces/ml/trainingjobs/train/status": ("application/json-patch+json", "12"),
                    f"{BASE}/namespaces/ml/splits/folds/status": ("application/json-patch+json", "17")}
    assert len(ApiServer.patches) == 3
    watched = {urlparse(path).path for path in ApiServer.gets}
    assert watched == {f"{BASE}/{plural}" for plural in ("datasets", "splits", "trainingjobs", "rings")}


def test_only_the_watched_namespaces_are_listed_and_watched(api_server):
    accept(api_server, expected=0, namespaces=("team-a", "team-b"))
    watched = {urlparse(path).path for path in ApiServer.gets}
    assert watched == {f"{BASE}/namespaces/{namespace}/{plural}" for namespace in ("team-a", "team-b")
                       for plural in ("datasets", "splits", "trainingjobs", "rings")}
    # Each watch starts where its list ended.
    assert all("resourceVersion=100" in path for path in ApiServer.gets if "watch=true" in path)


def test_an_object_offered_again_before_its_patch_gets_one_patch_of_its_latest_event(api_server):
    results, _ = accept(api_server, expected=1, offers=((DATASET, body("images", "10")),
                                                        (DATASET, body("images", "11"))))
    assert results == {("Dataset", "written"): 1}
    [(_, _, payload)] = ApiServer.patches
    assert payload[0]["value"] == "11"


def test_a_refused_patch_is_counted_and_not_sent_again(api_server):
    base = f"{BASE}/namespaces/ml/datasets"
    ApiServer.script = {f"{base}/raced/status": [422], f"{base}/gone/status": [404], f"{base}/broken/status": [500]}
    offers = tuple((DATASET, body(name)) for name in ("raced", "gone", "broken", "fine"))
    results, _ = accept(api_server, expected=4, offers=offers)
    assert results == {("Dataset", "superseded"): 2, ("Dataset", "failed"): 1, ("Dataset", "written"): 1}
    assert len(ApiServer.patches) == 4


def test_the_wait_from_creation_to_the_first_status_is_observed(api_server):
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3))
    _, metrics = accept(api_server, expected=1, offers=((SPLIT, body("folds", created=created)),))
    samples = {s.name: s.value for s in metrics.first_status_seconds.collect()[0].samples
               if s.labels == {"kind": "Split"}}
    assert samples["ringfeed_operator_first_status_seconds_count"] == 1
    assert 3 <= samples["ringfeed_operator_first_status_seconds_sum"] < 10  # whole seconds: up to 1 s more


@pytest.mark.parametrize("namespaces, connections", [((), 4 + PATCHERS), (("team-a", "team-b"), 8 + PATCHERS)])
def test_its_own_connection_pool_holds_every_watch_and_every_patch(namespaces, connections):
    acceptor = Acceptor.connect(recorded_in(Metrics(CollectorRegistry())), namespaces)
    pool = acceptor._custom.api_client.rest_client.pool_manager
    assert pool.connection_pool_kw["maxsize"] == connections


def test_a_refused_list_is_tried_again_later_and_then_its_objects_are_accepted(api_server):
    ApiServer.listed = {"rings": [body("main", "21")]}
    ApiServer.list_refusals = {"rings": [403, 503]}  # RBAC not there yet, an API server restarting
    results, _ = accept(api_server, expected=1)
    assert results == {("Ring", "written"): 1}
    lists = [path for path in ApiServer.gets if urlparse(path).path.endswith("/rings") and "watch=true" not in path]
    assert len(lists) == 3  # refused twice, waited 1 s then 2 s, listed


@pytest.mark.parametrize("report", [("Dataset", "written", 2.5), ("TrainingJob", "superseded", None),
                                    ("Ring", "failed", None), ("Split", "written", 0.0)])
def test_a_report_crosses_from_the_child_as_one_line(report):
    line = report_line(*report)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert parse_report(line) == report


def kubeconfig_of(server, folder) -> str:
    path = folder / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "loopback",
        "clusters": [{"name": "loopback", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "nobody", "user": {}}],
        "contexts": [{"name": "loopback", "context": {"cluster": "loopback", "user": "nobody"}}]}))
    return str(path)


def written(metrics: Metrics) -> float:
    return sum(s.value for s in metrics.first_statuses.collect()[0].samples
               if s.name.endswith("_total") and s.labels["result"] == "written")


def wait_for(condition, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.05)


def test_the_acceptors_process_reports_into_the_operators_metrics_and_is_started_again_if_it_ends(
        api_server, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", kubeconfig_of(api_server, tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ApiServer.listed = {"datasets": [body("images", "10")]}
    metrics = Metrics(CollectorRegistry())
    acceptor = AcceptorProcess.connect(metrics, ("ml",))
    acceptor.start()
    try:
        wait_for(lambda: written(metrics) == 1)
        first = acceptor.pid
        assert first is not None and first != os.getpid()
        assert [p for p, *_ in ApiServer.patches] == [f"{BASE}/namespaces/ml/datasets/images/status"]
        os.kill(first, signal.SIGKILL)
        # Started again (after 2 s: it ended young), it lists again and writes the still empty status again.
        wait_for(lambda: written(metrics) == 2)
        assert acceptor.pid not in (None, first)
        samples = {s.name: s.value for s in metrics.first_status_seconds.collect()[0].samples
                   if s.labels == {"kind": "Dataset"}}
        assert samples["ringfeed_operator_first_status_seconds_count"] == 2
    finally:
        acceptor.close()
    last = acceptor.pid
    assert last is not None
    with pytest.raises(ProcessLookupError):  # closed: its child is gone, and reaped
        os.kill(last, 0)


def test_the_acceptors_process_ends_when_its_standard_input_closes(api_server, tmp_path):
    env = {**os.environ, "KUBECONFIG": kubeconfig_of(api_server, tmp_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    child = subprocess.Popen([sys.executable, "-m", "ringfeed_operator.acceptor_process", "--namespace=ml"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        wait_for(lambda: len([p for p in ApiServer.gets if "watch=true" in p]) == len(KINDS))
        assert child.poll() is None
        child.stdin.close()  # as when the operator ends, however it ends
        assert child.wait(10) == 0
    finally:
        child.kill()
