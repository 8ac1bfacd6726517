"""Every failure a user can meet is a RingfeedError subclass whose one line says what happened and what to do, and
the retry counters count the retries that happened: against real nodes (a node of its own that is stopped and asks
for a password, the shared node for the rest)."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ringfeed import Decode, Loader, _native
from ringfeed.errors import (
    AuthenticationFailed,
    DatasetNotFound,
    PartNotFound,
    RingTimeout,
    RingUnavailable,
    SampleNotFound,
    SchemaMismatch,
    SplitNotFound,
    ring_error,
)
from ringfeed.ingest import IngestOptions, ingest
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import SplitSpec, create_split
from ringfeed.store import Store

RINGFEED = str(Path(sys.executable).with_name("ringfeed"))
SAMPLE_BYTES = 16_384


def run(address, *args):
    env = {**os.environ, "RINGFEED_HOSTS": ",".join(address.hosts), "COLUMNS": "200"}
    if address.username:
        env |= {"RINGFEED_USERNAME": address.username, "RINGFEED_PASSWORD": address.password}
    return subprocess.run([RINGFEED, *args], capture_output=True, text=True, env=env)


def raw_dataset(store: Store, name: str, folder: Path, samples: int) -> None:
    """A raw-encoded dataset of `samples` uint8 tensors of SAMPLE_BYTES, keyed by `item`, with a split "all"."""
    store.create_dataset(DatasetSchema(name, (Column("item", "int"),), Encoding("raw", "uint8", (SAMPLE_BYTES,))))
    for i in range(samples):
        (folder / f"{i}.bin").write_bytes(bytes([i % 256]) * SAMPLE_BYTES)
    (folder / "m.csv").write_text("path,item,label\n" + "".join(f"{i}.bin,{i},{i % 2}\n" for i in range(samples)))
    ingest(store, name, str(folder / "m.csv"))
    create_split(store, name, "all", SplitSpec(ratios=(1, 1), names=("train", "val"), seed=0))


@pytest.fixture(scope="module")
def login(password_node):
    """The password node's address with the default superuser, once Cassandra has made it (~10 s after start)."""
    address = dataclasses.replace(password_node.address, username="cassandra", password="cassandra")
    deadline = time.monotonic() + 120
    while True:
        try:
            Store(address, connect_timeout_s=5).close()
            return address
        except AuthenticationFailed:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def test_a_wrong_password_is_authentication_failed(login):
    wrong = dataclasses.replace(login, password="wrong")
    with pytest.raises(AuthenticationFailed, match=r"^Cassandra at 127\.0\.31\.1:9042 refused the credentials "
                                                   r".*; check the username and password$") as error:
        Store(wrong, connect_timeout_s=10)
    assert error.value.cli_hint.startswith("--username/--password")
    with pytest.raises(AuthenticationFailed, match="refused the credentials"):
        wrong.native_session()
    with pytest.raises(AuthenticationFailed, match="refused the credentials"):
        dataclasses.replace(login, username=None, password=None).native_session()
    proc = run(wrong, "datasets")
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: Cassandra at 127.0.31.1:9042 refused the credentials")
    # the message, then the hint naming the options
    assert proc.stderr.count("\n") == 2 and "\nhint: --username/--password" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_node_stopped_mid_epoch_is_ring_unavailable_and_its_retries_are_counted(password_node, login, tmp_path):
    name = "t_" + uuid.uuid4().hex[:12]
    with Store(login) as store:
        raw_dataset(store, name, tmp_path, samples=6000)
    # The reader holds at most `memory_bytes` ahead of the trainer (its window grows to that on loopback), so a train
    # part of ~3,000 × 16 kB (49 MB) is still partly unread when the node stops after the first batch.
    loader = Loader(name, "all", "train", batch_size=8, address=login, shuffle=False, concurrency=4, prefetch=1,
                    memory_bytes=32 * 2**20, max_retries=3)
    batches = iter(loader)
    next(batches)
    password_node.kill()
    try:
        with pytest.raises(RingUnavailable, match=r"^reading .* from t_\w+\.data_by_uuid: cannot reach Cassandra at "
                                                  r"127\.0\.31\.1:9042, or too few replicas are up \(.*failed after "
                                                  r"3 retries.*\); is the ring up") as error:
            for _ in batches:
                pass
        assert "\n" not in str(error.value)
        assert loader.stats.retries >= 3  # the failed read's own retries, at least
        with pytest.raises(RingUnavailable, match="^cannot reach Cassandra at 127.0.31.1:9042"):
            login.native_session()
        proc = run(login, "inspect", name)
        assert proc.returncode == 1
        assert proc.stderr.startswith("error: cannot reach Cassandra at 127.0.31.1:9042")
    finally:
        password_node.restart()


