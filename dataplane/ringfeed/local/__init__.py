"""Local Cassandra for development, demos and tests: real nodes on loopback addresses."""

from ringfeed.local.jars import CASSANDRA_VERSION, ensure_cassandra_jars
from ringfeed.local.ring import LocalRing, NodeStatus, RingSettings, cql_answers

__all__ = ["CASSANDRA_VERSION", "LocalRing", "NodeStatus", "RingSettings", "cql_answers", "ensure_cassandra_jars"]
