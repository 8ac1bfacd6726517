"""Where the ranks of a resized TrainingJob meet (builders/rescale.py), checked against the loader's own plan: the
samples before the meeting point under the old world and after it under the new one are each of the epoch's samples
exactly once, and with remainder pad every new rank gets as many. Pure; the resize itself runs in
e2e/tests/test_trainingjob.py."""

from __future__ import annotations

import pytest

from ringfeed.loader.options import LoaderOptions
from ringfeed.loader.plan import EpochPlan
from ringfeed_operator.builders.rescale import all_at, furthest, meeting_point, resized_positions


def state(epoch: int, offset: int, world: int, samples: int = 45, batch: int = 4, remainder: str = "uneven",
          skip=()) -> dict:
    return {"version": 1, "epoch": epoch, "offset": offset, "skip": list(skip), "split_id": "s", "part": "train",
            "samples": samples, "seed": 7, "shuffle": True, "remainder": remainder, "batch_size": batch,
            "world_size": world}


def test_the_ranks_meet_at_the_first_round_past_the_furthest_that_the_new_world_divides():
    # 2 ranks × batches of 4: a round is 8 positions; rank 1 is a round behind rank 0.
    positions = [state(0, 16, 2), state(0, 8, 2)]
    assert furthest(positions) == (0, 16)
    assert meeting_point(positions, 3) == (0, 24)  # 16 and 24: 24 is the first that 3 divides
    assert meeting_point(positions, 4) == (0, 16)
    assert meeting_point(positions, 1) == (0, 16)
    assert meeting_point([state(0, 40, 2)], 3) == (1, 0)  # 3 does not divide 40, and 48 is past the 45 samples
    assert meeting_point([state(1, 0, 2)], 7) == (1, 0)  # an epoch's start suits every size
    assert meeting_point([state(0, 8, 2, skip=[3])], 3) is None  # out of order: no single position


@pytest.mark.parametrize(("samples", "old", "new", "batch", "remainder"),
                         [(45, 2, 3, 4, "uneven"), (45, 3, 1, 4, "uneven"), (50, 2, 3, 4, "pad"),
                          (37, 3, 2, 5, "pad"), (64, 4, 6, 2, "drop"), (45, 1, 4, 3, "uneven")])
def test_before_and_after_the_meeting_point_every_sample_is_read_once(samples, old, new, batch, remainder):
    def plan(rank: int, world: int) -> EpochPlan:
        return EpochPlan(samples, LoaderOptions(batch_size=batch, seed=7, rank=rank, world_size=world,
                                                remainder=remainder))
    step = batch * old
    met = 0
    for offset in range(0, plan(0, old).epoch_length, step):  # every old rank has read offset / step batches
        at = meeting_point([state(0, offset, old, samples, batch, remainder)], new)
        assert at is not None and at >= (0, offset)
        if at == (1, 0):
            continue  # the old ranks finish the epoch under their own plan
        met += 1
        assert (at[1] - offset) % step == 0 and at[1] % new == 0
        read = [int(i) for rank in range(old) for i in plan(rank, old).global_order(0)[rank:at[1]:old]]
        after = [plan(rank, new).rank_indices(0, at[1]) for rank in range(new)]
        read += [int(i) for indices in after for i in indices]
        if remainder == "uneven":
            assert sorted(read) == list(range(samples)), offset
        elif remainder == "pad":  # every sample, w − 1 at most twice; every new rank reads as many (DDP)
            assert set(read) == set(range(samples)) and len(read) == samples + (-samples) % new, offset
            assert len({len(indices) for indices in after}) == 1, offset
        else:
            assert len(read) == len(set(read)) == samples - samples % new, offset
    assert met  # some resize met mid-epoch


def test_the_new_ranks_start_at_the_meeting_point_in_the_new_world():
    ranks = resized_positions([state(0, 24, 2), state(0, 24, 2)], (0, 24), 3)
    assert [r["rank"] for r in ranks] == [0, 1, 2]
    for item in ranks:
        assert (item["epoch"], item["offset"]) == (0, 24) and not item["done"]
        assert item["position"]["world_size"] == 3 and item["position"]["offset"] == 24
        assert item["position"]["skip"] == [] and item["position"]["seed"] == 7
    assert not all_at([], (0, 0))
    assert not all_at([state(0, 24, 2), state(0, 16, 2)], (0, 24))
    assert ranks[0]["position"] is not ranks[1]["position"]
