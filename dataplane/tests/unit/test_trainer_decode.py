"""Images decoded in the trainer (``decode.device: gpu``): the loader hands each image's box, read from its header, and
``ringfeed_client`` decodes, crops, resizes and mirrors with torch. The result must be the loader's own decode within
JPEG decoder tolerance, for every kind of crop, format and channel count; a bad image is left out and counted. On a
machine with a GPU the same checks run there too (nvJPEG)."""

from __future__ import annotations

import io
import uuid

import numpy as np
import pytest
from PIL import Image
from test_random_crop import IMAGENET, SAMPLES, encoded, photograph

from ringfeed._native import decode_image, image_box, random_crop_box
from ringfeed.loader import Decode, LoaderOptionsError

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from ringfeed_client.batch import Blobs  # noqa: E402 (after the skip: both need torch)
from ringfeed_client.codecs import CODECS  # noqa: E402
from ringfeed_client.decode import ImageDecoder  # noqa: E402
from ringfeed_client.resample import filter_weights, resize_boxes  # noqa: E402
from ringfeed_client.torch import tensors, undecodable  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
CODEC_NAMES = list(CODECS)
# (name, decode_image/image_box keyword arguments): the training crop and both evaluation fits.
FITS = [
    ("random", {"random_crop": IMAGENET, "seed": 11, "epoch": 3}),
    ("centre", {"crop": True}),
    ("stretch", {"crop": False}),
]


def blobs_of(images: list[bytes], size: tuple[int, int], channels: int, samples: list[uuid.UUID],
             **fit) -> Blobs:
    """A batch as the loader hands it with deferred decoding: the bytes, their spans, each image's box."""
    height, width = size
    data = np.frombuffer(bytearray(b"".join(images)), dtype=np.uint8)  # writable, as a feed slot's mapping is
    ends = np.cumsum([len(image) for image in images])
    spans = np.stack([ends - [len(image) for image in images], ends], axis=1).astype(np.int64)
    boxes = np.array([image_box(image, height, width, sample=sample, **fit)
                      for image, sample in zip(images, samples, strict=True)], dtype=np.int32)
    return Blobs(data, spans, boxes, (height, width, channels))


def loader_decode(image: bytes, size: tuple[int, int], channels: int, sample: uuid.UUID, **fit) -> np.ndarray:
    height, width = size
    return np.frombuffer(decode_image(image, height, width, channels, sample=sample, **fit),
                         dtype=np.uint8).reshape(height, width, channels)


@pytest.mark.parametrize("codec", CODEC_NAMES)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,fit", FITS, ids=[name for name, _ in FITS])
@pytest.mark.parametrize("size,channels", [((224, 224), 3), ((112, 160), 3), ((64, 64), 1)],
                         ids=["224-rgb", "112x160-rgb", "64-grey"])
def test_the_trainers_decode_is_the_loaders_within_decoder_tolerance(codec, device, name, fit, size, channels):
    """Photographs of several sizes and qualities, both chroma subsamplings, a grey JPEG, a PNG among them, and one
    photograph far larger than the rest (it resizes in a group of its own on a GPU)."""
    images = [encoded(photograph(500, 375, seed=0), quality=92),
              encoded(photograph(375, 500, seed=1), quality=80, subsampling=0),
              encoded(photograph(640, 427, seed=2), quality=95),
              encoded(photograph(333, 250, seed=3), "PNG"),
              encoded(photograph(96, 72, seed=4), quality=90),
              encoded(photograph(420, 300, seed=5).mean(axis=2).astype(np.uint8), quality=90),
              encoded(photograph(1600, 1200, seed=6), quality=85)]
    samples = SAMPLES[:len(images)]
    images_out, kept = ImageDecoder(device, codec).decode(blobs_of(images, size, channels, samples, **fit))
    assert kept.tolist() == list(range(len(images)))
    assert images_out.shape == (len(images), *size, channels) and images_out.dtype == torch.uint8
    assert images_out.device.type == device
    for index, (image, sample) in enumerate(zip(images, samples, strict=True)):
        ours = images_out[index].cpu().numpy().astype(np.int16)
        reference = loader_decode(image, size, channels, sample, **fit).astype(np.int16)
        difference = np.abs(ours - reference)
        assert difference.mean() < 3.0, (index, difference.mean())
        assert np.percentile(difference, 99) < 32, index


