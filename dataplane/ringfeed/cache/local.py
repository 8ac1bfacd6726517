"""The cache tier on this machine, managed by PID like the local ring: an Alluxio master and a worker (a memory
tier under /dev/shm) with the ring mounted as Alluxio's root through Ringfeed's under-storage extension, and a FUSE
mount that shows every split as ``<mount>/<dataset>/<split>/<part>/<label>/<uuid>.<ext>``.

The runtime (jars, extension, libfuse3) comes from ``make alluxio`` (scripts/build-alluxio.sh) under
``$RINGFEED_CACHE/alluxio``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from ringfeed.cache.preset import (
    cpu_count,
    fuse_options,
    jvm_flags,
    render_properties,
    ring_mount_options,
    site_properties,
)
from ringfeed.errors import RingfeedError
from ringfeed.local.jars import cache_dir, require_java
from ringfeed.local.ring import live_pid, stop_process, tree_size

# Stopped in this order: FUSE, then the worker (it ignores SIGTERM for long once the master is gone), the master.
PROCESSES = ("fuse", "worker", "master")
# Alluxio's logger types: each process logs to <type>.log.
LOGGERS = {"master": "MASTER_LOGGER", "worker": "WORKER_LOGGER", "fuse": "FUSE_LOGGER"}
READY_LINES = {"master": "Primary started", "worker": "Alluxio worker started"}
LOG4J = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=${alluxio.logs.dir}/${alluxio.logger.type}.log
log4j.appender.file.MaxFileSize=10MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=%d{ISO8601} %-5p %c{1} - %m%n
"""


def runtime_dir() -> Path:
    """``$RINGFEED_CACHE/alluxio``; outside make (no RINGFEED_CACHE), a source checkout's ``.cache/alluxio`` when
    ``make alluxio`` built it there."""
    runtime = cache_dir() / "alluxio"
    checkout = Path(__file__).resolve().parents[3] / ".cache" / "alluxio"
    if not runtime.exists() and "RINGFEED_CACHE" not in os.environ and checkout.exists():
        return checkout
    return runtime


@dataclasses.dataclass
class CacheSettings:
    """What ``ringfeed cache up`` was asked for; kept in ``cache.json`` so that every later command agrees."""

    mount: str
    host: str = "127.0.40.1"
    memory_bytes: int = 1 << 30
    tuned: bool = True
    master_heap: str = "1g"
    worker_heap: str = "1g"
    fuse_heap: str = "1g"


@dataclasses.dataclass
class ProcessStatus:
    name: str
    pid: int | None
    running: bool


