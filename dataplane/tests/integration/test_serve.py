"""The loader sidecar (``ringfeed serve``, a real process) and the trainer's ``ringfeed_client.Feed`` against a real
node: the same batches as the in-process loader, zero copy, exactly once per epoch across ranks, and positions kept
across restarts of the trainer and of the sidecar."""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ringfeed import Decode, Loader
from ringfeed.serve import wait_for_socket
from ringfeed.splits import load_split
from ringfeed.store import Store
from ringfeed_client import Blobs, Feed, FeedError
from ringfeed_client.protocol import local_feed_dir

from conftest import check_metrics, ingest_demo_slides

NAME = "serve_slides"
BATCH = 8
PORTS = iter(range(18480, 18600))


@pytest.fixture(scope="module")
def slides(cassandra_node, tmp_path_factory):
    with Store(cassandra_node.address) as store:
        ingest_demo_slides(store, NAME, tmp_path_factory.mktemp("serve"))
        yield store


class Sidecar:
    """``ringfeed serve`` in its own process, stopped by PID."""

    def __init__(self, node, directory: Path, *args: str, local_ranks: int = 1):
        self.directory, self.port = directory, next(PORTS)
        self.feeds = [local_feed_dir(directory, local_rank, local_ranks) for local_rank in range(local_ranks)]
        self.command = [sys.executable, "-m", "ringfeed", "--hosts", node.hosts[0], "serve", NAME, "s",
                        "--feed-dir", str(directory), "--bind", "127.0.0.1", "--http-port", str(self.port),
                        "--batch-size", str(BATCH), "--ranks-per-pod", str(local_ranks), *args]
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        for feed in self.feeds:
            (feed / "feed.sock").unlink(missing_ok=True)
        self.process = subprocess.Popen(self.command, stderr=subprocess.PIPE, text=True)
        for feed in self.feeds:
            wait_for_socket(feed, timeout_s=60)

    def report(self) -> dict:
        """The first feed's part of /status."""
        return json.loads(self.get("/status")[1])["feeds"][0]

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def post(self, path: str, token: str | None = None, body: dict | str | None = None) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body)).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method="POST", headers=headers,
                                         data=data)
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def stop(self) -> str:
        assert self.process is not None
        self.process.terminate()
        _, errors = self.process.communicate(timeout=30)
        return errors


@pytest.fixture
def sidecars(cassandra_node, tmp_path):
    started: list[Sidecar] = []

    def start(*args: str, directory: Path | None = None, local_ranks: int = 1) -> Sidecar:
        directory = directory or tmp_path / f"feed-{len(started)}"
        directory.mkdir(exist_ok=True)
        sidecar = Sidecar(cassandra_node, directory, *args, local_ranks=local_ranks)
        started.append(sidecar)
        return sidecar

    yield start
    for sidecar in started:
        if sidecar.process and sidecar.process.poll() is None:
            sidecar.kill()


def uuids_of(batches) -> list[bytes]:
    return [u.tobytes() for batch in batches for u in batch[2]]


def train_uuids(store) -> list[bytes]:
    return sorted(u.tobytes() for u in load_split(store, NAME, "s").uuids("train"))


def copied(batch: tuple) -> tuple:
    """The batch out of the sidecar's slot (its views are valid until the next batch only)."""
    return tuple(np.array(item) if isinstance(item, np.ndarray) else item for item in batch)


def epoch(feed: Feed) -> list[tuple]:
    """One epoch's batches, each copied."""
    return [copied(batch) for batch in feed]


def mapped_from_shared_memory(array: np.ndarray) -> bool:
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap) and not array.flags.owndata


