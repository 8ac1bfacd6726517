"""ringfeed._native.Session.scan against a real Cassandra node: every row once, every column type, nulls, errors."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from ringfeed import _native
from ringfeed.table import TextColumn, scan_table

KEYSPACE = "rf_native_scan"
ROWS = 5_000


@pytest.fixture(scope="module")
def typed_table(cassandra_node):
    session = cassandra_node.session()
    session.execute(f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    session.execute(f"DROP TABLE IF EXISTS {KEYSPACE}.typed")
    session.execute(f"CREATE TABLE {KEYSPACE}.typed (pk text, ck int, id uuid, small smallint, big bigint, "
                    "score double, ratio float, flag boolean, note text, PRIMARY KEY ((pk), ck))")
    insert = session.prepare(f"INSERT INTO {KEYSPACE}.typed (pk, ck, id, small, big, score, ratio, flag, note) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
    expected = {}
    for i in range(ROWS):
        row = (f"p{i % 97}", i, uuid.UUID(int=i * 7919 + 1), i % 300 - 150, i * 10**12, i / 8, 0.5,
               i % 3 == 0, None if i % 10 == 0 else f"note {i % 13}")
        session.execute(insert, row)
        expected[i] = row
    yield expected
    session.execute(f"DROP KEYSPACE {KEYSPACE}")


def test_scan_returns_every_row_once_with_its_values(cassandra_node, typed_table):
    native = _native.Session(cassandra_node.hosts)
    seen = []
    table = scan_table(native, KEYSPACE, "typed", ["pk"],
                       ["ck", "pk", "id", "small", "big", "score", "ratio", "flag", "note"], progress=seen.append,
                       slices=37, concurrency=5)
    assert len(table) == ROWS and seen[-1] == ROWS and seen == sorted(seen)
    ck = table["ck"]
    assert sorted(ck.tolist()) == list(range(ROWS))
    order = np.argsort(ck)
    assert table["id"].shape == (ROWS, 16)
    assert [uuid.UUID(bytes=b.tobytes()) for b in table["id"][order]] == [typed_table[i][2] for i in range(ROWS)]
    assert table["small"][order].tolist() == [typed_table[i][3] for i in range(ROWS)]
    assert table["big"][order].tolist() == [typed_table[i][4] for i in range(ROWS)]
    assert table["score"][order].tolist() == [typed_table[i][5] for i in range(ROWS)]
    assert set(table["ratio"].tolist()) == {0.5}
    assert table["flag"][order].tolist() == [typed_table[i][7] for i in range(ROWS)]
    note = table["note"]
    assert isinstance(note, TextColumn) and len(note.values) == 13
    assert note.take(order).to_list() == [typed_table[i][8] for i in range(ROWS)]
    assert table.nulls["note"][order].tolist() == [i % 10 == 0 for i in range(ROWS)]
    assert "score" not in table.nulls


def test_scan_is_in_token_order_whatever_the_slicing(cassandra_node, typed_table):
    native = _native.Session(cassandra_node.hosts)
    orders = [scan_table(native, KEYSPACE, "typed", ["pk"], ["ck"], slices=s, concurrency=c)["ck"].tolist()
              for s, c in ((1, 1), (64, 16), (1000, 3))]
    assert orders[0] == orders[1] == orders[2]


def test_scan_errors_are_clear(cassandra_node, typed_table):
    native = _native.Session(cassandra_node.hosts)
    with pytest.raises(ValueError, match="is not a plain CQL identifier"):
        native.scan(KEYSPACE, "typed; DROP TABLE x", ["pk"], ["ck"])
    with pytest.raises(RuntimeError, match="cannot prepare"):
        native.scan(KEYSPACE, "typed", ["pk"], ["no_such_column"])
    with pytest.raises(ValueError, match="must be positive"):
        native.scan(KEYSPACE, "typed", ["pk"], ["ck"], slices=0)