def test_a_node_stopped_mid_ingest_names_the_writers_retries(password_node, login, tmp_path):
    name = "t_" + uuid.uuid4().hex[:12]
    rows = 3000
    with Store(login) as store:
        store.create_dataset(DatasetSchema(name, (Column("item", "int"),), Encoding("raw", "uint8", (SAMPLE_BYTES,))))
        for i in range(rows):
            (tmp_path / f"{i}.bin").write_bytes(bytes([i % 256]) * SAMPLE_BYTES)
        (tmp_path / "m.csv").write_text("path,item,label\n" + "".join(f"{i}.bin,{i},0\n" for i in range(rows)))

        class StopHalfway:
            done = 0
            stopped = False

            def start(self, total):
                pass

            def advance(self, inputs):
                self.done += inputs
                if self.done >= rows // 2 and not self.stopped:
                    self.stopped = True
                    password_node.kill()

        try:
            with pytest.raises((RingUnavailable, RingTimeout),
                               match=r"^ingest of 't_\w+' interrupted after [\d,]+ rows written and [\d,]+ retries "
                                     r"\(re-run the same command") as error:
                ingest(store, name, str(tmp_path / "m.csv"), IngestOptions(chunk_size=32), StopHalfway())
            retries = re.search(r"and ([\d,]+) retries", str(error.value)).group(1)
            assert int(retries.replace(",", "")) > 0
            assert "\n" not in str(error.value)
        finally:
            password_node.restart()


def test_a_request_that_times_out_is_ring_timeout_and_its_retries_are_counted(password_node, login, tmp_path):
    name = "t_" + uuid.uuid4().hex[:12]
    with Store(login) as store:
        raw_dataset(store, name, tmp_path, samples=64)
        uuids = store.scan(name, "data_by_uuid", ["uuid"])["uuid"]
    session = _native.Session(list(login.hosts), login.port, login.username, login.password, request_timeout_ms=500)
    fetcher = session.fetcher(name, max_retries=2, request_bytes=2**24)
    # A node that is up but answers nothing: the connection stays open, so only the client's timeout ends the wait.
    with password_node.frozen():
        fetcher.submit(0, uuids.tobytes())
        with pytest.raises(_native.Timeout, match="failed after 2 retries") as raised:
            fetcher.take(0)
    assert fetcher.retries == 2
    error = ring_error(raised.value, "reading")
    assert isinstance(error, RingTimeout)
    assert str(error).startswith("reading: Cassandra did not answer in time (reading 64 samples")
    fetcher.submit(1, uuids.tobytes())  # the node goes on: the same session reads again
    batch = fetcher.take(1)
    assert batch.missing == [] and len(np.frombuffer(batch.positions, np.int64)) == 64
    session.close()


def test_a_missing_dataset_split_part_or_sample_says_which(store, cassandra_node, dataset_name, tmp_path):
    raw_dataset(store, dataset_name, tmp_path, samples=20)
    address = cassandra_node.address
    with pytest.raises(DatasetNotFound, match=r"^unknown dataset 't_nope' \(known: "):
        Loader("t_nope", "all", address=address)
    with pytest.raises(SplitNotFound, match=f"^dataset '{dataset_name}' has no split 'nope'"):
        Loader(dataset_name, "nope", address=address)
    with pytest.raises(PartNotFound, match=r"^split 'all' has no part 'test' \(parts: train, val\)"):
        Loader(dataset_name, "all", "test", address=address)
    absent = uuid.uuid4()
    with pytest.raises(SampleNotFound, match=f"^dataset '{dataset_name}' has no sample with UUID {absent}"):
        store.sample(dataset_name, absent)
    with pytest.raises(SampleNotFound, match=f"^dataset '{dataset_name}' has no sample with item=999"):
        store.sample_by_key(dataset_name, {"item": "999"})
    for args, message in [
        (["load", "t_nope", "all"], "error: unknown dataset 't_nope'"),
        (["load", dataset_name, "nope"], f"error: dataset '{dataset_name}' has no split 'nope'"),
        (["load", dataset_name, "all", "--part", "test"], "error: split 'all' has no part 'test'"),
        (["get", dataset_name, str(absent)], f"error: dataset '{dataset_name}' has no sample with UUID {absent}"),
    ]:
        proc = run(address, *args)
        assert proc.returncode == 1, args
        assert proc.stderr.startswith(message), proc.stderr
        assert "Traceback" not in proc.stderr


