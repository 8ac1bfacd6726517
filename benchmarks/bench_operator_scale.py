"""`make bench-operator-scale`: the operator under thousands of objects on the local cluster, their Pods on
simulated nodes (kwok), so that what is measured is the operator and the apiserver, not the Pods.

The run: a fresh local cluster (stopped at the end unless --keep), a Cassandra node outside it (the Datasets' external
ring), the packaged chart as the e2e installs it (`operator.verbose=false`: a production log level), `--nodes`
simulated nodes with the real node cordoned (operator_scale/kwok.py), the node agents (kube-router, the NetworkPolicy
engine, and kwok, the simulated kubelets) at the lowest CPU priority (NODE_AGENT_NICE), then:

  warm-up  one triple per namespace through the whole path (untimed)
  create   --count Datasets (each with an ingest Job) → Ready; their splits stored as the split Jobs would store them;
           --count Splits (each with a split Job) → Ready; --count TrainingJobs (one rank each) → Running
  settle   --settle-s for the creation burst's retries and timers' first rounds (untimed)
  rest     --rest-s with nothing changing
  churn    --churn-s in which, each minute, 10 % of the triples are deleted and created again

and reports, per kind and phase, the time from the create call to the object's first status and to Ready (Running
for a TrainingJob), p50 and p99; the operator's CPU (and that of the other processes on the same cores) and
resident memory; its apiserver requests by verb (operator_scale/probes.py: its own FlowSchemas) and its handler
runs, at rest and under churn; and, as a reference for each create burst, the API server's own pace on two
heartbeats (operator_scale/heartbeat.py: a ConfigMap and a TrainingJob written and watched every 0.25 s) and the
watchers it closed for not keeping up. --profile-apiserver KIND adds its CPU profile, goroutines and verbosity-1
log through that kind's burst. Everything goes to .state/bench/operator-scale-<count>.json. It ends with

  BAR operator_first_status_p99_s           p99 over every object created in `create` and `churn`   (≤ 5)
  BAR operator_rss_mib                      the operator's peak resident memory over the run       (≤ 512 at 3,000)
  BAR operator_requests_per_object_minute   at rest, all verbs, per object (all kinds) per minute  (≤ 1)

An object that never got there within the phase's timeout counts with the time waited (a lower bound).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
from kubernetes import client, config

from ringfeed.connection import ClusterAddress
from ringfeed.local import LocalRing, RingSettings
from ringfeed.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e" / "tests"))
from kubecluster import (  # noqa: E402
    CACHE,
    CHART_INSTALL,
    LOCAL_SETTINGS,
    RELEASE,
    REPO,
    RING_ADDRESS_PREFIX,
    STATE,
    SYSTEM,
    Cluster,
    container_pids,
)
from operator_scale import probes  # noqa: E402
from operator_scale.heartbeat import KINDS as HEARTBEAT_KINDS  # noqa: E402
from operator_scale.heartbeat import Heartbeat  # noqa: E402
from operator_scale.kwok import SimulatedNodes  # noqa: E402
from operator_scale.objects import CREDENTIALS, triples  # noqa: E402
from operator_scale.scenario import PLURALS, Scenario, progress  # noqa: E402
from operator_scale.timeline import Life, Timeline  # noqa: E402

OUT = REPO / ".state" / "bench"
FIRST_STATUS_BAR_S, RSS_BAR_MIB, REQUESTS_BAR = 5.0, 512.0, 1.0
CHURN_FRACTION = 0.10
SAMPLE_S = 2.0  # the operator's memory, read this often
METRICS_PORT = 9090  # the chart's operator.metricsPort
HEARTBEAT_NAMESPACE = "bench-heartbeat"
# The node agents' work on a real cluster is spread over its worker nodes, beside the Pods, never on the control
# plane's cores: here they share 2 cores with it, and kube-router's sync for each TrainingJob's NetworkPolicy took
# 0.4 of them in the TrainingJobs' burst. At the lowest priority they still do all of it, after the control plane.
NODE_AGENTS, NODE_AGENT_NICE = ("kwok", "kube-router"), 19
PROFILE_S = 40


def cluster_script(command: str) -> None:
    env = dict(os.environ, RINGFEED_CACHE=str(CACHE), RINGFEED_CLUSTER_DIR=str(STATE))
    subprocess.run([str(REPO / "e2e" / "cluster" / "cluster.sh"), command], env=env, check=True, timeout=300)


def api_client(kubeconfig: Path) -> client.ApiClient:
    """A client whose connection pool holds the watches and the concurrent create calls."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 32
    return client.ApiClient(configuration)