class LocalCache:
    """Start and stop the local cache tier whose state (config, journal, logs, PIDs) lives in ``state_dir``."""

    def __init__(self, state_dir: Path | str, runtime: Path | None = None):
        self.state_dir = Path(state_dir).resolve()
        self.runtime = (runtime or runtime_dir()).resolve()
        self._settings_file = self.state_dir / "cache.json"

    @property
    def settings(self) -> CacheSettings | None:
        if not self._settings_file.exists():
            return None
        return CacheSettings(**json.loads(self._settings_file.read_text()))

    @property
    def memory_dir(self) -> Path:
        # One per state directory: two tiers on one machine never share a memory tier.
        return Path("/dev/shm") / f"ringfeed-cache-{hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:12]}"

    def _require_runtime(self) -> None:
        missing = [path for path in (self.runtime / "lib", self.runtime / "extensions" / "ringfeed-alluxio-ufs.jar",
                                     self._libfuse_dir()) if not path.exists()]
        if missing:
            raise RingfeedError(f"the cache tier's runtime is not built ({missing[0]} is missing): run `make alluxio`")

    def _libfuse_dir(self) -> Path:
        """Where Debian's libfuse3 was unpacked (lib/<architecture triplet>/)."""
        found = sorted(self.runtime.glob("fuse/lib/*/libfuse3.so.3"))
        return found[0].parent if found else self.runtime / "fuse" / "lib" / "libfuse3-missing"

    def up(self, hosts: list[str], port: int, mount: Path, *, local_dc: str | None = None,
           username: str | None = None, password: str | None = None, memory_bytes: int = 1 << 30,
           host: str = "127.0.40.1", tuned: bool = True, on_progress=None, timeout_s: float = 180) -> CacheSettings:
        """Start master, worker and FUSE (each reused when already running) and wait until the mount serves;
        ``tuned=False``: Alluxio's defaults instead of the tuned preset (for comparisons)."""
        self._require_runtime()
        java = require_java()
        progress = on_progress or (lambda message: None)
        mount = Path(mount).resolve()
        current = self.settings
        if current is not None and self._running_pids() and current.mount != str(mount):
            raise RingfeedError(f"the cache tier is already up with its mount at {current.mount}: "
                                "`ringfeed cache down` first")
        settings = CacheSettings(mount=str(mount), host=host, memory_bytes=memory_bytes, tuned=tuned)
        for sub in ("conf", "logs", "journal"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        password_file = None
        if username:
            password_file = self.state_dir / "conf" / "ring-password"
            password_file.touch(mode=0o600)
            password_file.write_text(password or "")
        self.memory_dir.mkdir(exist_ok=True)
        properties = site_properties(
            host=host, journal_dir=str(self.state_dir / "journal"), memory_dir=str(self.memory_dir),
            memory_bytes=memory_bytes, extensions_dir=str(self.runtime / "extensions"),
            mount_options=ring_mount_options(hosts, port, local_dc=local_dc, username=username,
                                             password_file=str(password_file) if password_file else None),
            tuned=tuned)
        (self.state_dir / "conf" / "alluxio-site.properties").write_text(render_properties(properties))
        (self.state_dir / "conf" / "log4j.properties").write_text(LOG4J)
        self._settings_file.write_text(json.dumps(dataclasses.asdict(settings)))
        if not any((self.state_dir / "journal").iterdir()):
            progress("formatting the master's journal")
            self._run_java(java, "alluxio.cli.Format", "master", heap="256m", logger="Format")
        deadline = time.monotonic() + timeout_s
        for name, main_class, heap in (("master", "alluxio.master.AlluxioMaster", settings.master_heap),
                                       ("worker", "alluxio.worker.AlluxioWorker", settings.worker_heap)):
            if self._running_pid(name) is None:
                progress(f"starting the Alluxio {name}")
                self._wait_ready(name, self._start(java, name, main_class, heap=heap), deadline)
        if not self.mounted(mount):
            progress(f"mounting the tree at {mount}")
            mount.mkdir(parents=True, exist_ok=True)
            fuse = self._start(java, "fuse", "alluxio.fuse.AlluxioFuse", "-m", str(mount), "-a", "/",
                               *fuse_options(tuned), heap=settings.fuse_heap,
                               extra=["-Dalluxio.fuse.jnifuse.libfuse.version=3"])
            while not self.mounted(mount):
                if fuse.poll() is not None:
                    raise RingfeedError(f"Alluxio FUSE exited while mounting {mount}; see {self._log('fuse')}")
                if time.monotonic() > deadline:
                    raise RingfeedError(f"{mount} was not mounted within {timeout_s:.0f} s; see {self._log('fuse')}")
                time.sleep(0.25)
        return settings

    def down(self) -> None:
        """Unmount, stop every process, and drop the memory tier and the journal (the ring keeps the data)."""
        settings = self.settings
        if settings is not None and self.mounted(Path(settings.mount)):
            subprocess.run(["umount", settings.mount], capture_output=True)
        for name in PROCESSES:
            pid = self._running_pid(name)
            if pid is not None:
                stop_process(pid, grace_s=30)
            (self.state_dir / f"{name}.pid").unlink(missing_ok=True)
        shutil.rmtree(self.memory_dir, ignore_errors=True)
        shutil.rmtree(self.state_dir / "journal", ignore_errors=True)

    def status(self) -> list[ProcessStatus]:
        statuses = []
        for name in reversed(PROCESSES):
            pid_file = self.state_dir / f"{name}.pid"
            pid = int(pid_file.read_text()) if pid_file.exists() else None
            statuses.append(ProcessStatus(name, pid, self._running_pid(name) is not None))
        return statuses

    def cached_bytes(self) -> int:
        """Bytes in the worker's memory tier."""
        return tree_size(self.memory_dir)

    @staticmethod
    def mounted(path: Path) -> bool:
        target = str(Path(path).resolve())
        with open("/proc/mounts") as mounts:
            return any(line.split()[1] == target and line.split()[2].startswith("fuse") for line in mounts)

    def web_address(self, name: str) -> str:
        """host:port of a process's web server (its Prometheus metrics under /metrics/prometheus/)."""
        host = (self.settings or CacheSettings(mount="")).host
        return f"{host}:{19999 if name == 'master' else 30000}"

    # -- processes ---------------------------------------------------------------------------------------------

    def _log(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.out"

    def _java_command(self, java: str, main_class: str, *args: str, heap: str, logger: str,
                      extra: list[str] | None = None) -> list[str]:
        conf = self.state_dir / "conf"
        return [java, *jvm_flags(heap, cpu_count()), *(extra or []),
                f"-Dalluxio.home={self.state_dir}", f"-Dalluxio.conf.dir={conf}",
                f"-Dalluxio.logs.dir={self.state_dir / 'logs'}", f"-Dalluxio.logger.type={logger}",
                f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
                "-cp", f"{self.runtime / 'lib'}/*", main_class, *args]

    def _environment(self) -> dict[str, str]:
        environment = dict(os.environ)
        libfuse = str(self._libfuse_dir())
        environment["LD_LIBRARY_PATH"] = libfuse + (":" + environment["LD_LIBRARY_PATH"]
                                                    if environment.get("LD_LIBRARY_PATH") else "")
        return environment

    def _run_java(self, java: str, main_class: str, *args: str, heap: str, logger: str) -> None:
        proc = subprocess.run(self._java_command(java, main_class, *args, heap=heap, logger=logger),
                              capture_output=True, text=True, env=self._environment())
        if proc.returncode != 0:
            raise RingfeedError(f"{main_class} failed: " + " | ".join((proc.stdout + proc.stderr).splitlines()[-3:]))

    def _start(self, java: str, name: str, main_class: str, *args: str, heap: str,
               extra: list[str] | None = None) -> subprocess.Popen:
        log = open(self._log(name), "ab")
        logger = LOGGERS[name]
        # A new session: the tier outlives the command that started it.
        proc = subprocess.Popen(self._java_command(java, main_class, *args, heap=heap, logger=logger, extra=extra),
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=self._environment())
        log.close()
        (self.state_dir / f"{name}.pid").write_text(str(proc.pid))
        return proc

    def _wait_ready(self, name: str, proc: subprocess.Popen, deadline: float) -> None:
        log = self.state_dir / "logs" / f"{LOGGERS[name]}.log"
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RingfeedError(f"the Alluxio {name} exited while starting; see {log} and {self._log(name)}")
            if log.exists() and READY_LINES[name] in log.read_text(errors="replace"):
                return
            time.sleep(0.25)
        raise RingfeedError(f"the Alluxio {name} was not ready in time; see {log}")

    def _running_pid(self, name: str) -> int | None:
        """The saved PID when it is alive AND is this tier's JVM, else None."""
        return live_pid(self.state_dir / f"{name}.pid", f"-Dalluxio.home={self.state_dir}")

    def _running_pids(self) -> list[int]:
        return [pid for name in PROCESSES if (pid := self._running_pid(name)) is not None]
