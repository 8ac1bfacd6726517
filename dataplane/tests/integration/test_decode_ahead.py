"""Decoding ahead of the training loop (``tensors(feed, ahead=N)``, ``Feed.prefetch``) against a real sidecar: the
same batches in the same order as decoding in the loop, each still valid after the next, and the feed's position
that of the loop's batch, so a loop left early, a checkpoint taken mid-epoch or a failing decode loses and repeats
nothing; the sidecar keeps the loop's position too (a pause waits for the loop, a killed trainer's successor starts
where its loop was). The trainer's decode runs on the CPU here; a GPU run takes the same path with a CUDA
stream."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import test_serve
from test_serve import BATCH, copied, epoch, train_uuids, uuids_of

from ringfeed_client import Feed
from ringfeed_client.protocol import FeedError

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
        return copied(batch)

    handed = []
    with pytest.raises(RuntimeError, match="decoder failed"):
        for batch in feed.prefetch(prepare, depth=2):
            handed.append(batch)
    assert len(handed) == 3 and uuids_of(handed) == uuids_of(expected[:3])
    assert uuids_of(handed) + uuids_of(epoch(feed)) == uuids_of(expected)


def test_the_thread_prepares_the_next_epochs_first_batches_while_the_loop_is_between_epochs(slides, sidecars):
    """The loop comes back for the next epoch to batches decoded meanwhile (the step on an epoch's first batch no
    longer waits for its decode); the feed's position, its length and the sidecar's report between epochs are the
    loop's, and no batch is served twice."""
    reference = Feed(sidecars(*RANDOM_CROPS, "--epochs", "3").directory, with_uuids=True)
    sidecar = sidecars(*RANDOM_CROPS, "--epochs", "3")
    feed = Feed(sidecar.directory, with_uuids=True)
    prepared = 0

    def prepare(batch: tuple) -> tuple:
        nonlocal prepared
        prepared += 1
        return copied(batch)

    for _ in range(3):
        expected = epoch(reference)
        taken = []
        for batch in feed.prefetch(prepare, depth=2):
            taken.append(batch)
            time.sleep(0.02)  # a training step: the thread waits with the epoch's last batches queued
        assert same(taken, expected)
        assert (feed.state_dict(), len(feed), feed.epoch) == (reference.state_dict(), len(reference),
                                                              reference.epoch)
        deadline = time.monotonic() + 30
        ahead = 3 if reference.epoch < 3 else 0  # two queued, a third in hand: the thread goes no further
        while prepared < feed.stats.batches + ahead:
            assert time.monotonic() < deadline, (prepared, feed.stats.batches)
            time.sleep(0.01)
        while at((report := sidecar.report())["position"]) != at(feed.state_dict()):  # the loop's, not the thread's
            assert time.monotonic() < deadline, (report, feed.state_dict())
            time.sleep(0.01)
        assert report["batches_served"] == prepared == feed.stats.batches + ahead
    assert all(list(feed.prefetch(prepare, depth=2)) == [] for _ in range(3))  # done, every time
    assert sidecar.report()["batches_served"] == feed.stats.batches == reference.stats.batches


def test_the_next_epoch_through_tensors_continues_the_thread_and_serves_no_batch_twice(slides, sidecars):
    reference = Feed(sidecars(*DEFERRED, "--epochs", "2").directory, with_uuids=True)
    sidecar = sidecars(*DEFERRED, "--epochs", "2")
    feed = Feed(sidecar.directory, with_uuids=True)
    for _ in range(2):
        expected, _ = trained(reference, ahead=0)
        got, _ = trained(feed, ahead=2)
        assert same(got, expected)
    assert sidecar.report()["batches_served"] == feed.stats.batches == reference.stats.batches


def thread_went_on(sidecar, feed: Feed) -> None:
    """Wait until the prefetch thread has taken two batches of the next epoch, as it does between epochs."""
    deadline = time.monotonic() + 30
    while sidecar.report()["batches_served"] < feed.stats.batches + 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.mark.parametrize("then", ["iterate", "another-depth", "another-device", "load-state", "load-another-state",
                                  "close-and-continue", "close-and-reopen", "drop-and-reopen"])
