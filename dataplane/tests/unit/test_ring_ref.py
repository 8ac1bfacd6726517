"""RingRef: one ring reference read from a Dataset's spec.storage, the environment or the command line, and written
into a Job's environment; what the operator writes, the Jobs' `ringfeed` reads back as the same ring."""

from __future__ import annotations

import pytest

from ringfeed.cli.app import main
from ringfeed.connection import ClusterAddress
from ringfeed.errors import RingfeedError, StorageNotSupported
from ringfeed.ring import JOB_TLS_CA_FILE, CredentialsSecret, ProvisionedRing, RingRef, RingSecrets, SecretKey

FULL = {"external": {"contactPoints": ["cass-0.db", "10.0.0.7"], "port": 9142, "localDatacenter": "dc-west",
                     "credentialsSecret": {"name": "cass", "usernameKey": "user", "passwordKey": "pass"},
                     "tls": {"enabled": True, "caSecret": {"name": "ring-ca", "key": "ca.pem"}}}}
MINIMAL = {"external": {"contactPoints": ["cass-0.db"]}}
RING = {"ring": {"name": "images"}}
RING_VARIABLES = ("RINGFEED_HOSTS", "RINGFEED_PORT", "RINGFEED_LOCAL_DC", "RINGFEED_TLS_CA_FILE",
                  "RINGFEED_TLS_SERVER_NAME", "RINGFEED_USERNAME", "RINGFEED_PASSWORD")


def test_spec_storage_is_read_with_its_defaults():
    assert RingRef.from_spec(FULL) == RingRef(("cass-0.db", "10.0.0.7"), 9142, "dc-west", tls=True)
    assert RingRef.from_spec(MINIMAL) == RingRef(("cass-0.db",), 9042, None, tls=False)
    assert RingSecrets.from_spec(FULL) == RingSecrets(CredentialsSecret("cass", "user", "pass"),
                                                      SecretKey("ring-ca", "ca.pem"))
    defaults = {"external": {"contactPoints": ["a"], "credentialsSecret": {"name": "cass"},
                             "tls": {"enabled": True, "caSecret": {"name": "ring-ca"}}}}
    assert RingSecrets.from_spec(defaults) == RingSecrets(CredentialsSecret("cass", "username", "password"),
                                                          SecretKey("ring-ca", "ca.crt"))
    assert RingSecrets.from_spec(MINIMAL) == RingSecrets()
    tls_off = {"external": {**FULL["external"], "tls": {"enabled": False, "caSecret": {"name": "ring-ca"}}}}
    assert not RingRef.from_spec(tls_off).tls and RingSecrets.from_spec(tls_off).ca_certificate is None


def test_a_k8ssandra_ring_is_refused_with_what_to_do():
    storage = {"k8ssandra": {"clusterName": "ring"}}
    for parse in (RingRef.from_spec, RingSecrets.from_spec):
        with pytest.raises(StorageNotSupported, match="spec.storage.k8ssandra: .* use spec.storage.ring .* or "
                                                      "spec.storage.external"):
            parse(storage)


def test_a_ring_is_reached_through_its_service_in_its_datacenter():
    # The operator, in its own namespace, names the Service fully; a Job or loader Pod of the Ring's namespace
    # resolves the relative name through its DNS search path. Either way over TLS, the nodes' certificate checked
    # against the name the client reaches them by.
    assert RingRef.from_spec(RING, "ml") == RingRef(("images-images-service.ml.svc",), 9042, "images", tls=True,
                                                    tls_server_name="images-images-service.ml.svc")
    assert RingRef.from_spec(RING) == RingRef(("images-images-service",), 9042, "images", tls=True,
                                              tls_server_name="images-images-service")
    ring = ProvisionedRing("images")
    assert {"images-images-service", "images-images-service.ml.svc"} <= set(ring.server_names("ml"))
    assert ring.secrets == ("images-superuser", "images-reader", "images-ca", "images-node-tls",
                            "images-maac-server", "images-maac-client")  # what the Ring's deletion releases
    assert RingRef.from_spec(RING, "ml").identity != RingRef.from_spec(RING, "other").identity
    ring = ProvisionedRing("images")
    assert (ring.datacenter, ring.superuser_role, ring.reader_role) == ("images", "images_superuser", "images_reader")
    assert ProvisionedRing("tumour-slides").reader_role == "tumour_slides_reader"  # a CQL identifier


def test_a_ring_logs_in_as_its_superuser_and_loaders_as_its_reader():
    secrets = RingSecrets.from_spec(RING)
    assert secrets == RingSecrets(CredentialsSecret("images-superuser"), SecretKey("images-ca", "ca.crt"),
                                  CredentialsSecret("images-reader"))
    assert secrets.read_only == CredentialsSecret("images-reader")
    # An external ring has one login for both.
    assert RingSecrets.from_spec(FULL).read_only == RingSecrets.from_spec(FULL).credentials