def test_data_or_tables_that_do_not_fit_the_schema_are_schema_mismatch(store, cassandra_node, dataset_name,
                                                                      tmp_path):
    store.create_dataset(DatasetSchema(dataset_name, (Column("item", "int"),), Encoding("raw", "uint8", (4,)),
                                       metadata=(Column("site", "text"),)))
    (tmp_path / "0.bin").write_bytes(bytes(4))
    with pytest.raises(SchemaMismatch, match="already exists with a different schema"):
        store.create_dataset(DatasetSchema(dataset_name, (Column("other", "text"),), Encoding("png")))
    (tmp_path / "lacking.csv").write_text("path,item,label\n0.bin,0,0\n")
    with pytest.raises(SchemaMismatch, match=r"does not match dataset .*missing column\(s\) site"):
        ingest(store, dataset_name, str(tmp_path / "lacking.csv"))
    # A table changed outside Ringfeed: its column is gone.
    store.session.execute(f"ALTER TABLE {dataset_name}.metadata_by_nat DROP site")
    (tmp_path / "full.csv").write_text("path,item,site,label\n0.bin,0,a,0\n")
    with pytest.raises(SchemaMismatch, match=f"^ingest into '{dataset_name}': Cassandra at 127.0.10.1:9042 rejected "
                                             r"the request \(cannot prepare .*site.*\); the tables no longer match"):
        ingest(store, dataset_name, str(tmp_path / "full.csv"))
    proc = run(cassandra_node.address, "ingest", dataset_name, str(tmp_path / "full.csv"))
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error: ingest into '{dataset_name}': Cassandra at 127.0.10.1:9042 rejected the "
                                  "request")
    assert "Traceback" not in proc.stderr


def test_a_corrupt_jpeg_is_counted_and_reported_never_a_crash(store, cassandra_node, dataset_name, tmp_path):
    store.create_dataset(DatasetSchema(dataset_name, (Column("item", "int"),), Encoding("jpeg")))
    for i in range(12):
        image = io.BytesIO()
        Image.fromarray(np.full((40, 40, 3), i * 20, dtype=np.uint8)).save(image, "JPEG")
        (tmp_path / f"{i}.jpg").write_bytes(image.getvalue())
    (tmp_path / "m.csv").write_text("path,item,label\n" + "".join(f"{i}.jpg,{i},0\n" for i in range(12)))
    ingest(store, dataset_name, str(tmp_path / "m.csv"))
    create_split(store, dataset_name, "all", SplitSpec(ratios=(1,), seed=0))
    # Damaged on the ring after ingest checked it: a JPEG with its middle cut out.
    victim, data = store.session.execute(f"SELECT uuid, data FROM {dataset_name}.data_by_uuid LIMIT 1").one()
    store.session.execute(f"UPDATE {dataset_name}.data_by_uuid SET data = %s WHERE uuid = %s",
                          (data[:200] + data[-2:], victim))
    loader = Loader(dataset_name, "all", "all", batch_size=5, address=cassandra_node.address, decode=Decode(32, 32))
    delivered = sum(len(y) for _, y in loader)
    assert delivered == 11
    assert loader.stats.corrupt == 1 and loader.stats.corrupt_samples[0][0] == str(victim)
    proc = run(cassandra_node.address, "load", dataset_name, "all", "--part", "all", "--decode", "32x32")
    assert proc.returncode == 0, proc.stderr
    assert "corrupt 1" in proc.stdout and f"corrupt {victim}: " in proc.stdout

