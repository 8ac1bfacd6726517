"""``ringfeed serve``: the loader sidecar that a TrainingJob injects into each rank's Pod."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from ringfeed.cli.app import main
from ringfeed.cli.load import loader_flags, options_from_flags
from ringfeed.cli.types import COUNT, PORT, VERSION
from ringfeed_client.protocol import DEFAULT_FEED_DIR, FEED_DIR_ENV, TRAININGJOB_ENV

DEFAULT_PORT = 8477


@main.command()
@click.argument("dataset")
@click.argument("split")
@click.option("--part", default="train", show_default=True, help="Part of the split to feed.")
@click.option("--version", "split_version", type=VERSION, default=None, help="Version of the split (default: latest).")
@click.option("--epochs", default=1, show_default=True, type=COUNT, help="Epochs to feed before saying done.")
@click.option("--feed-dir", envvar=FEED_DIR_ENV, default=DEFAULT_FEED_DIR, show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help=f"Shared-memory directory of the handoff (socket and slots) [env {FEED_DIR_ENV}].")
@click.option("--bind", default="0.0.0.0", show_default=True, help="Address of the HTTP port.")
@click.option("--http-port", default=DEFAULT_PORT, show_default=True, type=PORT,
              help="Port of /healthz, /readyz, /status and /metrics.")
@click.option("--trainingjob", envvar=TRAININGJOB_ENV, default="", show_default=False,
              help=f"The TrainingJob this rank belongs to: the `trainingjob` label of the metrics [env "
                   f"{TRAININGJOB_ENV}; the operator sets it].")
@click.option("--control-token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File holding the token that POST /pause and POST /resume must carry (Authorization: Bearer); "
                   "without it the sidecar takes no commands. The operator mounts the TrainingJob's control Secret "
                   "here.")
@click.option("--kept-positions", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="JSON file of loader states by rank to start from when the feed directory has none (the "
                   "operator keeps them over a TrainingJob's suspension).")
@click.option("--ranks-per-pod", default=1, show_default=True, type=COUNT,
              help="Feeds served, one per local rank of the Pod (torchrun's processes), each in "
                   "<feed-dir>/local-rank-<n>; --rank is then the Pod's index: local rank n reads rank "
                   "--rank × --ranks-per-pod + n of --world-size.")
@loader_flags
@click.pass_context
def serve(ctx, dataset, split, part, split_version, epochs, feed_dir, bind, http_port, trainingjob,
          control_token_file, kept_positions, ranks_per_pod, **flags):
    """Feed DATASET's SPLIT to a trainer through shared memory (the TrainingJob loader sidecar).

    Reads this rank's share of the part with the native loader and hands each batch to the trainer of the same
    Pod, which reads it with ringfeed_client.Feed (numpy views, no copy, no Cassandra client). Positions survive
    a restart of either side: see docs/loader.md#the-loader-sidecar.

    \b
    Examples (what the operator runs in each Pod):
      ringfeed serve demo_slides by-patient --part train --epochs 2 --rank 0 --world-size 2 \\
          --decode 64x64 --feed-dir /var/run/ringfeed
      ringfeed serve demo_slides by-patient --rank 1 --ranks-per-pod 4 --world-size 8   # Pod 1: ranks 4-7
    """
    from ringfeed.serve import serve as run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    control_token = control_token_file.read_text().strip() if control_token_file else None
    if control_token == "":
        raise click.BadParameter(f"{control_token_file} is empty", param_hint="--control-token-file")
    if (flags["rank"] + 1) * ranks_per_pod > flags["world_size"]:
        raise click.BadParameter(f"Pod {flags['rank']} with {ranks_per_pod} ranks each needs a world of at least "
                                 f"{(flags['rank'] + 1) * ranks_per_pod} ranks, not {flags['world_size']}",
                                 param_hint="--rank / --ranks-per-pod / --world-size")
    run(ctx.obj, dataset, split, part, split_version, options_from_flags(**flags), epochs, feed_dir, bind,
        http_port, kept_positions, trainingjob=trainingjob, control_token=control_token, local_ranks=ranks_per_pod)