def test_feed_hands_over_the_loaders_batches_without_a_copy(slides, sidecars):
    sidecar = sidecars("--decode", "32x32", "--seed", "5", "--epochs", "2")
    reference = Loader(NAME, "s", "train", store=slides, batch_size=BATCH, decode=Decode(32, 32), seed=5,
                       with_uuids=True)
    with Feed(sidecar.directory, with_uuids=True) as feed:
        assert (feed.epoch, feed.epochs, feed.rank, feed.world_size) == (0, 2, 0, 1)
        for expected_epoch in range(2):
            assert len(feed) == len(reference)
            expected = list(reference)
            got = []
            for x, y, uuids in feed:
                assert x.dtype == np.uint8 and x.shape[1:] == (32, 32, 3)
                assert mapped_from_shared_memory(x) and mapped_from_shared_memory(y)
                got.append((np.array(x), np.array(y), np.array(uuids)))
            assert [g[2].tobytes() for g in got] == [e[2].tobytes() for e in expected]
            for g, e in zip(got, expected, strict=True):
                assert np.array_equal(g[0], e[0]) and np.array_equal(g[1], e[1])
            assert feed.epoch == expected_epoch + 1
        assert list(feed) == []  # every epoch delivered: done
    status, body = sidecar.get("/status")
    figures = json.loads(body)["feeds"][0]
    samples = len(train_uuids(slides))
    assert status == 200 and figures["done"] and figures["samples_delivered"] == 2 * samples
    assert figures["samples_served"] == 2 * samples and figures["corrupt"] == 0
    exposition = sidecar.get("/metrics")[1]
    check_metrics(exposition)
    metrics = {(s.name, s.labels.get("stage")): s.value for f in text_string_to_metric_families(exposition)
               for s in f.samples}
    assert metrics["ringfeed_loader_samples_total", None] == 2 * samples
    assert metrics["ringfeed_loader_epoch", None] == 2
    assert metrics["ringfeed_loader_fetch_latency_seconds_count", None] > 0
    assert metrics["ringfeed_loader_decode_seconds_count", None] >= 2 * samples  # every image, timed once
    batches = metrics["ringfeed_loader_batches_total", None]
    assert metrics["ringfeed_loader_stage_requests_total", "trainer"] >= batches
    assert metrics["ringfeed_loader_stage_requests_total", "batch"] >= batches
    assert sidecar.get("/readyz")[0] == 200 and sidecar.get("/healthz")[0] == 200


def test_stored_bytes_arrive_as_blobs(slides, sidecars):
    sidecar = sidecars("--no-shuffle")
    stored = dict(slides.session.execute(f"SELECT uuid, data FROM {NAME}.data_by_uuid"))
    with Feed(sidecar.directory, with_uuids=True) as feed:
        count = 0
        for blobs, _, uuids in feed:
            assert isinstance(blobs, Blobs) and mapped_from_shared_memory(blobs.data)
            for i, raw in enumerate(uuids):
                assert bytes(blobs[i]) == stored[uuid.UUID(bytes=raw.tobytes())]
                count += 1
    assert count == len(train_uuids(slides))


def test_images_left_to_the_trainer_arrive_with_their_crops_and_decode_to_the_sidecars_own(slides, sidecars):
    """--decode-device gpu: the slot holds the stored bytes and each image's box; the trainer's decode (torch on the
    CPU here) gives what a sidecar decoding itself hands, random crops of the same (seed, epoch, sample)."""
    pytest.importorskip("torchvision")
    from ringfeed_client.torch import tensors

    flags = ("--decode", "32x40", "--resize", "random", "--seed", "5", "--epochs", "2")
    own, deferred = sidecars(*flags), sidecars(*flags, "--decode-device", "gpu")
    with Feed(own.directory, with_uuids=True) as own_feed, Feed(deferred.directory, with_uuids=True) as feed:
        for _ in range(2):
            expected = epoch(own_feed)
            got = []
            for blobs, y, uuids in feed:
                assert isinstance(blobs, Blobs) and blobs.image == (32, 40, 3) and blobs.boxes.shape == (len(y), 5)
                assert mapped_from_shared_memory(blobs.boxes)
                (x, y, uuids), = tensors([(blobs, y, uuids)], device="cpu")
                got.append((x.numpy(), y.numpy().copy(), uuids.numpy().copy()))  # y, uuids: views of the slot
            assert [g[2].tobytes() for g in got] == [e[2].tobytes() for e in expected]
            for g, e in zip(got, expected, strict=True):
                assert np.array_equal(g[1], e[1]) and np.abs(g[0].astype(int) - e[0].astype(int)).mean() < 3.0


