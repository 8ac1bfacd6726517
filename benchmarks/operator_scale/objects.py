"""The benchmark's objects: triples of a Dataset on the external ring (with an ingest, so it has a Job), a Split of it
and a TrainingJob reading the Split, spread over a few namespaces; and what a split Job would have stored.

No Job runs for real (kwok plays their Pods), so nothing writes a split into the ring. The benchmark stores, before it
creates a Split, what that Split's Job would have stored: the engine's split of a small synthetic table under the
Split's parameters, written with the data plane's own `save_split`. The operator then reads a real stored split.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ringfeed.splits import SplitSpec
from ringfeed.splits.engine import compute_split
from ringfeed.splits.storage import save_split
from ringfeed.store import Store
from ringfeed.table import ColumnarTable

from kubecluster import GROUP, VERSION
from operator_scale.timeline import LABEL

CREDENTIALS = "ring-credentials"
SPLIT_RATIOS, SPLIT_NAMES, SPLIT_SEED = (9, 1), ("train", "val"), 1
SYNTHETIC_ROWS = 64  # the stored split's size: the operator reads its header only


@dataclasses.dataclass(frozen=True)
class Triple:
    namespace: str
    index: int

    @property
    def dataset(self) -> str:  # unique across namespaces: the name is the keyspace, and all share one ring
        return f"d{self.index:05d}"

    @property
    def split(self) -> str:
        return f"s{self.index:05d}"

    @property
    def trainingjob(self) -> str:
        return f"t{self.index:05d}"

    def name(self, plural: str) -> str:
        return {"datasets": self.dataset, "splits": self.split, "trainingjobs": self.trainingjob}[plural]


def triples(count: int, namespaces: list[str], first: int = 0) -> list[Triple]:
    return [Triple(namespaces[i % len(namespaces)], i) for i in range(first, first + count)]


def _meta(name: str, run_id: str) -> dict:
    return {"name": name, "labels": {LABEL: run_id}}


def dataset(triple: Triple, hosts: list[str], run_id: str) -> dict:
    """On the external ring, with a login Secret (as a production ring has) and an ingest from a folder of the
    node (never read: kwok plays the Job's Pod)."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Dataset", "metadata": _meta(triple.dataset, run_id),
            "spec": {
                "storage": {"external": {"contactPoints": hosts, "localDatacenter": "datacenter1",
                                         "credentialsSecret": {"name": CREDENTIALS}}},
                "schema": {"naturalKeys": [{"name": "path", "type": "text"}], "encoding": {"kind": "jpeg"},
                           "labelNames": ["a", "b"], "metadataByUuid": False},
                "ingest": {"source": {"volume": {"hostPath": {"path": "/var/empty"}}, "path": "manifest.csv"},
                           "format": "manifest"}}}


def split(triple: Triple, run_id: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Split", "metadata": _meta(triple.split, run_id),
            "spec": {"dataset": triple.dataset, "ratios": list(SPLIT_RATIOS), "names": list(SPLIT_NAMES),
                     "seed": SPLIT_SEED}}


def trainingjob(triple: Triple, run_id: str, image: str) -> dict:
    """One rank; the trainer never starts (kwok), so its image only has to be a valid reference."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": _meta(triple.trainingjob, run_id),
            "spec": {"split": {"name": triple.split, "part": "train"}, "replicas": 1, "epochs": 1,
                     "loader": {"batchSize": 8},
                     "template": {"spec": {"containers": [{"name": "trainer", "image": image,
                                                           "command": ["python", "train.py"]}]}}}}


def store_split(store: Store, triple: Triple) -> None:
    """What the Split's Job would store: the split of a synthetic table under the Split's parameters."""
    rng = np.random.default_rng(triple.index)
    table = ColumnarTable({"uuid": rng.integers(0, 256, (SYNTHETIC_ROWS, 16), dtype=np.uint8),
                           "label": rng.integers(0, 2, SYNTHETIC_ROWS).astype(np.int64)})
    spec = SplitSpec(ratios=SPLIT_RATIOS, names=SPLIT_NAMES, seed=SPLIT_SEED)
    save_split(store, triple.dataset, triple.split, spec, compute_split(table, spec, ("a", "b")))
