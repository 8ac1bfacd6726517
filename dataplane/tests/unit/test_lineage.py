"""ringfeed.lineage: one digest per epoch for what all the ranks of a job consume between them."""

import hashlib

import numpy as np
import pytest

from ringfeed.lineage import epoch_digest, epoch_order
from ringfeed.loader import LoaderOptions
from ringfeed.loader.plan import EpochPlan

UUIDS = np.random.default_rng(1).integers(0, 256, (101, 16), dtype=np.uint8)


def plan(**fields) -> EpochPlan:
    return EpochPlan(len(UUIDS), LoaderOptions(batch_size=4, **fields))


@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
@pytest.mark.parametrize("remainder", ["uneven", "pad", "drop"])
def test_the_digest_is_of_what_the_ranks_consume_between_them_in_stride_order(world_size, remainder):
    ranks = [plan(seed=3, rank=r, world_size=world_size, remainder=remainder) for r in range(world_size)]
    consumed = [np.concatenate(p.batches(2)) for p in ranks]
    order = np.empty((sum(len(c) for c in consumed), 16), np.uint8)
    for rank, indices in enumerate(consumed):
        order[rank::world_size] = UUIDS[indices]
    expected = "sha256:" + hashlib.sha256(order.tobytes()).hexdigest()
    assert {epoch_digest(UUIDS, p, 2) for p in ranks} == {expected}


def test_the_world_size_changes_the_digest_only_where_it_changes_the_order():
    uneven = {epoch_digest(UUIDS, plan(seed=3, world_size=w, remainder="uneven"), 0) for w in (1, 2, 5)}
    assert len(uneven) == 1  # every sample once, in the same global order
    padded = {epoch_digest(UUIDS, plan(seed=3, world_size=w, remainder="pad"), 0) for w in (1, 2)}
    assert len(padded) == 2  # 101 samples: two ranks read one of them twice


def test_seed_epoch_and_shuffle_each_give_another_order():
    digests = [epoch_digest(UUIDS, plan(seed=3), 0), epoch_digest(UUIDS, plan(seed=4), 0),
               epoch_digest(UUIDS, plan(seed=3), 1), epoch_digest(UUIDS, plan(seed=3, shuffle=False), 0)]
    assert len(set(digests)) == 4
    assert (epoch_order(UUIDS, plan(shuffle=False), 5) == UUIDS).all()
