"""kopf registrations and the operator's start: each registration hands kopf's kwargs on to the handler of its kind
(`handlers/`), which declares those it uses.

Built to stay light with thousands of objects (make bench-operator-scale):
- the timers send only the status fields that changed (status.drop_unchanged_status);
- the Jobs and the rank Pods come from watches filtered on the server by label (watched.py), not a GET and a LIST
  per tick;
- the indexes are asynchronous (kopf's event loop): they never wait behind the synchronous handlers in kopf's thread
  pool, where a Dataset's reconcile waits for the ring to make its keyspace;
- a new object's first status comes from watches, threads and connections of its own in a process of its own
  (acceptor.py, acceptor_process.py), not after kopf's finalizer and behind the other objects' work in kopf's event
  loop.

The function names are kopf's handler ids: kopf records a change handler's progress in annotations under its id
(`operator.ringfeed.io/reconcile_dataset`...), an index is passed to handlers under its id, and the reconcile
metrics are labelled with it. Renaming one makes an upgraded operator handle every object again.
"""

from __future__ import annotations

import asyncio
import logging

import kopf
import prometheus_client

from ringfeed_operator import api_session, memory_report
from ringfeed_operator.api_retries import JitteredDelays
from ringfeed_operator.config import Config
from ringfeed_operator.context import Context
from ringfeed_operator.handlers import dataset, ring, split, trainingjob
from ringfeed_operator.handlers.common import POLL_S
from ringfeed_operator.kube import DATASETS, RINGS, SPLITS, TRAININGJOBS
from ringfeed_operator.metrics import counted
from ringfeed_operator.status import drop_unchanged_status
from ringfeed_operator.watched import JOBS_SELECTOR, RANK_PODS_SELECTOR, job_entry, rank_pod_entry

# Annotations and the finalizer carry Ringfeed's domain.
ANNOTATION_PREFIX = "operator.ringfeed.io"
FINALIZER = "ringfeed.io/protect"
# How often a Ring's certificates are checked for renewal: far below the shortest validity allowed (an hour).
CERTIFICATE_CHECK_S = 60
JOBS = ("batch", "v1", "jobs")
PODS = ("v1", "pods")
# kopf's pool for the synchronous handlers (its default, min(32, CPUs + 4), is 6 on 2 CPUs): Dataset reconciles wait
# there for the ring's schema changes, one at a time on the ring, while other objects' handlers queue behind them.
HANDLER_THREADS = 16


