"""TLS to the ring, end to end on the real node (its CQL port takes TLS and plain clients alike): the control path
(Python driver), the native writer (ingest) and the native fetcher (loader) all verify the node's certificate."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from ringfeed import Loader, _native
from ringfeed.cli.app import main as cli
from ringfeed.demo import make_demo_set
from ringfeed.errors import RingfeedError
from ringfeed.ingest import ingest
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import SplitSpec, create_split
from ringfeed.store import Store


@pytest.fixture(scope="module")
def tls_address(cassandra_node):
    ca = cassandra_node.ring.tls_ca_file
    assert ca, "the test node is started with TLS (conftest)"
    return dataclasses.replace(cassandra_node.address, tls_ca_file=ca)


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    """A CA that did not sign the node's certificate."""
    folder = tmp_path_factory.mktemp("other-ca")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other",
                    "-keyout", str(folder / "ca.key"), "-out", str(folder / "ca.crt")], check=True, capture_output=True)
    return str(folder / "ca.crt")


def test_ingest_split_and_load_over_tls(tls_address, tmp_path):
    name = "tls_slides"
    with Store(tls_address) as store:
        assert store._cluster.ssl_context is not None
        if name in {d.schema.name for d in store.datasets()}:
            store.drop_dataset(name, force=True)
        demo = make_demo_set(tmp_path, patients=4)
        store.create_dataset(DatasetSchema(
            name, (Column("patient_id", "text"), Column("slide_num", "int"), Column("x", "int"), Column("y", "int")),
            Encoding("jpeg"), metadata=(Column("scanner", "text"),), label_names=("normal", "tumor")))
        summary = ingest(store, name, str(demo.manifest))  # native writer, TLS
        assert summary.written > 0
        create_split(store, name, "all", SplitSpec(ratios=(1,), names=("train",)))
        stored = {u.bytes: data for u, data in store.session.execute(f"SELECT uuid, data FROM {name}.data_by_uuid")}
        loader = Loader(name, "all", "train", batch_size=16, store=store, with_uuids=True)  # native fetcher, TLS
        seen = 0
        for blobs, _, uuids in loader:
            for i, uid in enumerate(uuids):
                start, end = blobs.spans[i]
                assert bytes(blobs.data[start:end]) == stored[uid.tobytes()]
                seen += 1
        assert seen == summary.written == len(stored)
        store.drop_dataset(name, force=True)


def test_a_certificate_from_another_ca_is_refused(cassandra_node, other_ca):
    address = dataclasses.replace(cassandra_node.address, tls_ca_file=other_ca)
    with pytest.raises(RingfeedError, match="cannot reach Cassandra"):
        Store(address, connect_timeout_s=5)
    with pytest.raises(ConnectionError, match="cannot connect to 127.0.10.1:9042"):
        _native.Session(list(address.hosts), address.port, tls_ca_file=other_ca)


def test_a_missing_ca_file_is_a_clear_error(cassandra_node, tmp_path):
    missing = str(tmp_path / "nope.crt")
    with pytest.raises(RingfeedError, match="TLS: cannot read the CA certificate .*nope.crt"):
        Store(dataclasses.replace(cassandra_node.address, tls_ca_file=missing))
    with pytest.raises(ValueError, match="TLS: cannot read the CA certificate .*nope.crt"):
        _native.Session(list(cassandra_node.hosts), tls_ca_file=missing)


def test_cli_connects_with_tls_ca_file(cassandra_node, tls_address):
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, ["--hosts", cassandra_node.hosts[0], "--tls-ca-file", tls_address.tls_ca_file,
                                      "datasets"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = CliRunner(env={"RINGFEED_TLS_CA_FILE": "/nonexistent/ca.crt"}).invoke(
        cli, ["--hosts", cassandra_node.hosts[0], "datasets"])
    assert result.exit_code == 1 and "TLS: cannot read the CA certificate /nonexistent/ca.crt" in result.output


def test_a_server_name_is_checked_instead_of_the_address(cassandra_node, tls_address):
    """As a Ring's clients connect: the nodes' certificate must carry the name, whatever the node's address."""
    named = dataclasses.replace(tls_address, tls_server_name=cassandra_node.ring.tls_server_name)
    with Store(named) as store:
        assert store.session.execute("SELECT release_version FROM system.local").one()
    named.native_session().close()


@pytest.mark.parametrize("name", ["nodes.another-ring", "ringfeed-local", "127.0.0.1"])
def test_a_node_without_the_server_name_is_refused(cassandra_node, tls_address, name):
    wrong = dataclasses.replace(tls_address, tls_server_name=name)
    with pytest.raises(RingfeedError, match="cannot reach Cassandra"):
        Store(wrong, connect_timeout_s=5)
    with pytest.raises(RingfeedError, match="cannot reach|cannot connect"):
        wrong.native_session()


def test_a_server_name_does_not_excuse_another_ca(cassandra_node, tls_address, other_ca):
    wrong = dataclasses.replace(tls_address, tls_ca_file=other_ca, tls_server_name=cassandra_node.ring.tls_server_name)
    with pytest.raises(RingfeedError, match="cannot reach|cannot connect"):
        wrong.native_session()
