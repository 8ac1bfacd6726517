"""Every knob of a loader in one frozen, validated value: built once by the Python API, the CLI or the torch adapter
(later the sidecar, from a TrainingJob's ``spec.loader``) and handed as it is to the epoch plan and the fetcher."""

from __future__ import annotations

import dataclasses
import numbers

from ringfeed.errors import RingfeedError

TENSOR = "tensor"  # decode= value for datasets with the raw encoding: arrays of the schema's dtype and shape
REMAINDER_POLICIES = ("uneven", "pad", "drop")
MISSING_POLICIES = ("raise", "skip")
# The levels the native session accepts (case-insensitive); checked here so a typo fails before any connection.
CONSISTENCY_LEVELS = ("ONE", "TWO", "LOCAL_ONE", "QUORUM", "LOCAL_QUORUM", "ALL")
# Where images are decoded (Decode.device); the GPU decoders (nvJPEG, nvImageCodec, torchvision's) read JPEG and PNG.
DECODE_DEVICES = ("cpu", "gpu", "auto")
GPU_ENCODINGS = ("jpeg", "png")
# Twice the native window's floor (16 MiB): the least the reader can work with.
MIN_MEMORY_BYTES = 32 * 1024 * 1024


class LoaderOptionsError(RingfeedError):
    """A loader option has a value the loader cannot use."""


@dataclasses.dataclass(frozen=True)
class RandomResizedCrop:
    """The training augmentation, as torchvision's RandomResizedCrop followed by RandomHorizontalFlip: a crop of
    ``scale`` (min, max) of the image's area and width ÷ height ``ratio`` (min, max, drawn on a log scale), ten tries
    then a centre crop, resized to the target and mirrored with probability ``flip``. A JPEG decodes only the crop's
    blocks, scaled down in the DCT domain where the target size allows. Each sample's crop follows from (the loader's
    seed, the epoch, its UUID): a resumed epoch crops as the first run did (docs/loader.md#random-crops)."""

    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: float = 0.5

    def __post_init__(self):
        for name in ("scale", "ratio"):
            value = getattr(self, name)
            if not (isinstance(value, tuple) and len(value) == 2
                    and all(isinstance(bound, numbers.Real) and not isinstance(bound, bool) for bound in value)):
                raise LoaderOptionsError(f"random crop {name} must be (min, max), got {value!r}")
        low, high = self.scale
        if not 0 < low <= high <= 1:
            raise LoaderOptionsError(f"random crop scale must be 0 < min <= max <= 1, got ({low}, {high})")
        low, high = self.ratio
        if not 0 < low <= high:
            raise LoaderOptionsError(f"random crop ratio must be 0 < min <= max, got ({low}, {high})")
        if not (isinstance(self.flip, numbers.Real) and 0 <= self.flip <= 1):
            raise LoaderOptionsError(f"flip probability must be in [0, 1], got {self.flip!r}")

    def native(self) -> tuple[tuple[float, float], tuple[float, float], float]:
        """The ranges as the native decoder takes them."""
        (scale_min, scale_max), (ratio_min, ratio_max) = self.scale, self.ratio
        return (float(scale_min), float(scale_max)), (float(ratio_min), float(ratio_max)), float(self.flip)


