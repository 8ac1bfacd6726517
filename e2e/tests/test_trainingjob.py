"""TrainingJob on the real local cluster: a real PyTorch trainer (images/trainer), two Pods of two local ranks each,
fed by the injected loader sidecar from a real Cassandra node, through the Pod network; restarts of a trainer and of
a sidecar mid-epoch; credentials kept from the trainer; refusals; suspend and resume.

The chart, the ring (the node IP's Cassandra node) and the samples are conftest's module fixtures, made again for
this module; this module creates the Dataset and Split it trains on.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
import uuid

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from probes import attempts_from, check_isolated
from ringfeed.splits import load_split

from conftest import CUDA_CLAIM, host_directory_claim
from kubecluster import CACHE, GROUP, REPO, STATE, VERSION, Cluster
from test_operator import condition, create, dataset_manifest, events, get, wait_ready

DATASET, SPLIT = "tj-slides", "tj-by-patient"
# What the restricted Pod Security level asks of every container of the trainer's Pods (the trainer image's user).
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
PASSWORD = "tj-e2e-password-5c1f"  # a value nothing but the sidecar may ever see
TRAINER, SIDECAR = "trainer", "ringfeed-loader"


@pytest.fixture(scope="module")
def split(cluster: Cluster, ns: str, ring, store, source, cuda_libraries: str) -> dict:
    cluster.kubectl("create", "secret", "generic", "ring-credentials", "-n", ns, "--from-literal=username=cassandra",
                    f"--from-literal=password={PASSWORD}")
    create(cluster, ns, "datasets", dataset_manifest(DATASET, ring))
    wait_ready(cluster, ns, "datasets", DATASET)
    create(cluster, ns, "splits", {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Split", "metadata": {"name": SPLIT},
                                   "spec": {"dataset": DATASET, "ratios": [3, 1], "names": ["train", "val"],
                                            "groupBy": ["patient_id"], "seed": 3}})
    return wait_ready(cluster, ns, "splits", SPLIT)


def trainingjob(name: str, replicas: int = 2, epochs: int = 2, step_delay_s: float = 0.0, split: str = SPLIT,
                **spec) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name},
        "spec": {
            "split": {"name": split, "part": "train"}, "replicas": replicas, "epochs": epochs,
            "loader": {"batchSize": 4, "seed": 7, "remainder": "uneven",
                       "decode": {"mode": "image", "width": 32, "height": 32}},
            "template": {"spec": {
                "securityContext": RESTRICTED_POD,
                "containers": [{
                    "name": TRAINER, "image": Cluster.image("trainer"), "command": ["python", "/opt/trainer/train.py"],
                    "securityContext": RESTRICTED_CONTAINER,
                    "env": [{"name": "STEP_DELAY_S", "value": str(step_delay_s)}],
                    "volumeMounts": [{"name": "checkpoint", "mountPath": "/checkpoint"},
                                     {"name": "cuda-libraries", "readOnly": True,
                                      "mountPath": "/opt/trainer/lib/python3.11/site-packages/nvidia"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                }],
                "volumes": [{"name": "checkpoint", "emptyDir": {}},
                            {"name": "cuda-libraries",
                             "persistentVolumeClaim": {"claimName": CUDA_CLAIM, "readOnly": True}}],
            }},
            **spec,
        },
    }


def control(pod, path: str, headers: dict[str, str]) -> int:
    """The HTTP status a sidecar answers a control request with."""
    request = urllib.request.Request(f"http://{pod.status.pod_ip}:8477{path}", method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def rank_pods(cluster: Cluster, ns: str, name: str) -> dict[int, object]:
    pods = cluster.core.list_namespaced_pod(ns, label_selector=f"ringfeed.io/trainingjob={name}").items
    return {int(p.metadata.annotations["batch.kubernetes.io/job-completion-index"]): p for p in pods
            if not p.metadata.deletion_timestamp}


def feed_report(pod, local_rank: int = 0) -> dict | None:
    """The feed of one local rank in its Pod's sidecar report, once the sidecar is ready (a sidecar of release 0.1.0,
    in the upgrade test, reports its one feed at the top)."""
    report = sidecar_report(pod)
    return report.get("feeds", [report])[local_rank] if report and report.get("ready") else None


def sidecar_report(pod) -> dict | None:
    if not pod.status.pod_ip:
        return None
    try:
        with urllib.request.urlopen(f"http://{pod.status.pod_ip}:8477/status", timeout=2) as reply:
            return json.loads(reply.read())
    except OSError:
        return None


def wait_served(cluster: Cluster, ns: str, name: str, rank: int, batches: int, ranks_per_pod: int = 1) -> object:
    """Rank's Pod once its sidecar has handed the rank at least `batches` batches (since the sidecar started)."""
    def served():
        failed = condition(get(cluster, ns, "trainingjobs", name), "Failed")
        assert failed.get("status") != "True", f"trainingjob {name} failed: {failed.get('message')}"
        pod = rank_pods(cluster, ns, name).get(rank // ranks_per_pod)
        report = feed_report(pod, rank % ranks_per_pod) if pod else None
        return pod if report and report.get("batches_served", 0) >= batches else None
    return cluster.wait(f"rank {rank} of {name} to be handed {batches} batches", served, timeout_s=240)


def wait_phase(cluster: Cluster, ns: str, name: str, phase: str, timeout_s: float = 300) -> dict:
    def reached():
        obj = get(cluster, ns, "trainingjobs", name)
        current = ((obj or {}).get("status") or {}).get("phase")
        if current == "Failed" and phase != "Failed":
            raise AssertionError(f"trainingjob {name} failed: {condition(obj, 'Failed')}")
        return obj if current == phase else None
    return cluster.wait(f"trainingjob {name} {phase}", reached, timeout_s)


def resume(cluster: Cluster, ns: str, name: str, timeout_s: float) -> dict:
    """Lift a TrainingJob's suspension; → rank 0's feed report once its new sidecar feeds again."""
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", name,
                                                  {"spec": {"suspend": False}})

    def resumed_position():
        pod = rank_pods(cluster, ns, name).get(0)
        return feed_report(pod) if pod else None
    return cluster.wait(f"rank 0 of {name} fed again", resumed_position, timeout_s=timeout_s)


