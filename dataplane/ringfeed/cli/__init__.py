"""``ringfeed`` command line: a local ring, datasets, ingest, inspection, splits and the loader.

Every command that talks to Cassandra takes ``--hosts/--port/--username/--password`` (or RINGFEED_* variables);
the defaults reach the ring started by ``ringfeed local up``.
"""

from ringfeed.cli import cache, datasets, demo, lineage, load, local, serve, splits  # noqa: F401  (they register)
from ringfeed.cli.app import main

__all__ = ["main"]