@dataclasses.dataclass(frozen=True)
class Decode:
    """Decode JPEG/PNG samples to uint8 arrays of shape (height, width, channels), resized with a bilinear filter.
    For evaluation the whole image: with ``crop`` first centre-cropped to the target's aspect ratio, else stretched;
    for training ``random_crop``, a ``RandomResizedCrop`` (``crop`` then plays no part).

    ``device`` says where: ``cpu``, the loader's native decoder threads; ``gpu``, the trainer's GPU: the loader hands
    the stored bytes with each image's crop (``Blobs.boxes``, the same crops) and ``ringfeed_client.torch.tensors``
    (or ``ringfeed.torch.RingfeedDataLoader``) decodes them with nvJPEG; ``auto``, ``gpu`` where torch sees a CUDA
    device, else ``cpu``."""

    height: int
    width: int
    channels: int = 3
    crop: bool = True
    random_crop: RandomResizedCrop | None = None
    device: str = "cpu"

    def __post_init__(self):
        if self.height < 1 or self.width < 1:
            raise LoaderOptionsError(f"decode size must be positive, got {self.height}x{self.width}")
        if self.channels not in (1, 3):
            raise LoaderOptionsError(f"decode channels must be 1 or 3, got {self.channels}")
        if self.random_crop is not None and not isinstance(self.random_crop, RandomResizedCrop):
            raise LoaderOptionsError(f"random_crop must be a ringfeed.RandomResizedCrop, got {self.random_crop!r}")
        if self.device not in DECODE_DEVICES:
            raise LoaderOptionsError(f"decode device must be one of {', '.join(DECODE_DEVICES)}, got {self.device!r}")

    def on_device(self, encoding: str) -> Decode:
        """This decode for a dataset of ``encoding``, with ``auto`` settled: ``gpu`` where the GPU decoders read the
        encoding and torch is installed and sees a CUDA device. Settled once, in the process that builds the loader
        (a forked DataLoader worker must not ask CUDA)."""
        if self.device == "gpu" and encoding not in GPU_ENCODINGS:
            raise LoaderOptionsError(f"the GPU decoders read {' and '.join(GPU_ENCODINGS)}, not {encoding}: decode on "
                                     "the cpu (or auto, which does)")
        if self.device != "auto":
            return self
        if encoding not in GPU_ENCODINGS:
            return dataclasses.replace(self, device="cpu")
        try:
            import torch
        except ImportError:
            return dataclasses.replace(self, device="cpu")
        return dataclasses.replace(self, device="gpu" if torch.cuda.is_available() else "cpu")


