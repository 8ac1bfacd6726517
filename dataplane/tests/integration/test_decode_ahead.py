"""Decoding ahead of the training loop (``tensors(feed, ahead=N)``, ``Feed.prefetch``) against a real sidecar: the
same batches in the same order as decoding in the loop, each still valid after the next, and the feed's position
that of the loop's batch, so a loop left early, a checkpoint taken mid-epoch or a failing decode loses and repeats
nothing. The trainer's decode runs on the CPU here; a GPU run takes the same path with a CUDA stream."""

from __future__ import annotations

import time

import numpy as np
import pytest
import test_serve
from test_serve import epoch, train_uuids, uuids_of

from ringfeed_client import Feed

pytest.importorskip("torchvision")
from ringfeed_client.torch import tensors  # noqa: E402 (needs torchvision for the trainer's decode)

slides, sidecars = test_serve.slides, test_serve.sidecars  # the sidecar's fixtures
RANDOM_CROPS = ("--decode", "32x40", "--resize", "random", "--seed", "5")
DEFERRED = (*RANDOM_CROPS, "--decode-device", "gpu")  # stored bytes and boxes: the trainer decodes


def trained(feed: Feed, ahead: int, stop_after: int | None = None,
            step_s: float = 0.0) -> tuple[list[tuple], list[dict]]:
    """The loop's batches as numpy arrays (in place when decoded ahead: each must outlive the next), and the feed's
    position seen inside the loop after each training step of `step_s` (the thread runs ahead meanwhile)."""
    batches, states = [], []
    loop = tensors(feed, device="cpu", ahead=ahead)
    for x, y, uuids in loop:
        batch = (x.numpy(), y.numpy(), uuids.numpy())
        batches.append(batch if ahead else tuple(a.copy() for a in batch))
        time.sleep(step_s)
        states.append(feed.state_dict())
        if len(batches) == stop_after:
            loop.close()  # type: ignore[attr-defined]  # what leaving a for loop early does to a generator
            break
    return batches, states


def same(got: list[tuple], expected: list[tuple]) -> bool:
    return len(got) == len(expected) and all(
        all(np.array_equal(a, b) for a, b in zip(g, e, strict=True)) for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize("ahead", [1, 3])
@pytest.mark.parametrize("flags", [DEFERRED, RANDOM_CROPS], ids=["trainer-decodes", "sidecar-decodes"])
def test_batches_decoded_ahead_are_the_loops_own_in_its_order_with_its_position(slides, sidecars, flags, ahead):
    reference = Feed(sidecars(*flags, "--epochs", "2").directory, with_uuids=True)
    feed = Feed(sidecars(*flags, "--epochs", "2").directory, with_uuids=True)
    for _ in range(2):
        expected, _ = trained(reference, ahead=0)
        total = len(expected)
        left = []
        batches = []
        for x, y, uuids in tensors(feed, device="cpu", ahead=ahead):
            batches.append((x.numpy(), y.numpy(), uuids.numpy()))
            left.append((len(batches), len(feed)))
        assert same(batches, expected)
        assert sorted(uuids_of(batches)) == train_uuids(slides)
        assert left == [(seen, total - seen) for seen in range(1, total + 1)]  # the loop's, not the thread's
        assert feed.epoch == reference.epoch
    assert feed.stats.batches == reference.stats.batches and feed.stats.samples == reference.stats.samples
    assert feed.state_dict() == reference.state_dict()
    assert list(tensors(feed, device="cpu", ahead=ahead)) == []  # done


@pytest.mark.parametrize("ahead", [1, 3])
@pytest.mark.parametrize("stop_after", [1, 4, 9])
@pytest.mark.parametrize("resume", ["same-feed", "checkpoint"])
def test_a_loop_left_early_hands_the_sidecar_back_its_position(slides, sidecars, ahead, stop_after, resume):
    expected, expected_states = trained(Feed(sidecars(*DEFERRED).directory, with_uuids=True), ahead=0)
    assert len(expected) > stop_after + ahead + 1  # the thread had batches of its own when the loop left
    sidecar = sidecars(*DEFERRED)
    feed = Feed(sidecar.directory, with_uuids=True)
    first, states = trained(feed, ahead, stop_after=stop_after, step_s=0.05)
    assert states == expected_states[:stop_after]  # a checkpoint inside the loop: the loop's position
    checkpoint = feed.state_dict()
    assert checkpoint == expected_states[stop_after - 1]
    if resume == "checkpoint":  # the trainer restarted from the checkpoint
        feed.close()
        feed = Feed(sidecar.directory, with_uuids=True)
        feed.load_state_dict(checkpoint)
    rest, _ = trained(feed, ahead)
    assert same(first + rest, expected)


def test_a_failing_decode_reaches_the_loop_and_the_batches_after_the_last_handed_are_served_again(slides, sidecars):
    expected = epoch(Feed(sidecars(*DEFERRED).directory, with_uuids=True))
    feed = Feed(sidecars(*DEFERRED).directory, with_uuids=True)
    prepared = 0

    def prepare(batch: tuple) -> tuple:
        nonlocal prepared
        prepared += 1
        if prepared == 4:
            raise RuntimeError("decoder failed")
        return tuple(np.array(item) if isinstance(item, np.ndarray) else item for item in batch)

    handed = []
    with pytest.raises(RuntimeError, match="decoder failed"):
        for batch in feed.prefetch(prepare, depth=2):
            handed.append(batch)
    assert len(handed) == 3 and uuids_of(handed) == uuids_of(expected[:3])
    assert uuids_of(handed) + uuids_of(epoch(feed)) == uuids_of(expected)
