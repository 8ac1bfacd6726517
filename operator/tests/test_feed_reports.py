"""The sidecars' reports as the operator reads them: one feed per local rank of a Pod."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator

import pytest
from loopback_http import Replies, serving

from ringfeed_operator import feeds
from ringfeed_operator.feeds import feeds_of


def feed(rank: int) -> dict:
    return {"rank": rank, "epoch": 0, "offset": 8, "samples_delivered": 8}


def test_a_pod_of_several_ranks_reports_a_feed_per_local_rank():
    assert feeds_of({"ready": True, "paused": False, "feeds": [feed(4), feed(5)]}) == [feed(4), feed(5)]


def test_a_sidecar_of_release_0_1_0_reports_its_one_feed_at_the_top():
    old = {"ready": True, **feed(1)}
    assert feeds_of(old) == [old]


@pytest.mark.parametrize("report", [
    None,
    {"ready": True, "feeds": "not a list"},
    {"ready": True, "feeds": [{"rank": "1"}, 7, None]},
    {"ready": True},  # no feed and no rank
])
def test_what_is_no_feed_report_is_left_out(report):
    assert feeds_of(report) == []


class Sidecar(Replies):
    """Answers /status only once every sidecar of the job has been asked: a client that asks one Pod after the other
    breaks the barrier and gets HTTP 500."""

    barrier: threading.Barrier

    def do_GET(self):  # the name http.server calls
        rank = int(self.server.server_address[0].rsplit(".", 1)[1]) - 2
        try:
            self.barrier.wait()
            code, body = 200, json.dumps({"ready": True, "feeds": [feed(rank)]}).encode()
        except threading.BrokenBarrierError:
            code, body = 500, b"asked one at a time"
        self.reply(code, body)


@pytest.fixture
def sidecars(monkeypatch) -> Iterator[list[dict]]:
    """Three rank Pods' sidecars on loopback addresses of their own, on one port, as Pods have."""
    Sidecar.barrier = threading.Barrier(3, timeout=feeds.TIMEOUT_S / 2)
    with contextlib.ExitStack() as servers:
        port = servers.enter_context(serving(Sidecar, "127.0.0.2")).server_address[1]
        for i in (3, 4):
            servers.enter_context(serving(Sidecar, f"127.0.0.{i}", port))
        monkeypatch.setattr(feeds, "SIDECAR_PORT", port)
        yield [{"status": {"podIP": f"127.0.0.{i}"}} for i in (2, 3, 4)]


def test_the_sidecars_of_a_job_are_asked_at_once(sidecars):
    reports = asyncio.run(feeds.rank_reports([*sidecars, {"status": {}}]))  # a Pod without an address yet
    assert sorted(reports) == [0, 1, 2]
