"""What the loader sidecars report on their HTTP port (``ringfeed serve``'s ``/status``): the operator reads it
through the Pod network to fill a TrainingJob's status, and pauses the feed before a suspension with the job's
control token (the sidecar refuses a pause without it).

Asynchronous, each Pod asked at once: a tick costs the slowest sidecar's answer (or the timeout), not their sum. The
synchronous handlers (a suspension, a resize) run these with asyncio.run."""

from __future__ import annotations

import asyncio
import json

from ringfeed_operator.builders.trainingjob import SIDECAR_PORT
from ringfeed_operator.tenant_http import ReplyRefused, fetch

TIMEOUT_S = 2.0
STATUS_LIMIT_BYTES = 256 * 1024  # a sidecar's /status is about 1 kB


async def feed_status(pod: dict, pause_token: str | None = None) -> dict | None:
    """The sidecar's report, or None while it cannot give one (starting, restarting, its Pod gone, an answer out of
    bounds). With `pause_token`, the sidecar first stops handing out batches, so that its position is final (before
    a suspension)."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return None
    url = f"http://{ip}:{SIDECAR_PORT}/{'pause' if pause_token else 'status'}"
    headers = {"Authorization": f"Bearer {pause_token}"} if pause_token else {}
    try:
        report = json.loads(await fetch(url, method="POST" if pause_token else "GET", headers=headers,
                                        limit_bytes=STATUS_LIMIT_BYTES, timeout_s=TIMEOUT_S))
    except (OSError, ValueError, ReplyRefused):
        return None
    return report if isinstance(report, dict) and report.get("ready") else None


async def command(pod: dict, token: str, path: str, payload: dict | None = None) -> bool:
    """POST a control command to a Pod's sidecar (``/pause`` with a position to stop at: a resize's meeting point;
    ``/resume``); → whether it took it."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return False
    try:
        await fetch(f"http://{ip}:{SIDECAR_PORT}{path}", method="POST", headers={"Authorization": f"Bearer {token}"},
                    data=None if payload is None else json.dumps(payload).encode(), limit_bytes=STATUS_LIMIT_BYTES,
                    timeout_s=TIMEOUT_S)
    except (OSError, ValueError, ReplyRefused):
        return False
    return True


async def command_all(pods: list[dict], token: str, path: str, payload: dict | None = None) -> list[bool]:
    """`command` to every Pod at once."""
    return list(await asyncio.gather(*(command(pod, token, path, payload) for pod in pods)))


async def pod_feeds(pods: list[dict], pause_token: str | None = None) -> list[tuple[dict, list[dict]]]:
    """Each Pod with the feeds its sidecar reports now (none when it does not answer), every Pod asked at once."""
    reports = await asyncio.gather(*(feed_status(pod, pause_token) for pod in pods))
    return [(pod, feeds_of(report)) for pod, report in zip(pods, reports, strict=True)]


def by_rank(feeds_by_pod: list[tuple[dict, list[dict]]]) -> dict[int, dict]:
    """The feed reports of `pod_feeds` by rank."""
    return {feed["rank"]: feed for _, feeds in feeds_by_pod for feed in feeds}


async def rank_reports(pods: list[dict], pause_token: str | None = None) -> dict[int, dict]:
    """Each rank's feed report, from the sidecars of `pods` that answer (all asked at once)."""
    return by_rank(await pod_feeds(pods, pause_token))


def feeds_of(report: dict | None) -> list[dict]:
    """The feeds a sidecar reports, one per local rank of its Pod, under ``feeds``; a sidecar of release 0.1.0 (a
    job running across an upgrade) reports its one feed at the top. Entries without an integer rank are left out."""
    if report is None:
        return []
    feeds = report.get("feeds", [report])
    return [feed for feed in feeds if isinstance(feed, dict) and isinstance(feed.get("rank"), int)] \
        if isinstance(feeds, list) else []
