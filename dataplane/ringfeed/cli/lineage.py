"""``ringfeed lineage NAMESPACE/TRAININGJOB``: what a TrainingJob read, from its status, and with ``--ids EPOCH`` the
sample ids of an epoch in the order its ranks consumed them, recomputed from the plan and checked against the
digest the job recorded (ringfeed.lineage)."""

from __future__ import annotations

import sys
import uuid
from typing import cast

import click

from ringfeed.cli.app import main, open_store
from ringfeed.cli.types import NON_NEGATIVE
from ringfeed.errors import RingfeedError

GROUP, VERSION, PLURAL = "ringfeed.io", "v1alpha1", "trainingjobs"


@main.command("lineage")
@click.argument("job", metavar="NAMESPACE/TRAININGJOB")
@click.option("--ids", "epoch", type=NON_NEGATIVE, default=None, metavar="EPOCH",
              help="Print the epoch's sample UUIDs, one a line, in the order the ranks consumed them (reads the Split "
                   "from the ring of --hosts); exit 1 if they do not give the digest the job recorded.")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, type=click.Path(dir_okay=False),
              help="The cluster's kubeconfig (default: ~/.kube/config, or the Pod's service account) [env KUBECONFIG].")
@click.pass_context
def lineage(ctx, job, epoch, kubeconfig):
    """What TRAININGJOB read: its Split version and content, the Dataset's ingest, the order's parameters, and per
    epoch the digest of the order its ranks consumed the samples in."""
    namespace, _, name = job.partition("/")
    if not namespace or not name:
        raise click.BadParameter(f"{job!r}: give it as NAMESPACE/NAME", param_hint="NAMESPACE/TRAININGJOB")
    record = read_lineage(namespace, name, kubeconfig)
    if epoch is None:
        print_record(job, record)
        return
    from ringfeed.lineage import order_digest

    recorded = {item["epoch"]: item["digest"] for item in record.get("epochs") or ()}
    ordered = epoch_ids(ctx, record, epoch)
    for sample in ordered:
        click.echo(str(uuid.UUID(bytes=sample.tobytes())))
    digest = order_digest(ordered)
    if epoch not in recorded:
        click.echo(f"epoch {epoch}: {len(ordered)} ids, {digest}; the job recorded no digest for it (not finished, "
                   "or before its last 1000 epochs)", err=True)
    elif recorded[epoch] != digest:
        click.echo(f"epoch {epoch}: {digest} is not the recorded {recorded[epoch]}: the Split or the parameters "
                   "changed since the job read it", err=True)
        sys.exit(1)
    else:
        click.echo(f"epoch {epoch}: {len(ordered)} ids, the job's recorded digest", err=True)


def read_lineage(namespace: str, name: str, kubeconfig: str | None) -> dict:
    try:
        from kubernetes import client, config
    except ImportError:
        raise RingfeedError("`ringfeed lineage` needs the Kubernetes client: pip install 'ringfeed[kubernetes]'") \
            from None
    try:
        config.load_kube_config(config_file=kubeconfig)
    except config.ConfigException as outside:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            raise RingfeedError(f"no cluster to read TrainingJob {namespace}/{name} from: {outside} (give "
                                "--kubeconfig or KUBECONFIG, or run it in a Pod)") from None
    try:
        job = cast(dict, client.CustomObjectsApi().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                                name))
    except client.ApiException as error:
        raise RingfeedError(f"TrainingJob {namespace}/{name}: {error.reason} ({error.status})") from None
    record = (job.get("status") or {}).get("lineage")
    if not record or not record.get("contentHash"):
        raise RingfeedError(f"TrainingJob {namespace}/{name} has no lineage yet: its ranks have not been made")
    return record


def print_record(job: str, record: dict) -> None:
    click.echo(f"TrainingJob {job}")
    click.echo(f"  Split {record['split']} part {record['part']}, version {record['splitVersion']} "
               f"(id {record.get('splitId') or '-'}, content {record['contentHash']})")
    click.echo(f"  Dataset {record['dataset']}, ingest generation {record.get('datasetGeneration', 0)}")
    click.echo(f"  order: seed {record['seed']}, shuffle {str(record['shuffle']).lower()}, remainder "
               f"{record['remainder']}, {record['worldSize']} rank(s)")
    for item in record.get("epochs") or ():
        click.echo(f"  epoch {item['epoch']}: {item['digest']}")


def epoch_ids(ctx, record: dict, epoch: int):
    """The epoch's UUIDs in the job's order: the recorded Split version read from the ring, the recorded
    parameters."""
    from ringfeed.lineage import epoch_order
    from ringfeed.loader import LoaderOptions, LoaderSource
    from ringfeed.loader.plan import EpochPlan

    with open_store(ctx) as store:
        source = LoaderSource.from_split(record["dataset"], record["split"], record["part"], store=store,
                                         version=record["splitVersion"])
    options = LoaderOptions(seed=record["seed"], shuffle=record["shuffle"], remainder=record["remainder"],
                            world_size=record["worldSize"])
    return epoch_order(source.uuids, EpochPlan(len(source.uuids), options), epoch)