def trained_by_rank(cluster: Cluster, ns: str, name: str) -> dict[int, dict]:
    """The JSON line each rank's trainer printed at its end (a Pod's local ranks each print one): the UUIDs it
    trained on per epoch."""
    result = {}
    for pod in rank_pods(cluster, ns, name).values():
        log = cluster.core.read_namespaced_pod_log(pod.metadata.name, ns, container=TRAINER)
        for line in log.splitlines():
            if line.startswith("{"):
                run = json.loads(line)
                result[run["rank"]] = run
    return result


def test_two_pods_of_two_ranks_train_every_sample_once_per_epoch_through_a_trainer_and_a_sidecar_restart(
        cluster: Cluster, ns: str, split: dict, store, ring):
    create(cluster, ns, "trainingjobs", trainingjob("resnet-mini", step_delay_s=1.0, ranksPerPod=2))
    # Pod 0's trainer dies mid-epoch, once both its local ranks have checkpointed (a batch trained on): they restart
    # in the Pod from their last checkpoints.
    wait_served(cluster, ns, "resnet-mini", 0, batches=2, ranks_per_pod=2)
    pod = wait_served(cluster, ns, "resnet-mini", 1, batches=2, ranks_per_pod=2)
    check_no_credentials_reach_the_trainer(cluster, ns, pod)
    cluster.kill_container(ns, pod.metadata.name, TRAINER)
    # Pod 1's sidecar dies mid-epoch: it restarts and each of its feeds goes on from where its trainer stands.
    pod = wait_served(cluster, ns, "resnet-mini", 3, batches=2, ranks_per_pod=2)
    cluster.kill_container(ns, pod.metadata.name, SIDECAR)
    job = wait_phase(cluster, ns, "resnet-mini", "Succeeded", timeout_s=420)

    train = sorted(u.tobytes().hex() for u in load_split(store, DATASET.replace("-", "_"), SPLIT).uuids("train"))
    runs = trained_by_rank(cluster, ns, "resnet-mini")
    assert sorted(runs) == [0, 1, 2, 3] and all(run["world_size"] == 4 for run in runs.values())
    for epoch in ("0", "1"):
        delivered = [u for run in runs.values() for u in run["trained"][epoch]]
        assert sorted(delivered) == train, f"epoch {epoch}: not every sample exactly once"
    pods = rank_pods(cluster, ns, "resnet-mini")
    assert sorted(pods) == [0, 1]  # two Pods of two ranks
    trainer_restarts = next(s.restart_count for s in pods[0].status.container_statuses if s.name == TRAINER)
    sidecar_restarts = next(s.restart_count for s in pods[1].status.init_container_statuses if s.name == SIDECAR)
    assert trainer_restarts >= 1 and sidecar_restarts >= 1
    status = job["status"]
    assert condition(job, "Succeeded")["status"] == "True" and status["completionTime"]
    assert status["splitVersion"] == split["status"]["version"]
    assert status["samplesDelivered"] == 2 * len(train) and status["epoch"] == 2
    assert [r["rank"] for r in status["ranks"]] == [0, 1, 2, 3] and all(r["done"] for r in status["ranks"])
    assert {"Started", "Running", "Succeeded"} <= {e.reason for e in events(cluster, ns, "resnet-mini")}
    header, row = cluster.kubectl("get", "trainingjobs", "resnet-mini", "-n", ns).stdout.splitlines()[:2]
    assert header.split()[:4] == ["NAME", "PHASE", "READY", "SPLIT"]
    assert row.split()[:2] == ["resnet-mini", "Succeeded"]
    # The rendezvous Service and the Job belong to the TrainingJob.
    service = cluster.core.read_namespaced_service("resnet-mini", ns)
    assert service.spec.cluster_ip == "None" and service.metadata.owner_references[0].kind == "TrainingJob"
    check_lineage(cluster, ns, "resnet-mini", job, split, runs, ring)


