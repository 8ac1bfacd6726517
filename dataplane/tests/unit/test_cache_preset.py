"""The cache tier's Alluxio settings (pure): the tuned preset, loopback binds, the ring's mount options."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ringfeed.cache import LocalCache
from ringfeed.cache.preset import (
    REQUIRED,
    TUNED_PRESET,
    UFS_ROOT,
    Placement,
    fuse_options,
    jvm_flags,
    ring_mount_options,
    site_properties,
)
from ringfeed.cache.runtime import AlluxioRuntime
from ringfeed.cache.serve import RingLogin, ServeSettings, command
from ringfeed.cache.serve import properties as serve_properties
from ringfeed.errors import RingfeedError


def properties(tuned: bool = True) -> dict[str, str]:
    return site_properties(placement=Placement.local("127.0.40.1"), journal_dir="/j", memory_dir="/dev/shm/x",
                           memory_bytes=1 << 30, extensions_dir="/ext",
                           mount_options={"ringfeed.contact-points": "10.0.0.1:9042"}, tuned=tuned)


def test_the_ring_is_alluxios_read_only_root_with_its_mount_options():
    site = properties()
    assert site["alluxio.master.mount.table.root.ufs"] == UFS_ROOT
    assert site["alluxio.master.mount.table.root.readonly"] == "true"
    assert site["alluxio.master.mount.table.root.option.ringfeed.contact-points"] == "10.0.0.1:9042"
    assert site["alluxio.extensions.dir"] == "/ext"
    assert site["alluxio.worker.tieredstore.level0.alias"] == "MEM"
    assert site["alluxio.worker.tieredstore.level0.dirs.quota"] == str(1 << 30)


def test_every_server_binds_to_the_tiers_address_only():
    binds = {key: value for key, value in properties().items() if key.endswith(".bind.host")}
    assert {"alluxio.master.bind.host", "alluxio.master.web.bind.host", "alluxio.worker.bind.host",
            "alluxio.worker.web.bind.host"} <= set(binds)
    assert set(binds.values()) == {"127.0.40.1"}


def test_the_preset_is_the_studys_and_the_defaults_leave_it_out():
    tuned, untuned = properties(True), properties(False)
    assert tuned["alluxio.user.metadata.cache.enabled"] == "true"
    assert tuned["alluxio.user.file.passive.cache.enabled"] == "false"
    assert tuned["alluxio.user.ufs.block.read.location.policy"].endswith("LocalFirstAvoidEvictionPolicy")
    for setting in TUNED_PRESET:
        assert setting.why, setting.key
        assert setting.key not in untuned, setting.key
    for setting in REQUIRED:  # never calls home, tuned or not
        assert untuned[setting.key] == tuned[setting.key] == setting.value
    assert fuse_options(True) == ["-o", "ro", "-o", "max_idle_threads=64", "-o", "kernel_cache",
                                  "-o", "attr_timeout=7200", "-o", "entry_timeout=7200"]
    assert fuse_options(False) == ["-o", "ro"]


def test_jvm_flags_size_the_jvm_to_the_cpus_and_block_cloud_metadata():
    flags = jvm_flags("1g", 3)
    assert flags[:2] == ["-Xmx1g", "-XX:ActiveProcessorCount=3"]
    assert "-Dcom.amazonaws.sdk.disableEc2Metadata=true" in flags


def test_a_login_needs_its_password_file():
    assert ring_mount_options(["a", "b"], 9042) == {"ringfeed.contact-points": "a:9042,b:9042"}
    with_login = ring_mount_options(["a"], 9142, local_dc="dc1", username="reader", password_file="/s/password")
    assert with_login == {"ringfeed.contact-points": "a:9142", "ringfeed.local-datacenter": "dc1",
                          "ringfeed.username": "reader", "ringfeed.password-file": "/s/password"}
    with pytest.raises(ValueError, match="password file"):
        ring_mount_options(["a"], 9042, username="reader")


def test_docs_explain_every_setting_of_the_preset():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[3] / "docs" / "cache.md").read_text()
    for setting in (*TUNED_PRESET, *REQUIRED):
        assert f"`{setting.key}" in page, f"docs/cache.md does not explain {setting.key}"


# -- one process per container (ringfeed cache serve): what the operator's Pods run ------------------------------

POD = Placement(master="demo-cache-master.ml.svc", hostname="10.244.0.7", bind="0.0.0.0", node="node-a")
RING = RingLogin(("10.0.0.1", "10.0.0.2"), 9042, "dc1", "reader", "s3cret")


def test_on_kubernetes_the_master_is_its_service_and_each_pod_its_own_address():
    site = serve_properties(ServeSettings(role="worker", placement=POD, memory_bytes=1 << 28), AlluxioRuntime(
        Path("/opt/alluxio")), RING)
    assert site["alluxio.master.hostname"] == "demo-cache-master.ml.svc"
    assert site["alluxio.worker.hostname"] == site["alluxio.user.hostname"] == "10.244.0.7"
    assert site["alluxio.locality.node"] == "node-a"  # a FUSE client on node-a reads through node-a's worker
    assert {value for key, value in site.items() if key.endswith(".bind.host")} == {"0.0.0.0"}
    assert site["alluxio.worker.tieredstore.level0.dirs.quota"] == str(1 << 28)
    assert site["alluxio.extensions.dir"] == "/opt/alluxio/extensions"


def test_master_and_workers_name_the_same_password_file_and_never_the_password():
    runtime = AlluxioRuntime(Path("/opt/alluxio"))
    master = serve_properties(ServeSettings(role="master", placement=POD), runtime, RING)
    worker = serve_properties(ServeSettings(role="worker", placement=POD), runtime, RING)
    key = "alluxio.master.mount.table.root.option.ringfeed.password-file"
    assert master[key] == worker[key] == "/var/lib/ringfeed-cache/conf/ring-password"
    assert master["alluxio.master.mount.table.root.option.ringfeed.contact-points"] == "10.0.0.1:9042,10.0.0.2:9042"
    assert not any("s3cret" in value for value in master.values())
    fuse = serve_properties(ServeSettings(role="fuse", placement=POD), runtime, None)
    assert not any("ringfeed.username" in key for key in fuse)


def test_the_fuse_process_mounts_one_datasets_tree_for_other_users_with_the_preset():
    settings = ServeSettings(role="fuse", placement=POD, mount=Path("/cache/ml/demo/mnt"), root="/demo", heap="512m")
    argv = command(settings, AlluxioRuntime(Path("/opt/alluxio")), "/usr/bin/java")
    assert argv[0] == "/usr/bin/java" and "-Xmx512m" in argv
    assert "-Dalluxio.fuse.jnifuse.libfuse.version=3" in argv
    main = argv.index("io.ringfeed.alluxio.fuse.RingFuse")  # zero-message opens
    assert argv[main + 1:main + 5] == ["-m", "/cache/ml/demo/mnt", "-a", "/demo"]
    options = argv[main + 5:][1::2]
    assert options[:2] == ["ro", "allow_other"] and "max_idle_threads=64" in options
    untuned = command(dataclasses.replace(settings, tuned=False), AlluxioRuntime(Path("/opt/alluxio")), "java")
    main = untuned.index("alluxio.fuse.AlluxioFuse")  # Alluxio's defaults: Alluxio's own FUSE
    assert untuned[main + 1:main + 5] == ["-m", "/cache/ml/demo/mnt", "-a", "/demo"]
    master = command(ServeSettings(role="master", placement=POD), AlluxioRuntime(Path("/opt/alluxio")), "java")
    assert master[-1] == "alluxio.master.AlluxioMaster" and "-cp" in master


def test_refresh_without_a_running_tier_says_what_to_do(tmp_path):
    with pytest.raises(RingfeedError, match="ringfeed cache up"):
        LocalCache(tmp_path).refresh()
