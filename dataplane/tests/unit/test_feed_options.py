"""The loader options of a sidecar's feeds, one per local rank of its Pod."""

from __future__ import annotations

import pytest

from ringfeed.loader import LoaderOptions
from ringfeed.serve import feed_options


@pytest.mark.parametrize(("pod", "local_ranks", "ranks"), [(0, 1, [0]), (1, 1, [1]), (0, 4, [0, 1, 2, 3]),
                                                           (2, 4, [8, 9, 10, 11])])
def test_local_rank_l_of_pod_p_reads_rank_p_times_the_pods_ranks_plus_l(pod, local_ranks, ranks):
    options = LoaderOptions(rank=pod, world_size=12, decode_threads=8)
    assert [o.rank for o in feed_options(options, local_ranks)] == ranks
    assert all(o.world_size == 12 for o in feed_options(options, local_ranks))
