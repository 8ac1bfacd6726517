"""A local datacenter (``ClusterAddress.local_dc``, ``--local-dc``, ``RINGFEED_LOCAL_DC``), end to end on the real node:
the control path (Python driver), the native writer (ingest) and the native fetcher (loader) route to that
datacenter's nodes, and a name no node has is refused when connecting, with the ring's datacenters."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from ringfeed import Loader
from ringfeed.cli.app import main as cli
from ringfeed.demo import make_demo_set
from ringfeed.errors import RingfeedError
from ringfeed.ingest import ingest
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import SplitSpec, create_split
from ringfeed.store import Store

LOCAL_DC = "datacenter1"  # SimpleSnitch's, on the local ring
UNKNOWN = "no node of the ring is in datacenter 'dc-elsewhere'; its datacenters: datacenter1"


def test_ingest_split_and_load_in_the_local_datacenter(cassandra_node, tmp_path):
    name = "dc_slides"
    address = dataclasses.replace(cassandra_node.address, local_dc=LOCAL_DC)
    with Store(address) as store:
        if name in {d.schema.name for d in store.datasets()}:
            store.drop_dataset(name, force=True)
        demo = make_demo_set(tmp_path, patients=2)
        store.create_dataset(DatasetSchema(
            name, (Column("patient_id", "text"), Column("slide_num", "int"), Column("x", "int"), Column("y", "int")),
            Encoding("jpeg"), label_names=("normal", "tumor")))
        summary = ingest(store, name, str(demo.manifest))  # native writer, local datacenter
        create_split(store, name, "all", SplitSpec(ratios=(1,), names=("train",)))
        stored = {u.bytes: data for u, data in store.session.execute(f"SELECT uuid, data FROM {name}.data_by_uuid")}
        delivered = {}
        for blobs, _, uuids in Loader(name, "all", "train", batch_size=16, store=store, with_uuids=True):
            for i, uid in enumerate(uuids):
                start, end = blobs.spans[i]
                delivered[uid.tobytes()] = bytes(blobs.data[start:end])
        assert summary.written > 0 and delivered == stored and len(stored) == summary.written
        store.drop_dataset(name, force=True)


def test_a_datacenter_without_nodes_is_refused_with_the_rings_datacenters(cassandra_node):
    address = dataclasses.replace(cassandra_node.address, local_dc="dc-elsewhere")
    with pytest.raises(RingfeedError) as control:
        Store(address)
    with pytest.raises(RingfeedError) as native:
        address.native_session()
    assert str(control.value) == str(native.value) == UNKNOWN


def test_cli_takes_the_local_datacenter_from_a_flag_or_the_environment(cassandra_node):
    host = cassandra_node.hosts[0]
    refused = CliRunner().invoke(cli, ["--hosts", host, "--local-dc", "dc-elsewhere", "datasets"])
    assert refused.exit_code == 1 and UNKNOWN in refused.output
    accepted = CliRunner(env={"RINGFEED_LOCAL_DC": LOCAL_DC}).invoke(cli, ["--hosts", host, "datasets"],
                                                                      catch_exceptions=False)
    assert accepted.exit_code == 0, accepted.output