def test_a_job_resized_mid_epoch_from_2_to_3_to_1_ranks_trains_every_sample_once_per_epoch(
        cluster: Cluster, ns: str, split: dict, store, tmp_path_factory):
    """spec.replicas 2 → 3 (kubectl scale) → 1 while the job trains. Each time every rank goes on to one position
    of the epoch, then the Job is made again at the new size from there. The trainers checkpoint to one shared
    volume (as elastic training does): a rank of the new size resumes its index's checkpoint, and the checkpoints of
    every rank that ever ran together hold every sample of each epoch exactly once."""
    import torch

    folder = tmp_path_factory.mktemp("resize-checkpoints")
    folder.chmod(0o777)  # the trainers' user writes there
    host_directory_claim(cluster, ns, "checkpoints", folder, writable=True)
    body = trainingjob("elastic", replicas=2, epochs=2, step_delay_s=2.0)
    pod = body["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "checkpoint", "persistentVolumeClaim": {"claimName": "checkpoints"}}
                      if volume["name"] == "checkpoint" else volume for volume in pod["volumes"]]
    create(cluster, ns, "trainingjobs", body)

    def resize_to(replicas: int, how: str) -> dict:
        before = len([e for e in events(cluster, ns, "elastic") if e.reason == "Resized"])
        if how == "scale":
            cluster.kubectl("scale", "trainingjob", "elastic", "-n", ns, f"--replicas={replicas}")
        else:
            cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "elastic",
                                                          {"spec": {"replicas": replicas}})

        def resized():
            said = [e.message for e in events(cluster, ns, "elastic") if e.reason == "Resized"]
            return said if len(said) > before and len(rank_pods(cluster, ns, "elastic")) == replicas else None
        said = cluster.wait(f"elastic resized to {replicas}", resized, timeout_s=240)
        found = re.search(r"^(\d+) → (\d+) ranks: the new ranks start at epoch (\d+) position (\d+)$",
                          next(m for m in said if f"→ {replicas} ranks" in m))
        assert found, said
        return dict(zip(("from", "to", "epoch", "offset"), map(int, found.groups()), strict=True))

    wait_served(cluster, ns, "elastic", 0, batches=1)
    first = resize_to(3, "scale")
    assert (first["from"], first["to"]) == (2, 3) and first["offset"] % 3 == 0
    assert (first["epoch"], first["offset"]) > (0, 0), "met mid-epoch"
    wait_served(cluster, ns, "elastic", 2, batches=1)  # the new rank trains
    second = resize_to(1, "patch")
    assert (second["from"], second["to"]) == (3, 1)
    assert (second["epoch"], second["offset"]) > (first["epoch"], first["offset"])
    job = wait_phase(cluster, ns, "elastic", "Succeeded", timeout_s=420)

    train = sorted(u.tobytes().hex() for u in load_split(store, DATASET.replace("-", "_"), SPLIT).uuids("train"))
    checkpoints = sorted(folder.glob("rank-*.pt"))
    assert [path.name for path in checkpoints] == ["rank-0.pt", "rank-1.pt", "rank-2.pt"]
    trained = [torch.load(path, weights_only=False)["trained"] for path in checkpoints]
    for epoch in ("0", "1"):
        delivered = [u for ranks in trained for u in ranks.get(epoch, [])]
        assert sorted(delivered) == train, f"epoch {epoch}: not every sample exactly once"
    status = job["status"]
    assert [r["rank"] for r in status["ranks"]] == [0] and status["ranks"][0]["done"]
    assert status["samplesDelivered"] == 2 * len(train) and not status.get("resize")
    assert not condition(job, "Resizing")
    reasons = [e.reason for e in events(cluster, ns, "elastic")]
    assert reasons.count("Resizing") == 2 and reasons.count("Resized") == 2, reasons
    assert "LineageMismatch" not in reasons and "ResizeRetried" not in reasons


