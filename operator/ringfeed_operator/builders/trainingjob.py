"""A TrainingJob's objects: an Indexed Job (one Pod per rank) with the loader sidecar injected, and the headless
Service its ranks rendezvous through; the TrainingJob's status from the Job and the sidecars' reports. Pure.

Credentials stay with the sidecar: the ring's Secret and CA reach only the ``ringfeed-loader`` container, which
runs as a user of its own (``isolation.SIDECAR_UID``); the trainer gets the shared-memory feed directory (its files
shared through the Pod's fsGroup, never world-writable), its rank's torch.distributed environment and nothing else,
and the Pod mounts no ServiceAccount token unless the template asks for one. The handler refuses a template that
would reach the sidecar's processes or the ring's Secrets (``isolation``).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ringfeed.loader.options import GPU_ENCODINGS
from ringfeed_client.protocol import FEED_DIR_ENV, TRAININGJOB_ENV
from ringfeed_operator.builders.cache import cache_spec, host_dir, part_path
from ringfeed_operator.builders.jobs import LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGER, owner_reference
from ringfeed_operator.builders.meta import pull_secrets, scrape_annotations
from ringfeed_operator.builders.queue import queue_labels, queue_name
from ringfeed_operator.builders.ring import reader_login, ring_env, ring_volumes
from ringfeed_operator.config import CacheConfig, JobsConfig
from ringfeed_operator.isolation import SIDECAR_UID
from ringfeed_operator.status import pod_not_starting

LABEL_TRAININGJOB = "ringfeed.io/trainingjob"
SIDECAR = "ringfeed-loader"
FEED_VOLUME = "ringfeed-feed"
FEED_DIR = "/var/run/ringfeed"
SIDECAR_PORT = 8477
MASTER_PORT = 29500
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
# The ranks' positions kept over a suspension: on the Pod template of the Job the operator makes again to resume
# (a started Job's template cannot change), read by each sidecar from a downward API file.
POSITIONS_ANNOTATION = "ringfeed.io/positions"
POSITIONS_VOLUME = "ringfeed-positions"
POSITIONS_DIR = "/etc/ringfeed/positions"
# The sidecar holds the prefetched batches (prefetch + 1 slots) in the feed directory's memory, which counts
# against the Pod's memory; the chart's `jobs.resources.sidecar` sets the default.
# access: posix — the Dataset's cache tier mounted read-only; the part's folder and the epochs in the environment.
CACHE_VOLUME = "ringfeed-cache"
CACHE_DIR = "/var/run/ringfeed/cache"
DATA_DIR_ENV = "RINGFEED_DATA_DIR"
EPOCHS_ENV = "RINGFEED_EPOCHS"
# The control path (POST /pause, /resume) answers only the token of this Secret, which the operator makes per
# TrainingJob and mounts into the sidecar alone.
CONTROL_VOLUME = "ringfeed-control"
CONTROL_DIR = "/etc/ringfeed/control"
CONTROL_KEY = "token"
DEFAULT_BACKOFF_LIMIT = 6  # a Job's own default
DEFAULT_RESTART_POLICY = "OnFailure"  # a killed trainer restarts in place: the feed directory and position stay


POD_INDEX_ENV = "RINGFEED_POD_INDEX"  # the sidecar's: its Pod's completion index
LAUNCHER = "ringfeed-launch"  # ringfeed-client's: one trainer process per local rank


def world_size(spec: dict) -> int:
    """Ranks of the job: Pods × ranks per Pod."""
    return spec.get("replicas", 1) * spec.get("ranksPerPod", 1)


def sidecar_arguments(spec: dict, dataset: str, encoding: str, split: str, version: int) -> list[str]:
    """``ringfeed serve`` for spec.split and spec.loader, on a dataset of ``encoding``: one feed per local rank of the
    Pod, whose index comes from the Pod (``$(RINGFEED_POD_INDEX)``)."""
    loader = spec.get("loader") or {}
    decode = loader.get("decode") or {}
    arguments = [
        "serve", dataset, split, f"--part={spec['split'].get('part', 'train')}", f"--version={version}",
        f"--epochs={spec.get('epochs', 1)}", f"--rank=$({POD_INDEX_ENV})",
        f"--ranks-per-pod={spec.get('ranksPerPod', 1)}", f"--world-size={world_size(spec)}",
        f"--batch-size={loader.get('batchSize', 64)}", f"--seed={loader.get('seed', 0)}",
        f"--remainder={loader.get('remainder', 'pad')}", f"--prefetch={loader.get('prefetch', 2)}",
        f"--concurrency={loader.get('concurrency', 128)}", f"--decode-threads={loader.get('decodeThreads', 0)}",
        f"--missing={loader.get('missing', 'raise')}", f"--consistency={loader.get('consistency', 'ONE')}",
        f"--feed-dir={FEED_DIR}", f"--http-port={SIDECAR_PORT}", f"--kept-positions={POSITIONS_DIR}/positions",
        f"--control-token-file={CONTROL_DIR}/{CONTROL_KEY}",
    ]
    if not loader.get("shuffle", True):
        arguments.append("--no-shuffle")
    mode = decode.get("mode", "none")
    if mode == "image":
        arguments += [f"--decode={decode['height']}x{decode['width']}", f"--channels={decode.get('channels', 3)}",
                      f"--resize={decode.get('resize', 'crop')}", f"--decode-device={decode_device(spec, encoding)}"]
        if decode.get("resize") == "random":
            arguments += random_crop_arguments(decode.get("randomCrop") or {})
    elif mode == "tensor":
        arguments.append("--decode=tensor")
    return arguments


def decode_mismatch(spec: dict, dataset: dict) -> str | None:
    """Why spec.loader.decode cannot read the Dataset's samples (images decoded from raw tensors, tensors from
    images, a GPU decode of an encoding the GPU decoders do not read), or None; the sidecar would refuse it only once
    the job's Pods run."""
    if spec.get("access", "sidecar") != "sidecar":
        return None
    mode = ((spec.get("loader") or {}).get("decode") or {}).get("mode", "none")
    kind = dataset["spec"]["schema"]["encoding"]["kind"]
    name = dataset["metadata"]["name"]
    if mode == "tensor" and kind != "raw":
        return (f"spec.loader.decode.mode tensor needs a Dataset of raw tensors; Dataset {name} holds {kind} images: "
                "use mode image (or none, the stored bytes)")
    if mode == "image" and kind == "raw":
        return (f"spec.loader.decode.mode image needs a Dataset of images; Dataset {name} holds raw tensors: use mode "
                "tensor (or none, the stored bytes)")
    device = ((spec.get("loader") or {}).get("decode") or {}).get("device", "cpu")
    if mode == "image" and device == "gpu" and kind not in GPU_ENCODINGS:
        return (f"spec.loader.decode.device gpu: the GPU decoders read {' and '.join(GPU_ENCODINGS)}, and Dataset "
                f"{name} holds {kind} images: use device cpu or auto")
    return None