@pytest.mark.parametrize("seed", range(4))
def test_the_batch_resize_is_torchs_antialiased_resize_of_each_box(seed):
    """Random image sizes (a large one among them on odd seeds), boxes that shrink, stretch and enlarge, flips: the
    batch's two matrix products give what torch's filter gives image by image."""
    rng = np.random.default_rng(seed)
    size = (int(rng.integers(16, 80)), int(rng.integers(16, 80)))
    shapes = [(int(rng.integers(8, 120)), int(rng.integers(8, 120))) for _ in range(9)]
    if seed % 2:
        shapes.append((400, 500))
    images, boxes, expected = [], [], []
    for height, width in shapes:
        image = torch.from_numpy(rng.integers(0, 256, (3, height, width), dtype=np.uint8))
        top, left = int(rng.integers(0, height)), int(rng.integers(0, width))
        box = [left, top, int(rng.integers(1, width - left + 1)), int(rng.integers(1, height - top + 1)),
               int(rng.integers(0, 2))]
        crop = image[None, :, top:top + box[3], left:left + box[2]].float()
        reference = torch.nn.functional.interpolate(crop, size=size, mode="bilinear", antialias=True,
                                                    align_corners=False)[0]
        images.append(image)
        boxes.append(box)
        expected.append(reference.flip(-1) if box[4] else reference)
    resized = resize_boxes(images, np.array(boxes, dtype=np.int32), size)
    assert resized.shape == (len(images), 3, *size) and resized.dtype == torch.float32
    assert torch.allclose(resized, torch.stack(expected), atol=1e-3)


