"""``ringfeed load``: stream a split part through the loader, as a trainer would, and report the throughput."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import click

from ringfeed.cli.app import console, main, open_store
from ringfeed.cli.render import human_bytes, progress_bar
from ringfeed.cli.types import COUNT, NON_NEGATIVE, SEED, NumberRange
from ringfeed.loader import (
    CONSISTENCY_LEVELS,
    DECODE_DEVICES,
    MISSING_POLICIES,
    REMAINDER_POLICIES,
    TENSOR,
    Decode,
    Loader,
    LoaderOptions,
    LoaderOptionsError,
    RandomResizedCrop,
)

DEFAULTS = LoaderOptions()  # the flags' defaults are the library's
RANDOM_CROP = RandomResizedCrop()
RESIZE_MODES = ("crop", "stretch", "random")


def synchronize_gpu() -> None:
    """Waits for the GPU's queued work, so that an epoch's time includes its decoding."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def parse_size(text: str | None):
    if text is None:
        return None
    if text == TENSOR:
        return TENSOR
    height, sep, width = text.lower().partition("x")
    if not sep or not height.isdigit() or not width.isdigit():
        raise click.BadParameter(f"{text!r} is not HEIGHTxWIDTH (e.g. 224x224) or 'tensor'")
    return Decode(int(height), int(width))


@dataclass
class Epochs:
    """What ``run_epochs`` measured: (samples, seconds) per epoch, and the images the trainer's decode (decode
    device gpu) could not decode, which the loader's stats do not count."""

    results: list[tuple[int, float]] = field(default_factory=list)
    undecodable: int = 0


def run_epochs(loader, epochs: int) -> Epochs:
    """Iterates `epochs` epochs with a progress bar. Images the loader leaves to the GPU (decode device gpu) are
    decoded there, as a trainer's ``ringfeed_client.torch.tensors`` does."""
    on_gpu = loader.options.trainer_decode is not None
    measured = Epochs()
    if on_gpu:
        from ringfeed_client.torch import tensors, undecodable
        undecodable_before = undecodable()
    with progress_bar() as progress:
        for _ in range(epochs):
            task = progress.add_task(f"epoch {loader.epoch}", total=len(loader))
            samples, started = 0, time.perf_counter()
            batches = tensors(loader) if on_gpu else loader
            for batch in batches:
                samples += len(batch[1])
                progress.advance(task)
            if on_gpu:
                synchronize_gpu()
            measured.results.append((samples, time.perf_counter() - started))
    if on_gpu:
        measured.undecodable = undecodable() - undecodable_before
    return measured


def loader_flags(command):
    """The LoaderOptions flags shared by ``ringfeed load`` and ``ringfeed serve``: their defaults are the library's."""
    flags = [
        click.option("--batch-size", "-b", default=DEFAULTS.batch_size, show_default=True, type=COUNT),
        click.option("--decode", "decode", default=None, metavar="HxW|tensor",
                     help="Decode images to HxW (resized as --resize says), or raw tensors to their dtype and "
                          "shape. Default: the stored bytes."),
        click.option("--channels", type=click.Choice(["1", "3"]), default="3", show_default=True,
                     help="Channels of decoded images: 1 (grey) or 3 (RGB)."),
        click.option("--resize", type=click.Choice(RESIZE_MODES), default="crop", show_default=True,
                     help="Decoded images: centre-crop to the aspect ratio then resize, resize only, or (training) "
                          "random: a RandomResizedCrop and horizontal flip per sample, drawn from --seed, the epoch "
                          "and the sample."),
        click.option("--crop-scale", type=NumberRange("0.08,1"), default=None,
                     help=f"--resize random: fraction of the image's area a crop covers [default: "
                          f"{RANDOM_CROP.scale[0]},{RANDOM_CROP.scale[1]:g}]."),
        click.option("--crop-ratio", type=NumberRange("3/4,4/3"), default=None,
                     help="--resize random: width/height of a crop, decimals or fractions [default: 3/4,4/3]."),
        click.option("--flip", type=click.FloatRange(0, 1), default=None,
                     help=f"--resize random: probability of a horizontal flip [default: {RANDOM_CROP.flip}]."),
        click.option("--decode-device", type=click.Choice(DECODE_DEVICES), default="cpu", show_default=True,
                     help="Where --decode HxW decodes: the loader's native threads (cpu), the trainer's GPU (gpu: "
                          "the stored bytes are handed with each image's crop), or gpu where torch sees one "
                          "(auto)."),
        click.option("--seed", default=DEFAULTS.seed, show_default=True, type=SEED,
                     help="Seed of the per-epoch shuffle."),
        click.option("--no-shuffle", is_flag=True, help="Read in split order."),
        click.option("--rank", default=DEFAULTS.rank, show_default=True, type=NON_NEGATIVE,
                     help="This process's share: 0 to --world-size − 1."),
        click.option("--world-size", default=DEFAULTS.world_size, show_default=True, type=COUNT),
        click.option("--remainder", type=click.Choice(REMAINDER_POLICIES), default=DEFAULTS.remainder,
                     show_default=True,
                     help="Tail of an epoch across ranks: every sample once (uneven), repeated (pad) or left out "
                          "(drop)."),
        click.option("--prefetch", default=DEFAULTS.prefetch, show_default=True, type=COUNT,
                     help="Batches in flight ahead of the consumer."),
        click.option("--concurrency", default=DEFAULTS.concurrency, show_default=True, type=COUNT,
                     help="Reads in flight."),
        click.option("--decode-threads", default=DEFAULTS.decode_threads, show_default=True, type=NON_NEGATIVE,
                     help="Native decoder threads; 0: one per CPU this process may use (its CPU limit), at most 8."),
        click.option("--consistency", type=click.Choice(CONSISTENCY_LEVELS, case_sensitive=False),
                     default=DEFAULTS.consistency, show_default=True, help="Consistency level of the reads."),
        click.option("--missing", type=click.Choice(MISSING_POLICIES), default=DEFAULTS.missing, show_default=True,
                     help="What a UUID without a row does."),
    ]
    for flag in reversed(flags):
        command = flag(command)
    return command


