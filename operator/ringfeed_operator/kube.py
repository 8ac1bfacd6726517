"""The few Kubernetes API calls the handlers make besides kopf's own: Secrets, Jobs, Services, Pods, references
between objects."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
from collections.abc import Callable, Iterator
from typing import Any, cast

import kubernetes
from kubernetes.client import CoreV1Event, V1Job, V1Pod, V1Secret, V1Service
from kubernetes.client.exceptions import ApiException

GROUP = "ringfeed.io"
VERSION = "v1alpha1"
DATASETS = (GROUP, VERSION, "datasets")
SPLITS = (GROUP, VERSION, "splits")
TRAININGJOBS = (GROUP, VERSION, "trainingjobs")
RINGS = (GROUP, VERSION, "rings")


FIELD_MANAGER = "ringfeed-operator"


class SecretNotFound(Exception):
    """A Secret, or a key of it, that a Dataset names does not exist."""


class JobRejected(Exception):
    """The API server refused a Job the operator built from a spec (invalid, forbidden, or another owner's)."""


class ObjectRejected(Exception):
    """The API server refused an object the operator applies (invalid, or forbidden to the operator)."""


REFUSALS = (400, 403, 422)


def api_message(error: ApiException) -> str:
    """The API server's own words for a refusal."""
    try:
        return (json.loads(error.body or "{}") or {}).get("message") or str(error.reason)
    except ValueError:
        return str(error.reason)


@contextlib.contextmanager
def _refusals_rejected(what: str) -> Iterator[None]:
    """The API server's refusal of `what` (invalid, forbidden) as ObjectRejected, in its own words."""
    try:
        yield
    except ApiException as error:
        if error.status in REFUSALS:
            raise ObjectRejected(f"{what} refused by the API server: {api_message(error)}") from None
        raise


def _name(obj: V1Job | V1Pod) -> str:
    """metadata.name of an object the API server returned: always set there, optional in the client's models."""
    if obj.metadata is None or obj.metadata.name is None:
        raise ValueError(f"a {type(obj).__name__} without metadata.name from the API server")
    return obj.metadata.name


def _created(pod: V1Pod) -> dt.datetime:
    """metadata.creationTimestamp of a Pod the API server returned (set by the server, like the name)."""
    if pod.metadata is None or pod.metadata.creation_timestamp is None:
        raise ValueError(f"Pod {_name(pod)} without metadata.creationTimestamp from the API server")
    return pod.metadata.creation_timestamp


_EPOCH = dt.datetime.fromtimestamp(0, dt.UTC)


def _event_time(event: CoreV1Event) -> dt.datetime:
    """When an event last happened: its lastTimestamp (core events), eventTime (events.k8s.io ones), or creation."""
    return event.last_timestamp or event.event_time or event.metadata.creation_timestamp or _EPOCH


def load_configuration() -> None:
    """The kubernetes client's default configuration: the Pod's ServiceAccount in the cluster, else the kubeconfig."""
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()


def api_client(connections: int) -> kubernetes.client.ApiClient:
    """A client of the loaded default configuration whose pool keeps `connections` open (the client's default is 5
    per CPU, whatever the threads that share it)."""
    configuration = kubernetes.client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = connections
    return kubernetes.client.ApiClient(configuration)


class Kube:
    """One API client (the service account's in a cluster, the current kubeconfig context outside) and the calls
    made with it."""

    def __init__(self, api: kubernetes.client.ApiClient):
        self._api = api
        self._core = kubernetes.client.CoreV1Api(api)
        self._batch = kubernetes.client.BatchV1Api(api)
        self._custom = kubernetes.client.CustomObjectsApi(api)
        apps = kubernetes.client.AppsV1Api(api)
        networking = kubernetes.client.NetworkingV1Api(api)
        # (read, server-side apply, delete) of each kind the operator applies
        self._applied: dict[str, tuple[Callable, Callable, Callable]] = {
            "Service": (self._core.read_namespaced_service, self._core.patch_namespaced_service,
                        self._core.delete_namespaced_service),
            "StatefulSet": (apps.read_namespaced_stateful_set, apps.patch_namespaced_stateful_set,
                            apps.delete_namespaced_stateful_set),
            "DaemonSet": (apps.read_namespaced_daemon_set, apps.patch_namespaced_daemon_set,
                          apps.delete_namespaced_daemon_set),
            "NetworkPolicy": (networking.read_namespaced_network_policy, networking.patch_namespaced_network_policy,
                              networking.delete_namespaced_network_policy),
        }

    @classmethod
    def connect(cls, connections: int) -> Kube:
        """A client whose pool keeps `connections` open: one per handler thread. The client's default (5 per CPU)
        made a burst's handlers on 2 CPUs drop connections and open new ones, a TLS handshake each."""
        load_configuration()
        return cls(api_client(connections))

    def secret_values(self, namespace: str, name: str, *keys: str) -> list[str]:
        """Keys of one Secret, read with one request."""
        try:
            secret = self._core.read_namespaced_secret(name, namespace)
        except ApiException as error:
            if error.status == 404:
                raise SecretNotFound(f"Secret {namespace}/{name} not found") from None
            raise
        data = secret.data or {}
        for key in keys:
            if key not in data:
                raise SecretNotFound(f"Secret {namespace}/{name} has no key {key!r}")
        return [base64.b64decode(data[key]).decode() for key in keys]

    def ensure_job(self, namespace: str, manifest: dict) -> tuple[dict | None, bool]:
        """Create the Job unless its owner already made it (a restarted operator finds it); → (job, created). The
        job is None when the existing Job went away between the refused create and the read."""
        name = manifest["metadata"]["name"]
        try:
            # The client validates a dict body into its V1Job model (pydantic), as the API server reads JSON.
            created = self._batch.create_namespaced_job(namespace, cast(V1Job, manifest))
            return self._api.sanitize_for_serialization(created), True
        except ApiException as error:
            if error.status in REFUSALS:
                raise JobRejected(f"Job {name} refused by the API server: {api_message(error)}") from None
            if error.status != 409:
                raise
        job = self.read_job(namespace, name)
        owners = {o.get("uid") for o in (job or {}).get("metadata", {}).get("ownerReferences") or ()}
        if job is not None and manifest["metadata"]["ownerReferences"][0]["uid"] not in owners:
            raise JobRejected(f"Job {name} already exists and belongs to another object")
        return job, False

    def patch_job(self, namespace: str, name: str, patch: dict) -> None:
        self._batch.patch_namespaced_job(name, namespace, patch)

    def ensure_service(self, namespace: str, manifest: dict) -> bool:
        """Create the Service unless it exists (a restarted operator finds it); → created."""
        return _create_unless_exists(lambda: self._core.create_namespaced_service(namespace, cast(V1Service, manifest)))

    def ensure_secret(self, namespace: str, manifest: dict) -> bool:
        """Create the Secret unless it exists (its values are kept: a Ring's passwords are made once); → created."""
        return _create_unless_exists(lambda: self._core.create_namespaced_secret(namespace, cast(V1Secret, manifest)))

    def apply(self, namespace: str, manifest: dict) -> None:
        """Server-side apply (a Service, StatefulSet, DaemonSet or NetworkPolicy): made, or brought back to the
        manifest when it differs; fields others own (the API server's defaults) are left alone."""
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        _, patch, _ = self._applied[kind]
        with _refusals_rejected(f"{kind} {name}"):
            patch(name, namespace, manifest, field_manager=FIELD_MANAGER, force=True,
                  _content_type="application/apply-patch+yaml")

    def read_applied(self, namespace: str, kind: str, name: str) -> dict | None:
        read, _, _ = self._applied[kind]
        try:
            return self._api.sanitize_for_serialization(read(name, namespace))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def delete_applied(self, namespace: str, kind: str, name: str) -> bool:
        """Delete one (its Pods in the background); → whether it existed."""
        _, _, delete = self._applied[kind]
        try:
            delete(name, namespace, propagation_policy="Background")
            return True
        except ApiException as error:
            if error.status != 404:
                raise
            return False

    def read_secret(self, namespace: str, name: str) -> dict | None:
        """A Secret as the API gives it (base64 data), or None."""
        try:
            return self._api.sanitize_for_serialization(self._core.read_namespaced_secret(name, namespace))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def put_secret(self, namespace: str, manifest: dict) -> None:
        """Create the Secret, or give an existing one the manifest's values (a renewal)."""
        if not _create_unless_exists(lambda: self._core.create_namespaced_secret(namespace,
                                                                                  cast(V1Secret, manifest))):
            self._core.patch_namespaced_secret(manifest["metadata"]["name"], namespace,
                                               {"stringData": manifest["stringData"]})

    def release_secret(self, namespace: str, name: str, finalizer: str) -> None:
        """Take `finalizer` off a Secret (gone or without it: nothing to do)."""
        try:
            secret = self._core.read_namespaced_secret(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return
            raise
        meta = cast(kubernetes.client.V1ObjectMeta, secret.metadata)
        if finalizer in (meta.finalizers or ()):
            # A JSON patch: a strategic merge patch merges a Secret's finalizers list (patchStrategy merge), so the
            # finalizer stayed and the Secret, and its namespace, never went. The test makes a concurrent change of
            # the list fail (422) rather than be overwritten.
            kept = [f for f in meta.finalizers or () if f != finalizer]
            self._core.patch_namespaced_secret(name, namespace, [
                {"op": "test", "path": "/metadata/resourceVersion", "value": meta.resource_version},
                {"op": "replace", "path": "/metadata/finalizers", "value": kept}])

    def read_custom(self, group_version_plural: tuple[str, str, str], namespace: str, name: str) -> dict | None:
        """An object of another operator's API (a CassandraDatacenter), or None."""
        try:
            found = self._custom.get_namespaced_custom_object(*group_version_plural[:2], namespace,
                                                              group_version_plural[2], name)
            return cast(dict[str, Any], found)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def list_custom(self, group_version_plural: tuple[str, str, str], namespace: str, selector: str) -> list[dict]:
        listed = self._custom.list_namespaced_custom_object(*group_version_plural[:2], namespace,
                                                            group_version_plural[2], label_selector=selector)
        return cast(dict[str, Any], listed)["items"]

    def create_custom(self, group_version_plural: tuple[str, str, str], namespace: str, manifest: dict) -> bool:
        """Create the object unless one of its name exists; → created. ObjectRejected: the API server refused it."""
        with _refusals_rejected(f"{manifest['kind']} {manifest['metadata']['name']}"):
            return _create_unless_exists(lambda: self._custom.create_namespaced_custom_object(
                *group_version_plural[:2], namespace, group_version_plural[2], manifest))

    def patch_custom(self, group_version_plural: tuple[str, str, str], namespace: str, name: str,
                     patch: dict) -> None:
        """A JSON merge patch (the client sends a dict body as one). ObjectRejected: the API server refused it."""
        with _refusals_rejected(f"a change of {group_version_plural[2]} {name}"):
            self._custom.patch_namespaced_custom_object(*group_version_plural[:2], namespace,
                                                        group_version_plural[2], name, patch)

    def delete_custom(self, group_version_plural: tuple[str, str, str], namespace: str, name: str) -> None:
        """Delete the object (already gone: nothing to do)."""
        try:
            self._custom.delete_namespaced_custom_object(*group_version_plural[:2], namespace,
                                                         group_version_plural[2], name)
        except ApiException as error:
            if error.status != 404:
                raise

    def scale_ring(self, namespace: str, name: str, nodes: int) -> None:
        """Set a Ring's spec.nodes through its scale subresource, as kubectl scale and an HPA do."""
        self._custom.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, "rings", name,
                                                          {"spec": {"replicas": nodes}})

    def pods(self, namespace: str, selector: str) -> list[dict]:
        return [self._api.sanitize_for_serialization(pod)
                for pod in self._core.list_namespaced_pod(namespace, label_selector=selector).items]

    def latest_warning(self, namespace: str, kind: str, name: str) -> tuple[str, str] | None:
        """(reason, message) of the newest Warning event about that object, or None."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name},type=Warning"
        events = self._core.list_namespaced_event(namespace, field_selector=selector).items
        if not events:
            return None
        newest = max(events, key=_event_time)
        return newest.reason or "", newest.message or ""

    def delete_jobs(self, namespace: str, selector: str, fields: str = "") -> None:
        """Delete the Jobs of a label selector (and a field selector) and, in the background, their Pods."""
        for job in self._batch.list_namespaced_job(namespace, label_selector=selector, field_selector=fields).items:
            try:
                self._batch.delete_namespaced_job(_name(job), namespace, propagation_policy="Background")
            except ApiException as error:
                if error.status != 404:
                    raise

    def pods_left(self, namespace: str, selector: str) -> list[str]:
        return [_name(p) for p in self._core.list_namespaced_pod(namespace, label_selector=selector).items]

    def read_job(self, namespace: str, name: str) -> dict | None:
        try:
            job = self._batch.read_namespaced_job(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return self._api.sanitize_for_serialization(job)

    def job_failure(self, namespace: str, job: dict) -> str:
        """Why a Job failed: its condition message and the last lines of its last Pod's log."""
        message = next((c.get("message", "") for c in job["status"].get("conditions") or ()
                        if c["type"] in ("Failed", "FailureTarget")), "")
        pods = self._core.list_namespaced_pod(namespace, label_selector=f"job-name={job['metadata']['name']}").items
        if pods:
            pod = max(pods, key=_created)
            try:
                log = self._core.read_namespaced_pod_log(_name(pod), namespace, tail_lines=5)
                message = f"{message}; last log lines of {_name(pod)}: {log.strip()}"
            except ApiException:
                pass
        return message

    def referrers(self, namespace: str, plural: str, field: Callable[[dict], str | None], name: str) -> list[str]:
        """Names of the objects of ``plural`` in ``namespace`` whose ``field(spec)`` is ``name``: a LIST, for the
        deletion guards, which must not trust an index that may not have seen a new referrer yet."""
        items = self.list_objects(namespace, plural)
        return sorted(item["metadata"]["name"] for item in items if field(item.get("spec") or {}) == name)

    def list_objects(self, namespace: str, plural: str) -> list[dict]:
        """Every Ringfeed object of ``plural`` in ``namespace``: a LIST."""
        # Custom objects come back as the JSON the API server sent (typed `object` by the client).
        listed = cast(dict[str, Any], self._custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural))
        return cast(list[dict], listed["items"])

    def read_object(self, namespace: str, plural: str, name: str) -> dict | None:
        try:
            found = self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
            return cast(dict[str, Any], found)
        except ApiException as error:
            if error.status == 404:
                return None
            raise


def _create_unless_exists(create: Callable[[], object]) -> bool:
    """Run one create call; → True, or False when an object of that name exists (409)."""
    try:
        create()
        return True
    except ApiException as error:
        if error.status != 409:
            raise
        return False
