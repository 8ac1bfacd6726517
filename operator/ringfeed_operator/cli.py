"""`ringfeed-operator`: runs the kopf operator with Ringfeed's Dataset and Split handlers and a Prometheus
endpoint."""

import dataclasses

import click

from ringfeed_operator import main as operator
from ringfeed_operator.config import (
    CacheConfig,
    Config,
    JobsConfig,
    NetworkConfig,
    NetworkPolicyError,
    ResourcesError,
    RingsConfig,
    parse_job_resources,
    parse_network_policy,
    parse_ring_resources,
    parse_secret_names,
)


def secret_names(text: str) -> tuple[str, ...]:
    try:
        return parse_secret_names(text)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--image-pull-secrets") from None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--namespace", "-n", "namespaces", multiple=True,
              help="Watch only this namespace (repeatable). Default: every namespace.")
@click.option("--metrics-port", default=Config.metrics_port, show_default=True, type=int,
              help="Port of the Prometheus /metrics endpoint; 0 turns it off.")
@click.option("--health-port", default=Config.health_port, show_default=True, type=int,
              help="Port of the liveness endpoint (GET /healthz) for the Deployment's probe.")
@click.option("--bind", default=Config.bind, show_default=True,
              help="Address the metrics and health endpoints listen on.")
@click.option("--job-image", default=JobsConfig.image, show_default=True,
              help="Data-plane image of the ingest and split Jobs (runs `ringfeed ingest` / `ringfeed split create`).")
@click.option("--job-image-pull-policy", default=JobsConfig.image_pull_policy, show_default=True,
              type=click.Choice(["Always", "IfNotPresent", "Never"]))
@click.option("--job-service-account", default=JobsConfig.service_account,
              help="Service account of the Jobs (default: the namespace's).")
@click.option("--job-backoff-limit", default=JobsConfig.backoff_limit, show_default=True, type=click.IntRange(0, 20),
              help="Retries of a failed Job Pod before the Job (and the ingest or split) is reported failed.")
@click.option("--job-allow-host-path", is_flag=True,
              help="Accept hostPath ingest sources (they give the ingest Pod a node's files): single-node and "
                   "development clusters only.")
@click.option("--job-resources", default=None, metavar="JSON",
              help='Resources of the Jobs by role (ingest, split), each a ResourceRequirements (limits, requests) '
                   'that replaces the role\'s default, e.g. \'{"split": {"requests": {"cpu": "1", "memory": '
                   '"4Gi"}}}\'. Default: ingest 1 CPU / 1Gi requested, 4Gi limit; split 1 CPU / 2Gi requested, '
                   "8Gi limit.")
@click.option("--ring-image", default=RingsConfig.image, show_default=True,
              help="Cassandra image with the Management API (MAAC) of the Rings' nodes, unless a Ring's spec.image "
                   "names another.")
@click.option("--ring-resources", default=None, metavar="JSON",
              help="Resources of each Ring node's Cassandra container (a ResourceRequirements as JSON), unless a "
                   "Ring's spec.resources says otherwise. Default: 1 CPU / 2Gi requested, 4Gi limit.")
@click.option("--cache-image", default=CacheConfig.image, show_default=True,
              help="Alluxio image of the Datasets' cache tiers (spec.cache.alluxio), unless a Dataset names another.")
@click.option("--cache-image-pull-policy", default=CacheConfig.image_pull_policy, show_default=True,
              type=click.Choice(["Always", "IfNotPresent", "Never"]))
@click.option("--cache-host-dir", default=CacheConfig.host_dir, show_default=True,
              help="The nodes' directory of the cache tiers' FUSE mounts (<dir>/<namespace>/<dataset>/mnt); it must "
                   "be a shared mount (the kubelet's Bidirectional propagation).")
@click.option("--image-pull-secrets", default="", metavar="NAMES",
              callback=lambda _ctx, _param, text: secret_names(text),
              help="Comma-separated Secrets (kubernetes.io/dockerconfigjson) every Pod the operator makes pulls its "
                   "images with: Jobs, TrainingJobs, cache tiers, Ring nodes (the chart's global.imagePullSecrets).")
@click.option("--network-policy", default=None, metavar="JSON",
              help="NetworkPolicies of the operator's objects (the chart's networkPolicy values as JSON: enabled, "
                   "operatorNamespace, operatorPods, cassOperatorNamespace, cassOperatorPods, monitoringNamespace, "
                   "ringClients). Default: none made.")
@click.option("--verbose", "-v", is_flag=True, help="Log every handler call and API request.")
def main(namespaces: tuple[str, ...], metrics_port: int, health_port: int, bind: str, job_image: str,
         job_image_pull_policy: str, job_service_account: str, job_backoff_limit: int,
         job_allow_host_path: bool,
         job_resources: str | None, ring_image: str, ring_resources: str | None, cache_image: str,
         cache_image_pull_policy: str, cache_host_dir: str, image_pull_secrets: tuple[str, ...],
         network_policy: str | None, verbose: bool) -> None:
    """Reconcile Ringfeed's Dataset, Split, TrainingJob and Ring objects.

    Inside a cluster the service account's credentials are used; outside, the current kubeconfig context.

    \b
    Examples:
      ringfeed-operator                          # every namespace
      ringfeed-operator -n ml-data -n ml-train   # two namespaces only
      ringfeed-operator --bind 127.0.0.1 --metrics-port 19090 --health-port 18080
      ringfeed-operator --job-image localhost/ringfeed/dataplane:0.2.0 --job-image-pull-policy Never
    """
    jobs = JobsConfig(image=job_image, image_pull_policy=job_image_pull_policy,
                      image_pull_secrets=image_pull_secrets, service_account=job_service_account,
                      backoff_limit=job_backoff_limit, allow_host_path=job_allow_host_path)
    if job_resources is not None:
        try:
            jobs = dataclasses.replace(jobs, resources=parse_job_resources(job_resources, jobs.resources))
        except ResourcesError as error:
            raise click.BadParameter(str(error), param_hint="--job-resources") from None
    rings = RingsConfig(image=ring_image, image_pull_secrets=image_pull_secrets)
    if ring_resources is not None:
        try:
            rings = dataclasses.replace(rings, resources=parse_ring_resources(ring_resources))
        except ResourcesError as error:
            raise click.BadParameter(str(error), param_hint="--ring-resources") from None
    network = NetworkConfig()
    if network_policy is not None:
        try:
            network = parse_network_policy(network_policy)
        except NetworkPolicyError as error:
            raise click.BadParameter(str(error), param_hint="--network-policy") from None
    operator.run(Config(watch_namespaces=namespaces, metrics_port=metrics_port, health_port=health_port, bind=bind,
                        verbose=verbose, jobs=jobs, rings=rings,
                        cache=CacheConfig(image=cache_image, image_pull_policy=cache_image_pull_policy,
                                          image_pull_secrets=image_pull_secrets, host_dir=cache_host_dir),
                        network=network))
