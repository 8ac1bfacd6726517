"""What keeps a TrainingJob's trainer away from the ring's credentials, pure: the Pod template settings that would
let it into the sidecar's processes, and the Secrets its template names (volumes, projected volumes, variables).

The sidecar holds the ring's login; the trainer holds only the feed. A template that shares the Pod's process
namespace, the node's, or runs as the sidecar's user could read the sidecar's environment and files; one that names
a ring's Secret would get the login directly. The TrainingJob handler refuses both with a condition that says which
part of the template does it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ringfeed.ring import ProvisionedRing, RingSecrets, writer_secret

# The loader sidecar's user and group: outside the ranges images give their users (system users below 1000, the
# first login users from 1000, the shipped images' 10001, distroless' 65532), so no trainer image runs as it by
# accident; a template that asks for it is refused.
SIDECAR_UID = 47701
# Pod settings that join the trainer to other processes: the sidecar's (shareProcessNamespace) or the node's.
SHARED_NAMESPACES = ("shareProcessNamespace", "hostPID", "hostIPC", "hostNetwork")


def isolation_breaches(pod: Mapping) -> list[str]:
    """What in the Pod template (its spec) would let the trainer into the sidecar: each a sentence."""
    found = [f"spec.template.spec.{field} is true: the trainer would see the loader sidecar's processes (or the "
             "node's) and their environment" for field in SHARED_NAMESPACES if pod.get(field)]
    if (pod.get("securityContext") or {}).get("runAsUser") == SIDECAR_UID:
        found.append(f"spec.template.spec.securityContext.runAsUser is {SIDECAR_UID}, the loader sidecar's user")
    for kind, container in _containers(pod):
        if (container.get("securityContext") or {}).get("runAsUser") == SIDECAR_UID:
            found.append(f"{kind} {container.get('name')!r} runs as {SIDECAR_UID}, the loader sidecar's user")
    return found


def secret_references(pod: Mapping) -> dict[str, list[str]]:
    """The Secrets the Pod template names, each with where: volumes (secret, projected) and the containers'
    variables (valueFrom.secretKeyRef, envFrom.secretRef)."""
    found: dict[str, list[str]] = {}
    for volume in pod.get("volumes") or ():
        where = f"volume {volume.get('name')!r}"
        if name := (volume.get("secret") or {}).get("secretName"):
            found.setdefault(name, []).append(where)
        for source in (volume.get("projected") or {}).get("sources") or ():
            if name := (source.get("secret") or {}).get("name"):
                found.setdefault(name, []).append(where)
    for kind, container in _containers(pod):
        for variable in container.get("env") or ():
            if name := ((variable.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name"):
                found.setdefault(name, []).append(f"{kind} {container.get('name')!r} variable {variable.get('name')}")
        for source in container.get("envFrom") or ():
            if name := (source.get("secretRef") or {}).get("name"):
                found.setdefault(name, []).append(f"{kind} {container.get('name')!r} envFrom")
    return found


def ring_secret_names(storage: Mapping) -> set[str]:
    """The Secrets of a Dataset's ring: a Ring's own (logins, CA, node and Management API keys) or an external
    ring's login and CA."""
    if "ring" in storage:
        return set(ProvisionedRing(storage["ring"]["name"]).secrets)
    named = RingSecrets.from_spec(storage)
    return {secret.name for secret in (named.credentials, named.ca_certificate, named.reader) if secret is not None}


def dataset_secret_names(dataset: Mapping) -> set[str]:
    """Every Secret that logs in to a Dataset's ring: its ring's, and on a Ring its writer role's."""
    storage = (dataset.get("spec") or {}).get("storage") or {}
    writer = {writer_secret(dataset["metadata"]["name"]).name} if "ring" in storage else set()
    return ring_secret_names(storage) | writer


def refusal(breaches: list[str], forbidden: Mapping[str, str], references: Mapping[str, list[str]]) -> str | None:
    """The condition's message, or None: `forbidden` maps each Secret the template must not name to whose it is."""
    problems = [*breaches]
    for name in sorted(set(forbidden) & set(references)):
        problems.append(f"{', '.join(references[name])} names Secret {name} ({forbidden[name]})")
    if not problems:
        return None
    return ("the trainer must not reach the ring's credentials, which only the loader sidecar holds: "
            + "; ".join(problems))


def _containers(pod: Mapping) -> Iterator[tuple[str, Mapping]]:
    for kind, field in (("container", "containers"), ("init container", "initContainers")):
        for container in pod.get(field) or ():
            yield kind, container
