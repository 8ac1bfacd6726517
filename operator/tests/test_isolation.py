"""A TrainingJob template that would reach the loader sidecar's processes or the ring's Secrets is named, each way
it does so, and one that does neither passes: pure, checked without a cluster."""

from __future__ import annotations

import pytest

from ringfeed_operator.isolation import (
    SIDECAR_UID,
    dataset_secret_names,
    isolation_breaches,
    refusal,
    ring_secret_names,
    secret_references,
)

TRAINER = {"name": "train", "image": "trainer:1"}


@pytest.mark.parametrize("field", ["shareProcessNamespace", "hostPID", "hostIPC", "hostNetwork"])
def test_a_template_joining_other_processes_is_a_breach(field):
    breaches = isolation_breaches({field: True, "containers": [TRAINER]})
    assert len(breaches) == 1 and f"spec.template.spec.{field} is true" in breaches[0]
    assert isolation_breaches({field: False, "containers": [TRAINER]}) == []


@pytest.mark.parametrize("pod", [
    {"securityContext": {"runAsUser": SIDECAR_UID}, "containers": [TRAINER]},
    {"containers": [{**TRAINER, "securityContext": {"runAsUser": SIDECAR_UID}}]},
    {"containers": [TRAINER], "initContainers": [{"name": "prep", "securityContext": {"runAsUser": SIDECAR_UID}}]},
], ids=["pod", "container", "init-container"])
def test_running_as_the_sidecars_user_is_a_breach(pod):
    breaches = isolation_breaches(pod)
    assert len(breaches) == 1 and str(SIDECAR_UID) in breaches[0]


def test_an_ordinary_template_has_no_breach():
    assert isolation_breaches({"securityContext": {"runAsUser": 10001, "fsGroup": 10001},
                               "containers": [TRAINER]}) == []


def test_every_way_a_template_names_a_secret_is_found_with_where():
    pod = {
        "volumes": [{"name": "creds", "secret": {"secretName": "images-superuser"}},
                    {"name": "bundle", "projected": {"sources": [{"configMap": {"name": "settings"}},
                                                                  {"secret": {"name": "images-ca"}}]}},
                    {"name": "scratch", "emptyDir": {}}],
        "containers": [{**TRAINER, "env": [
            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "cass", "key": "password"}}},
            {"name": "PLAIN", "value": "x"},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "envFrom": [{"secretRef": {"name": "wandb"}}, {"configMapRef": {"name": "settings"}}]}],
        "initContainers": [{"name": "prep", "envFrom": [{"secretRef": {"name": "images-reader"}}]}],
    }
    assert secret_references(pod) == {
        "images-superuser": ["volume 'creds'"],
        "images-ca": ["volume 'bundle'"],
        "cass": ["container 'train' variable PASSWORD"],
        "wandb": ["container 'train' envFrom"],
        "images-reader": ["init container 'prep' envFrom"],
    }
    assert secret_references({"containers": [TRAINER]}) == {}


def test_a_rings_secrets_are_all_of_its_logins_and_keys_an_external_rings_its_login_and_ca():
    assert ring_secret_names({"ring": {"name": "images"}}) == {
        "images-superuser", "images-reader", "images-ca", "images-node-tls", "images-maac-server",
        "images-maac-client"}
    external = {"external": {"contactPoints": ["10.0.0.5"], "credentialsSecret": {"name": "cass"},
                             "tls": {"enabled": True, "caSecret": {"name": "cass-ca"}}}}
    assert ring_secret_names(external) == {"cass", "cass-ca"}
    assert ring_secret_names({"external": {"contactPoints": ["10.0.0.5"]}}) == set()


def test_the_refusal_names_every_breach_and_forbidden_secret_and_nothing_else():
    references = {"images-superuser": ["volume 'creds'"], "wandb": ["container 'train' envFrom"]}
    message = refusal(["spec.template.spec.hostPID is true: x"], {"images-superuser": "Ring images's",
                                                                  "images-ca": "Ring images's"}, references)
    assert message is not None
    assert message.startswith("the trainer must not reach the ring's credentials")
    assert "hostPID" in message and "volume 'creds' names Secret images-superuser (Ring images's)" in message
    assert "wandb" not in message and "images-ca" not in message  # allowed, and not named by the template
    assert refusal([], {"images-superuser": "Ring images's"}, {"wandb": ["container 'train' envFrom"]}) is None


def test_a_datasets_secrets_include_its_writer_role_on_a_ring():
    on_ring = {"metadata": {"name": "slides"}, "spec": {"storage": {"ring": {"name": "images"}}}}
    assert "slides-writer" in dataset_secret_names(on_ring)
    assert ring_secret_names({"ring": {"name": "images"}}) < dataset_secret_names(on_ring)
    external = {"metadata": {"name": "slides"}, "spec": {"storage": {"external": {
        "contactPoints": ["db"], "credentialsSecret": {"name": "cass"}}}}}
    assert dataset_secret_names(external) == {"cass"}
