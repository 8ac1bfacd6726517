"""A computed Split stays Ready only while its Dataset, and its stored version made from that dataset, exist. Pure."""

from __future__ import annotations

import dataclasses
import uuid

from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import SplitSpec
from ringfeed.splits.storage import StoredSplit
from ringfeed.store import DatasetInfo
from ringfeed_operator.builders.split import split_readiness

DATASET_ID = uuid.uuid4()
ON_RING = DatasetInfo(DatasetSchema("slides", (Column("path", "text"),), Encoding("png")), None, 10, 1000, {}, {},
                      None, None, dataset_id=DATASET_ID)
STORED = StoredSplit("slides", "by-patient", 2, uuid.uuid4(), None, SplitSpec(ratios=(7, 3), names=("train", "val")),
                     {}, "sha256:0123456789abcdef",
                     {"train": 7, "val": 3}, dataset_id=DATASET_ID)


def test_ready_while_the_dataset_and_the_version_made_from_it_exist():
    assert split_readiness("slides", True, ON_RING, STORED) == (
        True, "Computed", "version 2: 10 samples, hash sha256:01234")


def test_a_deleted_dataset_object_makes_the_split_not_ready():
    ready, reason, message = split_readiness("slides", False, None, None)
    assert (ready, reason) == (False, "DatasetNotFound")
    assert message.startswith("Dataset slides no longer exists") and "ringfeed " not in message


def test_a_dataset_dropped_or_made_again_on_the_ring_makes_the_split_not_ready():
    made_again = dataclasses.replace(ON_RING, dataset_id=uuid.uuid4())
    for on_ring, stored in ((None, None), (ON_RING, None), (made_again, None), (made_again, STORED)):
        ready, reason, message = split_readiness("slides", True, on_ring, stored)
        assert (ready, reason) == (False, "DatasetReplaced")
        assert "delete this Split and create it again" in message


def test_a_dataset_of_the_earlier_layout_asks_for_its_migration():
    legacy = dataclasses.replace(ON_RING, dataset_id=None)
    ready, reason, message = split_readiness("slides", True, legacy, dataclasses.replace(STORED, dataset_id=None))
    assert (ready, reason) == (False, "DatasetNeedsMigration") and "migrated" in message
