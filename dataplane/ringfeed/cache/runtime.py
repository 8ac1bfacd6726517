"""Alluxio's runtime as the cache tier runs it: the jars, Ringfeed's under-storage extension, libfuse3, the
command line of each process, and the mount a dead FUSE process leaves. The local tier (``ringfeed cache up``) and
the Kubernetes image (``ringfeed cache serve``) start their JVMs from here.

On a machine: ``make alluxio`` builds the runtime under ``$RINGFEED_CACHE/alluxio`` (libfuse3 unpacked there). In the
image (images/alluxio): ``RINGFEED_ALLUXIO_RUNTIME=/opt/alluxio`` and Debian's libfuse3 installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ringfeed.cache.preset import jvm_flags
from ringfeed.errors import RingfeedError
from ringfeed.local.jars import cache_dir
from ringfeed_client.cpus import cpu_count

RUNTIME_ENV = "RINGFEED_ALLUXIO_RUNTIME"
EXTENSION_JAR = "ringfeed-alluxio-ufs.jar"
MAIN_CLASSES = {"master": "alluxio.master.AlluxioMaster", "worker": "alluxio.worker.AlluxioWorker",
                "fuse": "io.ringfeed.alluxio.fuse.RingFuse"}
# The FUSE process of a tier with Alluxio's defaults (tuned: false): Alluxio's own launcher. Ringfeed's
# (dataplane/alluxio, io.ringfeed.alluxio.fuse) mounts the same file system with zero-message opens (docs/cache.md).
ALLUXIO_FUSE_CLASS = "alluxio.fuse.AlluxioFuse"
# Alluxio's logger types: each process logs to <type>.log (file logging) or names itself in the console's lines.
LOGGERS = {"master": "MASTER_LOGGER", "worker": "WORKER_LOGGER", "fuse": "FUSE_LOGGER"}
# Alluxio's default ports: RPC, and the web server that serves /metrics/prometheus/.
RPC_PORTS = {"master": 19998, "worker": 29999}
WEB_PORTS = {"master": 19999, "worker": 30000, "fuse": 49999}
METRICS_PATH = "/metrics/prometheus/"
LOG_PATTERN = "%d{ISO8601} %-5p %c{1} - %m%n"
LOG4J_FILE = f"""log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=${{alluxio.logs.dir}}/${{alluxio.logger.type}}.log
log4j.appender.file.MaxFileSize=10MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern={LOG_PATTERN}
"""
# In a container the log goes to stdout, where `kubectl logs` finds it.
LOG4J_CONSOLE = f"""log4j.rootLogger=INFO, console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.Target=System.out
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern={LOG_PATTERN}
"""


def runtime_dir() -> Path:
    """``$RINGFEED_ALLUXIO_RUNTIME`` (the image), else ``$RINGFEED_CACHE/alluxio``; outside make (no
    RINGFEED_CACHE), a source checkout's ``.cache/alluxio`` when ``make alluxio`` built it there."""
    if os.environ.get(RUNTIME_ENV):
        return Path(os.environ[RUNTIME_ENV])
    runtime = cache_dir() / "alluxio"
    checkout = Path(__file__).resolve().parents[3] / ".cache" / "alluxio"
    if not runtime.exists() and "RINGFEED_CACHE" not in os.environ and checkout.exists():
        return checkout
    return runtime


class AlluxioRuntime:
    """The runtime under ``root``: ``lib/`` (Alluxio's jars), ``extensions/`` (Ringfeed's), and optionally
    ``fuse/lib/<triplet>/libfuse3.so.3`` (else the system's libfuse3)."""

    def __init__(self, root: Path | None = None):
        self.root = (root or runtime_dir()).resolve()
        self.lib = self.root / "lib"
        self.extensions = self.root / "extensions"

    def require(self) -> None:
        missing = [path for path in (self.lib, self.extensions / EXTENSION_JAR) if not path.exists()]
        if missing:
            raise RingfeedError(f"the cache tier's runtime is not built ({missing[0]} is missing): run `make alluxio`")

    def libfuse_dir(self) -> Path | None:
        """Where ``make alluxio`` unpacked Debian's libfuse3, or None (the system's library)."""
        found = sorted(self.root.glob("fuse/lib/*/libfuse3.so.3"))
        return found[0].parent if found else None

    def java_command(self, java: str, role: str, *args: str, home: Path, conf_dir: Path, logs_dir: Path,
                     heap: str, tuned: bool = True, main_class: str | None = None) -> list[str]:
        """The JVM of one of the tier's processes (``role``: master, worker, fuse), or of ``main_class`` (a tool,
        e.g. the journal's format) with that role's logger. An untuned FUSE process is Alluxio's own."""
        extra = ["-Dalluxio.fuse.jnifuse.libfuse.version=3"] if role == "fuse" else []
        if role == "fuse" and not tuned:
            main_class = main_class or ALLUXIO_FUSE_CLASS
        return [java, *jvm_flags(heap, cpu_count()), *extra,
                f"-Dalluxio.home={home}", f"-Dalluxio.conf.dir={conf_dir}", f"-Dalluxio.logs.dir={logs_dir}",
                f"-Dalluxio.logger.type={LOGGERS[role]}", f"-Dlog4j.configuration=file:{conf_dir / 'log4j.properties'}",
                "-cp", f"{self.lib}/*", main_class or MAIN_CLASSES[role], *args]

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The processes' environment: libfuse3 found where ``make alluxio`` unpacked it."""
        environment = dict(os.environ if base is None else base)
        libfuse = self.libfuse_dir()
        if libfuse is not None:
            environment["LD_LIBRARY_PATH"] = str(libfuse) + (":" + environment["LD_LIBRARY_PATH"]
                                                             if environment.get("LD_LIBRARY_PATH") else "")
        return environment

    def format_journal(self, java: str, *, home: Path, conf_dir: Path, logs_dir: Path) -> None:
        """Format a new master's journal (once, before its first start)."""
        argv = self.java_command(java, "master", "master", home=home, conf_dir=conf_dir, logs_dir=logs_dir,
                                 heap="256m", main_class="alluxio.cli.Format")
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.environment())
        if proc.returncode != 0:
            raise RingfeedError("formatting the master's journal failed: "
                                + " | ".join((proc.stdout + proc.stderr).splitlines()[-3:]))


def unmount_stale(mount: Path) -> None:
    """A FUSE process that died leaves its mount behind, answering every call with ENOTCONN: detach it before
    mounting again (the trainers' HostToContainer mounts then see the new one)."""
    target = os.path.realpath(mount)
    with open("/proc/mounts") as mounts:
        mounted = any(line.split()[1] == target for line in mounts)
    if mounted:
        subprocess.run(["umount", "-l", target], check=False, capture_output=True)
