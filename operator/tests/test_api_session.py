"""The operator's API session: kopf's login, in a pool bounded by what it watches plus its requests."""

from __future__ import annotations

import asyncio
import logging

import kopf
import kubernetes.config.kube_config
import pytest
import yaml

from ringfeed_operator.api_session import API_REQUESTS, Login, pool_size
from ringfeed_operator.config import Config
from ringfeed_operator.context import Context
from ringfeed_operator.kube import Kube

KUBECONFIG = {
    "apiVersion": "v1", "kind": "Config", "current-context": "bench",
    "clusters": [{"name": "bench", "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}}],
    "users": [{"name": "operator", "user": {"token": "s3cret-token"}}],
    "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "operator"}}],
}


@pytest.fixture()
def kubeconfig(tmp_path, monkeypatch):
    def write(token: str) -> None:
        config = {**KUBECONFIG, "users": [{"name": "operator", "user": {"token": token}}]}
        (tmp_path / "config").write_text(yaml.safe_dump(config))

    write("s3cret-token")
    # Read when the kubernetes client is imported: its default location is set where it is kept.
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "config"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a cluster: the kubeconfig
    return write


@pytest.mark.parametrize("namespaces", [(), ("team-a",), ("team-a", "team-b", "team-c", "team-d", "team-e")])
def test_the_login_of_the_kubeconfig_in_a_pool_with_room_for_every_watch_and_the_requests(kubeconfig, namespaces):
    memo = Context(config=Config(watch_namespaces=namespaces), kube=None, rings=None, metrics=None)
    login = Login()

    async def logged_in() -> tuple:
        info = await login(memo=memo, logger=logging.getLogger("test"), settings=kopf.OperatorSettings())
        again = await login(memo=memo, logger=logging.getLogger("test"), settings=kopf.OperatorSettings())
        kubeconfig("rotated-token")
        rotated = await login(memo=memo, logger=logging.getLogger("test"), settings=kopf.OperatorSettings())
        try:
            return (info, again, rotated, info.aiohttp_session.connector.limit, dict(info.aiohttp_session.headers),
                    dict(rotated.aiohttp_session.headers))
        finally:
            await info.aiohttp_session.close()
            await rotated.aiohttp_session.close()

    info, again, rotated, limit, headers, rotated_headers = asyncio.run(logged_in())
    assert isinstance(info, kopf.AiohttpSession) and info.server == "https://127.0.0.1:6443"
    assert headers["Authorization"] == "Bearer s3cret-token"
    # The watches each hold a connection: 6 per namespace watched (or once cluster-wide), plus the cluster's own.
    assert limit == pool_size(namespaces) >= API_REQUESTS + 6 * max(1, len(namespaces)) + 2
    # The same credentials, the same session (kopf refuses one it saw rejected); new credentials, a new one.
    assert again is info and rotated is not info and rotated_headers["Authorization"] == "Bearer rotated-token"


@pytest.mark.parametrize("threads", [4, 16, 32])
def test_the_handlers_client_keeps_a_connection_per_handler_thread(kubeconfig, threads):
    kube = Kube.connect(threads)
    assert kube._core.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] == threads