def run(config: Config) -> None:
    """Serve the metrics, then run the operator until it is stopped."""
    logging.basicConfig(level=logging.DEBUG if config.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if config.metrics_port:
        prometheus_client.start_http_server(config.metrics_port, addr=config.bind)
    memory_report.install()
    asyncio.run(kopf.operator(
        clusterwide=not config.watch_namespaces,
        namespaces=list(config.watch_namespaces),
        liveness_endpoint=f"http://{config.bind}:{config.health_port}/healthz",
        registry=kopf.get_default_registry(),
        standalone=True,  # one replica (Deployment strategy Recreate): no peering objects
        memo=Context.start(config, HANDLER_THREADS),
    ))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.finalizer = FINALIZER
    settings.execution.max_workers = HANDLER_THREADS
    settings.networking.error_backoffs = JitteredDelays()
    settings.watching.label_selectors[JOBS] = JOBS_SELECTOR
    settings.watching.label_selectors[PODS] = RANK_PODS_SELECTOR
    # kopf's own events: warnings and errors only (its INFO "Timer succeeded" would be an event per object every
    # POLL_S). Ringfeed's events go through handlers.common.event, which is not filtered.
    settings.posting.level = logging.WARNING


_login = api_session.Login()


@kopf.on.login()
async def login(**kwargs) -> kopf.AiohttpSession | None:
    return await _login(**kwargs)


@kopf.on.startup()
def start_acceptor(memo: Context, **_) -> None:
    if memo.acceptor is not None:
        memo.acceptor.start()


@kopf.on.cleanup()
def close_connections(memo: Context, **_) -> None:
    if memo.acceptor is not None:
        memo.acceptor.close()
    memo.rings.close()


# -- What the watches keep (watched.py) -------------------------------------------------------------------------------

@kopf.index(*JOBS)
async def jobs_by_name(**kwargs) -> dict:
    return job_entry(**kwargs)


@kopf.index(*PODS)
async def rank_pods(**kwargs) -> dict:
    return rank_pod_entry(**kwargs)


# -- Dataset ---------------------------------------------------------------------------------------------------------

@kopf.index(*DATASETS)
async def datasets_by_keyspace(**kwargs) -> dict:
    return dataset.keyspace_index(**kwargs)


@kopf.index(*DATASETS)
async def dataset_specs(**kwargs) -> dict:
    return dataset.spec_index(**kwargs)


@kopf.index("namespaces")
async def cache_namespaces(**kwargs) -> dict:
    return dataset.cache_namespace_index(**kwargs)


@kopf.on.create(*DATASETS)
@kopf.on.update(*DATASETS, field="spec")
@kopf.on.resume(*DATASETS)
@counted("Dataset")
def reconcile_dataset(**kwargs) -> None:
    dataset.reconcile(**kwargs)


@kopf.timer(*DATASETS, interval=POLL_S, initial_delay=POLL_S, when=dataset.in_progress)
@counted("Dataset")
def watch_dataset(**kwargs) -> None:
    dataset.follow(**kwargs)
    drop_unchanged_status(kwargs["patch"], kwargs["status"])


# Unfiltered: kopf can lose a filtered timer (see dataset.FAST_LOOK_LATE_S); this one it never stops.
@kopf.timer(*DATASETS, interval=dataset.REST_CHECK_S, initial_delay=dataset.REST_CHECK_S)
@counted("Dataset")
def refresh_dataset(**kwargs) -> None:
    dataset.refresh(**kwargs)
    drop_unchanged_status(kwargs["patch"], kwargs["status"])


@kopf.on.delete(*DATASETS)
@counted("Dataset")
def delete_dataset(**kwargs) -> None:
    dataset.delete(**kwargs)


# -- Split -----------------------------------------------------------------------------------------------------------

@kopf.index(*SPLITS)
async def splits_by_dataset(**kwargs) -> dict:
    return split.dataset_index(**kwargs)


@kopf.on.create(*SPLITS)
@kopf.on.resume(*SPLITS)
@counted("Split")
def reconcile_split(**kwargs) -> None:
    split.reconcile(**kwargs)


@kopf.timer(*SPLITS, interval=POLL_S, initial_delay=POLL_S, when=split.job_in_progress)
@counted("Split")
def watch_split(**kwargs) -> None:
    split.watch_job(**kwargs)
    drop_unchanged_status(kwargs["patch"], kwargs["status"])


@kopf.timer(*SPLITS, interval=split.DATASET_CHECK_S, initial_delay=split.DATASET_CHECK_S, when=split.computed)
@counted("Split")
def watch_split_dataset(**kwargs) -> None:
    split.watch_dataset(**kwargs)
    drop_unchanged_status(kwargs["patch"], kwargs["status"])


@kopf.on.delete(*SPLITS)
@counted("Split")
def delete_split(**kwargs) -> None:
    split.delete(**kwargs)


# -- TrainingJob -----------------------------------------------------------------------------------------------------

@kopf.on.create(*TRAININGJOBS)
@kopf.on.update(*TRAININGJOBS, field="spec")
@kopf.on.resume(*TRAININGJOBS)
@counted("TrainingJob")
def reconcile_trainingjob(**kwargs) -> None:
    trainingjob.reconcile(**kwargs)


@kopf.timer(*TRAININGJOBS, interval=POLL_S, initial_delay=POLL_S, when=trainingjob.in_progress)
@counted("TrainingJob")
async def watch_trainingjob(**kwargs) -> None:
    await trainingjob.watch(**kwargs)
    drop_unchanged_status(kwargs["patch"], kwargs["status"], incidental=trainingjob.INCIDENTAL_STATUS)


# -- Ring ------------------------------------------------------------------------------------------------------------

@kopf.index(*DATASETS)
async def datasets_by_ring(**kwargs) -> dict:
    return ring.dataset_index(**kwargs)


@kopf.on.create(*RINGS)
@kopf.on.update(*RINGS, field="spec")
@kopf.on.resume(*RINGS)
@counted("Ring")
def reconcile_ring(**kwargs) -> None:
    ring.reconcile(**kwargs)


@kopf.timer(*RINGS, interval=POLL_S, initial_delay=POLL_S)
@counted("Ring")
def watch_ring(**kwargs) -> None:
    ring.watch(**kwargs)
    drop_unchanged_status(kwargs["patch"], kwargs["status"])


@kopf.timer(*RINGS, interval=CERTIFICATE_CHECK_S, initial_delay=CERTIFICATE_CHECK_S)
@counted("Ring")
def renew_ring_certificates(**kwargs) -> None:
    ring.renew_certificates(**kwargs)


@kopf.on.delete(*RINGS)
@counted("Ring")
def delete_ring(**kwargs) -> None:
    ring.delete(**kwargs)
