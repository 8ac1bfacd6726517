"""Lineage: which samples a job consumed in an epoch, and in which order, as one digest.

An epoch's global order (``EpochPlan.global_order``) is what the ranks of a job consume between them: rank r of w
takes its positions r, r + w, … of it, and a resume or a restart goes on along the same order. The sha256 over the
UUIDs in that order therefore identifies everything the job read in the epoch, whichever rank computes it. Two jobs
on the same Split version with the same seed, shuffle and remainder policy show the same digest; the world size
changes it only under ``pad`` and ``drop`` (which extend or cut the order to a multiple of it). Samples skipped as
missing or corrupt are counted beside it (TrainingJob status), not left out of it.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ringfeed.loader.plan import EpochPlan

DIGEST_PREFIX = "sha256:"


def epoch_order(uuids: np.ndarray, plan: EpochPlan, epoch: int) -> np.ndarray:
    """The UUIDs (uint8, shape (n, 16)) of `epoch` in the order the job's ranks consume them between them."""
    return uuids[plan.global_order(epoch)]


def epoch_digest(uuids: np.ndarray, plan: EpochPlan, epoch: int) -> str:
    """``sha256:<hex>`` over the 16-byte UUIDs of `epoch`, in the job's order."""
    return order_digest(epoch_order(uuids, plan, epoch))


def order_digest(ordered: np.ndarray) -> str:
    """``sha256:<hex>`` over UUIDs (uint8, shape (n, 16)) in the given order."""
    return DIGEST_PREFIX + hashlib.sha256(np.ascontiguousarray(ordered, dtype=np.uint8).tobytes()).hexdigest()