def decode_device(spec: dict, encoding: str) -> str:
    """spec.loader.decode.device for the sidecar, whose Dataset holds ``encoding``: ``auto`` is ``gpu`` when the GPU
    decoders read the encoding and a container of the trainer's Pod asks for a GPU (``nvidia.com/gpu``, a MIG slice
    ``nvidia.com/mig-…``, ``amd.com/gpu``, ``gpu.intel.com/…``), else ``cpu``: the sidecar cannot see the trainer's
    devices itself."""
    device = ((spec.get("loader") or {}).get("decode") or {}).get("device", "cpu")
    if device != "auto":
        return device
    if encoding not in GPU_ENCODINGS:
        return "cpu"
    containers = spec["template"]["spec"].get("containers") or []
    resources = {name for container in containers for kind in ("limits", "requests")
                 for name in ((container.get("resources") or {}).get(kind) or {})}
    return "gpu" if any(asks_for_gpu(name) for name in resources) else "cpu"


def asks_for_gpu(resource: str) -> bool:
    """Whether an extended resource is a GPU (or a slice of one), by the device plugins' names."""
    vendor, _, kind = resource.partition("/")
    return kind == "gpu" or vendor.startswith("gpu.") or (vendor == "nvidia.com" and kind.startswith("mig-"))


# spec.loader.decode.randomCrop's defaults (the CRD's): torchvision's scale (0.08, 1), ratio (3/4, 4/3), flip 0.5.
RANDOM_CROP_DEFAULTS = {"scaleMinPercent": 8, "scaleMaxPercent": 100, "ratioMinPermille": 750,
                        "ratioMaxPermille": 1333, "flipPercent": 50}


