"""The certificates of a Ring: one CA per Ring, kept by the operator, and the certificates it signs for the nodes (CQL
and internode), the Management API and cass-operator's calls to it. Keys are made here (``cryptography``), never
leave the cluster's Secrets, and are renewed well before they expire (``renewal_due``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import cast

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_BITS = 2048
# A certificate is renewed once less than this share of its validity is left (the kubelet then takes up to about
# a minute to update the mounted files, and the servers reload them on their own period).
RENEW_WHEN_LEFT = 1 / 3
CA_VALIDITY = dt.timedelta(days=3650)
BACKDATE = dt.timedelta(minutes=5)  # tolerates clocks a little behind the operator's


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """A PEM private key (PKCS#8, unencrypted: it lives in a Secret) and its PEM certificate."""

    key_pem: str
    cert_pem: str

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem.encode())


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)


def _pem(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def new_ca(common_name: str, now: dt.datetime) -> KeyPair:
    """A self-signed CA that may sign leaf certificates only (path length 0)."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Ringfeed"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return KeyPair(_pem(key), cert.public_bytes(serialization.Encoding.PEM).decode())


def issue(ca: KeyPair, common_name: str, now: dt.datetime, validity: dt.timedelta, *, server: bool = False,
          client: bool = False, dns_names: tuple[str, ...] = ()) -> KeyPair:
    """A leaf certificate signed by `ca` for TLS servers and/or clients, with the names clients check."""
    key = _new_key()
    ca_key = cast(rsa.RSAPrivateKey, serialization.load_pem_private_key(ca.key_pem.encode(), password=None))
    usages = [*([ExtendedKeyUsageOID.SERVER_AUTH] if server else []),
              *([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])]
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Ringfeed"),
                                        x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
               .issuer_name(ca.certificate.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - BACKDATE).not_valid_after(now + validity)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, key_cert_sign=False,
                                            crl_sign=False, content_commitment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False, decipher_only=False),
                              critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    if dns_names:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]),
                                        critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(_pem(key), cert.public_bytes(serialization.Encoding.PEM).decode())


def renewal_due(cert_pem: str, now: dt.datetime, renew_when_left: float = RENEW_WHEN_LEFT) -> bool:
    """Whether less than `renew_when_left` of the certificate's validity is left (or it is unreadable)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
    except ValueError:
        return True
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now >= end - (end - start) * renew_when_left


def signed_by(cert_pem: str, ca_cert_pem: str) -> bool:
    """Whether `ca_cert_pem` signed `cert_pem` (a CA made again invalidates every certificate of the old one)."""
    try:
        x509.load_pem_x509_certificate(cert_pem.encode()).verify_directly_issued_by(
            x509.load_pem_x509_certificate(ca_cert_pem.encode()))
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
