"""A TrainingJob's Indexed Job, Service and status figures: pure functions, checked without a cluster."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from test_builders import DATASET, SETTINGS
from test_cache_builders import CACHE, cached

from ringfeed.cli import main as ringfeed_cli
from ringfeed_operator.builders.trainingjob import (
    CONTROL_DIR,
    CONTROL_KEY,
    FEED_DIR,
    POSITIONS_ANNOTATION,
    SIDECAR,
    control_secret,
    decode_device,
    decode_mismatch,
    phase,
    rank_job,
    rank_not_starting,
    rank_progress,
    rendezvous_service,
    running_pods,
    sidecar_arguments,
    summary,
)
from ringfeed_operator.isolation import SIDECAR_UID

REPO = Path(__file__).resolve().parents[2]
SAMPLE = yaml.safe_load((REPO / "crds" / "samples" / "trainingjob.yaml").read_text())


def trainingjob(**spec) -> dict:
    body = copy.deepcopy(SAMPLE)
    body["metadata"].update(namespace="ml", uid="7d0c1c2e-aaaa-bbbb-cccc-444455556666", generation=1)
    body["apiVersion"], body["kind"] = "ringfeed.io/v1alpha1", "TrainingJob"
    body["spec"].update(spec)
    return body


def job_of(body: dict) -> dict:
    return rank_job(body, DATASET, "tumour_slides", 3, SETTINGS, CACHE)


def test_ranks_are_an_indexed_job_owned_by_the_trainingjob():
    job = job_of(trainingjob())
    assert job["metadata"]["name"] == "resnet-slides"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "7d0c1c2e-aaaa-bbbb-cccc-444455556666"
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["suspend"]) == ("Indexed", 2, 2,
                                                                                                  False)
    assert job_of(trainingjob(suspend=True))["spec"]["suspend"] is True
    assert spec["backoffLimit"] == 6 and job_of(trainingjob(backoffLimit=0))["spec"]["backoffLimit"] == 0
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "resnet-slides" and pod["automountServiceAccountToken"] is False
    assert pod["restartPolicy"] == "Never"  # the sample's own choice is kept
    without = trainingjob()
    del without["spec"]["template"]["spec"]["restartPolicy"]
    assert job_of(without)["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"


def test_only_the_sidecar_sees_the_ring_and_its_credentials():
    pod = job_of(trainingjob())["spec"]["template"]["spec"]
    sidecar = pod["initContainers"][0]
    assert sidecar["name"] == SIDECAR and sidecar["restartPolicy"] == "Always"
    login = next(v for v in pod["volumes"] if v["name"] == "ring-login")
    assert login["secret"]["secretName"] == "cass"
    assert {"name": "ring-login", "mountPath": "/etc/ringfeed/login", "readOnly": True} in sidecar["volumeMounts"]
    trainer = pod["containers"][0]
    assert not any("secretKeyRef" in e.get("valueFrom", {}) or e["name"].startswith("RINGFEED_HOSTS")
                   for e in trainer["env"])
    assert {m["mountPath"] for m in trainer["volumeMounts"]} == {FEED_DIR}
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"] == "resnet-slides-0.resnet-slides"
    assert env["RINGFEED_FEED_DIR"] == FEED_DIR
    assert {"name": "ringfeed-feed", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert sidecar["image"] == SETTINGS.image and sidecar["resources"] == SETTINGS.resources["sidecar"]


def test_the_sidecar_runs_as_its_own_user_and_shares_the_feed_through_the_pods_fs_group():
    pod = job_of(trainingjob())["spec"]["template"]["spec"]
    sidecar = pod["initContainers"][0]["securityContext"]
    assert (sidecar["runAsUser"], sidecar["runAsGroup"], sidecar["runAsNonRoot"]) == (SIDECAR_UID, SIDECAR_UID, True)
    assert sidecar["capabilities"] == {"drop": ["ALL"]} and sidecar["readOnlyRootFilesystem"] is True
    trainer_user = pod["containers"][0].get("securityContext", {}).get("runAsUser")
    assert trainer_user != SIDECAR_UID
    assert pod["securityContext"]["fsGroup"] == SIDECAR_UID  # the feed directory's group, given to both
    own = trainingjob()
    own["spec"]["template"]["spec"]["securityContext"] = {"fsGroup": 2000, "runAsUser": 1000}
    assert job_of(own)["spec"]["template"]["spec"]["securityContext"] == {"fsGroup": 2000, "runAsUser": 1000}


def test_the_sidecars_metrics_name_their_trainingjob_and_are_offered_for_scraping():
    template = job_of(trainingjob())["spec"]["template"]
    [named] = [e for e in template["spec"]["initContainers"][0]["env"] if e["name"] == "RINGFEED_TRAININGJOB"]
    assert named["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['ringfeed.io/trainingjob']"
    assert template["metadata"]["labels"]["ringfeed.io/trainingjob"] == "resnet-slides"
    annotations = template["metadata"]["annotations"]
    assert (annotations["prometheus.io/scrape"], annotations["prometheus.io/port"]) == ("true", "8477")
    own = trainingjob()
    own["spec"]["template"].setdefault("metadata", {})["annotations"] = {"prometheus.io/scrape": "false"}
    assert job_of(own)["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "false"  # theirs


def test_a_tls_ring_mounts_its_ca_into_the_sidecar_only():
    dataset = copy.deepcopy(DATASET)
    dataset["spec"]["storage"]["external"]["tls"] = {"enabled": True, "caSecret": {"name": "ring-ca", "key": "ca"}}
    pod = rank_job(trainingjob(), dataset, "tumour_slides", 3, SETTINGS, CACHE)["spec"]["template"]["spec"]
    ca = next(v["name"] for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "ring-ca")
    assert ca in {m["name"] for m in pod["initContainers"][0]["volumeMounts"]}
    assert ca not in {m["name"] for c in pod["containers"] for m in c["volumeMounts"]}


def test_the_control_token_reaches_the_sidecar_only():
    body = trainingjob()
    secret = control_secret(body, "t0ken")
    assert secret["metadata"]["name"] == "resnet-slides-control" and secret["stringData"] == {CONTROL_KEY: "t0ken"}
    assert secret["metadata"]["ownerReferences"][0]["uid"] == body["metadata"]["uid"]
    pod = job_of(body)["spec"]["template"]["spec"]
    control = next(v["name"] for v in pod["volumes"]
                   if v.get("secret", {}).get("secretName") == secret["metadata"]["name"])
    sidecar = pod["initContainers"][0]
    assert {"name": control, "mountPath": CONTROL_DIR, "readOnly": True} in sidecar["volumeMounts"]
    assert f"--control-token-file={CONTROL_DIR}/{CONTROL_KEY}" in sidecar["args"]
    assert control not in {m["name"] for c in pod["containers"] for m in c["volumeMounts"]}


@pytest.mark.parametrize("decode,expected", [
    ({"mode": "image", "width": 224, "height": 160},
     ["--decode=160x224", "--channels=3", "--resize=crop", "--decode-device=cpu"]),
    ({"mode": "image", "width": 8, "height": 8, "channels": 1, "resize": "stretch", "device": "gpu"},
     ["--decode=8x8", "--channels=1", "--resize=stretch", "--decode-device=gpu"]),
    ({"mode": "tensor"}, ["--decode=tensor"]),
    ({"mode": "none"}, []),
])
def test_sidecar_arguments_are_a_valid_ringfeed_serve_command(decode, expected):
    spec = trainingjob(loader={"batchSize": 32, "shuffle": False, "seed": 7, "decode": decode})["spec"]
    arguments = sidecar_arguments(spec, "tumour_slides", "jpeg", "by-patient", 3)
    assert arguments[:3] == ["serve", "tumour_slides", "by-patient"]
    assert {"--batch-size=32", "--seed=7", "--no-shuffle", "--version=3", "--world-size=2", "--epochs=10"} <= set(
        arguments)
    decoding = ("--decode=", "--decode-device", "--channels", "--resize")
    assert [a for a in arguments if a.startswith(decoding)] == expected
    # The operator's command is one `ringfeed serve` accepts: parsed and type-checked by click, not run.
    serve = ringfeed_cli.get_command(None, "serve")
    context = serve.make_context("serve", [a.replace("$(RINGFEED_POD_INDEX)", "1") for a in arguments[1:]])
    assert context.params["rank"] == 1 and context.params["batch_size"] == 32
    assert context.params["ranks_per_pod"] == 1


@pytest.mark.parametrize("random_crop,scale,ratio,flip", [
    (None, (0.08, 1.0), (0.75, 1.333), 0.5),   # the CRD's defaults: torchvision's
    ({"scaleMinPercent": 35, "scaleMaxPercent": 90, "ratioMinPermille": 500, "ratioMaxPermille": 2000,
      "flipPercent": 0}, (0.35, 0.9), (0.5, 2.0), 0.0),
    ({"flipPercent": 100}, (0.08, 1.0), (0.75, 1.333), 1.0),
])
def test_a_random_crop_reaches_the_sidecar_as_the_fractions_it_stands_for(random_crop, scale, ratio, flip):
    decode = {"mode": "image", "width": 224, "height": 224, "resize": "random"}
    if random_crop is not None:
        decode["randomCrop"] = random_crop
    arguments = sidecar_arguments(trainingjob(loader={"seed": 7, "decode": decode})["spec"], "d", "jpeg", "s", 1)
    serve = ringfeed_cli.get_command(None, "serve")
    params = serve.make_context("serve", [a.replace("$(RINGFEED_POD_INDEX)", "0") for a in arguments[1:]]).params
    assert params["resize"] == "random"
    assert params["crop_scale"] == pytest.approx(scale) and params["crop_ratio"] == pytest.approx(ratio)
    assert params["flip"] == flip


@pytest.mark.parametrize("resources,device", [
    ({"limits": {"nvidia.com/gpu": 1}}, "gpu"),
    ({"requests": {"nvidia.com/mig-1g.10gb": 1}, "limits": {"nvidia.com/mig-1g.10gb": 1}}, "gpu"),
    ({"limits": {"amd.com/gpu": 2}}, "gpu"),
    ({"limits": {"gpu.intel.com/i915": 1}}, "gpu"),
    ({"limits": {"cpu": "4", "memory": "8Gi"}}, "cpu"),
    ({"limits": {"nvidia.com/nic": 1, "example.com/gpus-not": 1}}, "cpu"),
    ({}, "cpu"),
    (None, "gpu"),  # the sample's trainer: nvidia.com/gpu 1
])
def test_decode_device_auto_is_gpu_where_the_template_asks_for_a_gpu(resources, device):
    job = trainingjob(loader={"decode": {"mode": "image", "width": 64, "height": 64, "device": "auto"}})
    if resources is not None:
        job["spec"]["template"]["spec"]["containers"][0]["resources"] = resources
    assert decode_device(job["spec"], "jpeg") == device
    assert decode_device(job["spec"], "tiff") == "cpu"  # the GPU decoders read JPEG and PNG
    arguments = sidecar_arguments(job["spec"], "d", "jpeg", "s", 1)
    serve = ringfeed_cli.get_command(None, "serve")
    params = serve.make_context("serve", [a.replace("$(RINGFEED_POD_INDEX)", "0") for a in arguments[1:]]).params
    assert params["decode_device"] == device


@pytest.mark.parametrize(("mode", "kind", "refused"), [
    ("none", "jpeg", False), ("none", "raw", False), ("image", "jpeg", False), ("image", "png", False),
    ("image", "tiff", False), ("image", "raw", True), ("tensor", "raw", False), ("tensor", "jpeg", True),
    ("tensor", "png", True), ("tensor", "tiff", True)])
def test_a_decode_mode_the_datasets_encoding_cannot_give_is_refused_before_any_pod_runs(mode, kind, refused):
    dataset = copy.deepcopy(DATASET)
    dataset["spec"]["schema"]["encoding"] = {"kind": kind}
    decode = {"mode": mode, "width": 64, "height": 64} if mode == "image" else {"mode": mode}
    message = decode_mismatch(trainingjob(loader={"decode": decode})["spec"], dataset)
    assert (message is not None) == refused
    if refused:
        assert f"spec.loader.decode.mode {mode}" in message and dataset["metadata"]["name"] in message
    # access posix reads the cache tier's files: no sidecar, no decode
    assert decode_mismatch(trainingjob(access="posix", loader={"decode": decode})["spec"], dataset) is None


@pytest.mark.parametrize(("device", "kind", "refused"), [
    ("gpu", "jpeg", False), ("gpu", "png", False), ("gpu", "tiff", True), ("auto", "tiff", False),
    ("cpu", "tiff", False)])
def test_a_gpu_decode_of_an_encoding_the_gpu_decoders_cannot_read_is_refused(device, kind, refused):
    dataset = copy.deepcopy(DATASET)
    dataset["spec"]["schema"]["encoding"] = {"kind": kind}
    decode = {"mode": "image", "width": 64, "height": 64, "device": device}
    message = decode_mismatch(trainingjob(loader={"decode": decode})["spec"], dataset)
    assert (message is not None) == refused
    if refused:
        assert "spec.loader.decode.device gpu" in message and kind in message


def test_evaluation_resizes_carry_no_random_crop_flags():
    decode = {"mode": "image", "width": 224, "height": 224, "resize": "crop"}
    arguments = sidecar_arguments(trainingjob(loader={"decode": decode})["spec"], "d", "jpeg", "s", 1)
    assert not [a for a in arguments if a.startswith(("--crop-", "--flip"))]


def environment(container: dict) -> dict:
    return {e["name"]: e.get("value") or e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}


def test_several_ranks_per_pod_start_under_the_launcher_and_one_sidecar_serves_each_its_feed():
    body = trainingjob(ranksPerPod=4)
    body["spec"]["template"]["spec"]["containers"][0].update(command=["python", "train.py"], args=["--lr", "0.1"])
    job = job_of(body)
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2  # Pods, not ranks
    trainer = pod["containers"][0]
    assert trainer["command"] == ["ringfeed-launch", "--local-ranks=4", "--", "python", "train.py"]
    assert trainer["args"] == ["--lr", "0.1"]  # after the command, as the kubelet runs them
    env = environment(trainer)
    assert env["GROUP_RANK"].endswith("job-completion-index']")
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("8", "4")
    assert env["MASTER_ADDR"] == "resnet-slides-0.resnet-slides"
    assert "RANK" not in env and "LOCAL_RANK" not in env  # each process gets its own from the launcher
    sidecar = pod["initContainers"][0]
    assert {"--rank=$(RINGFEED_POD_INDEX)", "--ranks-per-pod=4", "--world-size=8"} <= set(sidecar["args"])
    assert environment(sidecar)["RINGFEED_POD_INDEX"].endswith("job-completion-index']")
    serve = ringfeed_cli.get_command(None, "serve")
    context = serve.make_context("serve", [a.replace("$(RINGFEED_POD_INDEX)", "1") for a in sidecar["args"][1:]])
    assert (context.params["rank"], context.params["ranks_per_pod"], context.params["world_size"]) == (1, 4, 8)


def test_one_rank_per_pod_runs_the_trainers_own_command_with_its_rank():
    trainer = job_of(trainingjob())["spec"]["template"]["spec"]["containers"][0]
    env = environment(trainer)
    assert env["RANK"].endswith("job-completion-index']") and env["LOCAL_RANK"] == "0"
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("2", "1")
    assert trainer.get("command") == SAMPLE["spec"]["template"]["spec"]["containers"][0].get("command")


def test_the_rendezvous_service_publishes_ranks_before_they_are_ready():
    service = rendezvous_service(trainingjob())
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["metadata"]["name"] == "resnet-slides"


def report(epoch: int, offset: int, samples: int) -> dict:
    return {"epoch": epoch, "offset": offset, "samples_delivered": samples, "corrupt": 1, "missing": 0,
            "trainer_wait_s": 0.25, "done": False, "position": {"epoch": epoch, "offset": offset, "skip": []}}


def test_a_rank_that_does_not_answer_keeps_its_last_position():
    first = rank_progress([], {0: report(0, 64, 32), 1: report(0, 64, 32)})
    later = rank_progress(first, {1: report(1, 0, 100)})
    assert [r["samplesDelivered"] for r in later] == [32, 100] and later[1]["epoch"] == 1
    assert summary(later, world=2, epochs=3) == {"epoch": 0, "samplesDelivered": 132, "corruptSamples": 2}
    assert summary(later[:1], world=2, epochs=3)["epoch"] == 0


def test_a_job_made_again_after_a_suspension_hands_each_rank_its_kept_position():
    ranks = rank_progress([], {0: report(0, 64, 32), 1: report(0, 72, 36)})
    fresh = job_of(trainingjob())["spec"]["template"]["metadata"]
    assert POSITIONS_ANNOTATION not in (fresh.get("annotations") or {})
    resumed = rank_job(trainingjob(), DATASET, "tumour_slides", 3, SETTINGS, CACHE,
                       ranks)["spec"]["template"]["metadata"]
    kept = json.loads(resumed["annotations"][POSITIONS_ANNOTATION])
    assert kept == {"0": ranks[0]["position"], "1": ranks[1]["position"]}
    pod = job_of(trainingjob())["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "ringfeed-positions")
    assert POSITIONS_ANNOTATION in volume["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"]
    assert "ringfeed-positions" in {m["name"] for m in pod["initContainers"][0]["volumeMounts"]}


@pytest.mark.parametrize("state,suspended,running,expected", [
    ("succeeded", False, 0, "Succeeded"), ("failed", False, 1, "Failed"), ("running", True, 0, "Suspended"),
    ("running", False, 2, "Running"), ("running", False, 0, "Pending"),
])
def test_phase(state, suspended, running, expected):
    assert phase(state, suspended, running) == expected


def test_access_posix_mounts_the_datasets_cache_tier_read_only_and_injects_no_sidecar():
    dataset = cached(nodeSelector={"ringfeed.io/cache": "yes"})
    body = trainingjob(access="posix", epochs=3)
    pod = rank_job(body, dataset, "tumour_slides", 3, SETTINGS, CACHE)["spec"]["template"]["spec"]
    assert not pod.get("initContainers"), "no loader sidecar"
    volume = next(v for v in pod["volumes"] if v["name"] == "ringfeed-cache")
    assert volume["hostPath"] == {"path": "/srv/ringfeed-cache/ml/tumour-slides", "type": "Directory"}
    assert not any("secret" in v or v.get("emptyDir", {}).get("medium") == "Memory" for v in pod["volumes"])
    assert pod["nodeSelector"]["ringfeed.io/cache"] == "yes"
    for container in pod["containers"]:
        env = {e["name"]: e.get("value") for e in container["env"]}
        split, part = body["spec"]["split"]["name"], body["spec"]["split"].get("part", "train")
        assert env["RINGFEED_DATA_DIR"] == f"/var/run/ringfeed/cache/mnt/{split}/{part}"
        assert env["RINGFEED_EPOCHS"] == "3" and "WORLD_SIZE" in env and "RINGFEED_FEED_DIR" not in env
        assert not any("valueFrom" in e and "secretKeyRef" in e["valueFrom"] for e in container["env"])
        mount = next(m for m in container["volumeMounts"] if m["name"] == "ringfeed-cache")
        assert mount["readOnly"] is True and mount["mountPropagation"] == "HostToContainer"
    annotations = rank_job(body, dataset, "tumour_slides", 3, SETTINGS, CACHE)["spec"]["template"]["metadata"].get(
        "annotations") or {}
    assert "prometheus.io/port" not in annotations  # nothing listens for metrics without the sidecar


def test_only_the_running_pods_of_the_current_job_are_its_ranks():
    def pod(name: str, uid: str, phase: str = "Running", deleting: bool = False, label: str = "batch.kubernetes.io/"
            "controller-uid") -> dict:
        return {"metadata": {"name": name, "labels": {label: uid},
                             **({"deletionTimestamp": "2026-11-27T14:00:00Z"} if deleting else {})},
                "status": {"phase": phase}}
    job = {"metadata": {"uid": "new"}}
    pods = [pod("a", "new"), pod("b", "new", phase="Pending"), pod("c", "old"), pod("d", "new", deleting=True),
            pod("e", "old", deleting=True), pod("f", "new", label="controller-uid")]
    # the old Job's Pods, terminating after a resize with their trainers alive, are never counted or commanded
    assert [p["metadata"]["name"] for p in running_pods(pods, job)] == ["a", "f"]
    assert running_pods(pods, None) == []


def test_a_rank_pod_that_cannot_start_is_named_with_the_schedulers_words():
    job = {"metadata": {"uid": "j1"}}
    unscheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                   "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}

    def pod(name: str, phase: str, uid: str = "j1", conditions=(), deleting: bool = False) -> dict:
        metadata = {"name": name, "labels": {"batch.kubernetes.io/controller-uid": uid},
                    "creationTimestamp": "2026-12-07T10:00:00Z"}
        if deleting:
            metadata["deletionTimestamp"] = "2026-12-07T10:01:00Z"
        return {"metadata": metadata, "status": {"phase": phase, "conditions": list(conditions)}}

    stuck = rank_not_starting([pod("a", "Running"), pod("b", "Pending", conditions=[unscheduled])], job)
    assert stuck == "Pod b: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    # an older Job's Pods, Pods going away and Pods being started say nothing
    assert rank_not_starting([pod("c", "Pending", uid="old", conditions=[unscheduled])], job) is None
    assert rank_not_starting([pod("d", "Pending", conditions=[unscheduled], deleting=True)], job) is None
    assert rank_not_starting([pod("e", "Pending")], job) is None
    assert rank_not_starting([pod("b", "Pending", conditions=[unscheduled])], None) is None
