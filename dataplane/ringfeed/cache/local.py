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

from ringfeed.cache.preset import Placement, fuse_options, render_properties, ring_mount_options, site_properties
from ringfeed.cache.runtime import LOG4J_FILE, LOGGERS, WEB_PORTS, AlluxioRuntime, unmount_stale
from ringfeed.errors import RingfeedError
from ringfeed.local.jars import require_java
from ringfeed.local.ring import live_pid, stop_process, tree_size

# Stopped in this order: FUSE, then the worker (it ignores SIGTERM for long once the master is gone), the master.
PROCESSES = ("fuse", "worker", "master")
READY_LINES = {"master": "Primary started", "worker": "Alluxio worker started"}
# Looking this name up under the mount runs Alluxio FUSE's "metadatacache dropAll" (alluxio.fuse.special.command).
DROP_METADATA_CACHE = ".alluxiocli.metadatacache.dropAll"


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
        self.runtime = AlluxioRuntime(runtime)
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
        self.runtime.require()
        if self.runtime.libfuse_dir() is None:
            raise RingfeedError(f"libfuse3 is missing under {self.runtime.root}/fuse: run `make alluxio`")

    def up(self, hosts: list[str], port: int, mount: Path, *, local_dc: str | None = None,
           username: str | None = None, password: str | None = None, tls_ca_file: str | None = None,
           tls_server_name: str | None = None, memory_bytes: int = 1 << 30, host: str = "127.0.40.1",
           tuned: bool = True, on_progress=None, timeout_s: float = 180) -> CacheSettings:
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
            placement=Placement.local(host), journal_dir=str(self.state_dir / "journal"),
            memory_dir=str(self.memory_dir), memory_bytes=memory_bytes, extensions_dir=str(self.runtime.extensions),
            mount_options=ring_mount_options(hosts, port, local_dc=local_dc, username=username,
                                             password_file=str(password_file) if password_file else None,
                                             tls_ca_file=tls_ca_file, tls_server_name=tls_server_name),
            tuned=tuned)
        (self.state_dir / "conf" / "alluxio-site.properties").write_text(render_properties(properties))
        (self.state_dir / "conf" / "log4j.properties").write_text(LOG4J_FILE)
        self._settings_file.write_text(json.dumps(dataclasses.asdict(settings)))
        if not any((self.state_dir / "journal").iterdir()):
            progress("formatting the master's journal")
            self.runtime.format_journal(java, home=self.state_dir, conf_dir=self.state_dir / "conf",
                                        logs_dir=self.state_dir / "logs")
        deadline = time.monotonic() + timeout_s
        for name, heap in (("master", settings.master_heap), ("worker", settings.worker_heap)):
            if self._running_pid(name) is None:
                progress(f"starting the Alluxio {name}")
                self._wait_ready(name, self._start(java, name, heap=heap), deadline)
        if self._running_pid("fuse") is None:
            unmount_stale(mount)
        if not self.mounted(mount):
            progress(f"mounting the tree at {mount}")
            mount.mkdir(parents=True, exist_ok=True)
            fuse = self._start(java, "fuse", "-m", str(mount), "-a", "/", *fuse_options(tuned),
                               heap=settings.fuse_heap, tuned=tuned)
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

    def refresh(self) -> None:
        """FUSE drops its metadata cache: listings made before a split (or a new version of one) was made, and
        paths looked up before they existed, are asked of the master again, which checks them against the ring."""
        settings = self.settings
        if settings is None or not self._running_pids() or not self.mounted(Path(settings.mount)):
            raise RingfeedError("the cache tier is not up: `ringfeed cache up` first")
        os.stat(Path(settings.mount) / DROP_METADATA_CACHE)

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
        return f"{host}:{WEB_PORTS[name]}"

    # -- processes ---------------------------------------------------------------------------------------------

    def _log(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.out"

    def _java_command(self, java: str, role: str, *args: str, heap: str, tuned: bool = True) -> list[str]:
        return self.runtime.java_command(java, role, *args, home=self.state_dir, conf_dir=self.state_dir / "conf",
                                         logs_dir=self.state_dir / "logs", heap=heap, tuned=tuned)

    def _start(self, java: str, name: str, *args: str, heap: str, tuned: bool = True) -> subprocess.Popen:
        log = open(self._log(name), "ab")
        # A new session: the tier outlives the command that started it.
        proc = subprocess.Popen(self._java_command(java, name, *args, heap=heap, tuned=tuned), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env=self.runtime.environment())
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
