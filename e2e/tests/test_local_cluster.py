"""Smoke tests of the cluster: real Pods of the project's images on the real kubelet and containerd, and a real Pod
network (Pod IPs, Services through kube-proxy, cluster DNS, the apiserver through Service `kubernetes`).

The tests run in the cluster's network (e2e/cluster/cluster.sh run), so they reach Pod IPs themselves too."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from kubecluster import PULL_SECRET, Cluster

SMOKE_CHART = Path(__file__).parent / "charts" / "smoke"


def pod_spec(containers: list[client.V1Container], **kwargs) -> client.V1PodSpec:
    return client.V1PodSpec(
        containers=containers, restart_policy="Never", termination_grace_period_seconds=1,
        image_pull_secrets=[client.V1LocalObjectReference(name=PULL_SECRET)],
        security_context=client.V1PodSecurityContext(run_as_non_root=True), **kwargs)


def container(name: str, image: str, command: list[str] | None = None, args: list[str] | None = None,
              **kwargs) -> client.V1Container:
    return client.V1Container(name=name, image=image, command=command, args=args, **kwargs)


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
    assert "Reconcile Ringfeed's Dataset, Split, TrainingJob and Ring objects" in " ".join(
        cluster.core.read_namespaced_pod_log("operator-help", namespace).split())


# An HTTP server that answers with its Pod's name: what the network tests call.
WEB_SERVER = ("import http.server, os\n"
              "class Hello(http.server.BaseHTTPRequestHandler):\n"
              "    def do_GET(self):\n"
              "        body = os.environ['HOSTNAME'].encode()\n"
              "        self.send_response(200); self.end_headers(); self.wfile.write(body)\n"
              "http.server.HTTPServer(('0.0.0.0', 8080), Hello).serve_forever()")


def start_web_servers(cluster: Cluster, namespace: str, names: list[str]) -> dict[str, str]:
    """Pods (no hostNetwork) serving HTTP on 8080 behind Service `web`, Ready by an HTTP probe; name -> Pod IP."""
    for name in names:
        spec = pod_spec([container("web", cluster.image("dataplane"), command=["python3", "-c", WEB_SERVER],
                                   ports=[client.V1ContainerPort(container_port=8080)],
                                   readiness_probe=client.V1Probe(
                                       http_get=client.V1HTTPGetAction(path="/", port=8080), period_seconds=1))])
        spec.restart_policy = "Always"
        cluster.core.create_namespaced_pod(namespace, client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, labels={"app": "web"}), spec=spec))
    cluster.core.create_namespaced_service(namespace, client.V1Service(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1ServiceSpec(selector={"app": "web"}, ports=[client.V1ServicePort(port=80, target_port=8080)])))

    def ready_ips():
        pods = [cluster.core.read_namespaced_pod(name, namespace) for name in names]
        ready = all(any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or ()) for p in pods)
        return {p.metadata.name: p.status.pod_ip for p in pods} if ready else None

    return cluster.wait("web Pods Ready (HTTP probe by Pod IP)", ready_ips)


def run_client(cluster: Cluster, namespace: str, script: str, *args: str) -> tuple[client.V1Pod, str]:
    """A Pod (no hostNetwork) of the data-plane image that runs `script`: the Pod and its log, once it succeeded."""
    pod = run_pod(cluster, namespace, "client", pod_spec(
        [container("client", cluster.image("dataplane"), command=["python3", "-c", script, *args])]))
    log = cluster.core.read_namespaced_pod_log("client", namespace)
    assert pod.status.phase == "Succeeded", log
    return pod, log


def test_pods_get_pod_ips_and_reach_each_other(cluster: Cluster, namespace: str):
    ips = start_web_servers(cluster, namespace, ["web-a", "web-b"])
    assert len(set(ips.values())) == 2
    for ip in ips.values():
        assert ip.startswith("10.244.0.") and ip != "10.244.0.1"
    fetch = ("import sys, urllib.request\n"
             "for ip in sys.argv[1:]:\n"
             "    print(urllib.request.urlopen(f'http://{ip}:8080/', timeout=5).read().decode())")
    pod, log = run_client(cluster, namespace, fetch, *ips.values())
    assert log.split() == list(ips)
    assert pod.status.pod_ip not in ips.values()


def test_a_pod_reaches_a_service_by_its_dns_name(cluster: Cluster, namespace: str):
    ips = start_web_servers(cluster, namespace, ["web-a", "web-b"])
    service_ip = cluster.core.read_namespaced_service("web", namespace).spec.cluster_ip
    # kube-proxy may program the second endpoint a moment after both Pods are Ready: ask through the ClusterIP
    # until both answered, at most 200 times in about 10 s.
    script = ("import socket, time, urllib.request\n"
              f"print(socket.gethostbyname('web.{namespace}.svc.cluster.local'))\n"
              "print(socket.gethostbyname('web'))\n"  # the Pod's search path
              "seen = set()\n"
              "for _ in range(200):\n"
              "    seen.add(urllib.request.urlopen('http://web/', timeout=5).read().decode())\n"
              "    if len(seen) == 2: break\n"
              "    time.sleep(0.05)\n"
              "print(' '.join(sorted(seen)))")
    lines = run_client(cluster, namespace, script)[1].split("\n")
    assert lines[0] == lines[1] == service_ip
    # kube-proxy spreads the requests over both Pods behind the ClusterIP.
    assert lines[2].split() == sorted(ips)


def test_a_pod_reaches_the_apiserver_through_service_kubernetes(cluster: Cluster, namespace: str):
    script = ("import json, os, ssl, urllib.request\n"
              "sa = '/var/run/secrets/kubernetes.io/serviceaccount'\n"
              "host, port = os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT']\n"
              "request = urllib.request.Request(f'https://kubernetes.default.svc/api/v1/namespaces/"
              f"{namespace}/serviceaccounts/default', "
              "headers={'Authorization': 'Bearer ' + open(sa + '/token').read()})\n"
              "context = ssl.create_default_context(cafile=sa + '/ca.crt')\n"
              "print(host, port, json.load(urllib.request.urlopen(request, context=context, timeout=5))"
              "['metadata']['name'])")
    # The default ServiceAccount may read nothing; this one may read ServiceAccounts of its namespace.
    cluster.kubectl("create", "role", "read-sa", "--verb=get", "--resource=serviceaccounts", "-n", namespace)
    cluster.kubectl("create", "rolebinding", "read-sa", "--role=read-sa", f"--serviceaccount={namespace}:default",
                    "-n", namespace)
    service_ip = cluster.core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    assert run_client(cluster, namespace, script)[1].split() == [service_ip, "443", "default"]


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
                 "--set", f"image={cluster.image('dataplane')}", "--set", f"pullSecret={PULL_SECRET}", "--wait",
                 "--wait-for-jobs", "--timeout", "90s")
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
