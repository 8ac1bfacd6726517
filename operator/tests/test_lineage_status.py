"""A TrainingJob's lineage: the record of what it reads, and the epochs every rank has finished with the digest
their sidecars attest."""

from ringfeed_operator.builders.lineage import EPOCHS_KEPT, lineage_epochs, lineage_record

A, B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def ranks(*epochs: int) -> list[dict]:
    return [{"rank": rank, "epoch": epoch} for rank, epoch in enumerate(epochs)]


def test_the_record_names_the_split_version_the_ingest_and_the_orders_parameters():
    spec = {"split": {"name": "s", "part": "val"}, "replicas": 3,
            "loader": {"seed": 7, "shuffle": True, "remainder": "uneven"}}
    split = {"metadata": {"name": "s"},
             "status": {"version": 2, "splitId": "id-2", "contentHash": "h", "parts": [{"name": "val"}]}}
    dataset = {"status": {"ingest": {"generation": 4}}}
    assert lineage_record(spec, split, dataset, "slides_v1") == {
        "dataset": "slides_v1", "split": "s", "part": "val", "splitVersion": 2, "splitId": "id-2",
        "contentHash": "h", "datasetGeneration": 4, "seed": 7, "shuffle": True, "remainder": "uneven",
        "worldSize": 3}


def test_an_epoch_is_recorded_once_every_rank_has_finished_it():
    reports = {0: {"epoch_digests": {"0": A, "1": B}}, 1: {"epoch_digests": {"0": A}}}
    # rank 1 is still in epoch 1: only epoch 0 is finished by all
    assert lineage_epochs([], ranks(2, 1), reports, world=2) == ([{"epoch": 0, "digest": A}], [])
    # a rank that has not reported yet holds everything back
    assert lineage_epochs([], ranks(2), reports, world=2) == ([], [])
    reports[1]["epoch_digests"]["1"] = B
    assert lineage_epochs([{"epoch": 0, "digest": A}], ranks(2, 2), reports, world=2) == (
        [{"epoch": 0, "digest": A}, {"epoch": 1, "digest": B}], [])


def test_recorded_epochs_stay_when_no_sidecar_reports_them_any_more():
    recorded = [{"epoch": 0, "digest": A}]
    assert lineage_epochs(recorded, ranks(3, 3), {}, world=2) == (recorded, [])


def test_ranks_that_disagree_leave_the_epoch_out_and_say_so():
    reports = {0: {"epoch_digests": {"0": A}}, 1: {"epoch_digests": {"0": B}}}
    assert lineage_epochs([], ranks(1, 1), reports, world=2) == ([], [0])


def test_malformed_reports_are_ignored():
    reports = {0: {"epoch_digests": {"x": A, "0": 5}}, 1: {"epoch_digests": None}}
    assert lineage_epochs([], ranks(1, 1), reports, world=2) == ([], [])


def test_only_the_last_epochs_are_kept():
    recorded = [{"epoch": e, "digest": A} for e in range(EPOCHS_KEPT)]
    reports = {0: {"epoch_digests": {str(EPOCHS_KEPT): B}}}
    kept, _ = lineage_epochs(recorded, ranks(EPOCHS_KEPT + 1), reports, world=1)
    assert len(kept) == EPOCHS_KEPT and kept[0]["epoch"] == 1 and kept[-1] == {"epoch": EPOCHS_KEPT, "digest": B}
