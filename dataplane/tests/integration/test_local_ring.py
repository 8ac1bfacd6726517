"""The local ring manager on a real 3-node ring: RF=2 data survives a node joining and a node leaving."""

from __future__ import annotations

import hashlib

from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from ringfeed.ids import sample_uuid
from ringfeed.ingest import ingest
from ringfeed.local import cql_answers
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.store import Store

ROWS = 600


def digest_all(session, keyspace: str) -> tuple[int, str]:
    """Row count and a digest of (uuid, data) read at consistency ALL: every replica must hold every row."""
    statement = SimpleStatement(f"SELECT uuid, data FROM {keyspace}.data_by_uuid",
                                consistency_level=ConsistencyLevel.ALL, fetch_size=200)
    rows = sorted((r[0].bytes, bytes(r[1])) for r in session.execute(statement))
    return len(rows), hashlib.sha256(b"".join(u + d for u, d in rows)).hexdigest()


def test_ring_grows_and_shrinks_with_data_intact(cassandra_ring, tmp_path):
    ring = cassandra_ring.ring
    assert ring.members == [1, 2, 3]
    assert all(node.running and node.cql_ready for node in ring.status())
    assert "UN  127.0.20.3" in ring.nodetool(1, "status")

    schema = DatasetSchema("ring_rf2", (Column("n", "bigint"),), Encoding("raw", "uint8", (4096,)),
                           replication_factor=2)
    for i in range(ROWS):
        (tmp_path / f"{i}.bin").write_bytes(hashlib.sha256(str(i).encode()).digest() * 128)
    (tmp_path / "m.csv").write_text("path,n,label\n" + "".join(f"{i}.bin,{i},{i % 3}\n" for i in range(ROWS)))
    with Store(cassandra_ring.address) as store:
        store.create_dataset(schema)
        assert ingest(store, "ring_rf2", str(tmp_path / "m.csv")).written == ROWS
        before = digest_all(store.session, "ring_rf2")
        assert before[0] == ROWS

        added = ring.add_node()
        assert added == 4 and ring.members == [1, 2, 3, 4] and cql_answers("127.0.20.4")
        assert digest_all(store.session, "ring_rf2") == before

        removed = ring.remove_node(2)
        assert removed == 2 and ring.members == [1, 3, 4]
        assert not cql_answers("127.0.20.2")
        status = ring.nodetool(1, "status")
        assert "127.0.20.2" not in status and status.count("UN  ") == 3
        assert digest_all(store.session, "ring_rf2") == before
        record = store.sample("ring_rf2", sample_uuid("ring_rf2", (7,)))
        assert (record.label, record.data) == (1, hashlib.sha256(b"7").digest() * 128)
