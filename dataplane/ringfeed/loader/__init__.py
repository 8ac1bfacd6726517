"""Streaming a split's samples to training: epoch plans (pure) and the native-backed loader."""

from ringfeed.loader.loader import TENSOR, Blobs, Decode, Loader, LoaderSource, LoaderStats
from ringfeed.loader.plan import REMAINDER_POLICIES, EpochPlan

__all__ = ["REMAINDER_POLICIES", "TENSOR", "Blobs", "Decode", "EpochPlan", "Loader", "LoaderSource",
           "LoaderStats"]