class Operator:
    """The operator's Pod as installed by the chart: its ServiceAccount, address and processes."""

    def __init__(self, cluster: Cluster):
        deployment = cluster.apps.read_namespaced_deployment(RELEASE, SYSTEM)
        self.service_account = deployment.spec.template.spec.service_account_name
        selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
        self._core, self._selector = cluster.core, selector
        pod = self._pod()
        self.ip = pod.status.pod_ip
        self.pids = container_pids(pod.status.container_statuses[0].container_id.split("://")[-1])

    def _pod(self) -> client.V1Pod:
        return self._core.list_namespaced_pod(SYSTEM, label_selector=self._selector).items[0]

    def restarts(self) -> int:
        """Restarts of its container (its CPU and memory are read from the processes found at the start)."""
        return self._pod().status.container_statuses[0].restart_count


def lowest_priority(pids: list[int]) -> None:
    """Every thread of each process to NODE_AGENT_NICE (the threads and processes they start inherit it)."""
    for pid in pids:
        for task in (Path("/proc") / str(pid) / "task").iterdir():
            try:
                os.setpriority(os.PRIO_PROCESS, int(task.name), NODE_AGENT_NICE)
            except ProcessLookupError:  # a thread that ended meanwhile
                pass


def process_groups(operator: Operator, kwok_pid: int, ring: LocalRing) -> dict[str, list[int]]:
    groups = {"operator": operator.pids, "kwok": [kwok_pid], "bench": [os.getpid()],
              "cassandra": [n.pid for n in ring.status() if n.pid]}
    for name in ("apiserver", "etcd", "controller-manager", "scheduler", "kube-router"):
        groups[name] = [int((STATE / "run" / f"{name}.pid").read_text())]
    return groups


def sample_until(usage: probes.Usage, stop: threading.Event) -> None:
    while not stop.wait(SAMPLE_S):
        usage.sample()


def window(cluster: Cluster, usage: probes.Usage, operator: Operator, seconds: float, objects: int,
           during=None) -> dict:
    """Requests by verb, handler runs and CPU over `seconds` (while `during` runs, if given)."""
    requests0, runs0, cpu0, t0 = (probes.request_counts(cluster), probes.handler_runs(operator.ip, METRICS_PORT),
                                  usage.cpu(), time.monotonic())
    if during:
        during(seconds)
    else:
        time.sleep(seconds)
    requests1, runs1, cpu1 = (probes.request_counts(cluster), probes.handler_runs(operator.ip, METRICS_PORT),
                              usage.cpu())
    minutes = (time.monotonic() - t0) / 60
    rates = {key: (requests1[key] - requests0.get(key, 0.0)) / minutes for key in requests1}
    requests = {key.removeprefix("verb:"): round(rate, 1) for key, rate in rates.items() if key.startswith("verb:")}
    waited = {verb: round((requests1[f"waited_sum:{verb}"] - requests0.get(f"waited_sum:{verb}", 0.0)) / count, 3)
              for verb in requests if (count := requests1.get(f"waited_count:{verb}", 0.0)
                                       - requests0.get(f"waited_count:{verb}", 0.0)) > 0}
    busiest = sorted(((rate, key.removeprefix("all:")) for key, rate in rates.items() if key.startswith("all:")),
                     reverse=True)[:12]
    return {"minutes": round(minutes, 2), "objects": objects, "requests_per_minute": requests,
            "requests_per_object_minute": round(sum(requests.values()) / objects, 3),
            "queued_mean_s": waited,
            "watchers_terminated": {key.removeprefix("terminated:"): int(requests1[key] - requests0.get(key, 0.0))
                                    for key in requests1 if key.startswith("terminated:")
                                    and requests1[key] > requests0.get(key, 0.0)},
            "all_clients_requests_per_minute": {key: round(rate, 1) for rate, key in busiest},
            "handler_runs_per_minute": {h: round((runs1[h] - runs0.get(h, 0)) / minutes, 1) for h in runs1
                                        if runs1[h] > runs0.get(h, 0)},
            "cpu_cores": {name: round((cpu1[name] - cpu0[name]) / (minutes * 60), 3) for name in cpu1},
            "operator_rss_mib": round(usage.sample(), 1)}


