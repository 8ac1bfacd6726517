"""A Dataset's ring in its Jobs: the data plane's RingRef as environment variables, its Secrets as ``secretKeyRef``
variables and a mounted CA certificate. spec.storage itself is read by ``ringfeed.ring``. Pure."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from ringfeed.ring import JOB_TLS_CA_FILE, PASSWORD_ENV, USERNAME_ENV, RingRef, RingSecrets

CA_VOLUME = "ring-ca"


def ring_env(storage: dict) -> list[dict]:
    """How a data-plane container finds the ring (``RingRef.from_env`` reads it back) and logs in to it."""
    env: list[dict[str, Any]] = [{"name": name, "value": value}
                                 for name, value in RingRef.from_spec(storage).to_env().items()]
    if credentials := RingSecrets.from_spec(storage).credentials:
        for name, key in ((USERNAME_ENV, credentials.username_key), (PASSWORD_ENV, credentials.password_key)):
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": credentials.name, "key": key}}})
    return env


def ring_volumes(storage: dict) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts) that put the nodes' CA certificate where the Job's environment says (JOB_TLS_CA_FILE)."""
    ca = RingSecrets.from_spec(storage).ca_certificate
    if not ca:
        return [], []
    file = PurePosixPath(JOB_TLS_CA_FILE)
    volume = {"name": CA_VOLUME, "secret": {"secretName": ca.name, "items": [{"key": ca.key, "path": file.name}]}}
    return [volume], [{"name": CA_VOLUME, "mountPath": str(file.parent), "readOnly": True}]