def test_the_batch_resize_runs_as_many_operations_for_32_images_as_for_4():
    """What costs the training loop's thread on a GPU is a kernel launch per operation: the batch's resize must not
    add any per image (views, which launch nothing, aside)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    views = {"aten.detach.default", "aten.view.default", "aten.slice.Tensor", "aten.unsqueeze.default",
             "aten.expand.default", "aten.transpose.int", "aten.select.int", "aten.alias.default"}

    class Operations(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += str(func) not in views
            return func(*args, **(kwargs or {}))

    counts = []
    for batch in (4, 32):
        rng = np.random.default_rng(batch)
        images = [torch.from_numpy(rng.integers(0, 256, (3, int(rng.integers(300, 400)), int(rng.integers(300, 500))),
                                                dtype=np.uint8)) for _ in range(batch)]
        boxes = np.array([[5, 7, 200, 150, index % 2] for index in range(batch)], dtype=np.int32)
        with Operations() as operations:
            resize_boxes(images, boxes, (224, 224))
        counts.append(operations.count)
    assert counts[0] == counts[1] and counts[0] > 0


def test_filter_weights_sum_to_one_and_stay_inside_the_box():
    weights = filter_weights(torch.tensor([3.0, 0.0]), torch.tensor([50.0, 7.0]), 20, 64)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 20))
    assert weights[0, :, :3].abs().sum() == 0 and weights[0, :, 53:].abs().sum() == 0
    assert weights[1, :, 7:].abs().sum() == 0


def test_an_unknown_codec_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="codec must be one of torchvision, nvimgcodec"):
        ImageDecoder("cpu", "pillow")


def test_the_box_of_a_random_crop_is_the_crop_the_loader_draws():
    image = encoded(photograph(500, 375), quality=90)
    for sample in SAMPLES[:50]:
        assert image_box(image, 224, 224, random_crop=IMAGENET, seed=5, epoch=2, sample=sample) == \
            random_crop_box(500, 375, IMAGENET, 5, 2, sample)


def test_a_flipped_box_is_mirrored():
    image = encoded(photograph(), quality=90)
    never, always = ((0.08, 1.0), (3 / 4, 4 / 3), 0.0), ((0.08, 1.0), (3 / 4, 4 / 3), 1.0)
    plain = ImageDecoder("cpu").decode(blobs_of([image], (64, 64), 3, SAMPLES[:1], random_crop=never))[0]
    flipped = ImageDecoder("cpu").decode(blobs_of([image], (64, 64), 3, SAMPLES[:1], random_crop=always))[0]
    assert torch.equal(plain.flip(2), flipped)


@pytest.mark.parametrize("codec", CODEC_NAMES)
@pytest.mark.parametrize("bad", [b"\xff\xd8\xff" + bytes(500), b"\x89PNG\r\n\x1a\n" + bytes(100)],
                         ids=["jpeg-body", "png-body"])
def test_an_image_that_cannot_be_decoded_leaves_the_batch_with_its_label_and_is_counted(codec, bad):
    """Its header was read (the loader boxed it), its body is broken: it goes, the others keep their order."""
    good = encoded(photograph(), quality=90)
    blobs = blobs_of([good, good, good], (32, 32), 3, SAMPLES[:3], crop=False)
    blobs.data = np.frombuffer(bytearray(good + bad + good), dtype=np.uint8)
    blobs.spans = np.array([[0, len(good)], [len(good), len(good) + len(bad)],
                            [len(good) + len(bad), 2 * len(good) + len(bad)]], dtype=np.int64)
    labels, uuids = np.array([7, 8, 9]), np.arange(48, dtype=np.uint8).reshape(3, 16)
    before = undecodable()
    (x, y, ids), = tensors([(blobs, labels, uuids)], device="cpu", codec=codec)
    assert x.shape == (2, 32, 32, 3)
    assert y.tolist() == [7, 9] and ids[:, 0].tolist() == [0, 32]
    assert undecodable() == before + 1  # what ringfeed load adds to the loader's own count


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_a_16_bit_png_decodes_as_the_loader_decodes_it(codec):
    """torchvision decodes a 16-bit PNG to uint16: brought to 8 bits as the loader's decoder rounds it, not clipped
    to white."""
    levels = (photograph(120, 90, seed=7).mean(axis=2) * 257).astype(np.uint16)
    out = io.BytesIO()
    Image.fromarray(levels).save(out, format="PNG")  # mode I;16
    png = out.getvalue()
    images, kept = ImageDecoder("cpu", codec).decode(blobs_of([png], (32, 32), 3, SAMPLES[:1], crop=False))
    assert kept.tolist() == [0]
    reference = loader_decode(png, (32, 32), 3, SAMPLES[0], crop=False).astype(np.int16)
    assert 60 < reference.mean() < 200  # a photograph's levels, not white
    assert np.abs(images[0].numpy().astype(np.int16) - reference).mean() < 3.0


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_a_batch_of_nothing_but_unreadable_images_is_empty_and_every_one_counted(codec):
    good = encoded(photograph(), quality=90)
    blobs = blobs_of([good, good], (16, 16), 3, SAMPLES[:2], crop=False)
    blobs.data = np.frombuffer(bytearray(b"\xff\xd8\xff" + bytes(300) + b"\x89PNG" + bytes(100)), dtype=np.uint8)
    blobs.spans = np.array([[0, 303], [303, 407]], dtype=np.int64)
    decoder = ImageDecoder("cpu", codec)
    images, kept = decoder.decode(blobs)
    assert images.shape == (0, 16, 16, 3) and kept.tolist() == [] and decoder.corrupt == 2


def test_batches_the_loader_decoded_pass_as_tensors_over_the_same_memory():
    x, y = np.zeros((2, 4, 4, 3), dtype=np.uint8), np.array([1, 2])
    (tx, ty), = tensors([(x, y)])
    tx[0, 0, 0, 0] = 5
    assert x[0, 0, 0, 0] == 5 and ty.tolist() == [1, 2]


def test_stored_bytes_without_boxes_are_not_decoded():
    blobs = Blobs(np.zeros(4, dtype=np.uint8), np.array([[0, 4]]))
    (x, _), = tensors([(blobs, np.array([0]))])
    assert x is blobs
    with pytest.raises(ValueError, match="without boxes"):
        ImageDecoder("cpu").decode(blobs)


@pytest.mark.parametrize("batches", [[], iter([]), (b for b in [])], ids=["list", "iterator", "generator"])
def test_decoding_ahead_needs_the_feed_itself_and_a_count_of_batches(batches):
    """Only the Feed can keep its position at the loop's batch while a thread runs ahead of it."""
    with pytest.raises(TypeError, match="decoding ahead needs the Feed itself"):
        tensors(batches, ahead=1)
    with pytest.raises(ValueError, match="ahead is a number of batches, 0 or more, not -1"):
        tensors(batches, ahead=-1)
    assert list(tensors(batches, ahead=0)) == []


def test_decode_device_is_checked_and_auto_settles_to_what_torch_sees():
    with pytest.raises(LoaderOptionsError, match="decode device must be one of cpu, gpu, auto"):
        Decode(224, 224, device="tpu")
    assert Decode(8, 8, device="gpu").on_device("jpeg").device == "gpu"
    assert Decode(8, 8, device="auto").on_device("png").device == ("gpu" if torch.cuda.is_available() else "cpu")
    # The GPU decoders read JPEG and PNG: auto decodes anything else on the CPU, gpu is refused.
    assert Decode(8, 8, device="auto").on_device("tiff").device == "cpu"
    with pytest.raises(LoaderOptionsError, match="the GPU decoders read jpeg and png, not tiff"):
        Decode(8, 8, device="gpu").on_device("tiff")