@pytest.mark.parametrize("storage", [FULL, MINIMAL, RING], ids=["full", "minimal", "ring"])
def test_the_jobs_read_back_the_ring_the_operator_wrote(storage, monkeypatch):
    ring = RingRef.from_spec(storage)
    env = ring.to_env()
    assert RingRef.from_env(env) == ring
    # The Job's `ringfeed` reads the same variables through its options, logged in from the Secret's values.
    for name in RING_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in {**env, "RINGFEED_USERNAME": "u", "RINGFEED_PASSWORD": "p"}.items():
        monkeypatch.setenv(name, value)
    with main.make_context("ringfeed", ["inspect"]) as ctx:
        ctx.invoke(main.callback, **ctx.params)
    address = ctx.obj
    assert address.ring == ring and (address.username, address.password) == ("u", "p")
    assert address.tls_ca_file == (JOB_TLS_CA_FILE if ring.tls else None)
    assert ClusterAddress.from_env() == address
    assert address.tls_server_name == ring.tls_server_name


def test_a_pods_login_is_read_from_its_mounted_folder_and_given_values_win(tmp_path, monkeypatch):
    for name in (*RING_VARIABLES, "RINGFEED_USERNAME", "RINGFEED_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "username").write_text("images_reader")
    (tmp_path / "password").write_text("s3cret\n")  # a Secret written with a trailing newline
    monkeypatch.setenv("RINGFEED_LOGIN_DIR", str(tmp_path))
    with main.make_context("ringfeed", ["inspect"]) as ctx:
        ctx.invoke(main.callback, **ctx.params)
    assert (ctx.obj.username, ctx.obj.password) == ("images_reader", "s3cret")
    assert (ClusterAddress.from_env().username, ClusterAddress.from_env().password) == ("images_reader", "s3cret")
    with main.make_context("ringfeed", ["--username", "u", "--password", "p", "inspect"]) as ctx:
        ctx.invoke(main.callback, **ctx.params)
    assert (ctx.obj.username, ctx.obj.password) == ("u", "p")
    (tmp_path / "password").unlink()
    with pytest.raises(Exception, match="cannot read the ring login in .*password"):
        with main.make_context("ringfeed", ["inspect"]) as ctx:
            ctx.invoke(main.callback, **ctx.params)


def test_a_server_name_without_tls_is_refused():
    with pytest.raises(Exception, match="--tls-ca-file"):
        with main.make_context("ringfeed", ["--tls-server-name", "ring.svc", "inspect"]) as ctx:
            ctx.invoke(main.callback, **ctx.params)


def test_the_job_env_names_the_ring_and_no_secret():
    assert RingRef.from_spec(FULL).to_env() == {"RINGFEED_HOSTS": "cass-0.db,10.0.0.7", "RINGFEED_PORT": "9142",
                                                "RINGFEED_LOCAL_DC": "dc-west",
                                                "RINGFEED_TLS_CA_FILE": JOB_TLS_CA_FILE}
    assert RingRef.from_env({}) == RingRef()  # the ring of `ringfeed local up`


def test_command_line_strings_are_read_once_and_checked():
    assert RingRef.parse(" a, b ,,", "9043", "", tls=False) == RingRef(("a", "b"), 9043)
    with pytest.raises(RingfeedError, match="no contact points"):
        RingRef.parse(" , ", 9042, None, tls=False)
    with pytest.raises(RingfeedError, match="port 'x' is not a number"):
        RingRef.parse("a", "x", None, tls=False)
    with pytest.raises(RingfeedError, match="port 70000 is not a TCP port"):
        RingRef.parse("a", 70000, None, tls=False)


def test_a_ring_ref_holds_no_secret_and_keys_a_cache():
    ring = RingRef.from_spec(FULL)
    assert {ring: 1}[RingRef.from_spec(FULL)] == 1
    address = ring.login("u", "secret", "/tmp/ca.crt")
    assert address.ring == ring and "secret" not in repr(address)
    assert {address: 1}[ring.login("u", "secret", "/tmp/ca.crt")] == 1
    assert address != ring.login("u", "rotated", "/tmp/ca.crt")  # a changed Secret is another login
    assert ring.identity == RingRef(("10.0.0.7", "cass-0.db"), 9142).identity  # one ring, whatever the order
    with pytest.raises(RingfeedError, match="TLS needs a CA certificate file"):
        ring.login("u", "secret")
