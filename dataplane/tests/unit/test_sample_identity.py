"""Pure parts of sample and split identity: one metadata row per sample, and whether a split fits a dataset."""

import numpy as np

from ringfeed.migration import one_row_per_sample
from ringfeed.splits.storage import membership_problem


def uuids(*values: int) -> np.ndarray:
    return np.array([v.to_bytes(16, "big") for v in values], dtype="S16").view(np.uint8).reshape(-1, 16)


def test_one_row_per_sample_keeps_the_served_label_of_a_relabelled_sample():
    # Old layout: sample 2 was ingested as label 0, then relabelled 1 (two rows); sample 3 the other way round.
    rows = uuids(1, 2, 2, 3, 3, 4)
    labels = np.array([0, 0, 1, 1, 0, 1])
    keep = one_row_per_sample(rows, labels, {uuids(2)[0].tobytes(): 1, uuids(3)[0].tobytes(): 0})
    assert keep.tolist() == [0, 2, 4, 5]


def test_one_row_per_sample_falls_back_to_the_first_row_without_a_served_label():
    keep = one_row_per_sample(uuids(7, 7, 8), np.array([1, 0, 0]), {})
    assert keep.tolist() == [0, 2]


def test_membership_accepts_a_split_of_the_dataset():
    samples = uuids(*range(10))
    assert membership_problem({"train": uuids(0, 1, 2), "val": uuids(5)}, samples) is None


def test_membership_names_foreign_and_repeated_uuids():
    samples = uuids(*range(10))
    assert membership_problem({"train": uuids(0, 11, 12)}, samples) == "2 of its UUIDs are no sample of the dataset"
    assert membership_problem({"train": uuids(0, 1), "val": uuids(1)}, samples) == "1 of its UUIDs appear twice"
    assert membership_problem({"train": uuids(0, 11), "val": uuids(0)}, samples) == (
        "1 of its UUIDs are no sample of the dataset and 1 of its UUIDs appear twice")
