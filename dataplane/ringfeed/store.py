"""The control path to a ring: DDL, the dataset catalog, stats and single-sample reads.

Bulk traffic (ingest writes, table scans, loader reads) goes through the native client in ``ringfeed._native``
(``Store.native``); the catalog and DDL use the Python cassandra-driver, whose ~0.2 ms of CPU per request is
irrelevant for a few queries.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import logging
import os
import ssl
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ringfeed.connection import CONNECT_RETRY_ENV, ClusterAddress
from ringfeed.errors import (
    DatasetNotFound,
    RingfeedError,
    RingUnavailable,
    SampleNotFound,
    SchemaMismatch,
    ring_error,
    ring_failures,
)
from ringfeed.schema import CATALOG_KEYSPACE, CATALOG_TABLES, METADATA_BY_NAT, DatasetSchema, catalog_ddl
from ringfeed.table import ColumnarTable, scan_table

if TYPE_CHECKING:
    from cassandra.metadata import TableMetadata

log = logging.getLogger("ringfeed.store")


class DatasetNeedsMigration(RingfeedError):
    """A dataset written before a sample's identity was its natural key alone (and datasets had an identity)."""


class DatasetHasSplits(RingfeedError):
    pass


@dataclasses.dataclass
class DatasetInfo:
    schema: DatasetSchema
    created_at: dt.datetime | None
    samples: int
    bytes: int
    label_counts: dict[int, int]
    label_bytes: dict[int, int]
    stats_updated_at: dt.datetime | None
    last_ingest: dict | None
    dataset_id: uuid.UUID | None = None
    """Made with the dataset and recorded by its splits; None for a dataset that needs `ringfeed dataset migrate`."""


@dataclasses.dataclass(frozen=True)
class SampleRecord:
    """One stored sample: its identity, label and bytes, and (where known) its natural keys and metadata."""

    uuid: uuid.UUID
    label: int
    data: bytes
    fields: dict[str, object] | None
    """Natural-key and metadata values by column; None when looked up by UUID in a dataset without
    ``metadata_by_uuid``."""


def _identity(info: DatasetInfo) -> uuid.UUID:
    """The dataset's identity; DatasetNeedsMigration when it was written before datasets had one."""
    if info.dataset_id is None:
        name = info.schema.name
        raise DatasetNeedsMigration(f"dataset {name!r} was written by an earlier Ringfeed, whose layout counts a "
                                    "relabelled sample twice: run `ringfeed dataset migrate "
                                    f"{name}` once (stop its ingests first)")
    return info.dataset_id