def check_lineage(cluster: Cluster, ns: str, name: str, job: dict, split: dict, runs: dict[int, dict], ring) -> None:
    """The job's lineage names what it read, and each epoch's digest is that of the order the trainers received
    the samples in (rank r of W: positions r, r + W, …), through a trainer and a sidecar restart; `ringfeed lineage
    --ids` lists the same order from the plan."""
    lineage = job["status"]["lineage"]
    assert (lineage["split"], lineage["part"], lineage["splitVersion"], lineage["contentHash"]) == (
        SPLIT, "train", split["status"]["version"], split["status"]["contentHash"])
    world = len(runs)
    assert (lineage["dataset"], lineage["seed"], lineage["worldSize"], lineage["remainder"]) == (
        DATASET.replace("-", "_"), 7, world, "uneven")
    orders = {}
    for epoch in (0, 1):
        order: list = [None] * sum(len(run["trained"][str(epoch)]) for run in runs.values())
        for rank, run in runs.items():
            order[rank::world] = run["trained"][str(epoch)]
        orders[epoch] = order
        digest = "sha256:" + hashlib.sha256(b"".join(bytes.fromhex(u) for u in order)).hexdigest()
        assert lineage["epochs"][epoch] == {"epoch": epoch, "digest": digest}
    assert len(lineage["epochs"]) == 2

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ringfeed", "--hosts", ",".join(ring.hosts), "lineage",
                               f"{ns}/{name}", "--kubeconfig", str(cluster.kubeconfig), *args],
                              capture_output=True, text=True, timeout=60)
    shown = cli()
    assert shown.returncode == 0 and all(item["digest"] in shown.stdout for item in lineage["epochs"]), shown
    listed = cli("--ids", "1")
    assert listed.returncode == 0 and "recorded digest" in listed.stderr, listed.stderr
    assert listed.stdout.split() == [str(uuid.UUID(hex=u)) for u in orders[1]]


def test_jobs_on_the_same_split_with_the_same_seed_record_the_same_order(cluster: Cluster, ns: str, split: dict):
    """Lineage across jobs: the same Split and seed give the same epoch digest, on one rank or two (every sample
    once, in the same global order); another seed gives another. The two-rank job decodes in its trainers
    (decode.device gpu: the sidecars hand the bytes with each image's crop; no GPU here, so torchvision's CPU
    decoder): its trainers would fail on batches they could not decode."""
    for name, seed, replicas, device in (("order-a", 7, 1, "cpu"), ("order-b", 7, 2, "gpu"), ("order-c", 8, 1, "cpu")):
        job = trainingjob(name, replicas=replicas, epochs=1)
        job["spec"]["loader"]["seed"] = seed
        job["spec"]["loader"]["decode"]["device"] = device
        create(cluster, ns, "trainingjobs", job)
    digests = {name: wait_phase(cluster, ns, name, "Succeeded")["status"]["lineage"]["epochs"]
               for name in ("order-a", "order-b", "order-c")}
    assert digests["order-a"] == digests["order-b"] and [e["epoch"] for e in digests["order-a"]] == [0]
    assert digests["order-c"][0]["digest"] != digests["order-a"][0]["digest"]
    # Every sample reached order-b's trainers decoded, in the recorded order: none was left out by their decode.
    runs = trained_by_rank(cluster, ns, "order-b")
    order: list = [None] * sum(len(run["trained"]["0"]) for run in runs.values())
    for rank, run in runs.items():
        order[rank::len(runs)] = run["trained"]["0"]
    assert "sha256:" + hashlib.sha256(b"".join(bytes.fromhex(u) for u in order)).hexdigest() == \
        digests["order-b"][0]["digest"]