@dataclasses.dataclass(frozen=True)
class LoaderOptions:
    """How a loader reads one part of a split; ``docs/loader.md`` explains each field at length."""

    batch_size: int = 64
    """Samples per batch; only a rank's last batch of an epoch may be smaller."""
    decode: Decode | str | None = None
    """None: the stored bytes; a ``Decode``: images to uint8 arrays; ``"tensor"``: raw datasets to their arrays."""
    shuffle: bool = True
    """Draw each epoch's order from (seed, epoch); False: split order."""
    seed: int = 0
    """Seed of the per-epoch permutation, in [0, 2**64)."""
    rank: int = 0
    """This process's share of the epoch, in [0, world_size)."""
    world_size: int = 1
    """Processes sharing the epoch."""
    remainder: str = "pad"
    """Tail of an epoch across ranks: ``pad`` (the first samples of the order again, so that every rank has as many
    batches: DDP's collectives never wait on a rank that has finished; the TrainingJob's default too), ``uneven``
    (every sample exactly once; ranks may differ by one batch) or ``drop``."""
    prefetch: int = 2
    """Batches in flight ahead of the consumer at least; the reader's adaptive window asks for more where the link
    needs them (``memory_bytes`` bounds them)."""
    concurrency: int = 128
    """Read requests in flight at most, across all batches; below it the window of bytes in flight adapts to the
    link."""
    memory_bytes: int = 128 * 1024 * 1024
    """Bytes of samples the reader holds at most: batches in flight, and batches arrived ahead of their turn. Half
    of it bounds the window of bytes in flight (64 MiB: 100 ms of round trip at 640 MB/s)."""
    request_bytes: int = 512 * 1024
    """Bytes one read request asks for (samples grouped by owning node); 1 reads each sample alone."""
    decode_threads: int = 0
    """Native decoder threads; 0: one per CPU this process may use (a container's CPU limit), at most 8."""
    consistency: str = "ONE"
    """Read consistency level."""
    missing: str = "raise"
    """A UUID without a row: ``raise`` or ``skip`` (counted in the loader's stats)."""
    max_retries: int = 8
    """Retries of a read that fails transiently, with exponential backoff."""
    out_of_order: bool = False
    """Hand batches over as they complete rather than in the epoch's order (still each exactly once; a resume then
    needs the same world size and batch size)."""
    with_uuids: bool = False
    """Yield ``(x, y, uuids)`` instead of ``(x, y)``."""
    shard: tuple[int, int] = (0, 1)
    """(index, count): read only every count-th batch of the rank's stream, from index (one DataLoader worker)."""

    def __post_init__(self):
        for name in ("batch_size", "seed", "rank", "world_size", "prefetch", "concurrency", "request_bytes",
                     "decode_threads", "max_retries", "memory_bytes"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise LoaderOptionsError(f"{name} must be an integer, got {value!r}")
        for name in ("batch_size", "world_size", "prefetch", "concurrency", "request_bytes"):
            if getattr(self, name) < 1:
                raise LoaderOptionsError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.memory_bytes < MIN_MEMORY_BYTES:
            raise LoaderOptionsError(f"memory_bytes must be at least {MIN_MEMORY_BYTES} (32 MiB), got "
                                     f"{self.memory_bytes}")
        for name in ("decode_threads", "max_retries"):
            if getattr(self, name) < 0:
                raise LoaderOptionsError(f"{name} must be zero or more, got {getattr(self, name)}")
        if not 0 <= self.rank < self.world_size:
            raise LoaderOptionsError(f"rank must be in [0, {self.world_size}), got {self.rank}")
        if not 0 <= self.seed < 2**64:
            raise LoaderOptionsError(f"seed must be in [0, 2**64), got {self.seed}")
        if self.remainder not in REMAINDER_POLICIES:
            raise LoaderOptionsError(f"unknown remainder policy {self.remainder!r} "
                                     f"(one of {', '.join(REMAINDER_POLICIES)})")
        if self.missing not in MISSING_POLICIES:
            raise LoaderOptionsError(f"unknown missing policy {self.missing!r} (one of {', '.join(MISSING_POLICIES)})")
        if not isinstance(self.consistency, str) or self.consistency.upper() not in CONSISTENCY_LEVELS:
            raise LoaderOptionsError(f"unknown consistency {self.consistency!r} "
                                     f"(one of {', '.join(CONSISTENCY_LEVELS)})")
        if self.decode not in (None, TENSOR) and not isinstance(self.decode, Decode):
            raise LoaderOptionsError(f"decode must be None, 'tensor' or a ringfeed.Decode, got {self.decode!r}")
        if not (isinstance(self.shard, tuple) and len(self.shard) == 2 and 0 <= self.shard[0] < self.shard[1]):
            raise LoaderOptionsError(f"shard must be (index, count) with 0 <= index < count, got {self.shard}")

    @property
    def trainer_decode(self) -> Decode | None:
        """The decode left to the trainer (decode device gpu: images are handed undecoded, each with its box), else
        None."""
        return self.decode if isinstance(self.decode, Decode) and self.decode.device == "gpu" else None

    @classmethod
    def build(cls, options: LoaderOptions | None = None, **fields) -> LoaderOptions:
        """`options` (default: the defaults) with `fields` changed and validated again: how the keyword form of
        ``Loader(..., batch_size=64, seed=42)`` and of the torch adapter becomes one object."""
        if options is not None and not isinstance(options, LoaderOptions):
            raise LoaderOptionsError(f"options must be a ringfeed.LoaderOptions, got {type(options).__name__}")
        unknown = sorted(fields.keys() - {field.name for field in dataclasses.fields(cls)})
        if unknown:
            raise LoaderOptionsError(f"unknown loader option(s): {', '.join(unknown)}")
        return dataclasses.replace(options or cls(), **fields)
