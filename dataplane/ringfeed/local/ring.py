"""A real Cassandra ring on loopback addresses, managed by PID: the local default of Ringfeed and its test fixtures.

Node ``i`` (1-based) listens on ``{address_prefix}{i}`` (the whole 127.0.0.0/8 is on ``lo``), so every node keeps the
standard ports 7000/9042; only JMX, which binds to 127.0.0.1, needs a port per node: ``jmx_base + i``.
Nodes join one at a time because Cassandra refuses overlapping range movements.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from importlib import resources
from pathlib import Path

from ringfeed.errors import RingfeedError
from ringfeed.local.jars import ensure_cassandra_jars, require_java

CQL_PORT = 9042


@dataclasses.dataclass
class RingSettings:
    """Everything that shapes a local ring; persisted in ``ring.json`` so every command agrees on it."""

    cluster_name: str = "ringfeed-local"
    address_prefix: str = "127.0.0."
    jmx_base: int = 7200
    heap: str = "768M"
    # Test-speed: a fresh node otherwise sleeps RING_DELAY=30 s before picking tokens.
    ring_delay_ms: int = 5000
    num_tokens: int = 16
    # Client TLS on the CQL port, optional (plain clients still connect): a CA and one certificate per node (its IP
    # address as subject alternative name) are made under state_dir/tls; clients verify with ``tls_ca_file``.
    tls: bool = False
    # Clients log in (PasswordAuthenticator): Cassandra's default superuser is cassandra/cassandra, made ~10 s after
    # the first node starts.
    password_auth: bool = False


@dataclasses.dataclass
class NodeStatus:
    index: int
    address: str
    pid: int | None
    running: bool
    cql_ready: bool
    decommissioned: bool
    data_bytes: int


class LocalRing:
    """Start, grow, shrink and stop a local Cassandra ring whose state lives in ``state_dir``."""

    def __init__(self, state_dir: Path | str, settings: RingSettings | None = None):
        self.state_dir = Path(state_dir).resolve()
        state_file = self.state_dir / "ring.json"
        if state_file.exists():
            saved = json.loads(state_file.read_text())
            self.settings = RingSettings(**saved["settings"])
            self._members: list[int] = saved["members"]
        else:
            self.settings = settings or RingSettings()
            self._members = []

    # -- public operations -------------------------------------------------------------------------------------

    @property
    def members(self) -> list[int]:
        """Indices of nodes that belong to the ring (started at least once and not decommissioned)."""
        return list(self._members)

    @property
    def hosts(self) -> list[str]:
        return [self.address(i) for i in self._members]

    def address(self, index: int) -> str:
        return f"{self.settings.address_prefix}{index}"

    @property
    def tls_server_name(self) -> str:
        """The name every node's certificate carries besides its address (as a Ring's nodes carry their Service's),
        for clients that check a name rather than the address."""
        return f"nodes.{self.settings.cluster_name}"

    @property
    def tls_ca_file(self) -> str | None:
        """The CA certificate (PEM) that signed the nodes' certificates, when the ring speaks TLS."""
        return str(self.state_dir / "tls" / "ca.crt") if self.settings.tls else None

    def up(self, nodes: int = 1, timeout_s: float = 300, on_progress=None) -> list[int]:
        """Make sure nodes 1..``nodes`` run and answer CQL, starting missing ones one at a time."""
        if nodes < 1:
            raise RingfeedError("a ring needs at least one node")
        wanted = sorted(set(self._members) | set(range(1, nodes + 1)))
        for index in wanted:
            if not self._running(index):
                if on_progress:
                    on_progress(f"starting node {index} on {self.address(index)}")
                self.start_node(index, timeout_s=timeout_s)
        return self.members

    def add_node(self, timeout_s: float = 600) -> int:
        """Bootstrap one more node (it streams its token ranges, then serves CQL)."""
        if not self._members:
            raise RingfeedError("no local ring: run `ringfeed local up` first")
        index = max(self._members) + 1
        self.start_node(index, timeout_s=timeout_s)
        return index

    def remove_node(self, index: int | None = None, force: bool = False) -> int:
        """Decommission a node (its data streams to the others), then stop its JVM by PID. Cassandra refuses while a
        keyspace's replication factor is not below the nodes that would remain (system_distributed's is 3);
        ``force`` decommissions anyway."""
        if len(self._members) < 2:
            raise RingfeedError("cannot remove the last node of the ring; use `ringfeed local down`")
        index = index if index is not None else max(self._members)
        if index not in self._members:
            raise RingfeedError(f"node {index} is not a member of the ring (members: {self._members})")
        if index == 1:
            raise RingfeedError("node 1 is the seed; remove another node")
        if not self._running(index):
            raise RingfeedError(f"node {index} is not running: start it before decommissioning it")
        try:
            self.nodetool(index, "decommission", *(["--force"] if force else []))
        except RingfeedError as error:
            if "forceful decommission" in str(error):
                raise RingfeedError(f"{error} (`ringfeed local remove-node --force`)") from None
            raise
        # A decommissioned JVM keeps running (and holding its heap): stop it ourselves.
        self._stop_pid(index)
        self._members.remove(index)
        self._save()
        shutil.rmtree(self._node_dir(index), ignore_errors=True)
        return index

    def down(self, purge: bool = False) -> list[int]:
        """Stop every node (SIGTERM, then SIGKILL after a grace period); ``purge`` also deletes data and state.
        Returns the nodes that were running."""
        stopped = []
        for index in sorted(self._known_nodes(), reverse=True):
            if self._running(index):
                self._stop_pid(index)
                stopped.append(index)
        if purge:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self._members = []
        return sorted(stopped)

    @property
    def exists(self) -> bool:
        """True when ``state_dir`` holds a ring (started at least once, not purged), running or not."""
        return (self.state_dir / "ring.json").exists() or bool(self._known_nodes())

    def running_nodes(self) -> list[int]:
        """Indices of the nodes whose JVM runs now."""
        return [index for index in sorted(self._known_nodes()) if self._running(index)]

    def require(self, running: bool = False) -> None:
        """RingfeedError unless ``state_dir`` holds a ring (``running``: with its seed, node 1, running)."""
        if not self.exists:
            raise RingfeedError(f"no local ring in {self.state_dir}: start one with `ringfeed local up` (a ring "
                                "kept elsewhere: --state-dir DIR or RINGFEED_LOCAL_DIR)")
        if running and not self._running(1):
            raise RingfeedError(f"the local ring in {self.state_dir} is not running: start it with "
                                "`ringfeed local up`")

    def status(self) -> list[NodeStatus]:
        rows = []
        for index in sorted(self._known_nodes()):
            pid = self.pid(index)
            running = self._running(index)
            rows.append(NodeStatus(
                index=index, address=self.address(index), pid=pid if running else None, running=running,
                cql_ready=running and cql_answers(self.address(index)),
                decommissioned=index not in self._members,
                data_bytes=tree_size(self._node_dir(index) / "data"),
            ))
        return rows

    def start_node(self, index: int, timeout_s: float = 300) -> int:
        """Start node ``index`` (creating its config on first start) and wait until it answers CQL."""
        if (pid := self._running_pid(index)) is not None:
            return pid
        java = require_java()
        lib = ensure_cassandra_jars()
        node_dir = self._node_dir(index)
        self._write_node_config(index)
        log = open(node_dir / "logs" / "stdout.log", "ab")
        cmd = [java, *self._jvm_options("jvm-server.options"), f"-Xms{self.settings.heap}", f"-Xmx{self.settings.heap}",
               f"-Dcassandra.config=file://{node_dir / 'conf' / 'cassandra.yaml'}",
               f"-Dcassandra.storagedir={node_dir}", f"-Dcassandra.logdir={node_dir / 'logs'}",
               f"-Dcassandra.triggers_dir={node_dir / 'triggers'}",
               f"-Dlogback.configurationFile={self._conf_file('logback-server.xml')}",
               f"-Dcassandra.jmx.local.port={self.jmx_port(index)}",
               f"-Dcassandra.ring_delay_ms={self.settings.ring_delay_ms}",
               "-Dcassandra.skip_wait_for_gossip_to_settle=0",
               "-cp", f"{lib}/*", "org.apache.cassandra.service.CassandraDaemon"]
        # A new session: the node outlives the command that started it (e.g. `make demo`).
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        (node_dir / "pid").write_text(str(proc.pid))
        joining = index not in self._members and bool(self._members)
        if index not in self._members:
            self._members.append(index)
            self._save()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RingfeedError(f"node {index} exited with code {proc.returncode} while starting; "
                                    f"see {node_dir / 'logs' / 'system.log'}")
            if cql_answers(self.address(index)):
                if joining:
                    self._require_joined(index)
                return proc.pid
            time.sleep(0.25)
        raise RingfeedError(f"node {index} did not answer CQL within {timeout_s:.0f} s; see {node_dir / 'logs'}")

    def _require_joined(self, index: int) -> None:
        """A node whose bootstrap streaming failed still opens its CQL port, in mode JOINING, without all of its
        ranges' data: refuse it rather than let it look like a member."""
        mode = next((line.split(":", 1)[1].strip() for line in self.nodetool(index, "netstats").splitlines()
                     if line.startswith("Mode:")), "unknown")
        if mode != "NORMAL":
            raise RingfeedError(f"node {index} answers CQL but has not joined the ring (mode {mode}): its bootstrap "
                                f"did not complete; see {self._node_dir(index) / 'logs' / 'system.log'}")

    def stop_node(self, index: int) -> None:
        """Graceful stop (SIGTERM); the node stays a ring member and can be started again."""
        self._stop_pid(index)

    def kill_node(self, index: int) -> None:
        """Crash a node (SIGKILL), as a failing machine would."""
        pid = self._running_pid(index)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 30)

    def nodetool(self, index: int, *args: str) -> str:
        java = require_java()
        lib = ensure_cassandra_jars()
        cmd = [java, *self._jvm_options("jvm-clients.options"), "-Xmx256m", "-XX:+UseSerialGC",
               "-XX:TieredStopAtLevel=1", f"-Dcassandra.storagedir={self.state_dir}",
               f"-Dcassandra.logdir={self.state_dir}",
               f"-Dlogback.configurationFile={self._conf_file('logback-tools.xml')}",
               "-cp", f"{lib}/*", "org.apache.cassandra.tools.NodeTool", "-h", "127.0.0.1",
               "-p", str(self.jmx_port(index)), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            # nodetool prints `nodetool: <why>` or `error: <why>` (a stack trace may follow), then a generic hint.
            lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines() or ["(no output)"]
            reason = next((line.split(": ", 1)[1] for line in lines
                           if line.startswith(("nodetool: ", "error: "))), lines[-1])
            raise RingfeedError(f"nodetool {' '.join(args)} on node {index} failed: {reason[:300]}")
        return proc.stdout

    def jmx_port(self, index: int) -> int:
        return self.settings.jmx_base + index

    # -- internals ---------------------------------------------------------------------------------------------

    def _node_dir(self, index: int) -> Path:
        return self.state_dir / "nodes" / f"n{index}"

    def _known_nodes(self) -> set[int]:
        nodes_dir = self.state_dir / "nodes"
        found = {int(p.name[1:]) for p in nodes_dir.glob("n*") if p.name[1:].isdigit()} if nodes_dir.exists() else set()
        return found | set(self._members)

    def _save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        payload = {"settings": dataclasses.asdict(self.settings), "members": self._members}
        (self.state_dir / "ring.json").write_text(json.dumps(payload, indent=2) + "\n")

    def _conf_file(self, name: str) -> Path:
        target = self.state_dir / "conf" / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text((resources.files("ringfeed.local") / name).read_text())
        return target

    def _jvm_options(self, name: str) -> list[str]:
        text = (resources.files("ringfeed.local") / name).read_text()
        return [line.strip() for line in text.splitlines() if line.startswith("-")]

    def _write_node_config(self, index: int) -> None:
        node_dir = self._node_dir(index)
        for sub in ("data", "commitlog", "saved_caches", "hints", "cdc_raw", "logs", "conf", "triggers"):
            (node_dir / sub).mkdir(parents=True, exist_ok=True)
        s = self.settings
        yaml = f"""\
cluster_name: {s.cluster_name}
num_tokens: {s.num_tokens}
allocate_tokens_for_local_replication_factor: 2
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
storage_compatibility_mode: NONE
data_file_directories: [{node_dir / 'data'}]
commitlog_directory: {node_dir / 'commitlog'}
saved_caches_directory: {node_dir / 'saved_caches'}
hints_directory: {node_dir / 'hints'}
cdc_raw_directory: {node_dir / 'cdc_raw'}
commitlog_sync: periodic
commitlog_sync_period: 10000ms
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{self.address(1)}"
listen_address: {self.address(index)}
rpc_address: {self.address(index)}
storage_port: 7000
native_transport_port: {CQL_PORT}
start_native_transport: true
endpoint_snitch: SimpleSnitch
authenticator: {"PasswordAuthenticator" if s.password_auth else "AllowAllAuthenticator"}
authorizer: AllowAllAuthorizer
role_manager: CassandraRoleManager
concurrent_reads: 32
concurrent_writes: 32
concurrent_compactors: 1
# Dropping a test keyspace must not leave a snapshot of it behind.
auto_snapshot: false
"""
        if s.tls:
            yaml += f"""\
client_encryption_options:
  enabled: true
  optional: true
  require_client_auth: false
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: {self._node_certificate(index)}
"""
        (node_dir / "conf" / "cassandra.yaml").write_text(yaml)

    def _node_certificate(self, index: int) -> Path:
        """key + certificate (PEM) of node ``index``, signed by the ring's CA (both made on first use)."""
        folder = self.state_dir / "tls"
        folder.mkdir(parents=True, exist_ok=True)
        ca_key, ca_cert = folder / "ca.key", folder / "ca.crt"
        if not ca_cert.exists():
            # Key usages as RFC 5280 wants them: Python 3.13's default checks refuse a CA without keyCertSign.
            _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj",
                     f"/CN={self.settings.cluster_name} local CA", "-addext", "basicConstraints=critical,CA:TRUE",
                     "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-keyout", ca_key, "-out", ca_cert)
        pem = folder / f"node{index}.pem"
        if not pem.exists():
            key, request, cert = folder / f"node{index}.key", folder / f"node{index}.csr", folder / f"node{index}.crt"
            extensions = folder / f"node{index}.ext"
            extensions.write_text(f"subjectAltName=IP:{self.address(index)},DNS:{self.tls_server_name}\n"
                                  "keyUsage=critical,digitalSignature,keyEncipherment\n"
                                  "extendedKeyUsage=serverAuth\n")
            _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={self.address(index)}", "-keyout", key,
                     "-out", request)
            _openssl("x509", "-req", "-in", request, "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial", "-days",
                     "3650", "-extfile", extensions, "-out", cert)
            pem.write_text(key.read_text() + cert.read_text())
        return pem

    def pid(self, index: int) -> int | None:
        """The PID saved when node ``index`` was started (it may have exited since)."""
        pid_file = self._node_dir(index) / "pid"
        return int(pid_file.read_text()) if pid_file.exists() else None

    def _running(self, index: int) -> bool:
        """True when the saved PID is alive AND is this node's JVM (PIDs get reused)."""
        return self._running_pid(index) is not None

    def _running_pid(self, index: int) -> int | None:
        """The saved PID when it is alive AND is this node's JVM, else None."""
        return live_pid(self._node_dir(index) / "pid", str(self._node_dir(index) / "conf" / "cassandra.yaml"))

    def _stop_pid(self, index: int, grace_s: float = 60) -> None:
        pid = self._running_pid(index)
        if pid is not None:
            stop_process(pid, grace_s)