def latencies(timeline: Timeline, timeout: Callable[[str], float]) -> dict:
    """p50/p99 of first status and Ready per phase and kind; an object that never got there counts with its phase's
    timeout."""
    table: dict[str, dict] = {}
    for phase in ("create", "churn"):
        for plural in PLURALS:
            lives = [life for life in list(timeline.lives.values()) if life.phase == phase and life.kind == plural]
            if not lives:
                continue
            row: dict = {"objects": len(lives)}
            for mark in ("first_status", "ready"):
                seconds = [(getattr(life, mark) or life.created + timeout(phase)) - life.created for life in lives]
                row[mark] = {**percentiles(seconds),
                             "missing": sum(1 for life in lives if getattr(life, mark) is None)}
            row["first_status_waits"] = first_status_waits(lives)
            table[f"{phase}/{plural}"] = row
    return table


def create_calls(bursts: list[dict], usage: probes.Usage, hearts: dict[str, Heartbeat]) -> list[dict]:
    """Each kind's create calls in the create phase: how many a second, the CPU of each process group meanwhile
    (where the samples, every SAMPLE_S, fall inside them), and the API server's pace on the heartbeat."""
    return [{"kind": burst["kind"], "objects": burst["objects"], "seconds": round(burst["end"] - burst["start"], 1),
             "per_second": round(burst["objects"] / max(burst["end"] - burst["start"], 1e-3), 1),
             "cpu_cores": usage.cores_between(burst["start"], burst["end"]),
             "heartbeat": {kind: heart.between(burst["start"], burst["end"]) for kind, heart in hearts.items()}}
            for burst in bursts if burst["phase"] == "create"]


def percentiles(seconds: list[float]) -> dict:
    return {"p50": round(float(np.percentile(seconds, 50)), 2), "p99": round(float(np.percentile(seconds, 99)), 2)}


def first_status_waits(lives: list[Life]) -> dict:
    """Where the first status waited, of the objects that got one: the create call (the API server's queue), the
    object's first event reaching a watching process of the benchmark (the API server's delivery: a lower bound of
    the operator's lag in seeing it), then the operator's write and its delivery there."""
    done = [life for life in lives if life.first_status is not None and life.seen is not None]
    if not done:
        return {}
    return {"create_call": percentiles([life.returned - life.created for life in done]),
            "event_here": percentiles([max(0.0, life.seen - life.returned) for life in done]),
            "status_after_event": percentiles([life.first_status - max(life.seen, life.returned) for life in done])}


def first_status_p99(timeline: Timeline, timeout: Callable[[str], float]) -> float:
    seconds = [(life.first_status or life.created + timeout(life.phase)) - life.created
               for life in list(timeline.lives.values()) if life.phase in ("create", "churn")]
    return float(np.percentile(seconds, 99))