def random_crop_arguments(random_crop: dict) -> list[str]:
    """``ringfeed serve``'s flags of resize random: the CRD's integers as the fractions they stand for."""
    ranges = {**RANDOM_CROP_DEFAULTS, **random_crop}
    return [f"--crop-scale={ranges['scaleMinPercent']}/100,{ranges['scaleMaxPercent']}/100",
            f"--crop-ratio={ranges['ratioMinPermille']}/1000,{ranges['ratioMaxPermille']}/1000",
            f"--flip={ranges['flipPercent'] / 100}"]


def labels_of(name: str) -> dict[str, str]:
    return {LABEL_TRAININGJOB: name, LABEL_COMPONENT: "trainer", LABEL_MANAGED_BY: MANAGER}


def rendezvous_service(trainingjob: dict) -> dict:
    """Headless: rank r's Pod is ``<name>-<r>.<name>``, published before it is ready (rank 0 listens for the
    others while they start)."""
    name = trainingjob["metadata"]["name"]
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels_of(name), "ownerReferences": [owner_reference(trainingjob)]},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {LABEL_TRAININGJOB: name},
                 "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}]},
    }


def control_secret_name(trainingjob_name: str) -> str:
    return f"{trainingjob_name}-control"


def control_secret(trainingjob: dict, token: str) -> dict:
    """The Secret holding the token of the sidecars' control path; deleted with the TrainingJob."""
    name = trainingjob["metadata"]["name"]
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": control_secret_name(name), "labels": labels_of(name),
                     "ownerReferences": [owner_reference(trainingjob)]},
        "stringData": {CONTROL_KEY: token},
    }


def rank_job(trainingjob: dict, dataset: dict, catalog: str, split_version: int, config: JobsConfig,
             cache: CacheConfig, ranks: list[dict] | None = None) -> dict:
    """The Indexed Job of the ranks: the user's Pod template with the rank environment and, by spec.access, the
    loader sidecar (each rank's sidecar starts from its position in `ranks`, status.ranks kept over a suspension) or
    the Dataset's cache tier mounted read-only."""
    spec, name = trainingjob["spec"], trainingjob["metadata"]["name"]
    replicas = spec.get("replicas", 1)
    template = copy.deepcopy(spec["template"])
    metadata = template.setdefault("metadata", {})
    metadata["labels"] = {**(metadata.get("labels") or {}), **labels_of(name)}
    pod = template["spec"]
    pod.setdefault("restartPolicy", DEFAULT_RESTART_POLICY)
    pod.setdefault("automountServiceAccountToken", False)  # the trainer never needs the API unless it says so
    pod.update(pull_secrets(config.image_pull_secrets, pod.get("imagePullSecrets") or ()))
    pod["subdomain"] = name  # the Job controller names each Pod's host <job>-<index>: DNS <job>-<index>.<service>
    rank_env = trainer_environment(name, replicas, spec.get("ranksPerPod", 1))
    launch_local_ranks(pod["containers"][0], spec.get("ranksPerPod", 1))
    if spec.get("access", "sidecar") == "posix":
        _mount_cache(pod, dataset, spec, rank_env, cache)
    else:
        _inject_sidecar(pod, metadata, spec, dataset, catalog, split_version, rank_env, config, ranks)
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed", "completions": replicas, "parallelism": replicas,
        "backoffLimit": spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT),
        # A queued Job waits suspended until Kueue admits it (builders.queue).
        "suspend": bool(spec.get("suspend", False)) or queue_name(spec) is not None,
        "template": template,
    }
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {**labels_of(name), **queue_labels(spec)},
                     "ownerReferences": [owner_reference(trainingjob)]},
        "spec": job_spec,
    }


