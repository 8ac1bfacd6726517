"""What the benchmark reads off the cluster: the operator's requests to the apiserver, its CPU and memory, the CPU of
the other processes on the same cores, and the operator's own handler counters.

Requests: the apiserver's `apiserver_request_total` has no user label, and kwok, the controllers and the kubelet
talk to the same apiserver. API Priority and Fairness classifies every request by a FlowSchema, whose subjects can
be one ServiceAccount, and counts it under that FlowSchema (`apiserver_flowcontrol_dispatched_requests_total`). The
benchmark adds FlowSchemas matching only the operator's ServiceAccount, one per verb, all sending it to the priority
level, with the distinguisher, of the FlowSchema that matched it before (the chart's own, else the built-in
`service-accounts`: `workload-low`, by user), so nothing changes for the operator but the name its requests are
counted under. No apiserver flag, restart or audit log is needed; watches count once, when they start.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.request
from pathlib import Path

import yaml

from kubecluster import Cluster

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
PREFIX = "ringfeed-bench-operator"
BUILT_IN = ("workload-low", "ByUser")  # the built-in `service-accounts` FlowSchema's level and distinguisher
_DISPATCHED = re.compile(r'^apiserver_flowcontrol_dispatched_requests_total\{flow_schema="([^"]+)"[^}]*\} (\S+)$')
_REQUESTS = re.compile(r"^apiserver_request_total\{([^}]*)\} (\S+)$")
_WAITED = re.compile(r'^apiserver_flowcontrol_request_wait_duration_seconds_(sum|count)\{([^}]*)\} (\S+)$')
_TERMINATED = re.compile(r"^apiserver_terminated_watchers_total\{([^}]*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_RECONCILES = re.compile(r'^ringfeed_operator_reconciles_total\{[^}]*handler="([^"]+)"[^}]*\} (\S+)$')
_TICK = os.sysconf("SC_CLK_TCK")


def flow_schemas(namespace: str, service_account: str, level: str, distinguisher: str) -> list[dict]:
    """One FlowSchema per verb for the ServiceAccount's requests, and one for whatever else it sends."""
    subject = [{"kind": "ServiceAccount", "serviceAccount": {"namespace": namespace, "name": service_account}}]

    def schema(name: str, precedence: int, verbs: list[str], non_resource: bool = False) -> dict:
        rule = {"subjects": subject, "resourceRules": [{"verbs": verbs, "apiGroups": ["*"], "resources": ["*"],
                                                       "namespaces": ["*"], "clusterScope": True}]}
        if non_resource:
            rule["nonResourceRules"] = [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
        return {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": name},
                "spec": {"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": precedence,
                         "distinguisherMethod": {"type": distinguisher}, "rules": [rule]}}
    return ([schema(f"{PREFIX}-{verb}", 100 + index, [verb]) for index, verb in enumerate(VERBS)]
            + [schema(f"{PREFIX}-other", 199, ["*"], non_resource=True)])


def request_counts(cluster: Cluster) -> dict[str, float]:
    """The apiserver's counters now: the operator's requests by verb (`verb:<verb>`, its FlowSchemas) and their
    seconds queued by API Priority and Fairness (`waited_sum:<verb>`, `waited_count:<verb>`), and every
    client's requests by verb and resource (`all:<VERB> <resource>[/<subresource>]`, apiserver_request_total): the
    operator is the only client that reads Jobs and Secrets or writes the benchmark's objects' status, so those rows
    tell its verbs apart by resource; and the watchers it closed for not keeping up, by resource
    (`terminated:<resource>`)."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    counts = {f"verb:{verb}": 0.0 for verb in (*VERBS, "other")}
    for line in text.splitlines():
        if (match := _DISPATCHED.match(line)) and match[1].startswith(PREFIX + "-"):
            counts["verb:" + match[1].removeprefix(PREFIX + "-")] += float(match[2])
        elif match := _WAITED.match(line):
            labels = dict(_LABEL.findall(match[2]))
            schema = labels.get("flow_schema", "")
            if schema.startswith(PREFIX + "-"):  # its seconds in the priority level's queues, and how many
                key = f"waited_{match[1]}:" + schema.removeprefix(PREFIX + "-")
                counts[key] = counts.get(key, 0.0) + float(match[3])
        elif match := _TERMINATED.match(line):  # watchers the API server closed for not keeping up
            counts[f"terminated:{dict(_LABEL.findall(match[1])).get('resource', '')}"] = float(match[2])
        elif match := _REQUESTS.match(line):
            labels = dict(_LABEL.findall(match[1]))
            if labels.get("resource"):
                key = f"all:{labels['verb']} {labels['resource']}" + (
                    f"/{labels['subresource']}" if labels.get("subresource") else "")
                counts[key] = counts.get(key, 0.0) + float(match[2])
    return counts


def apply_flow_schemas(cluster: Cluster, folder: Path, namespace: str, service_account: str,
                       chart_schema: str) -> tuple[str, str]:
    """The benchmark's FlowSchemas, at the level and with the distinguisher of `chart_schema` where the chart made
    it (operator.apiPriority), else of the built-in schema; → that (level, distinguisher)."""
    found = cluster.kubectl("get", "flowschema", chart_schema, "-o", "json", check=False)
    if found.returncode == 0:
        spec = json.loads(found.stdout)["spec"]
        level, distinguisher = spec["priorityLevelConfiguration"]["name"], spec["distinguisherMethod"]["type"]
    else:
        level, distinguisher = BUILT_IN
    manifest = folder / "flow-schemas.yaml"
    manifest.write_text(yaml.safe_dump_all(flow_schemas(namespace, service_account, level, distinguisher)))
    cluster.kubectl("apply", "-f", str(manifest))
    return level, distinguisher


def handler_runs(pod_ip: str, port: int) -> dict[str, float]:
    """ringfeed_operator_reconciles_total by handler (all results), from the operator's /metrics."""
    with urllib.request.urlopen(f"http://{pod_ip}:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    runs: dict[str, float] = {}
    for line in text.splitlines():
        if match := _RECONCILES.match(line):
            runs[match[1]] = runs.get(match[1], 0.0) + float(match[2])
    return runs


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of the processes (and of their children waited for)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / _TICK


def rss_mib(pids: list[int]) -> float:
    total_kib = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if match := re.search(r"^VmRSS:\s+(\d+) kB", status, re.M):
            total_kib += int(match[1])
    return total_kib / 1024


class Usage:
    """CPU seconds of named process groups between marks, and the peak RSS of one of them (the operator), sampled
    by `sample` (the benchmark's sampler thread calls it every few seconds)."""

    def __init__(self, groups: dict[str, list[int]], tracked: str):
        self.groups, self.tracked = groups, tracked
        self.peak_rss_mib = 0.0
        self.rss_samples: list[tuple[float, float]] = []
        self.cpu_samples: list[tuple[float, dict[str, float]]] = []  # (time.monotonic(), CPU seconds by group)

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(pids) for name, pids in self.groups.items()}

    def sample(self) -> float:
        rss = rss_mib(self.groups[self.tracked])
        self.peak_rss_mib = max(self.peak_rss_mib, rss)
        self.rss_samples.append((time.time(), rss))
        self.cpu_samples.append((time.monotonic(), self.cpu()))
        return rss

    def cores_between(self, start: float, end: float) -> dict[str, float] | None:
        """CPU cores by group from the first sample at or after `start` (time.monotonic()) to the last at or before
        `end`; None when fewer than two samples fall between them."""
        inside = [sample for sample in self.cpu_samples if start <= sample[0] <= end]
        if len(inside) < 2:
            return None
        (t0, cpu0), (t1, cpu1) = inside[0], inside[-1]
        return {name: round((cpu1[name] - cpu0[name]) / (t1 - t0), 3) for name in cpu1}


def apiserver_profile(api, seconds: int, path: Path) -> None:
    """The API server's CPU profile over the next `seconds` (its /debug/pprof, on by default) into `path`, with its
    log at verbosity 1 meanwhile (its watch caches' backlog, the watchers it closes) and its goroutines a third and
    two thirds of the way in (`<path>.goroutines-<n>`): where its cores go and what waits in a burst."""
    def call(method: str, url: str, body: str | None = None, timeout: float = 60):
        headers = {"Authorization": api.configuration.get_api_key_with_prefix("BearerToken"),
                   "Content-Type": "text/plain"}
        return api.call_api(method, f"{api.configuration.host}{url}", headers, body=body, _request_timeout=timeout)

    call("PUT", "/debug/flags/v", "1")

    def goroutines() -> None:
        for index in (1, 2):
            time.sleep(seconds / 3)
            Path(f"{path}.goroutines-{index}").write_bytes(call("GET", "/debug/pprof/goroutine?debug=2").read())

    threading.Thread(target=goroutines, daemon=True).start()
    try:
        path.write_bytes(call("GET", f"/debug/pprof/profile?seconds={seconds}", timeout=seconds + 60).read())
    finally:
        call("PUT", "/debug/flags/v", "0")