def test_ranks_cover_each_epoch_exactly_once_and_report_its_order_as_lineage(slides, sidecars):
    started = [sidecars("--rank", str(r), "--world-size", "2", "--epochs", "2", "--remainder", "uneven")
               for r in range(2)]
    feeds = [Feed(sidecar.directory, with_uuids=True) for sidecar in started]
    digests = []
    for _ in range(2):
        by_rank = [uuids_of(epoch(feed)) for feed in feeds]
        assert sorted(by_rank[0] + by_rank[1]) == train_uuids(slides)
        # Rank r consumed positions r, r + 2, … of the epoch's order: the order the lineage digest is taken over.
        order = [None] * (len(by_rank[0]) + len(by_rank[1]))
        order[0::2], order[1::2] = by_rank
        digests.append("sha256:" + hashlib.sha256(b"".join(order)).hexdigest())
    assert digests[0] != digests[1]  # each epoch has an order of its own
    for sidecar in started:
        assert sidecar.report()["epoch_digests"] == {"0": digests[0], "1": digests[1]}
    for feed in feeds:
        feed.close()


def test_one_sidecar_feeds_each_local_rank_of_its_pod_its_share_exactly_once(slides, sidecars, monkeypatch):
    """Two Pods of two local ranks (world 4): each sidecar serves ranks 2p and 2p + 1, each in its feed directory,
    which a trainer process finds from torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE; a local rank's trainer restarts
    mid-epoch from its checkpoint."""
    pods = [sidecars("--rank", str(pod), "--world-size", "4", "--epochs", "2", "--remainder", "uneven", "--seed", "4",
                     local_ranks=2) for pod in range(2)]

    def feed_of(pod: int, local_rank: int) -> Feed:
        monkeypatch.setenv("RINGFEED_FEED_DIR", str(pods[pod].directory))
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        monkeypatch.setenv("LOCAL_RANK", str(local_rank))
        return Feed(with_uuids=True)

    feeds = [feed_of(pod, local_rank) for pod in range(2) for local_rank in range(2)]
    assert [(feed.rank, feed.world_size) for feed in feeds] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    restarted = iter(feeds[3])
    first = [u.tobytes() for u in next(restarted)[2]]
    checkpoint = feeds[3].state_dict()
    feeds[3].close()  # rank 3's trainer dies; the other local rank of its Pod trains on
    feeds[3] = feed_of(1, 1)
    feeds[3].load_state_dict(checkpoint)
    by_rank = [uuids_of(epoch(feed)) for feed in feeds]
    by_rank[3] = first + by_rank[3]
    assert sorted(u for share in by_rank for u in share) == train_uuids(slides)
    second = [uuids_of(epoch(feed)) for feed in feeds]
    assert sorted(u for share in second for u in share) == train_uuids(slides)
    reported = json.loads(pods[1].get("/status")[1])["feeds"]
    assert [(feed["rank"], feed["done"]) for feed in reported] == [(2, True), (3, True)]
    # Every rank reports the same order for an epoch (the lineage digest).
    assert len({feed["epoch_digests"]["1"] for pod in pods for feed in json.loads(pod.get("/status")[1])["feeds"]}) == 1
    exposition = pods[1].get("/metrics")[1]
    check_metrics(exposition)
    samples = {s.labels["rank"]: s.value for f in text_string_to_metric_families(exposition) for s in f.samples
               if s.name == "ringfeed_loader_samples_total"}
    assert samples == {str(rank): len(by_rank[rank]) + len(second[rank]) for rank in (2, 3)}
    for feed in feeds:
        feed.close()


def test_a_trainer_without_a_local_rank_in_a_pod_of_several_is_told_to_use_torchrun(monkeypatch, tmp_path):
    monkeypatch.setenv("RINGFEED_FEED_DIR", str(tmp_path))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(FeedError, match="start the trainer under torchrun"):
        Feed()


