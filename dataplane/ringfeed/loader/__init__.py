"""Streaming a split's samples to training: options (validated once), epoch plans (pure) and the native-backed
loader."""

from ringfeed.loader.loader import Blobs, Loader, LoaderSource, LoaderStats
from ringfeed.loader.options import (
    CONSISTENCY_LEVELS,
    DECODE_DEVICES,
    MISSING_POLICIES,
    REMAINDER_POLICIES,
    TENSOR,
    Decode,
    LoaderOptions,
    LoaderOptionsError,
    RandomResizedCrop,
)
from ringfeed.loader.plan import EpochPlan

__all__ = ["CONSISTENCY_LEVELS", "DECODE_DEVICES", "MISSING_POLICIES", "REMAINDER_POLICIES", "TENSOR", "Blobs",
           "Decode", "EpochPlan", "Loader", "LoaderOptions", "LoaderOptionsError", "LoaderSource", "LoaderStats",
           "RandomResizedCrop"]
