"""A new object's first status: one PATCH of the status subresource per object, tested against the resourceVersion
its event carried, sent to an HTTP server on loopback that answers as the API server would."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import kopf
import pytest
from loopback_http import Replies, serving
from prometheus_client import CollectorRegistry

from ringfeed_operator.acceptor import Acceptor, first_status_ops
from ringfeed_operator.kube import DATASETS, SPLITS
from ringfeed_operator.metrics import Metrics

READY = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "observedGeneration": 1,
         "lastTransitionTime": "2026-11-28T10:00:00Z"}


def body(name: str, resource_version: str = "7", status: dict | None = None, deleting: bool = False,
         created: str = "2026-11-28T10:00:00Z") -> dict:
    meta = {"name": name, "namespace": "ml", "resourceVersion": resource_version, "generation": 1,
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
    """Records every PATCH; answers each path with the codes scripted for it in turn (200 once they run out), and
    401 to a token other than the current one."""

    patches: list = []
    script: dict = {}
    token = "first"
    lock = threading.Lock()

    def do_PATCH(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            self.patches.append((self.path, self.headers["Content-Type"], self.headers["Authorization"], payload))
            if self.headers["Authorization"] != f"Bearer {self.token}":
                code = 401
            else:
                codes = self.script.get(self.path, [])
                code = codes.pop(0) if codes else 200
        self.reply(code, b"{}")


def run_acceptor(server, offers: list[tuple], expected: int, stale_first: bool = False
                 ) -> tuple[dict, int, Metrics]:
    """Offers everything, then starts the acceptor and waits for `expected` results; the results by (kind, result),
    how many times it logged in, and the metrics. `stale_first`: the first login reads a token the server refuses."""
    logins = []

    def login() -> kopf.ConnectionInfo:
        logins.append(ApiServer.token)
        token = "stale" if stale_first and len(logins) == 1 else ApiServer.token
        return kopf.ConnectionInfo(server=f"http://127.0.0.1:{server.server_port}", token=token)

    metrics = Metrics(CollectorRegistry())

    def results() -> dict:
        return {(s.labels["kind"], s.labels["result"]): s.value for s in metrics.first_statuses.collect()[0].samples
                if s.name.endswith("_total")}

    async def scenario() -> None:
        acceptor = Acceptor(login=login, connections=2)
        for offer in offers:
            acceptor.offer(*offer)
        await acceptor.start(metrics)
        deadline = time.monotonic() + 20
        while sum(results().values()) < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await acceptor.close()

    asyncio.run(scenario())
    return results(), len(logins), metrics


@pytest.fixture()
def api_server():
    ApiServer.patches, ApiServer.script, ApiServer.token = [], {}, "first"
    with serving(ApiServer) as server:
        yield server


def test_each_new_object_gets_one_patch_of_its_latest_event(api_server):
    offers = [(DATASETS, "Dataset", body("images", "10"), "making its tables on the ring"),
              (DATASETS, "Dataset", body("images", "11"), "making its tables on the ring"),  # its next event
              (SPLITS, "Split", body("folds", "12"), "its split Job starts once its Dataset is Ready"),
              (SPLITS, "Split", body("done", "13", {"conditions": [READY]}), "—"),
              (DATASETS, "Dataset", body("leaving", "14", deleting=True), "—")]
    results, logins, _ = run_acceptor(api_server, offers, expected=2)
    assert results == {("Dataset", "written"): 1, ("Split", "written"): 1}
    assert logins == 1
    sent = {path: (content_type, token, payload[0]["value"]) for path, content_type, token, payload
            in ApiServer.patches}
    assert sent == {
        "/apis/ringfeed.io/v1alpha1/namespaces/ml/datasets/images/status":
            ("application/json-patch+json", "Bearer first", "11"),
        "/apis/ringfeed.io/v1alpha1/namespaces/ml/splits/folds/status":
            ("application/json-patch+json", "Bearer first", "12"),
    }
    assert len(ApiServer.patches) == 2


def test_a_refused_patch_is_counted_and_not_sent_again(api_server):
    base = "/apis/ringfeed.io/v1alpha1/namespaces/ml/datasets"
    ApiServer.script = {f"{base}/raced/status": [422], f"{base}/gone/status": [404], f"{base}/broken/status": [500]}
    offers = [(DATASETS, "Dataset", body(name), "…") for name in ("raced", "gone", "broken", "fine")]
    results, _, _ = run_acceptor(api_server, offers, expected=4)
    assert results == {("Dataset", "superseded"): 2, ("Dataset", "failed"): 1, ("Dataset", "written"): 1}
    assert len(ApiServer.patches) == 4


def test_a_rejected_token_is_read_again_once(api_server):
    results, logins, _ = run_acceptor(api_server, [(DATASETS, "Dataset", body("images"), "…")], expected=1,
                                      stale_first=True)
    assert results == {("Dataset", "written"): 1}
    assert logins == 2
    assert [token for _, _, token, _ in ApiServer.patches] == ["Bearer stale", "Bearer first"]


def test_the_wait_from_creation_to_the_first_status_is_observed(api_server):
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3))
    _, _, metrics = run_acceptor(api_server, [(DATASETS, "Dataset", body("images", created=created), "…")],
                                 expected=1)
    samples = {s.name: s.value for s in metrics.first_status_seconds.collect()[0].samples
               if s.labels == {"kind": "Dataset"}}
    assert samples["ringfeed_operator_first_status_seconds_count"] == 1
    assert 3 <= samples["ringfeed_operator_first_status_seconds_sum"] < 10  # whole seconds: up to 1 s more