def check_no_credentials_reach_the_trainer(cluster: Cluster, ns: str, pod) -> None:
    """Nothing in the trainer's environment, volumes, mounts or files holds the ring's password or a token."""
    trainer = next(c for c in pod.spec.containers if c.name == TRAINER)
    assert not any(e.value_from and e.value_from.secret_key_ref for e in trainer.env or [])
    secret_volumes = {v.name for v in pod.spec.volumes if v.secret or v.projected}
    assert not secret_volumes & {m.name for m in trainer.volume_mounts or []}
    assert pod.spec.automount_service_account_token is False

    def trainer_exec(*command: str) -> str:
        return cluster.kubectl("exec", pod.metadata.name, "-n", ns, "-c", TRAINER, "--", *command).stdout

    environment = trainer_exec("cat", "/proc/self/environ")
    assert PASSWORD not in environment and "RINGFEED_PASSWORD" not in environment
    mounts = trainer_exec("cat", "/proc/self/mounts")
    assert "serviceaccount" not in mounts and "/etc/ringfeed" not in mounts
    found = cluster.kubectl("exec", pod.metadata.name, "-n", ns, "-c", TRAINER, "--", "grep", "-rIl",
                            "--exclude-dir=proc", "--exclude-dir=sys", "--exclude-dir=usr", "--exclude-dir=opt",
                            "-e", PASSWORD, "/", check=False)
    # Exit 1: no match; 2 when some files are unreadable, which the trainer (uid 10001) cannot read either.
    assert found.returncode in (1, 2) and not found.stdout, f"the password is readable in: {found.stdout}"
    assert all("Permission denied" in line for line in found.stderr.splitlines()[:-1]), found.stderr
    # The trainer image holds no Cassandra client of any kind.
    modules = trainer_exec("python", "-c", "import importlib.util as u; print(u.find_spec('cassandra'), "
                                           "u.find_spec('ringfeed'))")
    assert modules.split() == ["None", "None"]


def test_a_missing_part_is_refused_and_a_missing_split_is_waited_for(cluster: Cluster, ns: str, split: dict):
    body = trainingjob("wrong-part")
    body["spec"]["split"]["part"] = "holdout"
    create(cluster, ns, "trainingjobs", body)

    def refused():
        found = condition(get(cluster, ns, "trainingjobs", "wrong-part"), "Ready")
        return found if found.get("reason") == "PartNotFound" else None
    ready = cluster.wait("wrong-part refused", refused, timeout_s=60)
    assert ready["status"] == "False" and "no part 'holdout' (its parts: train, val)" in ready["message"]
    assert not cluster.batch.list_namespaced_job(ns, label_selector="ringfeed.io/trainingjob=wrong-part").items

    body = trainingjob("early")
    body["spec"]["split"]["name"] = "not-yet"
    create(cluster, ns, "trainingjobs", body)

    def waiting():
        found = condition(get(cluster, ns, "trainingjobs", "early"), "Ready")
        return found if found.get("reason") == "SplitNotFound" else None
    assert "Split not-yet does not exist" in cluster.wait("early waiting", waiting, timeout_s=60)["message"]


def test_a_cache_tier_outside_the_opted_in_namespaces_is_refused(cluster: Cluster, ns: str, ring, split: dict):
    """This namespace is not labelled ringfeed.io/cache-tier=allowed: the Dataset's cache tier is refused with a
    condition saying why, and none of its objects is made; its tables and ingest go on."""
    create(cluster, ns, "datasets", dataset_manifest("uncached", ring,
                                                     cache={"alluxio": {"memory": "128Mi"}}))

    def refused():
        found = condition(get(cluster, ns, "datasets", "uncached"), "CacheReady")
        return found if found.get("reason") == "NamespaceNotAllowed" else None
    cache = cluster.wait("the cache tier refused", refused, timeout_s=90)
    assert cache["status"] == "False"
    assert f"namespace {ns} is not opted in to cache tiers" in cache["message"], cache["message"]
    assert "ringfeed.io/cache-tier=allowed" in cache["message"]
    assert not cluster.apps.list_namespaced_daemon_set(ns).items
    assert not cluster.apps.list_namespaced_stateful_set(ns).items
    wait_ready(cluster, ns, "datasets", "uncached")
    cluster.kubectl("delete", "datasets", "uncached", "-n", ns, "--wait=true", check=False)


