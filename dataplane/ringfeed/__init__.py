"""Ringfeed: deep-learning training data in an Apache Cassandra ring."""

from ringfeed.connection import ClusterAddress
from ringfeed.errors import DatasetNotFound, RingfeedError
from ringfeed.ids import sample_uuid
from ringfeed.ingest import IngestOptions, IngestSummary, ingest
from ringfeed.loader import Decode, Loader, LoaderOptions, RandomResizedCrop
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import SplitSpec, StoredSplit, create_split, load_split
from ringfeed.store import DatasetInfo, Store

__all__ = [
    "ClusterAddress",
    "Column",
    "DatasetInfo",
    "DatasetNotFound",
    "DatasetSchema",
    "Decode",
    "Encoding",
    "IngestOptions",
    "IngestSummary",
    "Loader",
    "LoaderOptions",
    "RandomResizedCrop",
    "RingfeedError",
    "SplitSpec",
    "Store",
    "StoredSplit",
    "create_split",
    "ingest",
    "load_split",
    "sample_uuid",
]
