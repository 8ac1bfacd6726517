"""Smoke tests of the local cluster: real Pods of the project's images on the real kubelet and containerd."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from kubecluster import Cluster

SMOKE_CHART = Path(__file__).parent / "charts" / "smoke"


def pod_spec(containers: list[client.V1Container], host_network: bool = True, **kwargs) -> client.V1PodSpec:
    return client.V1PodSpec(
        containers=containers, host_network=host_network, restart_policy="Never", termination_grace_period_seconds=1,
        security_context=client.V1PodSecurityContext(run_as_non_root=True), **kwargs)


def container(name: str, image: str, command: list[str] | None = None, args: list[str] | None = None,
              **kwargs) -> client.V1Container:
    return client.V1Container(name=name, image=image, image_pull_policy="Never", command=command, args=args,
                              **kwargs)


def run_pod(cluster: Cluster, namespace: str, name: str, spec: client.V1PodSpec) -> client.V1Pod:
    cluster.core.create_namespaced_pod(namespace, client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=spec))
    return cluster.wait_pod_done(namespace, name)


def test_dataplane_image_runs_ringfeed_help(cluster: Cluster, namespace: str):
    pod = run_pod(cluster, namespace, "help", pod_spec([container("ringfeed", cluster.image("dataplane"),
                                                                  args=["--help"])]))
    assert pod.status.phase == "Succeeded"
    log = cluster.core.read_namespaced_pod_log("help", namespace)
    assert "Usage: ringfeed [OPTIONS] COMMAND" in log
    assert "split" in log and "ingest" in log


def test_images_run_as_non_root_without_build_tools(cluster: Cluster, namespace: str):
    script = ("import os, shutil, ringfeed._native; "
              "print(os.getuid(), os.getgid(), [t for t in ('gcc', 'cc', 'cargo', 'rustc', 'maturin', 'pip') "
              "if shutil.which(t)])")
    run_pod(cluster, namespace, "whoami", pod_spec([container("probe", cluster.image("dataplane"),
                                                              command=["python3", "-c", script])]))
    assert cluster.core.read_namespaced_pod_log("whoami", namespace).split("\n")[0] == "10001 10001 []"

    pod = run_pod(cluster, namespace, "operator-help", pod_spec([container("operator", cluster.image("operator"),
                                                                           args=["--help"])]))
    assert pod.status.phase == "Succeeded"
    assert "Reconcile Ringfeed's Dataset, Split and TrainingJob" in cluster.core.read_namespaced_pod_log(
        "operator-help", namespace)


def test_pod_without_host_network_gets_an_isolated_loopback_address(cluster: Cluster, namespace: str):
    script = "import socket; s = socket.socket(); s.bind(('0.0.0.0', 8080)); print('bound')"
    pod = run_pod(cluster, namespace, "isolated", pod_spec(
        [container("probe", cluster.image("dataplane"), command=["python3", "-c", script])], host_network=False))
    assert pod.status.phase == "Succeeded"
    assert pod.status.pod_ip.startswith("10.88.")
    assert cluster.core.read_namespaced_pod_log("isolated", namespace).strip() == "bound"


def test_job_completes(cluster: Cluster, namespace: str):
    script = "import os, numpy; print('index', os.environ['JOB_COMPLETION_INDEX'], int(numpy.arange(5).sum()))"
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="indexed"),
        spec=client.V1JobSpec(
            completions=3, parallelism=2, completion_mode="Indexed", backoff_limit=0,
            template=client.V1PodTemplateSpec(spec=pod_spec([container(
                "work", cluster.image("dataplane"), command=["python3", "-c", script])]))))
    cluster.batch.create_namespaced_job(namespace, job)

    def finished():
        status = cluster.batch.read_namespaced_job("indexed", namespace).status
        return status if (status.succeeded or 0) + (status.failed or 0) >= 3 or status.failed else None

    status = cluster.wait("job indexed", finished)
    assert status.succeeded == 3 and not status.failed
    pods = cluster.core.list_namespaced_pod(namespace, label_selector="job-name=indexed").items
    logs = sorted(cluster.core.read_namespaced_pod_log(p.metadata.name, namespace).strip() for p in pods)
    assert logs == ["index 0 10", "index 1 10", "index 2 10"]


def test_containers_of_a_pod_share_a_memory_emptydir(cluster: Cluster, namespace: str):
    writer = ("import pathlib, time; p = pathlib.Path('/shared/batch.bin'); "
              "p.with_suffix('.tmp').write_bytes(bytes(range(256)) * 4096); p.with_suffix('.tmp').rename(p)")
    reader = ("import pathlib, time\n"
              "p = pathlib.Path('/shared/batch.bin')\n"
              "while not p.exists(): time.sleep(0.05)\n"
              "mount = [l.split() for l in open('/proc/mounts') if l.split()[1] == '/shared'][0]\n"
              "print(len(p.read_bytes()), mount[2])")
    volume = [client.V1VolumeMount(name="shared", mount_path="/shared")]
    spec = pod_spec(
        [container("writer", cluster.image("dataplane"), command=["python3", "-c", writer], volume_mounts=volume),
         container("reader", cluster.image("dataplane"), command=["python3", "-c", reader], volume_mounts=volume)],
        volumes=[client.V1Volume(name="shared", empty_dir=client.V1EmptyDirVolumeSource(medium="Memory",
                                                                                        size_limit="16Mi"))])
    pod = run_pod(cluster, namespace, "shared", spec)
    assert pod.status.phase == "Succeeded"
    assert cluster.core.read_namespaced_pod_log("shared", namespace, container="reader").strip() == "1048576 tmpfs"


def test_helm_install_and_uninstall(cluster: Cluster, namespace: str):
    cluster.helm("install", "smoke", str(SMOKE_CHART), "-n", namespace, "--set", "message=installed by helm",
                 "--wait", "--wait-for-jobs", "--timeout", "90s")
    assert "STATUS: deployed" in cluster.helm("status", "smoke", "-n", namespace).stdout
    config = cluster.core.read_namespaced_config_map("smoke-message", namespace)
    assert config.data == {"message": "installed by helm"}
    assert cluster.batch.read_namespaced_job("smoke-echo", namespace).status.succeeded == 1
    pod = cluster.core.list_namespaced_pod(namespace, label_selector="job-name=smoke-echo").items[0]
    assert cluster.core.read_namespaced_pod_log(pod.metadata.name, namespace).strip() == "installed by helm"

    cluster.helm("uninstall", "smoke", "-n", namespace, "--wait", "--timeout", "60s")
    assert cluster.helm("list", "-n", namespace, "-q").stdout.strip() == ""
    assert not cluster.core.list_namespaced_config_map(namespace, field_selector="metadata.name=smoke-message").items
    assert not cluster.batch.list_namespaced_job(namespace).items


def test_failure_dump_writes_logs_events_and_objects(cluster: Cluster, namespace: str, tmp_path: Path):
    run_pod(cluster, namespace, "talker", pod_spec([container("talk", cluster.image("dataplane"),
                                                              command=["python3", "-c", "print('said something')"])]))
    cluster.dump(namespace, tmp_path)
    assert (tmp_path / "talker.talk.log").read_text().strip() == "said something"
    assert "Pod/talker Scheduled" in (tmp_path / "events.txt").read_text()
    assert "name: talker" in (tmp_path / "objects.yaml").read_text()