def test_a_trainer_restarted_from_its_checkpoint_continues_there(slides, sidecars):
    sidecar = sidecars("--seed", "9")
    full = uuids_of(epoch(Feed(sidecars("--seed", "9").directory, with_uuids=True)))
    first = Feed(sidecar.directory, with_uuids=True)
    batches = iter(first)
    kept = []
    for _ in range(3):
        kept.append(np.array(next(batches)[2]))
    checkpoint = first.state_dict()  # saved with the model after 3 batches
    next(batches)  # a 4th batch trained on, then the trainer dies before the next checkpoint
    first.close()
    second = Feed(sidecar.directory, with_uuids=True)
    second.load_state_dict(checkpoint)
    rest = uuids_of(epoch(second))
    assert [u.tobytes() for batch in kept for u in batch] + rest == full
    second.close()


def test_a_trainer_restarted_without_a_checkpoint_gets_the_batch_it_held_again(slides, sidecars):
    sidecar = sidecars("--seed", "11")
    first = Feed(sidecar.directory, with_uuids=True)
    batches = iter(first)
    seen = [np.array(next(batches)[2]) for _ in range(2)]
    first.close()  # died while training on its second batch: that one was never released
    second = Feed(sidecar.directory, with_uuids=True)
    rest = epoch(second)
    assert rest[0][2].tobytes() == seen[1].tobytes()
    assert sorted([seen[0][i].tobytes() for i in range(len(seen[0]))] + uuids_of(rest)) == train_uuids(slides)
    second.close()


def test_a_killed_sidecar_restarts_where_the_trainer_stands(slides, sidecars):
    sidecar = sidecars("--seed", "13", "--rank", "1", "--world-size", "2", "--epochs", "2",
                       "--remainder", "uneven")
    other = Feed(sidecars("--seed", "13", "--rank", "0", "--world-size", "2", "--epochs", "2",
                         "--remainder", "uneven").directory,
                 with_uuids=True)
    feed = Feed(sidecar.directory, with_uuids=True, reconnect_s=60)
    delivered: list[bytes] = []
    batches = iter(feed)
    for _ in range(2):
        delivered += [u.tobytes() for u in next(batches)[2]]
    sidecar.kill()  # mid-epoch, with a batch held by the trainer and more prefetched
    sidecar.start()
    delivered += uuids_of(batches)  # the same iteration goes on through the new sidecar
    delivered += uuids_of(epoch(other))
    assert sorted(delivered) == train_uuids(slides)
    second_epoch = uuids_of(epoch(feed)) + uuids_of(epoch(other))
    assert sorted(second_epoch) == train_uuids(slides)
    feed.close()
    other.close()


def test_a_checkpoint_of_another_feed_is_refused_with_a_clear_error(slides, sidecars):
    feed = Feed(sidecars("--seed", "1").directory)
    state = feed.state_dict()
    other = Feed(sidecars("--seed", "2").directory)
    other.load_state_dict(state)
    with pytest.raises(FeedError, match="seed is 1, this loader has 2"):
        list(other)
    feed.close()
    other.close()


@pytest.mark.parametrize("token", [None, "", "wrong", "Bearer", "s3cret-token ", "s3cret-tokenX"])
def test_the_control_path_refuses_a_request_without_the_jobs_token(slides, sidecars, tmp_path, token):
    (tmp_path / "token").write_text("s3cret-token\n")
    sidecar = sidecars("--control-token-file", str(tmp_path / "token"))
    for path in ("/pause", "/resume"):
        code, body = sidecar.post(path, token)
        assert code == 401 and "token" in body
    assert json.loads(sidecar.get("/status")[1])["paused"] is False
    assert sidecar.post("/status", "s3cret-token")[0] == 404  # reports stay read-only


def test_a_sidecar_without_a_control_token_takes_no_commands(slides, sidecars):
    sidecar = sidecars()
    assert sidecar.post("/pause", "anything")[0] == 403
    assert json.loads(sidecar.get("/status")[1])["paused"] is False


