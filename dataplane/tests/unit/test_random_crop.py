"""The training augmentation fused into the native decode (RandomResizedCrop + flip): its crops are drawn as
torchvision draws them, reproducibly per (seed, epoch, sample); the fused JPEG decode gives what a full decode then
crop gives; PNG and bad bytes take the full decoder's path; and the loader hands the seed and each batch's epoch to
the native reader."""

from __future__ import annotations

import io
import uuid

import numpy as np
import pytest
from PIL import Image

from ringfeed._native import decode_image, random_crop_box
from ringfeed.connection import ClusterAddress
from ringfeed.loader import Decode, Loader, LoaderOptions, LoaderOptionsError, LoaderSource, RandomResizedCrop
from ringfeed.schema import Encoding

IMAGENET = RandomResizedCrop().native()
SAMPLES = [uuid.UUID(int=(0x5EED << 64) + n) for n in range(4000)]


def photograph(width: int = 500, height: int = 375, seed: int = 0) -> np.ndarray:
    """Smooth colour fields, edges and sensor-like grain: what JPEG is made for, with detail for a decoder to get
    wrong."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    red = 128 + 100 * np.sin(x / 37) * np.cos(y / 53)
    green = 255 * x / width
    blue = np.where((x // 40 + y // 40) % 2 == 0, 200, 50)
    pixels = np.stack([red, green, blue], axis=-1) + rng.normal(0, 6, (height, width, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8)


def encoded(pixels: np.ndarray, fmt: str = "JPEG", **save) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt, **save)
    return out.getvalue()


def decoded(data: bytes, size: tuple[int, int] = (224, 224), channels: int = 3, **crop) -> np.ndarray:
    height, width = size
    buffer = decode_image(data, height, width, channels, random_crop=crop.pop("random_crop", IMAGENET), **crop)
    return np.frombuffer(buffer, dtype=np.uint8).reshape(height, width, channels)


# -- the crops ---------------------------------------------------------------------------------------------------------

def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov distance: the largest gap between the two empirical distributions."""
    values = np.sort(np.concatenate([a, b]))
    gap = np.searchsorted(np.sort(a), values, side="right") / len(a) - \
        np.searchsorted(np.sort(b), values, side="right") / len(b)
    return float(np.abs(gap).max())


def torchvision_boxes(width: int, height: int, draws: int) -> np.ndarray:
    torch = pytest.importorskip("torch")
    transforms = pytest.importorskip("torchvision.transforms")
    torch.manual_seed(0)
    image = torch.empty(3, height, width)
    boxes = [transforms.RandomResizedCrop.get_params(image, [0.08, 1.0], [3 / 4, 4 / 3]) for _ in range(draws)]
    return np.array([(left, top, w, h) for top, left, h, w in boxes], dtype=np.float64)


@pytest.mark.parametrize("width, height", [(500, 375), (200, 800)])
def test_the_crops_are_distributed_as_torchvisions(width, height):
    ours = np.array([random_crop_box(width, height, IMAGENET, 1, 0, sample)[:4] for sample in SAMPLES],
                    dtype=np.float64)
    theirs = torchvision_boxes(width, height, len(SAMPLES))
    # Critical distance at the 0.1 % level for two samples of 4,000: 1.95 * sqrt(2 / 4000).
    critical = 1.95 * np.sqrt(2 / len(SAMPLES))

    def features(boxes: np.ndarray) -> dict[str, np.ndarray]:
        left, top, w, h = boxes.T
        return {"area": w * h / (width * height), "log ratio": np.log(w / h), "centre x": (left + w / 2) / width,
                "centre y": (top + h / 2) / height}

    for name, (mine, reference) in {k: (v, features(theirs)[k]) for k, v in features(ours).items()}.items():
        assert ks_statistic(mine, reference) < critical, name


def test_a_shifted_distribution_is_told_apart():
    """The test above can fail: crops drawn from scale (0.2, 1) instead of (0.08, 1) are far from torchvision's."""
    narrower = ((0.2, 1.0), IMAGENET[1], IMAGENET[2])
    ours = np.array([random_crop_box(500, 375, narrower, 1, 0, sample)[2:4] for sample in SAMPLES], dtype=np.float64)
    theirs = torchvision_boxes(500, 375, len(SAMPLES))[:, 2:4]
    assert ks_statistic(ours.prod(axis=1), theirs.prod(axis=1)) > 1.95 * np.sqrt(2 / len(SAMPLES))