def test_anything_else_between_epochs_gets_the_batches_the_thread_took_served_again(slides, sidecars, then):
    """Between epochs the thread holds the next epoch's first batches; a trainer that does something else with the
    feed first (or leaves, closing it or not, and another one takes over) still gets the whole next epoch, in its
    order, or exactly what follows the position it loads."""
    reference = Feed(sidecars(*DEFERRED, "--epochs", "2").directory, with_uuids=True)
    (first_expected, first_states), (second_expected, _) = trained(reference, ahead=0), trained(reference, ahead=0)
    sidecar = sidecars(*DEFERRED, "--epochs", "2")
    feed = Feed(sidecar.directory, with_uuids=True)
    first, _ = trained(feed, ahead=2)
    assert same(first, first_expected)
    thread_went_on(sidecar, feed)
    expected = second_expected
    if then == "iterate":
        second, _ = trained(feed, ahead=0)  # the feed itself, decoded in the loop
    elif then == "another-depth":
        second, _ = trained(feed, ahead=1)
    elif then == "another-device":
        second = [tuple(t.numpy() for t in batch) for batch in tensors(feed, device="cpu:0", ahead=2)]
    elif then == "load-state":
        feed.load_state_dict(feed.state_dict())
        second, _ = trained(feed, ahead=2)
    elif then == "load-another-state":  # back to a checkpoint of the first epoch
        feed.load_state_dict(first_states[2])
        second, expected = trained(feed, ahead=2)[0], first_expected[3:]
    elif then == "close-and-continue":
        checkpoint = feed.state_dict()
        feed.close()
        assert feed.state_dict() == checkpoint  # the loop's position, not the thread's
        second, _ = trained(feed, ahead=2)
    else:
        checkpoint = feed.state_dict()
        if then == "close-and-reopen":
            feed.close()
            assert at(sidecar.report()["position"]) == at(checkpoint)
        del feed  # dropped (drop-and-reopen): its thread must not keep it, nor its connection
        successor: list = []
        take = threading.Thread(target=lambda: successor.extend(
            trained(Feed(sidecar.directory, with_uuids=True), ahead=0)[0]), daemon=True)
        take.start()
        take.join(timeout=60)
        assert not take.is_alive(), "the next trainer's feed waits for the one dropped"
        second = successor
    assert same(second, expected)


def test_a_loop_decoding_ahead_of_a_feed_closed_under_it_ends_with_a_clear_error(slides, sidecars):
    expected, expected_states = trained(Feed(sidecars(*DEFERRED).directory, with_uuids=True), ahead=0)
    feed = Feed(sidecars(*DEFERRED).directory, with_uuids=True)
    loop = tensors(feed, device="cpu", ahead=2)
    taken = [tuple(t.numpy() for t in next(loop)) for _ in range(3)]
    feed.close()  # a signal's handler, say, while the loop is suspended
    assert feed.state_dict() == expected_states[2]
    with pytest.raises(FeedError, match="closed"):
        next(loop)
    rest, _ = trained(feed, ahead=2)
    assert same(taken + rest, expected)


def test_a_feed_whose_loop_decodes_ahead_refuses_a_second_loop_or_a_new_position_until_it_ends(slides, sidecars):
    expected = epoch(Feed(sidecars(*RANDOM_CROPS).directory, with_uuids=True))
    feed = Feed(sidecars(*RANDOM_CROPS).directory, with_uuids=True)
    got = []
    for batch in feed.prefetch(copied, depth=2):
        got.append(batch)
        if len(got) == 2:
            start = feed.state_dict()
            with pytest.raises(FeedError, match="being prefetched"):
                next(iter(feed))
            with pytest.raises(FeedError, match="being prefetched"):
                next(feed.prefetch(copied, depth=2))
            with pytest.raises(FeedError, match="being prefetched"):
                feed.load_state_dict(start)
            assert feed.state_dict() == start
    assert same(got, expected)


def at(position: dict) -> tuple[int, int]:
    return position["epoch"], position["offset"]


def test_the_sidecar_keeps_and_reports_the_loops_position_not_the_threads(slides, sidecars):
    """What the operator keeps over a suspension or a resize (``/status``' position) and where a restarted sidecar
    starts (state.json) is the loop's position, never ahead of it, though the thread has taken batches beyond."""
    sidecar = sidecars(*DEFERRED)
    feed = Feed(sidecar.directory, with_uuids=True)
    seen = []
    for _ in tensors(feed, device="cpu", ahead=3):
        time.sleep(0.05)  # a training step: the thread runs ahead meanwhile
        report = sidecar.report()
        saved = json.loads((sidecar.feeds[0] / "state.json").read_text())
        seen.append((at(feed.state_dict()), at(report["position"]), (report["epoch"], report["offset"]), at(saved),
                     report["batches_served"] - feed.stats.batches))
    end = len(train_uuids(slides))  # after an epoch's last batch is where the next one starts

    def settled(loop: tuple[int, int]) -> tuple[int, int]:
        return (loop[0] + 1, 0) if loop[1] >= end else loop

    assert all(reported <= settled(loop) and status <= settled(loop) and saved <= settled(loop)
               for loop, reported, status, saved, _ in seen)
    assert max(ahead for *_, ahead in seen) >= 2  # the thread was ahead of the loop: the case was there
    deadline = time.monotonic() + 10  # after the last batch the thread tells the sidecar within a poll
    while at((report := sidecar.report())["position"]) != (1, 0):
        assert time.monotonic() < deadline, report
        time.sleep(0.01)
    assert (report["epoch"], report["offset"]) == at(feed.state_dict()) == (1, 0)


