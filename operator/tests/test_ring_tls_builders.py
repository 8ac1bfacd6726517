"""A Ring's TLS Secrets: what each holds, who owns them, and when they are due, from real certificates."""

from __future__ import annotations

import base64
import datetime as dt

from test_ring_builders import RING

from ringfeed_operator.builders.ring import SECRET_FINALIZER
from ringfeed_operator.builders.ring_tls import (
    DEFAULT_VALIDITY_S,
    ca_secret,
    leaf_certificate,
    management_secret,
    node_secret,
    validity,
)
from ringfeed_operator.pki import issue, new_ca, renewal_due, signed_by

NOW = dt.datetime(2026, 11, 26, tzinfo=dt.UTC)


def as_read(secret: dict) -> dict:
    """The Secret as the API returns it: stringData becomes base64 data."""
    return {**secret, "data": {k: base64.b64encode(v.encode()).decode() for k, v in secret["stringData"].items()}}


def test_each_secret_holds_what_its_reader_expects_and_belongs_to_the_ring():
    ca = new_ca("Ring ml/images", NOW)
    node = issue(ca, "images nodes", NOW, validity(RING["spec"]), server=True, client=True,
                 dns_names=("images-images-service",))
    secrets = [ca_secret(RING, ca), node_secret(RING, ca, node),
               management_secret(RING, "images-maac-server", ca, node)]
    assert [sorted(s["stringData"]) for s in secrets] == [["ca.crt", "ca.key"], ["ca.crt", "node.pem"],
                                                           ["ca.crt", "tls.crt", "tls.key"]]
    assert [s["metadata"]["name"] for s in secrets[:2]] == ["images-ca", "images-node-tls"]
    assert [s["type"] for s in secrets] == ["Opaque", "Opaque", "kubernetes.io/tls"]  # cass-operator's requirement
    for secret in secrets:
        assert secret["metadata"]["ownerReferences"][0]["uid"] == "7c1d-0001"
        assert secret["metadata"]["finalizers"] == [SECRET_FINALIZER]
    bundle = secrets[1]["stringData"]["node.pem"]
    assert bundle.startswith("-----BEGIN PRIVATE KEY-----") and "BEGIN CERTIFICATE" in bundle  # Cassandra's PEM
    for secret in secrets[1:]:
        cert = leaf_certificate(as_read(secret))
        assert cert == node.cert_pem and signed_by(cert, ca.cert_pem) and not renewal_due(cert, NOW)


def test_validity_defaults_to_ninety_days_and_follows_the_spec():
    assert validity({}) == dt.timedelta(seconds=DEFAULT_VALIDITY_S) == dt.timedelta(days=90)
    assert validity({"tls": {"certificateValiditySeconds": 7200}}) == dt.timedelta(hours=2)