REACHING_THE_CREDENTIALS = {
    "shares-processes": ({"shareProcessNamespace": True}, "spec.template.spec.shareProcessNamespace is true"),
    "host-pid": ({"hostPID": True}, "spec.template.spec.hostPID is true"),
    "as-the-sidecar": ({"securityContext": {"runAsUser": 47701}}, "runAsUser is 47701, the loader sidecar's user"),
    "mounts-the-login": ({"volumes": [{"name": "login", "secret": {"secretName": "ring-credentials"}}]},
                         "volume 'login' names Secret ring-credentials (the ring login of Dataset tj-slides)"),
    "projects-the-login": ({"volumes": [{"name": "bundle", "projected": {"sources": [
                               {"secret": {"name": "ring-credentials"}}]}}]},
                           "volume 'bundle' names Secret ring-credentials"),
    "reads-the-password": ({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "ring-credentials",
                                                                                 "key": "password"}}}]},
                           "container 'trainer' variable P names Secret ring-credentials"),
    "takes-the-token": ({"envFrom": [{"secretRef": {"name": "isolated-takes-the-token-control"}}]},
                        "names Secret isolated-takes-the-token-control (this TrainingJob's control token)"),
}


@pytest.mark.parametrize("case", REACHING_THE_CREDENTIALS, ids=list(REACHING_THE_CREDENTIALS))
def test_a_template_that_would_reach_the_credentials_is_refused(cluster: Cluster, ns: str, split: dict, case: str):
    change, said = REACHING_THE_CREDENTIALS[case]
    name = f"isolated-{case}"
    body = trainingjob(name)
    pod = body["spec"]["template"]["spec"]
    for key, value in change.items():
        if key in ("env", "envFrom"):
            pod["containers"][0][key] = [*pod["containers"][0].get(key, []), *value]
        elif key == "volumes":
            pod["volumes"] = [*pod["volumes"], *value]
        else:
            pod[key] = value
    create(cluster, ns, "trainingjobs", body)

    def refused():
        found = condition(get(cluster, ns, "trainingjobs", name), "Ready")
        return found if found.get("reason") == "TrainerNotIsolated" else None
    ready = cluster.wait(f"{name} refused", refused, timeout_s=60)
    assert ready["status"] == "False", ready
    assert ready["message"].startswith("the trainer must not reach the ring's credentials"), ready["message"]
    assert said in ready["message"], ready["message"]
    assert not cluster.batch.list_namespaced_job(ns, label_selector=f"ringfeed.io/trainingjob={name}").items
    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", name)


def test_the_api_server_refuses_changes_and_bad_names(cluster: Cluster, ns: str, split: dict):
    create(cluster, ns, "trainingjobs", trainingjob("fixed", suspend=True))
    for patch, field in (({"spec": {"epochs": 3}}, "epochs"), ({"spec": {"loader": {"batchSize": 8}}}, "loader"),
                         ({"spec": {"queueName": "gpu"}}, "queueName")):
        with pytest.raises(ApiException) as refused:
            cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "fixed", patch)
        assert "only spec.suspend and spec.replicas can change" in json.loads(refused.value.body)["message"], field
    body = trainingjob("x" * 53)
    with pytest.raises(ApiException) as refused:
        create(cluster, ns, "trainingjobs", body)
    assert "at most 52 characters" in json.loads(refused.value.body)["message"]
    body = trainingjob("always")
    body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(ApiException) as refused:
        create(cluster, ns, "trainingjobs", body)
    assert 'supported values: "OnFailure", "Never"' in json.loads(refused.value.body)["message"]


