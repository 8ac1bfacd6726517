"""The operator's API session: kopf's login, in a pool of at most API_CONNECTIONS connections."""

from __future__ import annotations

import asyncio
import logging

import kopf
import kubernetes.config.kube_config
import yaml

from ringfeed_operator.api_session import API_CONNECTIONS, login

KUBECONFIG = {
    "apiVersion": "v1", "kind": "Config", "current-context": "bench",
    "clusters": [{"name": "bench", "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}}],
    "users": [{"name": "operator", "user": {"token": "s3cret-token"}}],
    "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "operator"}}],
}


def test_the_login_of_the_kubeconfig_in_a_bounded_pool(tmp_path, monkeypatch):
    (tmp_path / "config").write_text(yaml.safe_dump(KUBECONFIG))
    # Read when the kubernetes client is imported: its default location is set where it is kept.
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "config"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a cluster: the kubeconfig

    async def logged_in() -> tuple[kopf.AiohttpSession | None, int, dict]:
        info = await login(logger=logging.getLogger("test"), settings=kopf.OperatorSettings())
        assert info is not None
        try:
            return info, info.aiohttp_session.connector.limit, dict(info.aiohttp_session.headers)
        finally:
            await info.aiohttp_session.close()

    info, limit, headers = asyncio.run(logged_in())
    assert isinstance(info, kopf.AiohttpSession) and info.server == "https://127.0.0.1:6443"
    assert limit == API_CONNECTIONS and 0 < API_CONNECTIONS <= 64
    assert headers["Authorization"] == "Bearer s3cret-token"
