"""The Alluxio settings of Ringfeed's cache tier: the tuned preset of the Alluxio/Alibaba ResNet-50 study, each
setting with the reason it is there, and the JVM flags. Pure: the local tier (``ringfeed cache``) and the operator's
manifests render the same properties from here."""

from __future__ import annotations

import dataclasses

ALLUXIO_VERSION = "2.9.6"
UFS_ROOT = "ringfeed://ring/"


@dataclasses.dataclass(frozen=True)
class Setting:
    key: str
    value: str
    why: str


# The tuned preset (docs/cache.md explains it with the study's figures).
TUNED_PRESET: tuple[Setting, ...] = (
    Setting("alluxio.user.metadata.cache.enabled", "true",
            "metadata cache on: FUSE answers stat/readdir of the millions of small files from its own memory "
            "instead of one master RPC each"),
    Setting("alluxio.user.metadata.cache.max.size", "2000000", "room for the entries of a 1.28M-image split"),
    Setting("alluxio.user.metadata.cache.expiration.time", "2day",
            "a split version is immutable: its entries never go stale"),
    Setting("alluxio.user.ufs.block.read.location.policy",
            "alluxio.client.block.policy.LocalFirstAvoidEvictionPolicy",
            "eviction avoided: a block read from the ring goes to a worker that has room, never one that must evict"),
    Setting("alluxio.user.block.write.location.policy.class",
            "alluxio.client.block.policy.LocalFirstAvoidEvictionPolicy", "the same for blocks written by clients"),
    Setting("alluxio.user.file.passive.cache.enabled", "false",
            "passive cache off: a block read from another worker is not copied again into the local one"),
    Setting("alluxio.user.file.readtype.default", "CACHE", "the first read of a file caches it in worker memory"),
    Setting("alluxio.user.update.file.accesstime.disabled", "true",
            "no master RPC per open to record access times the tier never uses"),
    Setting("alluxio.security.authorization.permission.enabled", "false",
            "the tree is read-only for every user; per-file permission checks only cost master time"),
)

# Not tuning: what every tier has, tuned or not (`make bench-cache` compares the preset with Alluxio's defaults).
REQUIRED: tuple[Setting, ...] = (
    Setting("alluxio.master.update.check.enabled", "false", "no call home (and no cloud metadata address)"),
    Setting("alluxio.master.mount.table.root.readonly", "true", "the ring stays the single source of truth"),
    Setting("alluxio.user.file.metadata.sync.interval", "0",
            "what FUSE's metadata cache misses, the master checks against the ring (from the extension's memory): "
            "a split made after its dataset's folder was listed shows, and nothing is ever reported absent that "
            "exists"),
    Setting("alluxio.master.ufs.path.cache.capacity", "0",
            "the master does not remember that a path was absent: a split looked for before it was made shows once "
            "it is"),
    Setting("alluxio.fuse.special.command.enabled", "true",
            "`ringfeed cache refresh` drops the FUSE client's metadata cache through a lookup under the mount"),
)

# FUSE runs with more worker threads than libfuse's default (10 idle threads at most: under a DataLoader's
# concurrent reads libfuse3 then creates and destroys a thread per request).
FUSE_MAX_IDLE_THREADS = 64

# Java 17 needs these for Alluxio 2.9's Netty and gRPC; the EC2 flag stops the AWS SDK inside Alluxio from calling
# the cloud instance-metadata address.
JAVA_17_FLAGS: tuple[str, ...] = (
    "-Dcom.amazonaws.sdk.disableEc2Metadata=true",
    "-Dio.netty.tryReflectionSetAccessible=true",
    *(f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in (
        "jdk.internal.misc", "java.nio", "sun.nio.ch", "java.lang", "java.util", "java.util.concurrent", "java.io",
        "java.lang.reflect", "java.net")),
    "--add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
)


def jvm_flags(heap: str, cpus: int) -> list[str]:
    return [f"-Xmx{heap}", f"-XX:ActiveProcessorCount={cpus}", *JAVA_17_FLAGS]