def test_suspend_stops_the_ranks_and_resume_continues_from_their_positions(cluster: Cluster, ns: str, split: dict):
    # Slow steps: rank 0 must still be mid-epoch when the checks below (probe Pods in another namespace) are done
    # and the job is suspended; at 1 s a step it had finished its 7 batches on a loaded machine.
    create(cluster, ns, "trainingjobs", trainingjob("pausable", epochs=1, step_delay_s=10.0, suspend=True))
    wait_phase(cluster, ns, "pausable", "Suspended", timeout_s=60)
    assert not rank_pods(cluster, ns, "pausable")
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "pausable",
                                                  {"spec": {"suspend": False}})
    wait_served(cluster, ns, "pausable", 0, batches=3)
    # The job's NetworkPolicy: its Pods refuse other Pods (here on the sidecar's port, which listens all along; the
    # rendezvous listens only while torch sets the group up); the job's own ranks reach every port of each other.
    ranks = rank_pods(cluster, ns, "pausable")
    sidecar = f"{ranks[0].status.pod_ip}:8477"
    check_isolated(cluster, ns, {"sidecar": sidecar})
    assert attempts_from(cluster, ns, ranks[1].metadata.name, [sidecar], container=TRAINER) == {sidecar: "open"}
    # The node (the operator's place here) may read a sidecar's report; only the job's token may pause it.
    pod = rank_pods(cluster, ns, "pausable")[0]
    for headers in ({}, {"Authorization": "Bearer guessed"}, {"Authorization": "Basic b3BlcmF0b3I6"}):
        assert control(pod, "/pause", headers) == 401
    assert sidecar_report(pod)["paused"] is False
    token = base64.b64decode(cluster.core.read_namespaced_secret("pausable-control", ns).data["token"]).decode()
    assert PASSWORD not in token and len(token) >= 32
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "pausable",
                                                  {"spec": {"suspend": True}})
    suspended = wait_phase(cluster, ns, "pausable", "Suspended", timeout_s=60)
    kept = {r["rank"]: r for r in suspended["status"]["ranks"]}
    assert kept[0]["offset"] > 0
    cluster.wait("the ranks' Pods gone", lambda: not rank_pods(cluster, ns, "pausable"), timeout_s=90)
    report = resume(cluster, ns, "pausable", timeout_s=120)
    # The new sidecar started at the kept position: what it served since is exactly the rest of the epoch.
    assert (report["epoch"], report["offset"]) >= (kept[0]["epoch"], kept[0]["offset"])
    done = wait_phase(cluster, ns, "pausable", "Succeeded", timeout_s=300)
    assert done["status"]["samplesDelivered"] == split["status"]["parts"][0]["samples"]
    assert {"Suspended", "Resumed"} <= {e.reason for e in events(cluster, ns, "pausable")}


KUEUE, KUEUE_API = "kueue-system", ("kueue.x-k8s.io", "v1beta1")
QUEUE, CLUSTER_QUEUE, FLAVOR = "tj-queue", "e2e-trainers", "e2e-default"


@pytest.fixture
def kueue(cluster: Cluster, ns: str):
    """Kueue from its own chart, the release e2e/kueue pins, built from the Go module proxy (`make test-e2e` starts
    that build in the background; this waits for it) and pushed to the cluster's registry; watching Jobs only.
    After the test: the queues first (Kueue lifts their finalizers), then Kueue with its CRDs and webhooks."""
    built = subprocess.run([str(REPO / "images" / "build.sh"), "kueue"], capture_output=True, text=True, timeout=1800,
                           env=dict(os.environ, RINGFEED_CACHE=str(CACHE), RINGFEED_CLUSTER_DIR=str(STATE)))
    assert built.returncode == 0, f"images/build.sh kueue failed:\n{built.stdout}\n{built.stderr}"
    _, digest, reference = (CACHE / "images" / "kueue.pushed").read_text().split()
    repository, tag = reference.rsplit(":", 1)
    cluster.kubectl("create", "namespace", KUEUE)
    cluster.allow_pulls(KUEUE)
    try:
        cluster.helm("install", "kueue", str(CACHE / "images" / "kueue-go" / "chart"), "-n", KUEUE,
                     "-f", str(REPO / "e2e" / "kueue" / "values.yaml"),
                     "--set", f"controllerManager.manager.image.repository={repository}",
                     "--set", f"controllerManager.manager.image.tag={tag}@{digest}",
                     "--wait", "--timeout", "180s", timeout=240)
        yield
    finally:
        cluster.kubectl("delete", "localqueue", QUEUE, "-n", ns, "--ignore-not-found", "--wait=true", check=False)
        cluster.kubectl("delete", "clusterqueue", CLUSTER_QUEUE, "--ignore-not-found", "--wait=true", check=False)
        cluster.kubectl("delete", "resourceflavor", FLAVOR, "--ignore-not-found", "--wait=true", check=False)
        cluster.helm("uninstall", "kueue", "-n", KUEUE, "--wait", check=False, timeout=180)
        cluster.kubectl("delete", "namespace", KUEUE, "--wait=false", check=False)


def cpu_millis(pod) -> int:
    """CPU requested by a Pod spec's containers and (restartable) init containers, in millicores."""
    return round(1000 * sum(parse_quantity(((c.resources and c.resources.requests) or {}).get("cpu", "0"))
                            for c in [*pod.containers, *(pod.init_containers or [])]))


