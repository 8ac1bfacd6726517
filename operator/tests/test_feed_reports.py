"""The sidecars' reports as the operator reads them: one feed per local rank of a Pod."""

from __future__ import annotations

import pytest

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