def ring_mount_options(hosts: list[str], port: int, *, local_dc: str | None = None, username: str | None = None,
                       password_file: str | None = None, tls_ca_file: str | None = None,
                       tls_server_name: str | None = None) -> dict[str, str]:
    """Options of the ring's mount (the UFS reads them: dataplane/alluxio RingSettings)."""
    options = {"ringfeed.contact-points": ",".join(f"{host}:{port}" for host in hosts)}
    if local_dc:
        options["ringfeed.local-datacenter"] = local_dc
    if tls_ca_file:
        options["ringfeed.tls-ca-file"] = tls_ca_file
        if tls_server_name:
            options["ringfeed.tls-server-name"] = tls_server_name
    if username:
        if not password_file:
            raise ValueError("a username needs its password file")
        options["ringfeed.username"] = username
        options["ringfeed.password-file"] = password_file
    return options


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the tier's processes find each other. On one machine every name is the tier's loopback address and
    every socket binds there only (Alluxio binds to all addresses by default). On Kubernetes the master is its
    Service's name, a worker or a FUSE client is its Pod IP, sockets bind to the Pod's addresses, and ``node`` (the
    node's name) tells a FUSE client which worker is local to it (Alluxio's locality, LocalFirst policies)."""

    master: str
    hostname: str
    bind: str
    node: str | None = None

    @classmethod
    def local(cls, host: str) -> Placement:
        return cls(master=host, hostname=host, bind=host)


BIND_HOSTS = ("master", "master.web", "worker", "worker.web", "worker.data", "fuse.web", "job.master",
              "job.master.web", "job.worker", "job.worker.web", "proxy.web")


def site_properties(*, placement: Placement, journal_dir: str, memory_dir: str, memory_bytes: int,
                    extensions_dir: str, mount_options: dict[str, str], tuned: bool = True) -> dict[str, str]:
    """alluxio-site.properties of the tier's master, workers and FUSE clients, the ring mounted as Alluxio's root;
    with the tuned preset, or (``tuned=False``) Alluxio's defaults."""
    properties = {
        "alluxio.master.hostname": placement.master,
        "alluxio.worker.hostname": placement.hostname,
        "alluxio.user.hostname": placement.hostname,
        **{f"alluxio.{server}.bind.host": placement.bind for server in BIND_HOSTS},
        **({"alluxio.locality.node": placement.node} if placement.node else {}),
        "alluxio.master.journal.type": "UFS",
        "alluxio.master.journal.folder": journal_dir,
        "alluxio.master.metastore": "HEAP",
        "alluxio.master.mount.table.root.ufs": UFS_ROOT,
        **{f"alluxio.master.mount.table.root.option.{key}": value for key, value in mount_options.items()},
        "alluxio.extensions.dir": extensions_dir,
        "alluxio.worker.tieredstore.levels": "1",
        "alluxio.worker.tieredstore.level0.alias": "MEM",
        "alluxio.worker.tieredstore.level0.dirs.path": memory_dir,
        "alluxio.worker.tieredstore.level0.dirs.quota": str(memory_bytes),
        "alluxio.worker.ramdisk.size": str(memory_bytes),
    }
    properties.update({setting.key: setting.value for setting in (*REQUIRED, *(TUNED_PRESET if tuned else ()))})
    return properties


# The kernel's side of the mount, with the preset: a split version never changes, so the kernel may keep what it has
# read (kernel_cache: file pages stay in the page cache across opens) and what it has looked up (entries and
# attributes for 2 hours instead of 1 s), as in the study; a warm epoch then reaches Alluxio only for what the page
# cache dropped.
FUSE_KERNEL_OPTIONS = ("kernel_cache", "attr_timeout=7200", "entry_timeout=7200")


def fuse_options(tuned: bool = True, allow_other: bool = False) -> list[str]:
    """libfuse mount options of the FUSE process (RingFuse; AlluxioFuse untuned): read-only; with the preset, more
    idle worker threads and the kernel's caches kept; ``allow_other`` where the mount is made by root for other users
    (trainer containers on Kubernetes)."""
    options = ["ro", *(["allow_other"] if allow_other else [])]
    if tuned:
        options += [f"max_idle_threads={FUSE_MAX_IDLE_THREADS}", *FUSE_KERNEL_OPTIONS]
    return [argument for option in options for argument in ("-o", option)]


def render_properties(properties: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in properties.items())