def make_queues(cluster: Cluster, ns: str, cpu: int) -> None:
    """A ResourceFlavor, a ClusterQueue with `cpu` millicores (and memory enough) for every namespace, and the
    LocalQueue of `ns` that points at it."""
    group, version = KUEUE_API
    cluster.custom.create_cluster_custom_object(group, version, "resourceflavors", {
        "apiVersion": f"{group}/{version}", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}})
    cluster.custom.create_cluster_custom_object(group, version, "clusterqueues", {
        "apiVersion": f"{group}/{version}", "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": f"{cpu}m"},
                                                       {"name": "memory", "nominalQuota": "64Gi"}]}]}]}})
    cluster.custom.create_namespaced_custom_object(group, version, ns, "localqueues", {
        "apiVersion": f"{group}/{version}", "kind": "LocalQueue", "metadata": {"name": QUEUE},
        "spec": {"clusterQueue": CLUSTER_QUEUE}})


def wait_queued(cluster: Cluster, ns: str, name: str, saying: str = "") -> dict:
    """The TrainingJob once it is Pending with Admitted False, the condition's message containing `saying`."""
    def queued():
        obj = get(cluster, ns, "trainingjobs", name)
        admitted = condition(obj, "Admitted")
        return obj if ((obj.get("status") or {}).get("phase") == "Pending" and admitted.get("status") == "False"
                       and saying in admitted.get("message", "")) else None
    return cluster.wait(f"{name} waiting in {QUEUE} ({saying or 'any reason'})", queued, timeout_s=120)


def test_queued_jobs_wait_for_kueue_and_the_second_runs_when_the_first_ends(cluster: Cluster, ns: str, split: dict,
                                                                            kueue):
    first, second = "queued-first", "queued-second"
    samples = split["status"]["parts"][0]["samples"]
    create(cluster, ns, "trainingjobs", trainingjob(first, replicas=1, epochs=1, step_delay_s=3.0, queueName=QUEUE))
    # No LocalQueue yet: the Job is made suspended and labelled for Kueue, and waits; the condition says where.
    waiting = wait_queued(cluster, ns, first)
    assert QUEUE in condition(waiting, "Admitted")["message"]
    job = cluster.batch.read_namespaced_job(first, ns)
    assert job.spec.suspend is True and job.metadata.labels["kueue.x-k8s.io/queue-name"] == QUEUE
    assert not rank_pods(cluster, ns, first)

    # Quota for one and a half such jobs: the first is admitted, the second waits for it to end.
    make_queues(cluster, ns, cpu_millis(job.spec.template.spec) * 3 // 2)
    wait_phase(cluster, ns, first, "Running", timeout_s=180)
    assert condition(get(cluster, ns, "trainingjobs", first), "Admitted")["reason"] == "Admitted"
    create(cluster, ns, "trainingjobs", trainingjob(second, replicas=1, epochs=1, queueName=QUEUE))
    blocked = wait_queued(cluster, ns, second, saying="insufficient")
    assert condition(blocked, "Admitted")["reason"] == "Queued" and not rank_pods(cluster, ns, second)

    # Suspended, a queued job leaves the queue (its Job, Workload and place go); resumed, it queues again.
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", second,
                                                  {"spec": {"suspend": True}})
    wait_phase(cluster, ns, second, "Suspended", timeout_s=60)
    cluster.wait(f"{second}'s Job gone", lambda: not cluster.batch.list_namespaced_job(
        ns, label_selector=f"ringfeed.io/trainingjob={second}").items, timeout_s=60)
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", second,
                                                  {"spec": {"suspend": False}})
    if get(cluster, ns, "trainingjobs", first)["status"]["phase"] == "Running":
        wait_queued(cluster, ns, second, saying="insufficient")

    done = wait_phase(cluster, ns, first, "Succeeded", timeout_s=300)
    assert done["status"]["samplesDelivered"] == samples
    done = wait_phase(cluster, ns, second, "Succeeded", timeout_s=300)
    assert done["status"]["samplesDelivered"] == samples
    for name in (first, second):
        reasons = {e.reason for e in events(cluster, ns, name)}
        assert {"Queued", "Admitted"} <= reasons, (name, reasons)
    cluster.kubectl("delete", "trainingjobs", first, second, "-n", ns, "--wait=true", timeout=150)