def test_a_pause_at_a_position_holds_the_trainer_done_only_once_its_loop_has_taken_every_batch(slides, sidecars,
                                                                                               tmp_path):
    """A resize's barrier with a trainer decoding ahead: the operator sees `trainer_held` (and moves the job on)
    only when the loop itself has taken the batches up to the position, not when the thread asks beyond them."""
    (tmp_path / "token").write_text("s3cret-token")
    flags = (*DEFERRED, "--rank", "0", "--world-size", "2")
    expected = epoch(Feed(sidecars(*flags).directory, with_uuids=True))
    sidecar = sidecars(*flags, "--control-token-file", str(tmp_path / "token"))
    feed = Feed(sidecar.directory, with_uuids=True)
    taken: list[np.ndarray] = []

    def train() -> None:
        for _, _, uuids in tensors(feed, device="cpu", ahead=3):
            taken.append(uuids.numpy())
            time.sleep(0.1)  # the step on it

    trainer = threading.Thread(target=train, daemon=True)  # a failed test must not keep the session
    trainer.start()
    while not taken:
        time.sleep(0.01)
    assert sidecar.post("/pause", "s3cret-token")[0] == 200  # frozen first, as the operator does
    target = 10
    assert sidecar.post("/pause", "s3cret-token", {"epoch": 0, "offset": target * BATCH * 2})[0] == 200
    deadline, behind = time.monotonic() + 60, 0
    while not (report := sidecar.report())["trainer_held"]:
        behind = max(behind, report["batches_served"] - len(taken))
        assert time.monotonic() < deadline, report
        time.sleep(0.02)
    assert len(taken) == target and at(report["position"]) == (0, target * BATCH * 2)
    assert behind >= 2  # the thread had asked beyond the loop while the loop went on to the position
    assert sidecar.post("/resume", "s3cret-token")[0] == 200
    trainer.join(timeout=60)
    assert not trainer.is_alive()
    assert uuids_of([(None, None, u) for u in taken]) == uuids_of(expected)


TRAINER = """
import sys, time
from ringfeed_client import Feed
from ringfeed_client.torch import tensors

for _, _, uuids in tensors(Feed(sys.argv[1], with_uuids=True), device="cpu", ahead=3):
    print(uuids.numpy().tobytes().hex(), flush=True)
    time.sleep(0.1)
"""


def test_a_trainer_killed_while_its_thread_was_ahead_loses_no_batch_to_the_next_one(slides, sidecars):
    """No checkpoint: the next trainer of the Pod starts where the sidecar placed the killed one's loop. At most the
    batches the loop took since its thread last asked (the thread's queue and one more) are served again."""
    sidecar = sidecars(*DEFERRED)
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(sidecar.directory)], stdout=subprocess.PIPE,
                               text=True)
    assert trainer.stdout is not None
    lines = [trainer.stdout.readline() for _ in range(5)]
    trainer.kill()
    lines += trainer.stdout.readlines()
    trainer.wait()
    trained = [bytes.fromhex(line.strip()) for line in lines if line.strip()]
    trained_uuids = [batch[i:i + 16] for batch in trained for i in range(0, len(batch), 16)]
    rest = uuids_of(epoch(Feed(sidecar.directory, with_uuids=True)))
    assert set(trained_uuids) | set(rest) == set(train_uuids(slides))  # nothing lost
    assert len(set(trained_uuids) & set(rest)) <= (3 + 1) * BATCH


def test_a_loop_left_while_the_sidecar_holds_its_thread_ends_at_once_and_resumes_after(slides, sidecars, tmp_path):
    """Paused (a suspension coming), the thread's request waits in the sidecar: a signal that ends the training
    loop (SIGTERM's handler, Ctrl-C) does not wait for the pause to end, and the feed stays at the loop's batch."""
    (tmp_path / "token").write_text("s3cret-token")
    expected, expected_states = trained(Feed(sidecars(*DEFERRED).directory, with_uuids=True), ahead=0)
    sidecar = sidecars(*DEFERRED, "--control-token-file", str(tmp_path / "token"))
    feed = Feed(sidecar.directory, with_uuids=True)
    loop = tensors(feed, device="cpu", ahead=2)
    taken = [tuple(t.numpy() for t in next(loop))]
    assert sidecar.post("/pause", "s3cret-token")[0] == 200

    class Leave(Exception):
        pass

    def leave(*_) -> None:
        raise Leave

    previous = signal.signal(signal.SIGALRM, leave)
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    started = time.monotonic()
    try:
        with pytest.raises(Leave):
            for x, y, uuids in loop:
                taken.append((x.numpy(), y.numpy(), uuids.numpy()))
        loop.close()  # type: ignore[attr-defined]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 10
    assert feed.state_dict() == expected_states[len(taken) - 1]
    assert sidecar.post("/resume", "s3cret-token")[0] == 200
    rest, _ = trained(feed, ahead=2)
    assert same(taken + rest, expected)