def trainer_environment(name: str, replicas: int, ranks_per_pod: int) -> list[dict[str, Any]]:
    """torch.distributed's environment of a Pod's trainer, by torchrun's conventions (GROUP_RANK: the Pod's index).
    With several ranks per Pod, ``ringfeed-launch`` gives each process its RANK and LOCAL_RANK."""
    index = {"fieldRef": {"fieldPath": COMPLETION_INDEX}}
    single: list[dict[str, Any]] = (
        [{"name": "RANK", "valueFrom": index}, {"name": "LOCAL_RANK", "value": "0"}] if ranks_per_pod == 1 else [])
    return [
        *single,
        {"name": "GROUP_RANK", "valueFrom": index},
        {"name": "WORLD_SIZE", "value": str(replicas * ranks_per_pod)},
        {"name": "LOCAL_WORLD_SIZE", "value": str(ranks_per_pod)},
        {"name": "MASTER_ADDR", "value": f"{name}-0.{name}"},
        {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
    ]


def launch_local_ranks(trainer: dict, ranks_per_pod: int) -> None:
    """Several ranks per Pod: the trainer's command (the template's first container; the API server refuses one
    without a command) runs under ``ringfeed-launch``, once per local rank."""
    if ranks_per_pod > 1:
        trainer["command"] = [LAUNCHER, f"--local-ranks={ranks_per_pod}", "--", *trainer["command"]]


def _inject_sidecar(pod: dict, metadata: dict, spec: dict, dataset: dict, catalog: str, split_version: int,
                    rank_env: list[dict], config: JobsConfig, ranks: list[dict] | None) -> None:
    storage = dataset["spec"]["storage"]
    metadata["annotations"] = {**scrape_annotations(SIDECAR_PORT), **(metadata.get("annotations") or {})}
    if positions := {str(item["rank"]): item["position"] for item in ranks or () if item.get("position")}:
        metadata["annotations"] = {**metadata["annotations"],
                                   POSITIONS_ANNOTATION: json.dumps(positions, separators=(",", ":"), sort_keys=True)}
    # The feed directory's group, which the kubelet gives both containers: the sidecar's files are the trainer's
    # to read through it (a template's own fsGroup serves as well).
    pod.setdefault("securityContext", {}).setdefault("fsGroup", SIDECAR_UID)
    rank_env = [*rank_env, {"name": FEED_DIR_ENV, "value": FEED_DIR}]
    feed_mount = {"name": FEED_VOLUME, "mountPath": FEED_DIR}
    for container in pod["containers"]:
        container["env"] = [*rank_env, *(container.get("env") or [])]
        container["volumeMounts"] = [*(container.get("volumeMounts") or []), feed_mount]
    tls_volumes, tls_mounts = ring_volumes(storage, reader_login(storage))
    positions_mount = {"name": POSITIONS_VOLUME, "mountPath": POSITIONS_DIR, "readOnly": True}
    control_mount = {"name": CONTROL_VOLUME, "mountPath": CONTROL_DIR, "readOnly": True}
    sidecar = _sidecar(spec, catalog, dataset["spec"]["schema"]["encoding"]["kind"], split_version, storage,
                       [feed_mount, positions_mount, control_mount, *tls_mounts], config)
    pod["initContainers"] = [sidecar, *(pod.get("initContainers") or [])]
    positions = {"name": POSITIONS_VOLUME, "downwardAPI": {"items": [
        {"path": "positions", "fieldRef": {"fieldPath": f"metadata.annotations['{POSITIONS_ANNOTATION}']"}}]}}
    # Mounted into the sidecar alone (read by its uid: the Secret volume's files belong to root).
    control = {"name": CONTROL_VOLUME, "secret": {"secretName": control_secret_name(metadata["labels"][
        LABEL_TRAININGJOB])}}
    pod["volumes"] = [*(pod.get("volumes") or []), {"name": FEED_VOLUME, "emptyDir": {"medium": "Memory"}},
                      positions, control, *tls_volumes]


def _mount_cache(pod: dict, dataset: dict, spec: dict, rank_env: list[dict], cache: CacheConfig) -> None:
    """access: posix — the node's directory of the Dataset's FUSE mount, read-only. HostToContainer: a FUSE
    process that restarts mounts again underneath, and the trainer sees the new mount. No credentials at all."""
    meta = dataset["metadata"]
    data_dir = f"{CACHE_DIR}/{part_path(spec['split']['name'], spec['split'].get('part', 'train'))}"
    env = [*rank_env, {"name": DATA_DIR_ENV, "value": data_dir},
           {"name": EPOCHS_ENV, "value": str(spec.get("epochs", 1))}]
    mount = {"name": CACHE_VOLUME, "mountPath": CACHE_DIR, "readOnly": True, "mountPropagation": "HostToContainer"}
    for container in pod["containers"]:
        container["env"] = [*env, *(container.get("env") or [])]
        container["volumeMounts"] = [*(container.get("volumeMounts") or []), mount]
    pod["volumes"] = [*(pod.get("volumes") or []), {"name": CACHE_VOLUME, "hostPath": {
        "path": str(host_dir(cache, meta["namespace"], meta["name"])), "type": "Directory"}}]
    if selector := (cache_spec(dataset) or {}).get("nodeSelector"):  # where the mounts are
        pod["nodeSelector"] = {**selector, **(pod.get("nodeSelector") or {})}


def _sidecar(spec: dict, catalog: str, encoding: str, split_version: int, storage: dict, mounts: list[dict],
             config: JobsConfig) -> dict:
    sidecar_spec = spec.get("sidecar") or {}
    probe = {"httpGet": {"path": "/readyz", "port": SIDECAR_PORT}, "periodSeconds": 2, "failureThreshold": 150}
    return {
        "name": SIDECAR, "image": config.image,  # the chart's: the sidecar holds the ring's login
        "imagePullPolicy": config.image_pull_policy,
        "restartPolicy": "Always",  # a native sidecar: started before the trainer, stopped after it
        "command": ["ringfeed"],
        "args": sidecar_arguments(spec, catalog, encoding, spec["split"]["name"], split_version),
        "env": [{"name": POD_INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
                *ring_env(storage, reader_login(storage)),
                # names the TrainingJob in the sidecar's metrics (label `trainingjob`)
                {"name": TRAININGJOB_ENV, "valueFrom": {"fieldRef": {
                    "fieldPath": f"metadata.labels['{LABEL_TRAININGJOB}']"}}}],
        "ports": [{"name": "feed-http", "containerPort": SIDECAR_PORT}],
        # The trainer starts once the split is loaded and the ring answered (startup), and the kubelet restarts a
        # sidecar whose HTTP port stops answering (liveness).
        "startupProbe": probe,
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": SIDECAR_PORT}, "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": SIDECAR_PORT}, "periodSeconds": 10,
                          "failureThreshold": 3},
        "volumeMounts": mounts,
        "resources": sidecar_spec.get("resources") or config.resources.get("sidecar", {}),
        "securityContext": {"runAsNonRoot": True, "runAsUser": SIDECAR_UID, "runAsGroup": SIDECAR_UID,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
    }


# -- status ------------------------------------------------------------------------------------------------------------

JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")  # the Job controller's, new and old


def job_pods(pods: list[dict], job: dict | None) -> list[dict]:
    """The Pods of `job` that are not being deleted. A Job made again (a resize, a resume) leaves the old one's Pods
    terminating for a while, their trainers alive until killed: they are not ranks of the job any more."""
    uid = ((job or {}).get("metadata") or {}).get("uid")
    if not uid:
        return []
    return [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")
            and uid in {(pod["metadata"].get("labels") or {}).get(label) for label in JOB_UID_LABELS}]


def running_pods(pods: list[dict], job: dict | None) -> list[dict]:
    """The Pods of `job` that run and are not being deleted: its ranks."""
    return [pod for pod in job_pods(pods, job) if (pod.get("status") or {}).get("phase") == "Running"]


def rank_not_starting(pods: list[dict], job: dict | None) -> str | None:
    """Why a Pod of `job` cannot start (not schedulable: a GPU no node has, say; its image not pulled), or None."""
    return next(filter(None, (pod_not_starting([pod]) for pod in job_pods(pods, job))), None)


def pod_ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())


def rank_progress(previous: list[dict], reports: dict[int, dict]) -> list[dict]:
    """Each rank's last known position: a rank whose sidecar did not answer (restarting, suspended) keeps the one it
    reported last."""
    ranks = {item["rank"]: dict(item) for item in previous}
    for rank, report in reports.items():
        ranks[rank] = {
            "rank": rank, "epoch": report["epoch"], "offset": report["offset"],
            "samplesDelivered": report["samples_delivered"], "corrupt": report["corrupt"],
            "missing": report["missing"], "trainerWaitSeconds": round(report["trainer_wait_s"], 3),
            "done": report["done"], "position": report["position"],
        }
    return [ranks[rank] for rank in sorted(ranks)]


def summary(ranks: list[dict], world: int, epochs: int) -> dict:
    """The job-wide figures of the printer columns: the epoch of the slowest rank, samples of all ranks."""
    if len(ranks) < world:
        epoch = 0
    else:
        epoch = min(epochs, min(item["epoch"] for item in ranks))
    return {"epoch": epoch, "samplesDelivered": sum(item["samplesDelivered"] for item in ranks),
            "corruptSamples": sum(item["corrupt"] for item in ranks)}


def phase(job_state: str, suspended: bool, running: int) -> str:
    """Pending | Running | Suspended | Succeeded | Failed."""
    if job_state == "succeeded":
        return "Succeeded"
    if job_state == "failed":
        return "Failed"
    if suspended:
        return "Suspended"
    return "Running" if running else "Pending"