# CQL native protocol v4 OPTIONS request: version 0x04, flags 0, stream 0, opcode 0x05, empty body.
_OPTIONS_FRAME = struct.pack(">BBhBi", 0x04, 0, 0, 0x05, 0)
_SUPPORTED_OPCODE = 0x06


def cql_answers(address: str, port: int = CQL_PORT, timeout_s: float = 1.0) -> bool:
    """True when the node answers a CQL OPTIONS request (listening alone is not enough: it must speak CQL)."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s) as sock:
            sock.sendall(_OPTIONS_FRAME)
            header = sock.recv(9)
            return len(header) >= 5 and header[4] == _SUPPORTED_OPCODE
    except OSError:
        return False


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            # Reap it if it is our child, so it does not linger as a zombie.
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return True
        time.sleep(0.2)
    return False


def live_pid(pid_file: Path, marker: str) -> int | None:
    """The PID saved in ``pid_file`` when that process is alive AND its command line holds ``marker`` (PIDs get
    reused; a zombie's command line is empty), else None."""
    if not pid_file.exists():
        return None
    pid = int(pid_file.read_text())
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if marker.encode() in cmdline else None


def stop_process(pid: int, grace_s: float) -> None:
    """SIGTERM, and SIGKILL when the process is still there after ``grace_s``."""
    os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, grace_s):
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 30)


def tree_size(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when it does not exist)."""
    if not path.exists():
        return 0
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _openssl(*args) -> None:
    result = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True)
    if result.returncode != 0:
        raise RingfeedError(f"openssl {args[0]} failed: {result.stderr.strip()}")
