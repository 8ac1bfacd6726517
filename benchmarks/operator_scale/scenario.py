"""The benchmark's load: triples created kind by kind (Datasets Ready, their splits stored, Splits computed,
TrainingJobs Running), and churn (a share of the triples deleted and created again each minute)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client

from ringfeed.errors import RingfeedError
from ringfeed.store import Store

from kubecluster import GROUP, VERSION
from operator_scale import objects
from operator_scale.objects import Triple
from operator_scale.timeline import Timeline

PLURALS = ("datasets", "splits", "trainingjobs")
CHURN_TIMEOUT_S = 120  # a churned object not there by then is counted missing, and the round goes on
CREATORS = 8  # concurrent create calls: the burst a CI pipeline or a sweep submits
# Deleting in the foreground: an object is gone only once what it owns (Jobs, Pods, Services) is, so a triple made
# again under the same names never meets the previous one's Job.
FOREGROUND = client.V1DeleteOptions(propagation_policy="Foreground")


def progress(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)


class Scenario:
    def __init__(self, api: client.ApiClient, timeline: Timeline, store: Store, hosts: list[str], run_id: str,
                 trainer_image: str, timeout_s: float, on_burst: Callable[[str, str], None] = lambda *_: None):
        self._custom = client.CustomObjectsApi(api)
        self._timeline, self._store, self._hosts, self._run_id = timeline, store, hosts, run_id
        self._image, self.timeout_s = trainer_image, timeout_s
        self._pool = ThreadPoolExecutor(CREATORS)
        self.missing: dict[str, int] = {}  # by phase/kind: objects that did not get there within timeout_s
        self.rounds: list[dict] = []
        self.bursts: list[dict] = []  # each kind's create calls: phase, kind, objects, start and end (monotonic)
        self._on_burst = on_burst  # called with (phase, kind) as a kind's create calls begin

    def manifest(self, plural: str, triple: Triple) -> dict:
        if plural == "datasets":
            return objects.dataset(triple, self._hosts, self._run_id)
        if plural == "splits":
            return objects.split(triple, self._run_id)
        return objects.trainingjob(triple, self._run_id, self._image)

    def create(self, plural: str, triples: list[Triple], phase: str) -> list[str]:
        """Create one object per triple, CREATORS at a time; → their uids."""
        def one(triple: Triple) -> str:
            started = time.time()
            made = self._custom.create_namespaced_custom_object(GROUP, VERSION, triple.namespace, plural,
                                                                self.manifest(plural, triple))
            self._timeline.created(plural, made, phase, started, time.time())
            return made["metadata"]["uid"]
        self._on_burst(phase, plural)
        start = time.monotonic()
        uids = list(self._pool.map(one, triples))
        self.bursts.append({"phase": phase, "kind": plural, "objects": len(uids), "start": start,
                            "end": time.monotonic()})
        return uids

    def create_ready(self, plural: str, triples: list[Triple], phase: str) -> None:
        started = time.monotonic()
        uids = self.create(plural, triples, phase)
        missing = self._timeline.wait(uids, "ready", self.timeout(phase))
        self._note(phase, plural, missing)
        progress(f"{phase}: {len(uids) - len(missing)} of {len(uids)} {plural} Ready in "
                 f"{time.monotonic() - started:.0f} s")

    def timeout(self, phase: str) -> float:
        return min(self.timeout_s, CHURN_TIMEOUT_S) if phase.startswith("churn") else self.timeout_s

    def build(self, triples: list[Triple], phase: str) -> None:
        """Datasets, then (their splits stored as the split Jobs would) Splits, then TrainingJobs."""
        self.create_ready("datasets", triples, phase)
        list(self._pool.map(self._store_split, triples))
        self.create_ready("splits", triples, phase)
        self.create_ready("trainingjobs", triples, phase)

    def _store_split(self, triple: Triple) -> None:
        try:
            objects.store_split(self._store, triple)
        except RingfeedError:  # its Dataset never made its tables: its Split will say so
            self._note("store-split", "datasets", [triple.dataset])

    def delete(self, plural: str, triples: list[Triple]) -> list[Triple]:
        """Delete one object per triple; → the triples whose object is gone within the churn timeout."""
        names = [t.name(plural) for t in triples]
        uids = [self._timeline.latest(plural, t.namespace, name) for t, name in zip(triples, names, strict=True)]
        list(self._pool.map(lambda t, name: self._custom.delete_namespaced_custom_object(
            GROUP, VERSION, t.namespace, plural, name, body=FOREGROUND), triples, names))
        left = set(self._timeline.wait(uids, "gone", self.timeout("churn")))
        self._note("churn-delete", plural, list(left))
        return [t for t, uid in zip(triples, uids, strict=True) if uid not in left]

    def churn(self, triples: list[Triple], fraction: float, duration_s: float) -> None:
        """Each minute, the next `fraction` of the triples deleted (TrainingJob, Split, Dataset: the deletion
        guards' order) and created again; a round that takes longer than its minute delays the next. A triple is
        created again only once all three of its objects are gone (the others are counted missing)."""
        share = max(1, math.ceil(fraction * len(triples)))
        end, turn = time.monotonic() + duration_s, 0
        while time.monotonic() < end:
            started = time.monotonic()
            batch = [triples[(turn * share + i) % len(triples)] for i in range(share)]
            gone = batch
            for plural in reversed(PLURALS):
                gone = self.delete(plural, gone)
            deleted = time.monotonic()
            for plural in PLURALS:
                if gone:
                    self.create_ready(plural, gone, "churn")
            self.rounds.append({"triples": share, "recreated": len(gone), "delete_s": round(deleted - started, 1),
                                "create_s": round(time.monotonic() - deleted, 1)})
            turn += 1
            time.sleep(max(0.0, min(started + 60 - time.monotonic(), end - time.monotonic())))

    def _note(self, phase: str, plural: str, missing: list[str]) -> None:
        if missing:
            key = f"{phase}/{plural}"
            self.missing[key] = self.missing.get(key, 0) + len(missing)
