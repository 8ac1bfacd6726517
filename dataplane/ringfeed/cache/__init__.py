"""The optional Alluxio FUSE cache tier: a split as a POSIX directory tree, read through from the ring."""

from ringfeed.cache.local import CacheSettings, LocalCache, ProcessStatus
from ringfeed.cache.preset import TUNED_PRESET, Setting

__all__ = ["TUNED_PRESET", "CacheSettings", "LocalCache", "ProcessStatus", "Setting"]
