"""UUIDs derive from dataset + typed natural key: stable across runs, distinct across datasets and types."""

import uuid

from ringfeed.ids import SAMPLE_NAMESPACE, sample_uuid


def test_namespace_is_the_documented_constant():
    assert SAMPLE_NAMESPACE == uuid.uuid5(uuid.NAMESPACE_URL, "https://ringfeed.io/sample")


def test_same_key_same_uuid_and_it_never_changes():
    assert sample_uuid("slides", ("P001", 2, 96, 192)) == sample_uuid("slides", ("P001", 2, 96, 192))
    # Pinned: a change here would silently re-key every stored dataset.
    assert str(sample_uuid("slides", ("P001", 2, 96, 192))) == str(
        uuid.uuid5(SAMPLE_NAMESPACE, '["slides","P001",2,96,192]'))


def test_uuid_depends_on_dataset_values_and_types():
    base = sample_uuid("slides", ("P001", 2))
    assert sample_uuid("other", ("P001", 2)) != base
    assert sample_uuid("slides", ("P001", 3)) != base
    assert sample_uuid("slides", ("P001", "2")) != base
    assert sample_uuid("slides", ("P0012",)) != sample_uuid("slides", ("P001", 2))


def test_uuid_is_version_5():
    assert sample_uuid("d", ("k",)).version == 5
