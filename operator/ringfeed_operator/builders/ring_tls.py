"""A Ring's TLS (always on), pure: the Secrets that hold its CA and the certificates it signs, the Cassandra settings
that encrypt CQL and internode traffic with them, the volume that brings them into each node, and the mutual TLS of
the Management API. The keys themselves are made by ``ringfeed_operator.pki``.

Who proves what to whom (docs/security.md):
- a client (the operator, Jobs, sidecars) checks a node's certificate against the Ring's CA and the Service host
  name it connects by (every node carries all the Service's names: Pod addresses are unknown when it is made);
- nodes check each other's certificates against the CA (internode ``require_client_auth``);
- the Management API takes calls only with a client certificate of the CA, which only cass-operator holds.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping

from ringfeed.ring import ProvisionedRing
from ringfeed_operator.builders.ring import ring_secret
from ringfeed_operator.pki import KeyPair

NODE_TLS_VOLUME = "ringfeed-node-tls"
NODE_TLS_DIR = "/etc/ringfeed/ring-tls"
NODE_PEM = "node.pem"  # the node's key and certificate, Cassandra's PEM keystore
CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT, TLS_KEY = "tls.crt", "tls.key"  # cass-operator's names for the Management API's Secrets
PEM_FACTORY = {"class_name": "org.apache.cassandra.security.PEMBasedSslContextFactory"}
# At least 3600 (the CRD's minimum): Cassandra looks for new certificate files every 600 s (SSLFactory's fixed
# period) and the kubelet updates a mounted Secret within about a minute, so a certificate renewed with a third of
# its validity left is in use well before it expires.
DEFAULT_VALIDITY_S = 90 * 24 * 3600
# The Management API does not load a renewed server certificate (its file watcher misses the symlink swap of a
# Secret volume's update): its certificate lives as long as the CA, and only cass-operator, which holds the client
# certificate of the same CA, checks it. A new CA issues it again, and the nodes take it when they restart.
MANAGEMENT_SERVER_VALIDITY = dt.timedelta(days=3650)


def validity(spec: Mapping) -> dt.timedelta:
    """How long the certificates a Ring's CA signs are valid (spec.tls.certificateValiditySeconds)."""
    return dt.timedelta(seconds=(spec.get("tls") or {}).get("certificateValiditySeconds", DEFAULT_VALIDITY_S))


def encryption_settings() -> dict:
    """cassandra.yaml: CQL only over TLS (a plaintext client is refused), internode over mutual TLS."""
    keystore = f"{NODE_TLS_DIR}/{NODE_PEM}"
    truststore = f"{NODE_TLS_DIR}/{CA_CERT}"
    return {
        "client_encryption_options": {"enabled": True, "optional": False, "require_client_auth": False,
                                      "ssl_context_factory": PEM_FACTORY, "keystore": keystore},
        "server_encryption_options": {"internode_encryption": "all", "optional": False,
                                      "ssl_context_factory": PEM_FACTORY, "keystore": keystore,
                                      "outbound_keystore": keystore, "truststore": truststore,
                                      "require_client_auth": True,
                                      # peers are Pods: their certificates name the Service, not their addresses
                                      "require_endpoint_verification": False},
    }


def node_volume(name: str) -> tuple[dict, dict]:
    """(volume, mount) of the nodes' certificate in the Cassandra container."""
    return ({"name": NODE_TLS_VOLUME, "secret": {"secretName": ProvisionedRing(name).node_tls_secret}},
            {"name": NODE_TLS_VOLUME, "mountPath": NODE_TLS_DIR, "readOnly": True})


def management_api_auth(name: str) -> dict:
    """The Management API with mutual TLS: cass-operator calls it with the client certificate, probes included."""
    ring = ProvisionedRing(name)
    return {"manual": {"clientSecretName": ring.management_client_secret,
                       "serverSecretName": ring.management_server_secret}}


def ca_secret(ring: dict, ca: KeyPair) -> dict:
    """The CA: its key stays with the operator; clients mount only ca.crt."""
    return ring_secret(ring, ProvisionedRing(ring["metadata"]["name"]).ca_secret,
                       {CA_CERT: ca.cert_pem, CA_KEY: ca.key_pem})


def node_secret(ring: dict, ca: KeyPair, node: KeyPair) -> dict:
    return ring_secret(ring, ProvisionedRing(ring["metadata"]["name"]).node_tls_secret,
                       {NODE_PEM: node.key_pem + node.cert_pem, CA_CERT: ca.cert_pem})


def management_secret(ring: dict, name: str, ca: KeyPair, leaf: KeyPair) -> dict:
    """cass-operator reads only Secrets of type kubernetes.io/tls for the Management API."""
    return ring_secret(ring, name, {CA_CERT: ca.cert_pem, TLS_CERT: leaf.cert_pem, TLS_KEY: leaf.key_pem},
                       "kubernetes.io/tls")


def secret_text(secret: dict, key: str) -> str | None:
    """A value of a Secret as read from the API (base64 data)."""
    value = (secret.get("data") or {}).get(key)
    return base64.b64decode(value).decode() if value else None


def leaf_certificate(secret: dict) -> str | None:
    """The certificate a Ring's Secret holds (the node's PEM bundle: the part after the key)."""
    if bundle := secret_text(secret, NODE_PEM):
        return bundle[bundle.find("-----BEGIN CERTIFICATE-----"):]
    return secret_text(secret, TLS_CERT)
