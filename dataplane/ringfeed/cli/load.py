"""``ringfeed load``: stream a split part through the loader, as a trainer would, and report the throughput."""

from __future__ import annotations

import time

import click

from ringfeed.cli.app import console, main, open_store
from ringfeed.cli.render import human_bytes, progress_bar
from ringfeed.loader import MISSING_POLICIES, REMAINDER_POLICIES, TENSOR, Decode, Loader, LoaderOptions

DEFAULTS = LoaderOptions()  # the flags' defaults are the library's


def parse_size(text: str | None):
    if text is None:
        return None
    if text == TENSOR:
        return TENSOR
    height, sep, width = text.lower().partition("x")
    if not sep or not height.isdigit() or not width.isdigit():
        raise click.BadParameter(f"{text!r} is not HEIGHTxWIDTH (e.g. 224x224) or 'tensor'")
    return Decode(int(height), int(width))


def run_epochs(loader, epochs: int) -> list[tuple[int, float]]:
    """Iterates `epochs` epochs with a progress bar; returns (samples, seconds) per epoch."""
    results = []
    with progress_bar() as progress:
        for _ in range(epochs):
            task = progress.add_task(f"epoch {loader.epoch}", total=len(loader))
            samples, started = 0, time.perf_counter()
            for batch in loader:
                samples += len(batch[1])
                progress.advance(task)
            results.append((samples, time.perf_counter() - started))
    return results


@main.command()
@click.argument("dataset")
@click.argument("split")
@click.option("--part", default="train", show_default=True, help="Part of the split to read.")
@click.option("--batch-size", "-b", default=DEFAULTS.batch_size, show_default=True)
@click.option("--epochs", default=1, show_default=True)
@click.option("--decode", "decode", default=None, metavar="HxW|tensor",
              help="Decode images to HxW (centre crop + bilinear resize), or raw tensors to their dtype and shape. "
                   "Default: the stored bytes.")
@click.option("--seed", default=DEFAULTS.seed, show_default=True, help="Seed of the per-epoch shuffle.")
@click.option("--no-shuffle", is_flag=True, help="Read in split order.")
@click.option("--rank", default=DEFAULTS.rank, show_default=True)
@click.option("--world-size", default=DEFAULTS.world_size, show_default=True)
@click.option("--remainder", type=click.Choice(REMAINDER_POLICIES), default=DEFAULTS.remainder, show_default=True,
              help="Tail of an epoch across ranks: every sample once (uneven), repeated (pad) or left out (drop).")
@click.option("--prefetch", default=DEFAULTS.prefetch, show_default=True,
              help="Batches in flight ahead of the consumer.")
@click.option("--concurrency", default=DEFAULTS.concurrency, show_default=True, help="Reads in flight.")
@click.option("--missing", type=click.Choice(MISSING_POLICIES), default=DEFAULTS.missing, show_default=True,
              help="What a UUID without a row does.")
@click.pass_context
def load(ctx, dataset, split, part, batch_size, epochs, decode, seed, no_shuffle, rank, world_size, remainder,
         prefetch, concurrency, missing):
    """Read DATASET's SPLIT through the loader for some epochs and show samples/s and MB/s.

    This is what a trainer's loader does (shuffle per epoch, rank sharding, prefetch), without the training.

    \b
    Examples:
      ringfeed load demo_slides by-patient --epochs 2
      ringfeed load demo_slides by-patient --decode 224x224 -b 128
      ringfeed load demo_slides by-patient --part val --rank 1 --world-size 4
    """
    options = LoaderOptions(batch_size=batch_size, decode=parse_size(decode), shuffle=not no_shuffle, seed=seed,
                            rank=rank, world_size=world_size, remainder=remainder, prefetch=prefetch,
                            concurrency=concurrency, missing=missing)
    with open_store(ctx) as store:
        loader = Loader(dataset, split, part, options=options, store=store)
    results = run_epochs(loader, epochs)
    print_throughput(loader, results)


def print_throughput(loader, results: list[tuple[int, float]]) -> None:
    for epoch, (samples, seconds) in enumerate(results):
        console.print(f"epoch {epoch}: {samples:,} samples in {seconds:.2f} s = [bold]{samples / seconds:,.0f}[/] "
                      "samples/s")
    stats = loader.stats
    seconds = sum(s for _, s in results)
    console.print(f"{stats.batches:,} batches, {human_bytes(stats.bytes)} ({stats.bytes / seconds / 1e6:,.1f} MB/s), "
                  f"waited for data {stats.wait_s:.2f} s of {seconds:.2f} s; retries {stats.retries}, "
                  f"missing {stats.missing}, corrupt {stats.corrupt}")
    for uuid, reason in stats.corrupt_samples[:5]:
        console.print(f"  corrupt {uuid}: {reason}")
