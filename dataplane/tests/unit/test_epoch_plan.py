"""Epoch semantics: exactly once across ranks, elastic global order, resume from a global offset; batch slicing."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfeed.errors import RingfeedError
from ringfeed.loader import EpochPlan, LoaderOptions

WORLD_SIZES = [1, 2, 3, 8]
samples = st.integers(0, 300)
batch_sizes = st.integers(1, 40)
seeds = st.integers(0, 2**64 - 1)


def plan(n, b, **options):
    return EpochPlan(n, LoaderOptions(batch_size=b, **options))


def plans(n, b, w, seed, remainder="uneven", shuffle=True):
    return [plan(n, b, shuffle=shuffle, seed=seed, rank=r, world_size=w, remainder=remainder) for r in range(w)]


def joined(batches):
    return np.concatenate(batches or [np.empty(0, int)])


@settings(max_examples=150, deadline=None)
@given(n=samples, b=batch_sizes, seed=seeds, epoch=st.integers(0, 1000))
def test_every_sample_exactly_once_per_epoch_across_ranks(n, b, seed, epoch):
    for w in WORLD_SIZES:
        delivered = np.concatenate([joined(p.batches(epoch)) for p in plans(n, b, w, seed)])
        assert sorted(delivered.tolist()) == list(range(n)), w
        counts = [len(p.rank_indices(epoch)) for p in plans(n, b, w, seed)]
        assert max(counts) - min(counts) <= 1
        assert counts == [p.rank_samples() for p in plans(n, b, w, seed)]


@settings(max_examples=150, deadline=None)
@given(n=samples, b=batch_sizes, seed=seeds, epoch=st.integers(0, 50))
def test_global_order_does_not_depend_on_world_size(n, b, seed, epoch):
    reference = plan(n, b, seed=seed).global_order(epoch)
    assert sorted(reference.tolist()) == list(range(n))
    for w in WORLD_SIZES:
        ranks = plans(n, b, w, seed)
        # Interleaving the ranks' streams position by position gives back the global order.
        merged = np.empty(n, dtype=reference.dtype)
        for p in ranks:
            merged[p.options.rank :: w] = p.rank_indices(epoch)
        assert np.array_equal(merged, reference)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 300), b=batch_sizes, seed=seeds, epoch=st.integers(0, 50), data=st.data())
def test_resume_yields_exactly_the_remainder(n, b, seed, epoch, data):
    for w in WORLD_SIZES:
        ranks = plans(n, b, w, seed)
        full = [p.batches(epoch) for p in ranks]
        consumed = data.draw(st.integers(0, max(len(batches) for batches in full)), label="batches read")
        offset = ranks[0].offset_after(0, consumed)
        for p, batches in zip(ranks, full, strict=True):
            remainder = joined(batches[consumed:])
            assert np.array_equal(p.rank_indices(epoch, offset), remainder)
            assert p.rank_samples(offset) == len(remainder)
        # Nothing read before the offset comes again, nothing after it was read.
        read = {int(i) for batches in full for batch in batches[:consumed] for i in batch}
        rest = {int(i) for p in ranks for i in p.rank_indices(epoch, offset)}
        assert read.isdisjoint(rest) and read | rest == set(range(n))


@settings(max_examples=100, deadline=None)
@given(n=samples, b=batch_sizes, seed=seeds, data=st.data())
def test_resume_with_another_world_size_is_elastic(n, b, seed, data):
    before, after = data.draw(st.sampled_from(WORLD_SIZES)), data.draw(st.sampled_from(WORLD_SIZES))
    first = plan(n, b, seed=seed, world_size=before, remainder="uneven")
    offset = first.offset_after(0, data.draw(st.integers(0, n // (b * before) + 1)))
    resumed = np.concatenate([p.rank_indices(3, offset) for p in plans(n, b, after, seed)])
    assert sorted(resumed.tolist()) == sorted(first.global_order(3)[offset:].tolist())


@settings(max_examples=100, deadline=None)
@given(n=samples, b=batch_sizes, seed=seeds)
def test_pad_and_drop_give_every_rank_the_same_count(n, b, seed):
    for w in WORLD_SIZES:
        padded = plans(n, b, w, seed, "pad")
        counts = {len(p.rank_indices(0)) for p in padded}
        assert counts == {-(-n // w)}
        delivered = np.concatenate([p.rank_indices(0) for p in padded])
        assert set(delivered.tolist()) == set(range(n)) and len(delivered) - n == (-n) % w

        dropped = plans(n, b, w, seed, "drop")
        assert {len(p.rank_indices(0)) for p in dropped} == {n // w}
        delivered = np.concatenate([p.rank_indices(0) for p in dropped])
        assert len(set(delivered.tolist())) == len(delivered) == n - n % w


def test_epochs_reshuffle_deterministically_and_shuffle_off_keeps_split_order():
    seven = plan(1000, 10, seed=7)
    assert np.array_equal(seven.global_order(0), plan(1000, 10, seed=7).global_order(0))
    assert not np.array_equal(seven.global_order(0), seven.global_order(1))
    assert not np.array_equal(seven.global_order(0), plan(1000, 10, seed=8).global_order(0))
    assert np.array_equal(plan(1000, 10, shuffle=False).global_order(5), np.arange(1000))


@settings(max_examples=150, deadline=None)
@given(n=samples, b=batch_sizes, seed=seeds, epoch=st.integers(0, 50), data=st.data())
def test_batches_slice_the_rank_stream_in_order(n, b, seed, epoch, data):
    for w in WORLD_SIZES:
        for p in plans(n, b, w, seed, data.draw(st.sampled_from(["uneven", "pad", "drop"]), label="remainder")):
            offset = data.draw(st.integers(0, p.epoch_length), label="offset")
            batches = p.batches(epoch, offset)
            assert len(batches) == p.batch_count(offset)
            assert np.array_equal(joined(batches), p.rank_indices(epoch, offset))
            assert all(len(batch) == b for batch in batches[:-1]) and all(0 < len(batch) <= b for batch in batches)


def test_batches_are_full_except_the_last():
    rank_one = plan(103, 10, rank=1, world_size=2, remainder="uneven")
    assert [len(batch) for batch in rank_one.batches(0)] == [10, 10, 10, 10, 10, 1]
    assert rank_one.batch_count() == 6
    # From an offset, the batches start at the rank's first unconsumed position.
    assert [len(batch) for batch in rank_one.batches(0, rank_one.offset_after(0, 2))] == [10, 10, 10, 1]
    assert plan(0, 10).batches(0) == [] and plan(0, 10).batch_count() == 0


def test_samples_below_zero_and_offsets_outside_the_epoch_are_refused():
    with pytest.raises(RingfeedError, match="samples must be zero or more, got -1"):
        plan(-1, 4)
    ten = plan(10, 4)
    with pytest.raises(RingfeedError, match=r"offset 11 is outside the epoch \(0..10\)"):
        ten.rank_indices(0, 11)
    with pytest.raises(RingfeedError, match=r"offset -1 is outside the epoch"):
        ten.batches(0, -1)
    with pytest.raises(RingfeedError, match="epoch must be zero or more"):
        ten.global_order(-1)
