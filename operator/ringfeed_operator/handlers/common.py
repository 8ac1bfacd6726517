"""What the handlers of every kind share: events, giving up with a Ready=False condition, opening a ring."""

from __future__ import annotations

import datetime as dt
from typing import NoReturn

import kopf

from ringfeed.errors import RingfeedError, StorageNotSupported
from ringfeed.store import Store
from ringfeed_operator.context import Context
from ringfeed_operator.kube import Kube, SecretNotFound
from ringfeed_operator.status import Conditions, pod_not_starting, pods_created_slowly, warning_summary

POLL_S = 5.0  # how often Jobs and the catalog are looked at
# Why a ring's Store cannot be had: a Secret missing, or the data plane's error (no such kind of ring yet, the ring
# not answering, the credentials refused).
STORE_ERRORS = (SecretNotFound, RingfeedError)


def event(body: dict, reason: str, message: str, warning: bool = False) -> None:
    kopf.event(body, type="Warning" if warning else "Normal", reason=reason, message=message[:1024])


def give_up(patch: kopf.Patch, conditions: Conditions, generation: int, reason: str, message: str, permanent: bool,
            delay: float = 15) -> NoReturn:
    """Record why the object is not Ready and end the handler: permanently (the spec must change) or to retry."""
    conditions.set("Ready", False, reason, message)
    patch.status["conditions"] = conditions.as_list()
    patch.status["observedGeneration"] = generation
    if permanent:
        raise kopf.PermanentError(message)
    raise kopf.TemporaryError(message, delay=delay)


def open_store(memo: Context, namespace: str, storage: dict, patch: kopf.Patch, conditions: Conditions,
               generation: int) -> Store:
    """The ring's Store, or give up saying why it cannot be reached."""
    try:
        return memo.rings.store(namespace, storage)
    except StorageNotSupported as error:
        give_up(patch, conditions, generation, "StorageNotSupported", str(error), permanent=True)
    except SecretNotFound as error:
        give_up(patch, conditions, generation, "SecretNotFound", str(error), permanent=False)
    except RingfeedError as error:
        give_up(patch, conditions, generation, "RingUnreachable", str(error), permanent=False)


def job_not_starting(memo: Context, namespace: str, job: dict) -> str | None:
    """Why a running Job's Pod cannot start (not schedulable, its image not pulled, a volume not mounted, …), or
    None. Its Pods are listed only while none is ready, which a running Job's Pod is as soon as it runs."""
    if (job.get("status") or {}).get("ready"):
        return None
    pods = memo.kube.pods(namespace, f"job-name={job['metadata']['name']}")
    return pod_not_starting(pods) or creation_warning(memo.kube, namespace, pods)


def creation_warning(kube: Kube, namespace: str, pods: list[dict]) -> str | None:
    """The kubelet's latest Warning about a Pod whose containers it has not created long after it was scheduled
    (status.pods_created_slowly: a volume it cannot mount, say), or None. Events are read only for such Pods."""
    for pod in pods_created_slowly(pods, dt.datetime.now(dt.UTC)):
        warning = kube.latest_warning(namespace, "Pod", pod)
        if warning:
            return warning_summary(pod, *warning)
    return None
