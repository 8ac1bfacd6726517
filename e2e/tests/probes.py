"""Connection attempts for the NetworkPolicy checks: from this process (the node, whose traffic the local cluster's
engine never filters: proof that a port listens) and from sleeper Pods that the restricted Pod Security level admits
(a Pod of another namespace, an unlabelled Pod of the namespace, a Pod with the labels a policy admits).

A refusal is a connection refused or timed out within the connect timeout (kube-router rejects at once); a port that
does not listen is refused too, so every port is first shown to listen from the node.
"""

from __future__ import annotations

import json
import socket

from kubernetes import client

from kubecluster import PULL_SECRET, Cluster

CONNECT_TIMEOUT_S = 1.0
OPEN, BLOCKED = "open", "blocked"
# Tries each HOST:PORT argument once; prints {target: open | refused | timeout | error N} as JSON.
PROBE = ("import json, socket, sys\n"
         "verdicts = {}\n"
         "for target in sys.argv[2:]:\n"
         "    host, port = target.rsplit(':', 1)\n"
         "    try:\n"
         "        socket.create_connection((host, int(port)), timeout=float(sys.argv[1])).close()\n"
         "        verdicts[target] = 'open'\n"
         "    except TimeoutError: verdicts[target] = 'timeout'\n"
         "    except ConnectionRefusedError: verdicts[target] = 'refused'\n"
         "    except OSError as e: verdicts[target] = f'error {e.errno}'\n"
         "print(json.dumps(verdicts))\n")
SLEEP = "import time; time.sleep(86400)"


def connect(target: str) -> str:
    """One attempt from this process: open, refused, timeout or error N."""
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
        return "open"
    except TimeoutError:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as error:
        return f"error {error.errno}"


def verdict(attempt: str) -> str:
    return OPEN if attempt == "open" else BLOCKED if attempt in ("refused", "timeout") else attempt


def sleeper(cluster: Cluster, name: str, labels: dict[str, str] | None = None) -> client.V1Pod:
    """A Pod of the data-plane image that only sleeps, admitted by the restricted level."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels or {}),
        spec=client.V1PodSpec(
            termination_grace_period_seconds=1, automount_service_account_token=False,
            image_pull_secrets=[client.V1LocalObjectReference(name=PULL_SECRET)],
            security_context=client.V1PodSecurityContext(
                run_as_non_root=True, seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault")),
            containers=[client.V1Container(
                name="main", image=cluster.image("dataplane"),
                command=["python3", "-c", SLEEP],
                security_context=client.V1SecurityContext(
                    allow_privilege_escalation=False, capabilities=client.V1Capabilities(drop=["ALL"])))]))


def attempts_from(cluster: Cluster, namespace: str, pod: str, targets: list[str], container: str | None = None
                  ) -> dict[str, str]:
    """Each target tried once from a running Pod's container (python3 in its image)."""
    where = ["-c", container] if container else []
    output = cluster.kubectl("exec", "-n", namespace, pod, *where, "--", "python3", "-c", PROBE,
                             str(CONNECT_TIMEOUT_S), *targets).stdout
    return json.loads(output)


def check_isolated(cluster: Cluster, namespace: str, targets: dict[str, str],
                   insiders: dict[str, tuple[dict[str, str], tuple[str, ...]]] | None = None) -> None:
    """Each target (what → HOST:PORT) listens, and refuses a Pod of another namespace and an unlabelled Pod of
    `namespace`; each insider (name → its labels, the targets it reaches) gets in there."""
    listening = {what: connect(target) for what, target in targets.items()}
    assert all(attempt == "open" for attempt in listening.values()), f"not listening (from the node): {listening}"
    rogue_namespace = f"{namespace[:50]}-rogue"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=rogue_namespace, labels={
        "ringfeed.io/test": "true", "pod-security.kubernetes.io/enforce": "restricted"})))
    cluster.allow_pulls(rogue_namespace)
    sources = {"rogue": (rogue_namespace, {}), "stranger": (namespace, {})}
    found: dict[str, dict[str, str]] = {}
    for name, (labels, _) in (insiders or {}).items():
        sources[name] = (namespace, labels)
    try:
        cluster.wait("the rogue namespace's ServiceAccount", lambda: cluster.core.list_namespaced_service_account(
            rogue_namespace, field_selector="metadata.name=default").items)
        for name, (where, labels) in sources.items():
            cluster.core.create_namespaced_pod(where, sleeper(cluster, f"probe-{name}", labels))
        for name, (where, _) in sources.items():
            cluster.wait(f"probe-{name} running", lambda where=where, name=name: cluster.core.read_namespaced_pod(
                f"probe-{name}", where).status.phase == "Running", timeout_s=90)
        for name, (where, _) in sources.items():
            # A new Pod is open for a moment until the engine has its rules: the refusals are waited for.
            expected = {what: OPEN if what in (insiders or {}).get(name, ({}, ()))[1] else BLOCKED
                        for what in targets}

            def as_expected(name=name, where=where, expected=expected):
                tried = attempts_from(cluster, where, f"probe-{name}", list(targets.values()))
                found[name] = {what: verdict(tried[target]) for what, target in targets.items()}
                return found[name] == expected
            cluster.wait(f"the policies' verdicts for probe-{name}", as_expected, timeout_s=30)
    except AssertionError:
        raise AssertionError(f"verdicts (source → port → open/blocked): {found}") from None
    finally:
        for name, (where, _) in sources.items():
            cluster.core.delete_namespaced_pod(f"probe-{name}", where, grace_period_seconds=0)
        cluster.core.delete_namespace(rogue_namespace, grace_period_seconds=0)
