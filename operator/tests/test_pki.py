"""A Ring's certificates: what the CA signs, the names clients check, when they are renewed, and a real TLS
handshake on loopback with them (Python's ssl, OpenSSL underneath, as the drivers)."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509

from ringfeed_operator.pki import KeyPair, issue, new_ca, renewal_due, signed_by

# Now, not a fixed date: the handshakes below check the certificates against the real clock.
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
SERVICE = "images-images-service.ml.svc"


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return new_ca("ring ml/images", NOW)


@pytest.fixture(scope="module")
def node(ca) -> KeyPair:
    return issue(ca, "images node", NOW, dt.timedelta(days=90), server=True, client=True, dns_names=(SERVICE,))


def test_the_ca_signs_leaves_only_and_its_leaves_name_the_ring(ca, node):
    constraints = ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0
    assert signed_by(node.cert_pem, ca.cert_pem)
    assert not signed_by(node.cert_pem, new_ca("another ring", NOW).cert_pem)
    names = node.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [SERVICE]
    assert not node.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert "BEGIN PRIVATE KEY" in node.key_pem  # PKCS#8, what Cassandra's PEM keystore reads


@pytest.mark.parametrize("elapsed,due", [
    (dt.timedelta(0), False), (dt.timedelta(days=59), False), (dt.timedelta(days=61), True),
    (dt.timedelta(days=100), True), (-dt.timedelta(days=1), False),
])
def test_a_certificate_is_renewed_once_a_third_of_its_validity_is_left(node, elapsed, due):
    assert renewal_due(node.cert_pem, NOW + elapsed) is due


def test_an_unreadable_certificate_is_due():
    assert renewal_due("not a certificate", NOW)


def _handshake(tmp_path: Path, server: KeyPair, trusted: KeyPair, server_name: str,
               client_cert: KeyPair | None = None, require_client: KeyPair | None = None) -> None:
    """One TLS handshake on loopback: the server presents `server`, the client trusts `trusted`'s CA and checks
    `server_name`; raises ssl.SSLError when either side refuses."""
    (tmp_path / "server.pem").write_text(server.key_pem + server.cert_pem)
    (tmp_path / "ca.crt").write_text(trusted.cert_pem)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "server.pem")
    if require_client:
        (tmp_path / "client-ca.crt").write_text(require_client.cert_pem)
        server_context.verify_mode = ssl.CERT_REQUIRED
        server_context.load_verify_locations(tmp_path / "client-ca.crt")
    client_context = ssl.create_default_context(cafile=tmp_path / "ca.crt")
    if client_cert:
        (tmp_path / "client.pem").write_text(client_cert.key_pem + client_cert.cert_pem)
        client_context.load_cert_chain(tmp_path / "client.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    failures: list[BaseException] = []

    def accept() -> None:
        connection, _ = listener.accept()
        try:
            with server_context.wrap_socket(connection, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError) as error:
            failures.append(error)

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        with socket.create_connection(listener.getsockname()) as raw, \
                client_context.wrap_socket(raw, server_hostname=server_name) as tls:
            tls.sendall(b"x")
            tls.recv(1)  # TLS 1.3: the server's verdict on the client's certificate arrives after the handshake
    except ssl.SSLError:
        raise
    except OSError:
        pass
    finally:
        thread.join(timeout=10)
        listener.close()
    if failures:
        raise failures[0]


def test_a_client_that_trusts_the_rings_ca_accepts_its_node_by_the_services_name(tmp_path, ca, node):
    _handshake(tmp_path, node, ca, SERVICE)


@pytest.mark.parametrize("name", ["other-service.ml.svc", "images-images-service.other.svc", "10.244.0.7"])
def test_a_node_is_refused_under_any_other_name(tmp_path, ca, node, name):
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(tmp_path, node, ca, name)


def test_a_node_of_another_rings_ca_is_refused(tmp_path, ca):
    other = new_ca("ring ml/other", NOW)
    stranger = issue(other, "other node", NOW, dt.timedelta(days=1), server=True, dns_names=(SERVICE,))
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(tmp_path, stranger, ca, SERVICE)


def test_mutual_tls_takes_a_client_certificate_of_the_ca_and_refuses_others(tmp_path, ca, node):
    caller = issue(ca, "cass-operator", NOW, dt.timedelta(days=1), client=True)
    _handshake(tmp_path, node, ca, SERVICE, client_cert=caller, require_client=ca)
    stranger = issue(new_ca("elsewhere", NOW), "stranger", NOW, dt.timedelta(days=1), client=True)
    with pytest.raises(ssl.SSLError):
        _handshake(tmp_path, node, ca, SERVICE, client_cert=stranger, require_client=ca)
    with pytest.raises(ssl.SSLError):
        _handshake(tmp_path, node, ca, SERVICE, require_client=ca)
