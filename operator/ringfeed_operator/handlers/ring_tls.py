"""A Ring's certificates: its CA made once, and the nodes', the Management API's and cass-operator's certificates
issued before the CassandraDatacenter needs them, then renewed when a third of their validity is left (or when they
were not signed by the Ring's CA), by the Ring's change handler and its renewal timer."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from ringfeed.ring import ProvisionedRing
from ringfeed_operator.builders.ring_tls import (
    CA_CERT,
    CA_KEY,
    MANAGEMENT_SERVER_VALIDITY,
    ca_secret,
    leaf_certificate,
    management_secret,
    node_secret,
    secret_text,
    validity,
)
from ringfeed_operator.context import Context
from ringfeed_operator.handlers.common import event
from ringfeed_operator.pki import KeyPair, issue, new_ca, renewal_due, signed_by


def ensure_certificates(name: str, namespace: str, body: dict, memo: Context) -> None:
    """The Ring's four TLS Secrets exist and hold certificates that are not due for renewal."""
    now = dt.datetime.now(dt.UTC)
    ring = ProvisionedRing(name)
    ca = _ca(name, namespace, body, memo, now)
    lifetime = validity(body["spec"])
    names = ring.server_names(namespace)
    leaves: list[tuple[str, Callable[[], dict]]] = [
        (ring.node_tls_secret, lambda: node_secret(body, ca, issue(
            ca, f"{name} nodes", now, lifetime, server=True, client=True, dns_names=names))),
        # Both uses on both certificates: the kubelet's probes call the Management API with the server's own
        # certificate, and cass-operator checks its client certificate as a server's (Go's default key usage).
        (ring.management_server_secret, lambda: management_secret(body, ring.management_server_secret, ca, issue(
            ca, f"{name} management api", now, MANAGEMENT_SERVER_VALIDITY, server=True, client=True,
            dns_names=names))),
        (ring.management_client_secret, lambda: management_secret(body, ring.management_client_secret, ca, issue(
            ca, "cass-operator", now, lifetime, server=True, client=True))),
    ]
    for secret_name, make in leaves:
        existing = memo.kube.read_secret(namespace, secret_name)
        cert = leaf_certificate(existing) if existing else None
        if cert and not renewal_due(cert, now) and signed_by(cert, ca.cert_pem):
            continue
        memo.kube.put_secret(namespace, make())
        if existing:
            event(body, "CertificateRenewed", f"Secret {secret_name}: a third of its validity or less was left, or "
                                              "another CA had signed it")
        else:
            event(body, "CertificateIssued", f"Secret {secret_name}")


def _ca(name: str, namespace: str, body: dict, memo: Context, now: dt.datetime) -> KeyPair:
    secret_name = ProvisionedRing(name).ca_secret
    if existing := memo.kube.read_secret(namespace, secret_name):
        key, cert = secret_text(existing, CA_KEY), secret_text(existing, CA_CERT)
        if key and cert:
            return KeyPair(key, cert)
    ca = new_ca(f"Ring {namespace}/{name}", now)
    memo.kube.put_secret(namespace, ca_secret(body, ca))
    event(body, "CertificateIssued", f"Secret {secret_name}: the Ring's CA")
    return ca