def report(result: dict) -> None:
    print(f"\n{result['count']} triples ({3 * result['count']} objects, {result['rest']['objects']} with the "
          f"warm-up's) in {result['namespaces']} namespaces, {result['nodes']} simulated nodes")
    print(f"{'phase/kind':<24}{'first status p50/p99 s':>24}{'Ready p50/p99 s':>20}{'missing':>9}")
    for key, row in result["latencies"].items():
        first, ready = row["first_status"], row["ready"]
        print(f"{key:<24}{first['p50']:>12.2f}{first['p99']:>12.2f}{ready['p50']:>10.2f}{ready['p99']:>10.2f}"
              f"{ready['missing']:>9}")
    for name in ("create", "rest", "churn"):
        part = result[name]
        print(f"\n{name}: {part['requests_per_object_minute']} requests per object-minute "
              f"({sum(part['requests_per_minute'].values()):.0f}/min: {part['requests_per_minute']})")
        print(f"  mean seconds queued at the API server (its priority and fairness), by verb: {part['queued_mean_s']}")
        print(f"  handler runs/min: {part['handler_runs_per_minute']}")
        print(f"  watchers the API server closed for not keeping up: {part['watchers_terminated'] or 'none'}")
        print(f"  all clients' busiest requests/min: {part['all_clients_requests_per_minute']}")
        print(f"  CPU (cores): {part['cpu_cores']}; operator RSS {part['operator_rss_mib']} MiB")
    print(f"\n{'first status waited in (p50 p99 s)':<40}{'the create call':>20}{'its first event here':>22}"
          f"{'the status after it':>20}")
    for key, row in result["latencies"].items():
        waits = row.get("first_status_waits")
        if waits:
            print(f"{key:<40}" + "".join(f"{waits[part]['p50']:>{width - 10}.2f}{waits[part]['p99']:>10.2f}"
                                         for part, width in (("create_call", 20), ("event_here", 22),
                                                             ("status_after_event", 20))))
    for burst in result["create_calls"]:
        print(f"create calls of {burst['objects']} {burst['kind']}: {burst['seconds']} s ({burst['per_second']}/s), "
              f"CPU (cores) meanwhile: {burst['cpu_cores']}")
        for kind, beats in burst["heartbeat"].items():
            if beats:
                print(f"  the API server's heartbeat on {kind} meanwhile ({beats['beats']} beats, p50/p99 s): write "
                      f"call {beats['write_call']['p50']}/{beats['write_call']['p99']}, its event delivered "
                      f"{beats['delivery']['p50']}/{beats['delivery']['p99']} after it")
    if result["churn_rounds"]:
        print(f"churn rounds: {result['churn_rounds']}")
    print(f"operator peak RSS {result['peak_rss_mib']} MiB, {result['operator_restarts']} restart(s); not there in "
          f"time: {result['missing'] or 'none'}\n")


def checkpoint(count: int, measured: dict) -> None:
    """Add to what the run has measured so far, in case it ends early."""
    path = OUT / f"operator-scale-{count}.partial.json"
    so_far = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**so_far, **measured}, indent=1))


def signal_operator(cluster: Cluster) -> None:
    """SIGUSR1 to the operator: its memory_report starts tracing, or reports."""
    cluster.kubectl("exec", "-n", SYSTEM, f"deploy/{RELEASE}", "-c", "operator", "--", "python", "-c",
                    "import os, signal; os.kill(1, signal.SIGUSR1)")


def memory_report(cluster: Cluster, count: int) -> None:
    """The operator's largest allocation sites at rest (its memory_report), into the output folder."""
    signal_operator(cluster)
    time.sleep(30)  # the snapshot of a few hundred MiB of traced blocks takes a while
    logs = cluster.kubectl("logs", "-n", SYSTEM, f"deploy/{RELEASE}", "-c", "operator", "--since=5m").stdout
    report = [line for line in logs.splitlines() if "memory report" in line]
    path = OUT / f"operator-scale-{count}.memory.txt"
    path.write_text("\n".join(report) + "\n")
    progress(f"memory report: {len(report)} lines in {path}")