class Store:
    """A connection to one ring, and the datasets it holds."""

    def __init__(self, address: ClusterAddress | None = None, connect_timeout_s: float = 10):
        from cassandra import ConsistencyLevel
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import (
            ConstantReconnectionPolicy,
            DCAwareRoundRobinPolicy,
            RoundRobinPolicy,
            TokenAwarePolicy,
        )
        from cassandra.query import tuple_factory

        self.address = address or ClusterAddress.from_env()
        # QUORUM: the catalog, schemas and splits written through one replica are read back through any other.
        nodes = (DCAwareRoundRobinPolicy(self.address.local_dc, used_hosts_per_remote_dc=0)
                 if self.address.local_dc else RoundRobinPolicy())
        profile = ExecutionProfile(load_balancing_policy=TokenAwarePolicy(nodes),
                                   consistency_level=ConsistencyLevel.QUORUM, row_factory=tuple_factory,
                                   request_timeout=30)
        auth = (PlainTextAuthProvider(self.address.username, self.address.password)
                if self.address.username else None)
        tls = None
        tls_options = {"server_hostname": self.address.tls_server_name} if self.address.tls_server_name else None
        if self.address.tls_ca_file:
            # As the native session: the node's certificate is checked against the CA and the node's IP address,
            # or the ring's server name.
            try:
                tls = ssl.create_default_context(cafile=self.address.tls_ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise RingfeedError(f"TLS: cannot read the CA certificate {self.address.tls_ca_file}: {exc}") from None
        # A Pod's first connection may come before the cluster's NetworkPolicy engine admits the new Pod (refused for
        # tens of milliseconds to seconds): the operator's Pods retry for RINGFEED_CONNECT_RETRY_S; by hand, none.
        retry_until = time.monotonic() + float(os.environ.get(CONNECT_RETRY_ENV) or 0)
        while True:
            self._cluster = Cluster(
                list(self.address.hosts), port=self.address.port, auth_provider=auth, protocol_version=5,
                ssl_context=tls, ssl_options=tls_options,
                execution_profiles={EXEC_PROFILE_DEFAULT: profile}, connect_timeout=connect_timeout_s,
                # A restarted node should be back in use within a second, not after exponential back-off.
                reconnection_policy=ConstantReconnectionPolicy(1.0, max_attempts=None),
            )
            try:
                self.session = self._cluster.connect()
                break
            except ring_failures() as exc:
                # A local datacenter without nodes leaves no host to connect to: say so rather than "unreachable".
                problem = self._unknown_datacenter()
                self._cluster.shutdown()
                if problem or time.monotonic() >= retry_until:
                    raise (RingUnavailable(problem) if problem else ring_error(exc, where=self.address.where)
                           ) from None
                time.sleep(1)
        if problem := self._unknown_datacenter():
            self._cluster.shutdown()
            raise RingUnavailable(problem)

    def _unknown_datacenter(self) -> str | None:
        """The error when the local datacenter has no node the driver saw (None: fine, or nothing seen)."""
        local_dc = self.address.local_dc
        datacenters = sorted({host.datacenter for host in self._cluster.metadata.all_hosts() if host.datacenter})
        if local_dc and datacenters and local_dc not in datacenters:
            return f"no node of the ring is in datacenter {local_dc!r}; its datacenters: {', '.join(datacenters)}"
        return None

    @functools.cached_property
    def native(self):
        """The native session (``ringfeed._native.Session``) to the same ring, opened on first use."""
        return self.address.native_session()

    def close(self) -> None:
        self.__dict__.pop("native", None)
        self._cluster.shutdown()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- datasets ------------------------------------------------------------------------------------------------

    def create_dataset(self, schema: DatasetSchema) -> bool:
        """Create the keyspace, tables and catalog entry. Returns False when the same dataset already exists."""
        self.ensure_catalog(schema.replication_factor)
        existing = self._catalog_row(schema.name)
        if existing is not None:
            if DatasetSchema.from_json(existing[2]) != schema:
                raise SchemaMismatch(f"dataset {schema.name!r} already exists with a different schema; "
                                    "drop it first or choose another name")
            return False
        for statement in schema.ddl():
            self.session.execute(statement)
        self.session.execute(
            f"INSERT INTO {CATALOG_KEYSPACE}.datasets (name, keyspace_name, schema_json, created_at, samples, bytes, "
            "dataset_id) VALUES (%s, %s, %s, %s, 0, 0, %s) IF NOT EXISTS",
            (schema.name, schema.keyspace, schema.to_json(), _now(), uuid.uuid4()),
        )
        return True

    def drop_dataset(self, name: str, drop_tables: bool = True, force: bool = False) -> None:
        """Drop the dataset's splits, its keyspace (unless ``drop_tables`` is False) and its catalog entry.
        Without ``force`` a dataset that has splits is refused (DatasetHasSplits)."""
        from ringfeed.splits.storage import delete_split, list_splits

        schema = self.info(name).schema  # a dataset that needs migrating can be dropped too
        split_names = sorted({split.name for split in list_splits(self, name)})
        if split_names and not force:
            raise DatasetHasSplits(f"dataset {name!r} has splits ({', '.join(split_names)}): delete them first "
                                   "(`ringfeed split delete`) or drop with --force (force=True) to drop them too")
        # Splits first: an interrupted drop leaves a dataset without splits, never splits without their dataset.
        for split_name in split_names:
            delete_split(self, name, split_name)
        if drop_tables:
            self.session.execute(f"DROP KEYSPACE IF EXISTS {schema.keyspace}")
        self.session.execute(f"DELETE FROM {CATALOG_KEYSPACE}.datasets WHERE name = %s", (name,))

    def schema(self, name: str) -> DatasetSchema:
        """The schema of a dataset that can be read and written (DatasetNeedsMigration if it must be migrated)."""
        return self._current(name).schema

    def dataset_id(self, name: str) -> uuid.UUID:
        """The dataset's identity (DatasetNeedsMigration if it has none yet)."""
        return _identity(self.info(name))

    def info(self, name: str) -> DatasetInfo:
        row = self._catalog_row(name)
        if row is None:
            raise DatasetNotFound(f"unknown dataset {name!r}" + self._known_hint())
        return _info_from_row(row)

    def datasets(self) -> list[DatasetInfo]:
        if not self.catalog_has("datasets"):
            return []
        rows = self.session.execute(f"SELECT {self._catalog_columns()} FROM {CATALOG_KEYSPACE}.datasets")
        return sorted((_info_from_row(r) for r in rows), key=lambda i: i.schema.name)

    def refresh_stats(self, name: str, progress: Callable[[int], None] | None = None) -> DatasetInfo:
        """Recount samples and bytes per label from ``metadata_by_nat`` and store them in the catalog.

        A recount (not counters bumped by each ingest) keeps the numbers exact when an ingest is re-run.
        """
        table = self.scan(name, METADATA_BY_NAT, ["label", "sample_bytes"], progress)
        labels, index = np.unique(table.array("label"), return_inverse=True)
        counts = dict(zip(labels.tolist(), np.bincount(index).tolist(), strict=True))
        byte_sums = np.bincount(index, weights=table.array("sample_bytes")).astype(np.int64)
        sizes = dict(zip(labels.tolist(), byte_sums.tolist(), strict=True))
        self.session.execute(
            f"UPDATE {CATALOG_KEYSPACE}.datasets SET samples = %s, bytes = %s, label_counts = %s, label_bytes = %s, "
            "stats_updated_at = %s WHERE name = %s",
            (sum(counts.values()), sum(sizes.values()), counts, sizes, _now(), name),
        )
        return self.info(name)

    def record_ingest(self, name: str, summary: dict) -> None:
        self.session.execute(f"UPDATE {CATALOG_KEYSPACE}.datasets SET last_ingest = %s WHERE name = %s",
                             (json.dumps(summary, sort_keys=True), name))

    def set_label_names(self, name: str, label_names: tuple[str, ...]) -> DatasetSchema:
        """Record class names (ImageFolder sources); existing names must stay where they are."""
        schema = self.schema(name)
        if label_names[: len(schema.label_names)] != schema.label_names:
            raise RingfeedError(f"dataset {name!r} has classes {list(schema.label_names)}; the source's classes "
                                f"{list(label_names)} would renumber them")
        updated = dataclasses.replace(schema, label_names=label_names)
        self.session.execute(f"UPDATE {CATALOG_KEYSPACE}.datasets SET schema_json = %s WHERE name = %s",
                             (updated.to_json(), name))
        return updated

    def sample(self, name: str, sample_id: uuid.UUID) -> SampleRecord:
        """One sample by UUID (SampleNotFound if there is none); its fields come from ``metadata_by_uuid``, so a
        dataset made without it gives ``fields=None``."""
        schema = self.schema(name)
        fields = None
        if schema.with_metadata_by_uuid:
            names = [c.name for c in schema.columns]
            row = self.session.execute(f"SELECT {', '.join(names)} FROM {schema.keyspace}.metadata_by_uuid "
                                       "WHERE uuid = %s", (sample_id,)).one()
            fields = dict(zip(names, row, strict=True)) if row is not None else None
        return self._sample_data(schema, sample_id, fields, f"UUID {sample_id}")

    def sample_by_key(self, name: str, key: dict[str, object]) -> SampleRecord:
        """The sample whose natural key is ``key`` (every natural-key column once; text values are converted to the
        column's type, so ``{"slide_num": "3"}`` works), looked up in ``metadata_by_nat`` (SampleNotFound if none)."""
        schema = self.schema(name)
        key_names = [c.name for c in schema.natural_keys]
        if sorted(key) != sorted(key_names):
            raise RingfeedError(f"dataset {name!r} is keyed by {', '.join(key_names)}: give each of them once, "
                                f"e.g. --key {key_names[0]}=VALUE (got {', '.join(key) or 'none'})")
        try:
            values = [c.convert(key[c.name]) for c in schema.natural_keys]
        except ValueError as exc:
            raise RingfeedError(f"dataset {name!r}: {exc}") from None
        names = [c.name for c in schema.columns]
        where = " AND ".join(f"{n} = %s" for n in key_names)
        row = self.session.execute(f"SELECT {', '.join(names)}, uuid FROM {schema.keyspace}.{METADATA_BY_NAT} "
                                   f"WHERE {where}", values).one()
        described = ", ".join(f"{n}={v!r}" for n, v in zip(key_names, values, strict=True))
        if row is None:
            raise SampleNotFound(f"dataset {name!r} has no sample with {described}")
        return self._sample_data(schema, row[-1], dict(zip(names, row[:-1], strict=True)), described)

    def _sample_data(self, schema: DatasetSchema, sample_id: uuid.UUID, fields: dict | None,
                     described: str) -> SampleRecord:
        row = self.session.execute(f"SELECT label, data FROM {schema.keyspace}.data_by_uuid WHERE uuid = %s",
                                   (sample_id,)).one()
        if row is None:
            raise SampleNotFound(f"dataset {schema.name!r} has no sample with {described}")
        return SampleRecord(sample_id, row[0], bytes(row[1] or b""), fields)

    def count_rows(self, name: str, table: str) -> int:
        """Exact row count of one of the dataset's tables, by a token-range scan."""
        return len(self.scan(name, table, ["uuid"]))

    def scan(self, name: str, table: str, columns: list[str],
             progress: Callable[[int], None] | None = None) -> ColumnarTable:
        """Whole columns of one of the dataset's tables, read by token range (``progress(rows_so_far)``)."""
        schema = self.schema(name)
        try:
            return scan_table(self.native, schema.keyspace, table, schema.partition_key(table), columns, progress)
        except ring_failures() as exc:
            raise ring_error(exc, f"reading {schema.keyspace}.{table}", self.address.where) from None

    # -- catalog --------------------------------------------------------------------------------------------------

    def ensure_catalog(self, replication_factor: int = 1) -> None:
        """Create the catalog keyspace (with this RF, if it is new) and any catalog table it lacks."""
        for statement in catalog_ddl(replication_factor):
            self.session.execute(statement)

    def ensure_writer(self, role: str, password: str, keyspace: str) -> None:
        """A login that may write `keyspace` and the catalog's tables, and nothing else: a Dataset's ingest and split
        Jobs (Cassandra grants by table, so the catalog's rows of other datasets stay writable to it, never their
        samples, another keyspace, a role or the schema)."""
        # Cassandra refuses a second password change within 5 s: the role is altered only when it exists already
        # (its Secret made again), never right after its creation.
        if self.session.execute("SELECT role FROM system_auth.roles WHERE role = %s", (role,)).one() is None:
            self.session.execute(f'CREATE ROLE "{role}" WITH PASSWORD = %s AND LOGIN = true', (password,))
        else:
            self.session.execute(f'ALTER ROLE "{role}" WITH PASSWORD = %s', (password,))
        for permission in ("SELECT", "MODIFY"):
            self.session.execute(f'GRANT {permission} ON KEYSPACE {keyspace} TO "{role}"')
        self.session.execute(f'GRANT SELECT ON KEYSPACE {CATALOG_KEYSPACE} TO "{role}"')
        for table in CATALOG_TABLES:
            self.session.execute(f'GRANT MODIFY ON TABLE {CATALOG_KEYSPACE}.{table} TO "{role}"')

    def grant_read(self, role: str, keyspace: str) -> None:
        """Let `role` read `keyspace` and the catalog, and nothing else: the login of a loader, which reads a
        dataset's samples and splits and writes nothing (needs an authorizer on the ring and a superuser here)."""
        for readable in (keyspace, CATALOG_KEYSPACE):
            self.session.execute(f'GRANT SELECT ON KEYSPACE {readable} TO "{role}"')

    def catalog_has(self, table: str, column: str | None = None) -> bool:
        """Whether the ring's catalog has ``table`` (and ``column``). Another client (the operator, an ingest) may have
        made them since this session connected, and the driver's schema events lag under load: a miss reads the
        ring's schema before answering."""
        meta = self._known_table(CATALOG_KEYSPACE, table)
        if meta is None or (column is not None and column not in meta.columns):
            meta = self._table_from_ring(CATALOG_KEYSPACE, table)
        return meta is not None and (column is None or column in meta.columns)

    def partition_key(self, keyspace: str, table: str) -> list[str] | None:
        """The partition-key columns of a table as the ring has it now (None: no such table)."""
        meta = self._table_from_ring(keyspace, table)
        return None if meta is None else [column.name for column in meta.partition_key]

    # -- internals ------------------------------------------------------------------------------------------------

    def _current(self, name: str) -> DatasetInfo:
        info = self.info(name)
        _identity(info)
        return info

    def _known_table(self, keyspace: str, table: str) -> TableMetadata | None:
        meta = self._cluster.metadata.keyspaces.get(keyspace)
        return None if meta is None else meta.tables.get(table)

    def _table_from_ring(self, keyspace: str, table: str) -> TableMetadata | None:
        """The table as the driver's control node has it now: no wait for the ring's schema agreement (the answer
        is read, not acted on by DDL), and what the driver knew when that node cannot be read."""
        from cassandra import DriverException

        try:
            if keyspace not in self._cluster.metadata.keyspaces:
                # The driver files a table only under a keyspace it knows; a keyspace read alone carries no tables.
                self._cluster.refresh_keyspace_metadata(keyspace, max_schema_agreement_wait=0)
            self._cluster.refresh_table_metadata(keyspace, table, max_schema_agreement_wait=0)
        except DriverException as error:
            log.warning("could not read %s.%s's schema from the ring: %s", keyspace, table, error)
        return self._known_table(keyspace, table)

    def _catalog_columns(self) -> str:
        # A catalog made before dataset identities reads as identities not made yet (ensure_catalog adds the column).
        return _CATALOG_COLUMNS + (", dataset_id" if self.catalog_has("datasets", "dataset_id") else "")

    def _catalog_row(self, name: str):
        if not self.catalog_has("datasets"):
            return None
        return self.session.execute(f"SELECT {self._catalog_columns()} FROM {CATALOG_KEYSPACE}.datasets "
                                    "WHERE name = %s", (name,)).one()

    def _known_hint(self) -> str:
        names = [i.schema.name for i in self.datasets()]
        return f" (known: {', '.join(names)})" if names else " (no datasets yet)"


_CATALOG_COLUMNS = ("name, keyspace_name, schema_json, created_at, samples, bytes, label_counts, label_bytes, "
                    "stats_updated_at, last_ingest")


def _info_from_row(row) -> DatasetInfo:
    return DatasetInfo(
        schema=DatasetSchema.from_json(row[2]), created_at=row[3], samples=row[4] or 0, bytes=row[5] or 0,
        label_counts=dict(row[6] or {}), label_bytes=dict(row[7] or {}), stats_updated_at=row[8],
        last_ingest=json.loads(row[9]) if row[9] else None, dataset_id=row[10] if len(row) > 10 else None,
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)

