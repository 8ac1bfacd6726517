"""ringfeed.torch's position arithmetic, without a ring: which batches a torch DataLoader with k workers has handed
out (checked against torch's own DataLoader), and the position after them resumes with exactly the rest, in order."""

from __future__ import annotations

import pytest
import torch
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfeed.errors import RingfeedError
from ringfeed.loader import EpochPlan, LoaderOptions
from ringfeed.torch import RingfeedDataLoader, handed_out, position_after, shard_batches


class WorkerBatches(torch.utils.data.IterableDataset):
    """Yields, in DataLoader worker i of k, the batch numbers ``shard_batches`` gives that worker (the rule
    ``LoaderOptions.shard`` applies in the native loader)."""

    def __init__(self, plan: EpochPlan, state: dict):
        self.plan, self.state = plan, state

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        yield from shard_batches(self.plan, self.state, (info.id, info.num_workers) if info else (0, 1))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 3 workers on a 2-core machine
@pytest.mark.parametrize("samples, batch, world, rank, offset_batches, skip, workers", [
    (37, 4, 1, 0, 0, [], 2),        # 10 batches over 2 workers
    (37, 4, 1, 0, 0, [], 3),        # 10 over 3: worker 0 has one more
    (10, 4, 1, 0, 0, [], 3),        # 3 batches, 3 workers: one each
    (7, 4, 1, 0, 0, [], 3),         # 2 batches: worker 2 has none
    (50, 3, 2, 1, 2, [0, 4, 5], 3),  # rank 1 of 2, resumed at an offset, with batches delivered out of order
])
def test_handed_out_is_the_order_of_torchs_own_dataloader(samples, batch, world, rank, offset_batches, skip, workers):
    plan = EpochPlan(samples, LoaderOptions(batch_size=batch, world_size=world, rank=rank, remainder="uneven"))
    state = {"offset": plan.offset_after(0, offset_batches), "skip": skip}
    torch_order = [int(b) for b in torch.utils.data.DataLoader(WorkerBatches(plan, state), batch_size=None,
                                                               num_workers=workers)]
    count = plan.batch_count(state["offset"])
    assert sorted(torch_order) == sorted(set(range(count)) - set(skip))
    for n in range(len(torch_order) + 2):
        assert handed_out(plan, state, workers, n) == torch_order[:n]


def remaining(plan: EpochPlan, epoch: int, state: dict) -> list[list[int]]:
    """The sample indices of the batches still to read from `state`, in order."""
    batches = plan.batches(epoch, state["offset"])
    return [batches[b].tolist() for b in range(len(batches)) if b not in set(state["skip"])]


@settings(max_examples=200, deadline=None)
@given(samples=st.integers(0, 200), batch=st.integers(1, 12), world=st.sampled_from([1, 2, 3]),
       remainder=st.sampled_from(["uneven", "pad", "drop"]), workers=st.integers(0, 4), data=st.data())
def test_the_position_after_the_handed_out_batches_resumes_with_exactly_the_rest(samples, batch, world, remainder,
                                                                                 workers, data):
    rank = data.draw(st.integers(0, world - 1), label="rank")
    plan = EpochPlan(samples, LoaderOptions(batch_size=batch, world_size=world, rank=rank, remainder=remainder,
                                            seed=data.draw(st.integers(0, 2**64 - 1), label="seed")))
    offset = plan.offset_after(0, data.draw(st.integers(0, plan.batch_count(0)), label="offset in batches"))
    count = plan.batch_count(offset)
    skip = sorted(data.draw(st.sets(st.integers(0, max(0, count - 1)), max_size=count), label="skip"))
    state = {"epoch": 3, "offset": offset, "skip": skip}
    consumed = data.draw(st.integers(0, count), label="batches handed out")
    delivered = handed_out(plan, state, workers, consumed)
    after = position_after(plan, state, delivered)
    before = plan.batches(3, offset)
    expected = [before[b].tolist() for b in range(count) if b not in set(skip) | set(delivered)]
    assert remaining(plan, 3, after) == expected
    assert after["epoch"] == 3 and (not after["skip"] or after["skip"][0] > 0)  # no gap left at the offset
    if remainder != "pad":  # pad reads a few samples of the order's start again at its end
        read = {i for b in delivered for i in before[b].tolist()}
        assert not read & {i for rest in expected for i in rest}


def test_a_whole_epoch_handed_out_is_its_end():
    plan = EpochPlan(30, LoaderOptions(batch_size=4, remainder="uneven"))
    state = {"epoch": 0, "offset": 0, "skip": []}
    after = position_after(plan, state, handed_out(plan, state, 2, plan.batch_count(0)))
    assert (after["offset"], after["skip"]) == (30, []) and remaining(plan, 0, after) == []


def test_options_that_lose_the_position_are_refused():
    dataset = WorkerBatches(EpochPlan(1, LoaderOptions()), {"offset": 0, "skip": []})  # refused before it is used
    with pytest.raises(RingfeedError, match="persistent_workers"):
        RingfeedDataLoader(dataset, num_workers=1, persistent_workers=True)  # type: ignore[arg-type]
    with pytest.raises(RingfeedError, match="in_order=False"):
        RingfeedDataLoader(dataset, num_workers=2, in_order=False)  # type: ignore[arg-type]


def test_the_old_name_still_imports_with_a_warning():
    with pytest.warns(DeprecationWarning, match="RingfeedDataLoader"):
        from ringfeed.torch import DataLoader
    assert DataLoader is RingfeedDataLoader
    with pytest.raises(AttributeError):
        import ringfeed.torch

        ringfeed.torch.NoSuchThing  # noqa: B018


def test_stateful_protocols_recognise_both_classes():
    stateful = pytest.importorskip("torchdata.stateful_dataloader").Stateful
    from ringfeed.torch import RingfeedDataset

    assert issubclass(RingfeedDataset, stateful) and issubclass(RingfeedDataLoader, stateful)