def profile_burst(api: client.ApiClient, args: argparse.Namespace, phase: str, kind: str) -> None:
    """With --profile-apiserver KIND: the API server's CPU profile through that kind's create burst, in a thread."""
    if phase == "create" and kind == args.profile_apiserver:
        path = OUT / f"operator-scale-{args.count}.apiserver-{kind}.pprof"
        threading.Thread(target=probes.apiserver_profile, args=(api, PROFILE_S, path), daemon=True).start()
        progress(f"profiling the API server for {PROFILE_S} s into {path}")


def bar(name: str, value: float, limit: float) -> bool:
    print(f"BAR {name} {value:.3f} {limit:g} {'PASS' if value <= limit else 'FAIL'}")
    return value <= limit


def run(args: argparse.Namespace, cluster: Cluster, folder: Path) -> dict:
    run_id = uuid.uuid4().hex[:8]
    (OUT / f"operator-scale-{args.count}.partial.json").unlink(missing_ok=True)
    ring = LocalRing(folder / "ring", RingSettings(cluster_name="ringfeed-bench", address_prefix=RING_ADDRESS_PREFIX,
                                                   jmx_base=7700, heap=args.ring_heap, ring_delay_ms=1000))
    ring.down(purge=True)
    ring.up(1)
    nodes = timeline = None
    hearts: dict[str, Heartbeat] = {}
    try:
        cluster.kubectl("create", "namespace", SYSTEM)
        cluster.allow_pulls(SYSTEM)
        cluster.helm("install", RELEASE, *CHART_INSTALL, "-n", SYSTEM, *LOCAL_SETTINGS, "--set",
                     "operator.verbose=false", "--wait", "--timeout", "180s", timeout=240)
        operator = Operator(cluster)
        level, distinguisher = probes.apply_flow_schemas(cluster, folder, SYSTEM, operator.service_account,
                                                         f"{RELEASE}-operator")
        nodes = SimulatedNodes(cluster.core, CACHE / "kwok" / "bin" / "kwok", cluster.kubeconfig,
                               folder / "kwok.log", args.nodes)
        nodes.start()
        progress(f"chart installed (the operator's requests at priority level {level}, flows {distinguisher}), "
                 f"{args.nodes} simulated nodes Ready, the real node cordoned")
        namespaces = [f"bench-{index}" for index in range(args.namespaces)]
        for namespace in namespaces:
            cluster.kubectl("create", "namespace", namespace)
            cluster.kubectl("create", "secret", "generic", CREDENTIALS, "-n", namespace,
                            "--from-literal=username=cassandra", "--from-literal=password=cassandra")
        api = api_client(cluster.kubeconfig)
        timeline = Timeline(cluster.kubeconfig, PLURALS, run_id)
        timeline.start()
        cluster.kubectl("create", "namespace", HEARTBEAT_NAMESPACE)
        hearts = {kind: Heartbeat(cluster.kubeconfig, kind, HEARTBEAT_NAMESPACE) for kind in HEARTBEAT_KINDS}
        for heart in hearts.values():
            heart.start()
        if args.trace_memory:
            signal_operator(cluster)  # starts tracing: the report at rest holds what the objects made
        groups = process_groups(operator, nodes.pid, ring)
        lowest_priority([pid for agent in NODE_AGENTS for pid in groups[agent]])
        usage = probes.Usage(groups, "operator")
        sampling = threading.Event()
        threading.Thread(target=sample_until, args=(usage, sampling), daemon=True).start()
        with Store(ClusterAddress(tuple(ring.hosts))) as store:
            scenario = Scenario(api, timeline, store, ring.hosts, run_id, Cluster.image("trainer"), args.timeout_s,
                                on_burst=lambda phase, kind: profile_burst(api, args, phase, kind))
            scenario.build(triples(len(namespaces), namespaces, first=args.count), "warm-up")
            load = triples(args.count, namespaces)
            objects = 3 * (args.count + len(namespaces))
            started = time.monotonic()
            create = window(cluster, usage, operator, 0, objects, during=lambda _: scenario.build(load, "create"))
            created_s = time.monotonic() - started
            checkpoint(args.count, {"created_s": round(created_s), "latencies": latencies(timeline, scenario.timeout),
                                    "create": create})
            time.sleep(args.settle_s)
            rest = window(cluster, usage, operator, args.rest_s, objects)
            checkpoint(args.count, {"rest": rest, "peak_rss_mib": usage.peak_rss_mib})
            if args.trace_memory:
                memory_report(cluster, args.count)
            progress(f"rest: {rest['requests_per_object_minute']} requests per object-minute")
            churn = window(cluster, usage, operator, args.churn_s, objects,
                           during=lambda seconds: scenario.churn(load, CHURN_FRACTION, seconds))
        sampling.set()
        return {"count": args.count, "namespaces": args.namespaces, "nodes": args.nodes,
                "node_agents_nice": dict.fromkeys(NODE_AGENTS, NODE_AGENT_NICE), "created_s": round(created_s),
                "latencies": latencies(timeline, scenario.timeout), "create": create, "rest": rest, "churn": churn,
                "churn_rounds": scenario.rounds, "missing": scenario.missing,
                "create_calls": create_calls(scenario.bursts, usage, hearts),
                "peak_rss_mib": round(usage.peak_rss_mib, 1), "operator_restarts": operator.restarts(),
                "rss_samples": usage.rss_samples,
                "heartbeat_beats": {kind: heart.beats for kind, heart in hearts.items()},
                # for a look afterwards: each object's marks (wall clock), and where the monotonic beats fall on it
                "lives": [dataclasses.asdict(life) for life in timeline.lives.values()],
                "wall_minus_monotonic_s": time.time() - time.monotonic(),
                "first_status_p99_s": round(first_status_p99(timeline, scenario.timeout), 2)}
    finally:
        for watching in (timeline, *hearts.values()):
            if watching is not None:
                watching.stop()
        if nodes is not None:
            nodes.stop()
        ring.down(purge=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000, help="Datasets, Splits and TrainingJobs: this many each")
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=10, help="simulated nodes")
    parser.add_argument("--settle-s", type=float, default=30)
    parser.add_argument("--rest-s", type=float, default=180)
    parser.add_argument("--churn-s", type=float, default=180)
    parser.add_argument("--timeout-s", type=float, help="per kind and phase (default: 120 s + 1 s per triple)")
    parser.add_argument("--ring-heap", default="2G", help="the Cassandra node's heap (two tables per Dataset)")
    parser.add_argument("--trace-memory", action="store_true",
                        help="trace the operator's allocations from the first object on (slower) and save its "
                             "memory report at rest: where its memory goes, not a figure for the bars")
    parser.add_argument("--profile-apiserver", choices=PLURALS, metavar="KIND",
                        help="save the API server's CPU profile through the create burst of this kind (datasets, "
                             "splits, trainingjobs) beside the results")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running (make cluster-down stops it)")
    args = parser.parse_args()
    args.timeout_s = args.timeout_s or 120 + args.count
    folder = OUT / "operator-scale"
    folder.mkdir(parents=True, exist_ok=True)
    cluster_script("up")
    try:
        result = run(args, Cluster(STATE / "kubeconfig"), folder)
    finally:
        if not args.keep:
            cluster_script("down")
    (OUT / f"operator-scale-{args.count}.json").write_text(json.dumps(result, indent=1))
    report({k: v for k, v in result.items() if k not in ("rss_samples", "heartbeat_beats", "lives")})
    passed = [bar("operator_first_status_p99_s", result["first_status_p99_s"], FIRST_STATUS_BAR_S),
              bar("operator_rss_mib", result["peak_rss_mib"], RSS_BAR_MIB),
              bar("operator_requests_per_object_minute", result["rest"]["requests_per_object_minute"], REQUESTS_BAR)]
    return 0 if all(passed) else 1


if __name__ == "__main__":
    sys.exit(main())