def test_a_pause_with_the_token_holds_the_feed_and_a_resume_undoes_it(slides, sidecars, tmp_path):
    (tmp_path / "token").write_text("s3cret-token")
    sidecar = sidecars("--control-token-file", str(tmp_path / "token"), "--seed", "3")
    feed = Feed(sidecar.directory, with_uuids=True)
    batches = iter(feed)
    delivered = [u.tobytes() for u in next(batches)[2]]
    code, body = sidecar.post("/pause", "s3cret-token")
    assert code == 200 and json.loads(body)["paused"] is True
    served = sidecar.report()["batches_served"]
    waiting = threading.Thread(target=lambda: delivered.extend(u.tobytes() for u in next(batches)[2]))
    waiting.start()
    waiting.join(timeout=2)
    assert waiting.is_alive(), "a paused sidecar handed out a batch"
    assert sidecar.report()["batches_served"] == served
    code, body = sidecar.post("/resume", "s3cret-token")
    assert code == 200 and json.loads(body)["paused"] is False
    waiting.join(timeout=60)
    assert not waiting.is_alive()
    delivered += uuids_of(batches)
    assert sorted(delivered) == train_uuids(slides)
    feed.close()


def test_a_pause_at_a_position_hands_out_batches_up_to_it_then_holds(slides, sidecars, tmp_path):
    """A resize's barrier: rank 0 of 2 told to stop at the global position after its 3rd batch (3 batches × 8
    samples × 2 ranks) goes on to it from where it stands, then holds; a position it has passed stays where it is,
    and a body that is no position is refused."""
    (tmp_path / "token").write_text("s3cret-token")
    sidecar = sidecars("--control-token-file", str(tmp_path / "token"), "--seed", "4", "--rank", "0",
                       "--world-size", "2")
    feed = Feed(sidecar.directory, with_uuids=True)
    batches = iter(feed)
    next(batches)
    assert sidecar.post("/pause", "s3cret-token")[0] == 200  # frozen first, as the operator does
    code, body = sidecar.post("/pause", "s3cret-token", {"epoch": 0, "offset": 3 * BATCH * 2})
    assert code == 200 and json.loads(body)["paused"] is False  # not there yet: it goes on
    next(batches), next(batches)
    report = sidecar.report()
    assert report["position"]["offset"] == 3 * BATCH * 2 and report["paused"] is True
    assert json.loads(sidecar.get("/status")[1])["paused"] is True
    assert report["trainer_held"] is False  # the trainer still has its last batch
    waiting = threading.Thread(target=lambda: next(batches))
    waiting.start()
    waiting.join(timeout=2)
    assert waiting.is_alive(), "a sidecar at its pause position handed out a batch"
    assert sidecar.report()["trainer_held"] is True  # done with it: asking for the next one
    code, body = sidecar.post("/pause", "s3cret-token", {"epoch": 0, "offset": BATCH * 2})  # passed: holds there
    assert code == 200 and json.loads(body)["paused"] is True and sidecar.report()["batches_served"] == 3
    for bad in ("{", {"epoch": 0}, {"epoch": -1, "offset": 0}, {"epoch": 0, "offset": "8"}, [1, 2]):
        code, body = sidecar.post("/pause", "s3cret-token", bad)
        assert code == 400 and "pause" in body, bad
    assert sidecar.post("/resume", "s3cret-token")[0] == 200
    waiting.join(timeout=60)
    assert not waiting.is_alive()
    feed.close()


def test_the_sidecar_reports_a_split_it_cannot_find(cassandra_node, tmp_path):
    command = [sys.executable, "-m", "ringfeed", "--hosts", cassandra_node.hosts[0], "serve", NAME, "no-such-split",
               "--feed-dir", str(tmp_path), "--bind", "127.0.0.1", "--http-port", str(next(PORTS))]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ})
    assert result.returncode == 1 and "no-such-split" in result.stderr