def test_crops_are_the_same_for_the_same_seed_epoch_and_sample_and_move_with_the_epoch_and_seed():
    def boxes(seed: int, epoch: int) -> list[tuple]:
        return [random_crop_box(500, 375, IMAGENET, seed, epoch, sample) for sample in SAMPLES[:200]]

    assert boxes(42, 3) == boxes(42, 3)
    assert sum(a != b for a, b in zip(boxes(42, 3), boxes(42, 4), strict=True)) > 190
    assert sum(a != b for a, b in zip(boxes(42, 3), boxes(43, 3), strict=True)) > 190
    flipped = [box[4] for box in boxes(42, 3)]
    assert 70 < sum(flipped) < 130


def test_the_same_sample_decodes_to_the_same_pixels_in_a_resumed_epoch():
    data = encoded(photograph(), quality=92)
    first = decoded(data, seed=9, epoch=5, sample=SAMPLES[7])
    assert np.array_equal(first, decoded(data, seed=9, epoch=5, sample=SAMPLES[7]))
    assert not np.array_equal(first, decoded(data, seed=9, epoch=6, sample=SAMPLES[7]))


# -- the fused decode --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("subsampling", [0, 2], ids=["4:4:4", "4:2:0"])
@pytest.mark.parametrize("size", [(224, 224), (112, 112), (32, 48)], ids=["224", "112", "32x48"])
def test_the_fused_decode_matches_a_full_decode_then_crop_and_resize(subsampling, size):
    """Within JPEG decoder tolerance: libjpeg-turbo's scaled IDCT against the full decoder's, same crop, same resize.
    At 112 and 32×48 most crops decode at 1/2, 1/4 or 1/8 scale."""
    data = encoded(photograph(), quality=92, subsampling=subsampling)
    identical = 0
    for sample in SAMPLES[:25]:
        fused = decoded(data, size, seed=3, sample=sample).astype(np.int16)
        reference = decoded(data, size, seed=3, sample=sample, fused=False).astype(np.int16)
        assert np.abs(fused - reference).mean() < 3.0, sample
        assert np.percentile(np.abs(fused - reference), 99) < 24, sample
        identical += np.array_equal(fused, reference)
    # Two decoders never agree to the bit: identical outputs would mean the fused path fell back to the full one.
    assert identical == 0


def test_the_fused_decode_is_close_to_pillow_doing_the_same_crop():
    """An independent reference: Pillow decodes the whole JPEG, crops the same box and resizes (bilinear)."""
    data = encoded(photograph(seed=1), quality=95)
    source = Image.open(io.BytesIO(data)).convert("RGB")
    for sample in SAMPLES[:25]:
        left, top, width, height, flip = random_crop_box(500, 375, IMAGENET, 3, 0, sample)
        reference = source.crop((left, top, left + width, top + height)).resize((224, 224), Image.Resampling.BILINEAR)
        if flip:
            reference = reference.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        difference = np.abs(decoded(data, seed=3, sample=sample).astype(np.int16) - np.asarray(reference))
        assert difference.mean() < 4.0, sample


def test_a_flip_mirrors_the_output():
    data = encoded(photograph(), quality=90)
    never, always = ((0.08, 1.0), (3 / 4, 4 / 3), 0.0), ((0.08, 1.0), (3 / 4, 4 / 3), 1.0)
    for sample in SAMPLES[:5]:
        plain = decoded(data, random_crop=never, sample=sample)
        flipped = decoded(data, random_crop=always, sample=sample)
        assert np.array_equal(plain[:, ::-1], flipped)


def test_grey_output_is_the_grey_of_the_colour_output():
    data = encoded(photograph(), quality=90)
    grey = decoded(data, (64, 64), 1, sample=SAMPLES[0]).astype(np.float64)[..., 0]
    red, green, blue = np.moveaxis(decoded(data, (64, 64), 3, sample=SAMPLES[0]).astype(np.float64), -1, 0)
    assert np.abs(grey - (0.2126 * red + 0.7152 * green + 0.0722 * blue)).mean() < 1.5


def test_a_png_takes_the_full_decode_and_crops_the_same_box():
    data = encoded(photograph(), "PNG")
    for sample in SAMPLES[:5]:
        assert np.array_equal(decoded(data, sample=sample), decoded(data, sample=sample, fused=False))


@pytest.mark.parametrize("data", [b"\xff\xd8\xff\xe0 no JPEG after all", b"\x89PNG\r\n\x1a\n broken", b""],
                         ids=["jpeg header then junk", "png header then junk", "empty"])
def test_bytes_that_are_no_image_are_refused_with_a_reason(data):
    with pytest.raises(ValueError, match="cannot decode"):
        decoded(data, sample=SAMPLES[0])


