"""One process of the cache tier in the foreground, as a container runs it (``ringfeed cache serve ROLE``): the
Alluxio master, a worker, or the FUSE mount of one dataset. The operator's manifests (ringfeed_operator/builders/
cache.py) start the image's ``ringfeed cache serve`` with the Pod's names; the settings come from the same preset
as the local tier's.

The JVM replaces this process (exec): it is the container's main process, gets the kubelet's SIGTERM, and its log
goes to stdout."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ringfeed.cache.preset import Placement, fuse_options, render_properties, ring_mount_options, site_properties
from ringfeed.cache.runtime import LOG4J_CONSOLE, AlluxioRuntime, unmount_stale
from ringfeed.errors import RingfeedError
from ringfeed.local.jars import require_java

ROLES = ("master", "worker", "fuse")
DEFAULT_STATE_DIR = Path("/var/lib/ringfeed-cache")


@dataclasses.dataclass(frozen=True)
class RingLogin:
    """How the master and the workers reach the ring (a FUSE client never does: it reads through the workers)."""

    hosts: tuple[str, ...]
    port: int
    local_dc: str | None = None
    username: str | None = None
    password: str | None = None
    tls_ca_file: str | None = None
    tls_server_name: str | None = None


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    role: str
    placement: Placement
    state_dir: Path = DEFAULT_STATE_DIR
    heap: str = "1g"
    tuned: bool = True
    memory_bytes: int = 1 << 30  # worker: the memory tier's quota
    memory_dir: Path | None = None  # worker: the memory tier (a memory emptyDir); default <state_dir>/memory
    mount: Path | None = None  # fuse: where the tree is mounted
    root: str = "/"  # fuse: the Alluxio path mounted there (/<dataset>: one dataset's splits)

    @property
    def conf_dir(self) -> Path:
        return self.state_dir / "conf"

    @property
    def journal_dir(self) -> Path:
        return self.state_dir / "journal"

    @property
    def password_file(self) -> Path:
        # The same path in the master and every worker: the mount's options, which name it, go from the master to
        # the workers, which read the ring with them.
        return self.conf_dir / "ring-password"


def properties(settings: ServeSettings, runtime: AlluxioRuntime, ring: RingLogin | None) -> dict[str, str]:
    """The process's alluxio-site.properties."""
    mount_options = {}
    if ring is not None:
        mount_options = ring_mount_options(list(ring.hosts), ring.port, local_dc=ring.local_dc,
                                           username=ring.username,
                                           password_file=str(settings.password_file) if ring.username else None,
                                           tls_ca_file=ring.tls_ca_file, tls_server_name=ring.tls_server_name)
    return site_properties(placement=settings.placement, journal_dir=str(settings.journal_dir),
                           memory_dir=str(settings.memory_dir or settings.state_dir / "memory"),
                           memory_bytes=settings.memory_bytes, extensions_dir=str(runtime.extensions),
                           mount_options=mount_options, tuned=settings.tuned)


def command(settings: ServeSettings, runtime: AlluxioRuntime, java: str) -> list[str]:
    """The JVM's command line."""
    args: list[str] = []
    if settings.role == "fuse":
        if settings.mount is None:
            raise RingfeedError("the FUSE process needs --mount")
        # allow_other: the mount is made by root for trainer containers running as other users.
        args = ["-m", str(settings.mount), "-a", settings.root, *fuse_options(settings.tuned, allow_other=True)]
    return runtime.java_command(java, settings.role, *args, home=settings.state_dir, conf_dir=settings.conf_dir,
                                logs_dir=settings.state_dir / "logs", heap=settings.heap, tuned=settings.tuned)


def serve(settings: ServeSettings, ring: RingLogin | None, runtime: AlluxioRuntime | None = None) -> None:
    """Write the configuration, prepare the role's directories, then exec the JVM (never returns)."""
    if settings.role not in ROLES:
        raise RingfeedError(f"unknown role {settings.role!r}: one of {', '.join(ROLES)}")
    if settings.role != "fuse" and ring is None:
        raise RingfeedError(f"the {settings.role} reads the ring: give its contact points")
    runtime = runtime or AlluxioRuntime()
    runtime.require()
    java = require_java()
    for directory in (settings.conf_dir, settings.state_dir / "logs", settings.journal_dir):
        directory.mkdir(parents=True, exist_ok=True)
    if ring is not None and ring.username:
        settings.password_file.touch(mode=0o600)
        settings.password_file.write_text(ring.password or "")
    (settings.conf_dir / "alluxio-site.properties").write_text(render_properties(properties(settings, runtime, ring)))
    (settings.conf_dir / "log4j.properties").write_text(LOG4J_CONSOLE)
    if settings.role == "master" and not any(settings.journal_dir.iterdir()):
        runtime.format_journal(java, home=settings.state_dir, conf_dir=settings.conf_dir,
                               logs_dir=settings.state_dir / "logs")
    if settings.role == "worker":
        (settings.memory_dir or settings.state_dir / "memory").mkdir(parents=True, exist_ok=True)
    if settings.role == "fuse" and settings.mount is not None:
        unmount_stale(settings.mount)
        settings.mount.mkdir(parents=True, exist_ok=True)
    argv = command(settings, runtime, java)
    os.execve(argv[0], argv, runtime.environment())
