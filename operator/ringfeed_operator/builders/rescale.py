"""A running TrainingJob resized (spec.replicas changed): where its ranks meet, and the new ranks' positions. Pure.

An epoch's global order does not depend on the world size (ringfeed/loader/plan.py): rank r of w reads the
positions offset + r, offset + r + w, ... . After k batches of b samples on every rank, the positions
[offset, offset + k·b·w) are consumed, and a rank's position is that one number. The ranks of a resize therefore
stop at one global position T (the sidecars' pause at a position: those behind go on to it), and the new ranks start
there, with the new world size, each sample of the epoch still read exactly once.

T is the first position the old ranks can stop at (a whole number of batch rounds past the furthest rank) that the
new world size divides: from there every new rank reads as many samples of the epoch (with remainder pad, DDP's
collectives need it). Where no such position comes before the epoch's last sample, T is the next epoch's start."""

from __future__ import annotations


def furthest(positions: list[dict]) -> tuple[int, int]:
    """The (epoch, offset) furthest among the ranks' positions."""
    return max((position["epoch"], position["offset"]) for position in positions)


def meeting_point(positions: list[dict], new_world: int) -> tuple[int, int] | None:
    """Where the ranks at ``positions`` (each rank's loader state) stop for a resize to ``new_world`` ranks; None
    when a rank delivered batches out of order (its state has ``skip``: no single position describes it)."""
    if any(position.get("skip") for position in positions):
        return None
    state = positions[0]
    samples, remainder = state["samples"], state["remainder"]
    step = state["batch_size"] * state["world_size"]
    last = samples - samples % new_world if remainder == "drop" else samples  # positions past it are no sample
    epoch, offset = furthest(positions)
    while offset < last:
        if offset % new_world == 0:
            return epoch, offset
        offset += step
    return epoch + 1, 0


def resized_positions(positions: list[dict], at: tuple[int, int], new_world: int) -> list[dict]:
    """The new ranks' positions: every one at ``at``, in a world of ``new_world``."""
    epoch, offset = at
    state = {**positions[0], "epoch": epoch, "offset": offset, "skip": [], "world_size": new_world}
    return [{"rank": rank, "epoch": epoch, "offset": offset, "samplesDelivered": 0, "corrupt": 0, "missing": 0,
             "trainerWaitSeconds": 0.0, "done": False, "position": dict(state)} for rank in range(new_world)]


def all_at(positions: list[dict], at: tuple[int, int]) -> bool:
    return bool(positions) and all((position["epoch"], position["offset"]) == tuple(at) for position in positions)
