"""`helm test`: the release works as installed. The operator answers on its health port, every CRD of ringfeed.io is
established, and the API server accepts each sample (a server-side dry run: schemas, CEL rules, defaults; nothing is
stored). One line per check; exits 1 when any failed."""

import json
import os
import sys
import urllib.request
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.rest import ApiException

NAMESPACE = os.environ["RELEASE_NAMESPACE"]
GROUP, VERSION = "ringfeed.io", "v1alpha1"
PLURALS = {"Dataset": "datasets", "Split": "splits", "TrainingJob": "trainingjobs", "Ring": "rings"}
SAMPLES = Path(os.environ.get("SAMPLES_DIR", "/checks/samples"))


def operator_answers(core: client.CoreV1Api) -> str:
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=os.environ["OPERATOR_SELECTOR"]).items
    ready = [pod for pod in pods if pod.status.pod_ip and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or ())]
    if not ready:
        raise AssertionError(f"no ready operator Pod ({os.environ['OPERATOR_SELECTOR']})")
    url = f"http://{ready[0].status.pod_ip}:{os.environ['OPERATOR_HEALTH_PORT']}/healthz"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return f"{url} answered {reply.status}"


def crds_established(extensions: client.ApiextensionsV1Api) -> str:
    for plural in PLURALS.values():
        crd = extensions.read_custom_resource_definition(f"{plural}.{GROUP}")
        conditions = {c.type: c.status for c in crd.status.conditions or ()}
        if conditions.get("Established") != "True":
            raise AssertionError(f"CRD {plural}.{GROUP} is not established: {conditions}")
    return f"{len(PLURALS)} CRDs established"


def samples_accepted(custom: client.CustomObjectsApi) -> str:
    accepted = []
    for path in sorted(SAMPLES.glob("*.json")):
        body = json.loads(path.read_text())
        body["metadata"].pop("namespace", None)
        try:
            custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURALS[body["kind"]], body,
                                                   dry_run="All")
        except ApiException as error:
            raise AssertionError(f"{path.stem}: refused ({error.status}): {error.body}") from None
        accepted.append(path.stem)
    if len(accepted) != len(PLURALS):
        raise AssertionError(f"expected a sample of each kind, found {accepted}")
    return f"samples accepted by a server-side dry run: {', '.join(accepted)}"


def main() -> int:
    config.load_incluster_config()
    checks = {"operator": lambda: operator_answers(client.CoreV1Api()),
              "crds": lambda: crds_established(client.ApiextensionsV1Api()),
              "samples": lambda: samples_accepted(client.CustomObjectsApi())}
    failed = 0
    for name, check in checks.items():
        try:
            print(f"PASS {name}: {check()}")
        except Exception as error:  # every failure is reported, the next check still runs
            print(f"FAIL {name}: {error}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