def options_from_flags(batch_size, decode, channels, resize, crop_scale, crop_ratio, flip, decode_device, seed,
                       no_shuffle, rank, world_size, remainder, prefetch, concurrency, decode_threads, consistency,
                       missing, **fields) -> LoaderOptions:
    """The LoaderOptions the flags of ``loader_flags`` describe (validated once, there: a combination they refuse,
    such as --rank beyond --world-size, is a usage error like a bad value of one flag)."""
    size = parse_size(decode)
    given = [name for name, value in (("--crop-scale", crop_scale), ("--crop-ratio", crop_ratio), ("--flip", flip))
             if value is not None]
    if given and not (resize == "random" and isinstance(size, Decode)):
        raise click.UsageError(f"{', '.join(given)} apply only to --decode HxW with --resize random")
    if decode_device != "cpu" and not isinstance(size, Decode):
        raise click.UsageError("--decode-device applies only to --decode HxW")
    try:
        if isinstance(size, Decode):
            random_crop = None
            if resize == "random":
                random_crop = RandomResizedCrop(scale=crop_scale or RANDOM_CROP.scale,
                                                ratio=crop_ratio or RANDOM_CROP.ratio,
                                                flip=RANDOM_CROP.flip if flip is None else flip)
            size = Decode(size.height, size.width, channels=int(channels), crop=resize == "crop",
                          random_crop=random_crop, device=decode_device)
        return LoaderOptions(batch_size=batch_size, decode=size, shuffle=not no_shuffle, seed=seed, rank=rank,
                             world_size=world_size, remainder=remainder, prefetch=prefetch, concurrency=concurrency,
                             decode_threads=decode_threads, consistency=consistency.upper(), missing=missing,
                             **fields)
    except LoaderOptionsError as error:
        raise click.UsageError(str(error)) from None


@main.command()
@click.argument("dataset")
@click.argument("split")
@click.option("--part", default="train", show_default=True, help="Part of the split to read.")
@click.option("--epochs", default=1, show_default=True, type=COUNT)
@loader_flags
@click.pass_context
def load(ctx, dataset, split, part, epochs, **flags):
    """Read DATASET's SPLIT through the loader for some epochs and show samples/s and MB/s.

    This is what a trainer's loader does (shuffle per epoch, rank sharding, prefetch), without the training.

    \b
    Examples:
      ringfeed load demo_slides by-patient --epochs 2
      ringfeed load demo_slides by-patient --decode 224x224 -b 128
      ringfeed load demo_slides by-patient --decode 224x224 --resize random --crop-scale 0.2,1
      ringfeed load demo_slides by-patient --part val --rank 1 --world-size 4
    """
    options = options_from_flags(**flags)
    with open_store(ctx) as store:
        loader = Loader(dataset, split, part, options=options, store=store)
    print_throughput(loader, run_epochs(loader, epochs))


def print_throughput(loader, measured: Epochs) -> None:
    results = measured.results
    for epoch, (samples, seconds) in enumerate(results):
        console.print(f"epoch {epoch}: {samples:,} samples in {seconds:.2f} s = [bold]{samples / seconds:,.0f}[/] "
                      "samples/s")
    stats = loader.stats
    seconds = sum(s for _, s in results)
    trainer_side = f" ({measured.undecodable} of them found by the trainer-side decode)" if measured.undecodable else ""
    console.print(f"{stats.batches:,} batches, {human_bytes(stats.bytes)} ({stats.bytes / seconds / 1e6:,.1f} MB/s), "
                  f"waited for data {stats.wait_s:.2f} s of {seconds:.2f} s; retries {stats.retries}, "
                  f"missing {stats.missing}, corrupt {stats.corrupt + measured.undecodable}{trainer_side}")
    for uuid, reason in stats.corrupt_samples[:5]:
        console.print(f"  corrupt {uuid}: {reason}")
