"""The trainer's side of Ringfeed: batches handed over by the Pod's loader sidecar through shared memory.

    from ringfeed_client import Feed

    feed = Feed()                                  # the sidecar's socket in $RINGFEED_FEED_DIR
    if checkpoint:
        model.load_state_dict(checkpoint["model"])
        feed.load_state_dict(checkpoint["feed"])   # continue where the checkpoint was taken
    while feed.epoch < feed.epochs:
        for x, y in feed:                          # numpy views of shared memory, no copy
            ...
            save({"model": model.state_dict(), "feed": feed.state_dict()})

No Cassandra driver, no credentials: the sidecar alone talks to the ring.
"""

from ringfeed_client.batch import Blobs
from ringfeed_client.feed import Feed, FeedStats
from ringfeed_client.protocol import FeedError

__all__ = ["Blobs", "Feed", "FeedError", "FeedStats"]