def test_a_truncated_jpeg_is_decoded_or_refused_but_never_crashes():
    data = encoded(photograph(), quality=90)
    for cut in (len(data) // 4, len(data) // 2, len(data) - 20):
        try:
            decoded(data[:cut], sample=SAMPLES[0])
        except ValueError as error:
            assert "cannot decode" in str(error)


# -- the options and the loader ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, message", [
    (dict(scale=(0.5, 0.2)), r"random crop scale must be 0 < min <= max <= 1, got \(0.5, 0.2\)"),
    (dict(scale=(0.0, 1.0)), "random crop scale must be 0 < min <= max <= 1"),
    (dict(scale=(0.08, 1.5)), "random crop scale must be 0 < min <= max <= 1"),
    (dict(ratio=(2.0, 1.0)), r"random crop ratio must be 0 < min <= max, got \(2.0, 1.0\)"),
    (dict(ratio=0.75), "random crop ratio must be \\(min, max\\), got 0.75"),
    (dict(flip=1.5), r"flip probability must be in \[0, 1\], got 1.5"),
])
def test_bad_random_crops_are_refused_with_the_values(fields, message):
    with pytest.raises(LoaderOptionsError, match=message):
        RandomResizedCrop(**fields)


def test_the_defaults_are_torchvisions():
    assert RandomResizedCrop() == RandomResizedCrop(scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), flip=0.5)
    with pytest.raises(LoaderOptionsError, match="random_crop must be a ringfeed.RandomResizedCrop"):
        Decode(224, 224, random_crop=(0.08, 1.0))  # type: ignore[arg-type]


class FakeFetcher:
    """The native reader as the loader drives it: records what it was opened with and each submit's epoch, and
    delivers every batch whole."""

    def __init__(self, **opened):
        self.opened = opened
        self.submitted: dict[int, tuple[bytes, int]] = {}
        self.wants_more = False
        self.retries = self.buffers_allocated = 0

    def submit(self, ticket: int, uuids: bytes, epoch: int = 0) -> None:
        self.submitted[ticket] = (uuids, epoch)

    def take(self, ticket):
        uuids, _ = self.submitted[ticket]
        count = len(uuids) // 16
        batch = type("FetchedBatch", (), {})()
        batch.ticket, batch.missing, batch.corrupt = ticket, [], []
        batch.positions = np.arange(count, dtype=np.int64).tobytes()
        batch.labels = np.zeros(count, dtype=np.int32).tobytes()
        batch.data = bytes(count * 8 * 8 * 3)
        batch.boxes = None  # the loader decodes itself (decode device cpu)
        return batch

    def close(self) -> None:
        pass


class FakeSession:
    def __init__(self):
        self.fetchers: list[FakeFetcher] = []

    def fetcher(self, keyspace: str, **opened) -> FakeFetcher:
        self.fetchers.append(FakeFetcher(**opened))
        return self.fetchers[-1]


def test_the_loader_gives_the_native_reader_the_crop_the_seed_and_each_batchs_epoch():
    uuids = np.frombuffer(b"".join(sample.bytes for sample in SAMPLES[:8]), dtype=np.uint8).reshape(8, 16)
    source = LoaderSource(address=ClusterAddress(), keyspace="ks", uuids=uuids, split="d/s v1", split_id="id",
                          content_hash="h", part="train", encoding=Encoding("jpeg"))
    crop = RandomResizedCrop(scale=(0.25, 1.0), flip=0.0)
    session = FakeSession()
    loader = Loader.from_source(source, options=LoaderOptions(batch_size=4, seed=77, decode=Decode(8, 8,
                                                                                                     random_crop=crop)),
                                session=session)
    loader.set_epoch(3)
    assert [x.shape for x, _ in loader] == [(4, 8, 8, 3), (4, 8, 8, 3)]
    (fetcher,) = session.fetchers
    assert fetcher.opened["random_crop"] == ((0.25, 1.0), (3 / 4, 4 / 3), 0.0) and fetcher.opened["seed"] == 77
    epochs = [epoch for _, epoch in fetcher.submitted.values()]
    assert epochs[:2] == [3, 3], "the epoch's batches"
    assert set(epochs[2:]) <= {4}, "batches of the next epoch submitted ahead carry its number"


def test_evaluation_decodes_open_the_reader_without_a_random_crop():
    uuids = np.zeros((4, 16), dtype=np.uint8)
    source = LoaderSource(address=ClusterAddress(), keyspace="ks", uuids=uuids, split="d/s v1", split_id="id",
                          content_hash="h", part="val", encoding=Encoding("jpeg"))
    session = FakeSession()
    loader = Loader.from_source(source, options=LoaderOptions(batch_size=4, decode=Decode(8, 8)), session=session)
    next(iter(loader))
    assert "random_crop" not in session.fetchers[0].opened and session.fetchers[0].opened["crop"] is True
