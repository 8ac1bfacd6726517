"""ringfeed._native against a real Cassandra node: byte-exact bulk writes, value conversion, failure paths."""

from __future__ import annotations

import datetime
import gc
import os
import socket
import threading
import time
import uuid

import pytest
from cassandra.query import SimpleStatement

from ringfeed import _native

KEYSPACE = "rf_native_writer"
SAMPLE_BYTES = 20_000
PAYLOADS = [os.urandom(SAMPLE_BYTES) for _ in range(64)]


def payload(i: int) -> bytes:
    """Distinct per row: the row number, then one of the random buffers."""
    return i.to_bytes(4, "big") + PAYLOADS[i % len(PAYLOADS)][4:]


def data_rows(start: int, stop: int) -> list[tuple[uuid.UUID, int, bytes]]:
    return [(uuid.UUID(int=i + 1), i % 10, payload(i)) for i in range(start, stop)]


def call_with_deadline(fn, seconds: float):
    """Run ``fn`` in a daemon thread; fail the test (instead of hanging it) if it has not returned in time."""
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__} still running after {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.fixture(scope="module")
def keyspace(cassandra_node):
    session = cassandra_node.session()
    session.execute(f"DROP KEYSPACE IF EXISTS {KEYSPACE}")
    session.execute(f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    for table in ("data_by_uuid", "typecheck", "dropped", "crash"):
        session.execute(f"CREATE TABLE {KEYSPACE}.{table} (uuid uuid PRIMARY KEY, label int, data blob) "
                        "WITH compression = {'enabled': 'false'}")
    session.execute(f"CREATE TABLE {KEYSPACE}.all_types (id uuid PRIMARY KEY, tu timeuuid, i int, bi bigint, "
                    "si smallint, ti tinyint, t text, a ascii, vc varchar, b blob, d double, f float, flag boolean, "
                    "ts timestamp, l list<int>)")
    yield KEYSPACE
    cassandra_node.wait_reachable(session)
    session.execute(f"DROP KEYSPACE IF EXISTS {KEYSPACE}")


@pytest.fixture
def native(cassandra_node):
    return _native.Session(cassandra_node.hosts, cassandra_node.port)


def insert_data(native, keyspace, table="data_by_uuid"):
    return native.prepare(f"INSERT INTO {keyspace}.{table} (uuid, label, data) VALUES (?, ?, ?)")


def count(driver_session, keyspace: str, table: str) -> int:
    return driver_session.execute(f"SELECT count(*) FROM {keyspace}.{table}").one()[0]


def test_20k_rows_of_20kb_round_trip_byte_exact(cassandra_node, native, keyspace):
    rows = 20_000
    statement = insert_data(native, keyspace)
    assert statement.columns == [("uuid", "uuid"), ("label", "int"), ("data", "blob")]
    writer = native.writer(concurrency=64)
    for start in range(0, rows, 1000):
        writer.submit(statement, data_rows(start, start + 1000))
    assert writer.flush() == rows
    stats = writer.stats()
    assert stats["rows"] == rows
    assert stats["failed"] == 0
    assert stats["bytes"] == rows * (16 + 4 + SAMPLE_BYTES)

    unread = {uuid.UUID(int=i + 1): i for i in range(rows)}
    scan = SimpleStatement(f"SELECT uuid, label, data FROM {keyspace}.data_by_uuid", fetch_size=200)  # 4 MB pages
    result = cassandra_node.session().execute(scan, timeout=60)
    for row_uuid, label, data in result:
        i = unread.pop(row_uuid)
        assert label == i % 10
        assert data == payload(i)
    assert not unread


def test_every_supported_type_round_trips(cassandra_node, native, keyspace):
    statement = native.prepare(f"INSERT INTO {keyspace}.all_types"
                               " (id, tu, i, bi, si, ti, t, a, vc, b, d, f, flag, ts, l)"
                               " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
    assert [type_name for _, type_name in statement.columns] == [
        "uuid", "timeuuid", "int", "bigint", "smallint", "tinyint", "text", "ascii", "text", "blob", "double",
        "float", "boolean", "timestamp", "list<int>"]
    full_id, bytes_id, null_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    time_id = uuid.uuid1()
    ts_ms = 1_700_000_000_123
    rows = [
        (full_id, time_id, -2**31, 2**63 - 1, -2**15, 127, "grüße", "plain", "vc", bytearray(b"\x00\x01"), 2.5, 1.5,
         True, ts_ms, None),
        (bytes_id.bytes, time_id.bytes, 7, -7, 7, -128, "", "", "", memoryview(b"abcdef")[1:4], 3, -2, False, 0, None),
        (null_id, *([None] * 14)),
    ]
    writer = native.writer()
    writer.submit(statement, rows)
    assert writer.flush() == 3

    session = cassandra_node.session()
    select = f"SELECT tu, i, bi, si, ti, t, a, vc, b, d, f, flag, ts, l FROM {keyspace}.all_types WHERE id = %s"
    assert tuple(session.execute(select, (full_id,)).one()) == (
        time_id, -2**31, 2**63 - 1, -2**15, 127, "grüße", "plain", "vc", b"\x00\x01", 2.5, 1.5, True,
        datetime.datetime(2023, 11, 14, 22, 13, 20, 123000), None)
    assert tuple(session.execute(select, (bytes_id,)).one()) == (
        time_id, 7, -7, 7, -128, "", "", "", b"bcd", 3.0, -2.0, False, datetime.datetime(1970, 1, 1), None)
    assert tuple(session.execute(select, (null_id,)).one()) == (None,) * 14


@pytest.mark.parametrize(("column", "value", "error", "message"), [
    ("label", "7", TypeError, r"column 'label' \(int\), row 3: expected int, got str"),
    ("label", True, TypeError, r"column 'label' \(int\), row 3: expected int, got bool"),
    ("label", 2**31, OverflowError, r"column 'label' \(int\), row 3: value out of range for int"),
    ("data", "text", TypeError, r"column 'data' \(blob\), row 3: expected bytes, bytearray or memoryview, got str"),
    ("uuid", "not-a-uuid", TypeError, r"column 'uuid' \(uuid\), row 3: expected uuid.UUID or 16 bytes, got str"),
    ("uuid", b"short", ValueError, r"column 'uuid' \(uuid\), row 3: a UUID needs 16 bytes, got 5"),
])
def test_bad_value_raises_and_nothing_of_the_call_is_sent(cassandra_node, native, keyspace, column, value, error,
                                                          message):
    statement = insert_data(native, keyspace, "typecheck")
    good = [(uuid.uuid4(), i, b"ok") for i in range(5)]
    bad = dict(zip(("uuid", "label", "data"), good[3], strict=True), **{column: value})
    rows = good[:3] + [tuple(bad.values())] + good[4:]
    writer = native.writer()
    with pytest.raises(error, match=message):
        writer.submit(statement, rows)
    assert writer.flush() == 0
    assert writer.stats() == {"rows": 0, "bytes": 0, "retries": 0, "failed": 0}
    assert count(cassandra_node.session(), keyspace, "typecheck") == 0


def test_row_of_wrong_length_is_a_type_error(native, keyspace):
    statement = insert_data(native, keyspace, "typecheck")
    with pytest.raises(TypeError, match="row 0: has 2 values, the statement has 3 bind markers"):
        native.writer().submit(statement, [(uuid.uuid4(), 1)])


def test_unreachable_host_is_a_one_line_connection_error(cassandra_node):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind((cassandra_node.hosts[0], 0))
        closed_port = probe.getsockname()[1]
    with pytest.raises(ConnectionError) as excinfo:
        call_with_deadline(lambda: _native.Session(cassandra_node.hosts, closed_port), 60)
    assert "cannot connect to" in str(excinfo.value)
    assert "\n" not in str(excinfo.value)


def test_bad_arguments_are_value_errors(cassandra_node):
    with pytest.raises(ValueError, match="unknown consistency"):
        _native.Session(cassandra_node.hosts, cassandra_node.port, consistency="SOME")
    with pytest.raises(ValueError, match="concurrency"):
        _native.Session(cassandra_node.hosts, cassandra_node.port).writer(concurrency=0)


def test_writer_dropped_without_flush_finishes_its_rows_and_session_drop_does_not_hang(cassandra_node, native,
                                                                                      keyspace):
    rows = 2000
    writer = native.writer(concurrency=16)
    writer.submit(insert_data(native, keyspace, "dropped"), data_rows(0, rows))
    del writer
    gc.collect()
    driver_session = cassandra_node.session()
    deadline = time.monotonic() + 60
    while count(driver_session, keyspace, "dropped") < rows:
        assert time.monotonic() < deadline, "rows of a dropped writer were not written"
        time.sleep(0.2)

    def drop_session_with_writes_in_flight():
        session = _native.Session(cassandra_node.hosts, cassandra_node.port)
        in_flight = session.writer(concurrency=64)
        in_flight.submit(insert_data(session, keyspace, "dropped"), data_rows(rows, rows + 500))
        del in_flight, session
        gc.collect()

    call_with_deadline(drop_session_with_writes_in_flight, 30)


def test_node_killed_mid_write_makes_flush_raise_then_the_writer_recovers(cassandra_node, keyspace):
    """Runs last in this module: it crashes the node, then restarts it."""
    rows, kill_after = 6000, 1000
    native = _native.Session(cassandra_node.hosts, cassandra_node.port)
    statement = insert_data(native, keyspace, "crash")
    writer = native.writer(concurrency=64, max_retries=8)

    def kill_when_writes_are_landing():
        deadline = time.monotonic() + 120
        while writer.stats()["rows"] < kill_after and time.monotonic() < deadline:
            time.sleep(0.01)
        cassandra_node.kill()

    def write_everything():
        for start in range(0, rows, 500):
            writer.submit(statement, data_rows(start, start + 500))
        return writer.flush()

    killer = threading.Thread(target=kill_when_writes_are_landing, daemon=True)
    killer.start()
    try:
        # Once a row has failed for good the rest fail at once: one row's retries (~7 s), not every row's.
        # A killed node breaks connections (Unreachable) or lets requests time out (Timeout, a RingError).
        with pytest.raises((_native.Unreachable, _native.RingError),
                           match=r"^\d+ of 6000 rows failed \(\d+ not sent after the first failure\); first error, "
                                 r"after up to 8 retries: "):
            call_with_deadline(write_everything, 120)
        stats = writer.stats()
        assert stats["rows"] >= kill_after
        assert stats["failed"] > 0
        assert stats["rows"] + stats["failed"] == rows
        assert stats["retries"] > 0
    finally:
        killer.join(60)
        cassandra_node.restart()

    deadline = time.monotonic() + 60
    while True:
        writer.submit(statement, data_rows(rows, rows + 10))
        try:
            assert writer.flush() == 10
            break
        except (_native.Unreachable, _native.RingError):
            assert time.monotonic() < deadline, "the writer did not recover after the node restarted"
            time.sleep(0.5)
    cassandra_node.wait_reachable(cassandra_node.session())
