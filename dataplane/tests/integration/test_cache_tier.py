"""The Alluxio cache tier against a real Cassandra node: Ringfeed's under-storage extension (its Java tests, run here
with the node's address and the tree they must find) and the whole local tier (`ringfeed cache up`: master, worker,
FUSE) reading every file of two splits byte for byte: an ImageFolder of JPEGs (folders named after the classes) and
raw tensors (flat .npy files and labels.csv)."""

from __future__ import annotations

import errno
import hashlib
import io
import ipaddress
import os
import signal
import subprocess
import time
import uuid
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ringfeed.cache import LocalCache, ProcessStatus
from ringfeed.cache.runtime import runtime_dir
from ringfeed.ids import sample_uuid
from ringfeed.ingest import ingest
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import SplitSpec, create_split, load_split
from ringfeed.store import Store

REPO = Path(__file__).resolve().parents[3]
IMAGES = "cache_pets"
TENSORS = "cache_tensors"
CLASSES = ("cat", "dog", "fox")


def write_image_folder(root: Path) -> dict[str, bytes]:
    """root/<class>/<n>.jpg, 24 per class; returns each file's relative path and bytes."""
    rng = np.random.default_rng(3)
    files = {}
    for label, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for n in range(24):
            pixels = rng.integers(0, 256, (32 + label, 40, 3), dtype=np.uint8)
            buffer = io.BytesIO()
            Image.fromarray(pixels).save(buffer, format="JPEG", quality=80)
            (root / name / f"{n}.jpg").write_bytes(buffer.getvalue())
            files[f"{name}/{n}.jpg"] = buffer.getvalue()
    return files


def write_tensor_folder(root: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(4)
    arrays = {}
    for name in ("0", "1"):
        (root / name).mkdir(parents=True)
        for n in range(15):
            array = rng.standard_normal((4, 5)).astype(np.float32)
            np.save(root / name / f"{n}.npy", array)
            arrays[f"{name}/{n}.npy"] = array
    return arrays


@pytest.fixture(scope="module")
def ring_datasets(cassandra_node, tmp_path_factory):
    """Both datasets ingested and split (train/val 3:1) on the test node."""
    root = tmp_path_factory.mktemp("cache-tier")
    images = write_image_folder(root / "pets")
    tensors = write_tensor_folder(root / "tensors")
    key = (Column("path", "text"),)
    with Store(cassandra_node.address) as store:
        for name in (IMAGES, TENSORS):
            if name in {d.schema.name for d in store.datasets()}:
                store.drop_dataset(name, force=True)
        store.create_dataset(DatasetSchema(IMAGES, key, Encoding("jpeg"), metadata=(Column("class", "text"),)))
        store.create_dataset(DatasetSchema(TENSORS, key, Encoding("raw", "float32", (4, 5)),
                                           metadata=(Column("class", "text"),)))
        ingest(store, IMAGES, str(root / "pets"))
        ingest(store, TENSORS, str(root / "tensors"))
        spec = SplitSpec(ratios=(3, 1), names=("train", "val"), seed=5)
        create_split(store, IMAGES, "by-file", spec)
        create_split(store, TENSORS, "by-file", spec)
        yield {"images": images, "tensors": tensors,
               "image_parts": load_split(store, IMAGES, "by-file").loaded_parts,
               "tensor_parts": load_split(store, TENSORS, "by-file").loaded_parts}


def expected_tree(ring_datasets) -> dict[str, bytes]:
    """Every file the tree must show, by path under the mount, with its bytes (from the source files)."""
    tree: dict[str, bytes] = {}
    by_uuid = {sample_uuid(IMAGES, (path,)): (path.split("/")[0], data)
               for path, data in ring_datasets["images"].items()}
    for part, uuids in ring_datasets["image_parts"].items():
        for raw in uuids:
            member = uuid.UUID(bytes=raw.tobytes())
            folder, data = by_uuid[member]
            tree[f"{IMAGES}/by-file/{part}/{folder}/{member}.jpg"] = data
    arrays = {sample_uuid(TENSORS, (path,)): (int(path.split("/")[0]), array)
              for path, array in ring_datasets["tensors"].items()}
    for part, uuids in ring_datasets["tensor_parts"].items():
        members = sorted(uuid.UUID(bytes=raw.tobytes()) for raw in uuids)
        lines = ["file,label"]
        for member in members:
            label, array = arrays[member]
            tree[f"{TENSORS}/by-file/{part}/{member}.npy"] = array.tobytes()  # compared as arrays
            lines.append(f"{member}.npy,{label}")
        tree[f"{TENSORS}/by-file/{part}/labels.csv"] = ("\n".join(lines) + "\n").encode()
    return tree


def require_runtime() -> Path:
    runtime = runtime_dir()
    if not (runtime / "extensions" / "ringfeed-alluxio-ufs.jar").exists():
        pytest.fail(f"no cache-tier runtime under {runtime}: `make alluxio` builds it (make test does)")
    return runtime


def run_java_tests(cassandra_node, ring_datasets, tmp_path, *properties: str) -> tuple[str, dict[str, int]]:
    """RingUnderFileSystemIT against the node, with extra -D properties (TLS): (Maven's output when it failed, the
    test counts of the report)."""
    manifest = tmp_path / "manifest.tsv"
    # The Java tests walk one dataset: the images (the tensors' bytes carry an .npy header, checked through FUSE).
    lines = [f"/{path}\t{len(data)}\t{hashlib.sha256(data).hexdigest()}"
             for path, data in expected_tree(ring_datasets).items() if path.startswith(IMAGES + "/")]
    manifest.write_text("\n".join(lines) + "\n")
    project = REPO / "dataplane" / "alluxio"
    reports = project / "target" / "surefire-reports"
    report = reports / "TEST-io.ringfeed.alluxio.RingUnderFileSystemIT.xml"
    report.unlink(missing_ok=True)
    # In a session of its own: on a timeout the whole tree goes (mvn forks the tests' JVM, which would keep the
    # pipes open and the wait going).
    process = subprocess.Popen(
        ["mvn", "-B", "-q", "-o", "-s", str(project / "maven-settings.xml"), "-f", str(project / "pom.xml"),
         f"-Dmaven.repo.local={Path(os.environ.get('RINGFEED_CACHE', REPO / '.cache')) / 'm2'}",
         "test", "-Dtest=RingUnderFileSystemIT", f"-Dringfeed.test.contact-point={cassandra_node.hosts[0]}:9042",
         f"-Dringfeed.test.manifest={manifest}", *properties],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        output = f"timed out after 600 s\n{output}"
    counts = {}
    if report.exists():
        suite = ElementTree.parse(report).getroot()
        counts = {key: int(suite.get(key)) for key in ("tests", "failures", "errors", "skipped")}
    return ("" if process.returncode == 0 else output[-4000:] or "failed"), counts


def test_the_extensions_java_tests_find_the_splits_tree_in_the_ring_over_tls(cassandra_node, ring_datasets,
                                                                             tmp_path):
    """The node's certificate checked against its CA and the name the nodes carry (as on a Ring)."""
    require_runtime()
    failure, counts = run_java_tests(cassandra_node, ring_datasets, tmp_path,
                                     f"-Dringfeed.test.tls-ca-file={cassandra_node.ring.tls_ca_file}",
                                     f"-Dringfeed.test.tls-server-name={cassandra_node.ring.tls_server_name}")
    assert not failure, failure
    assert counts == {"tests": 4, "failures": 0, "errors": 0, "skipped": 0}, counts


def test_the_extension_refuses_a_node_without_the_server_name(cassandra_node, ring_datasets, tmp_path):
    require_runtime()
    failure, counts = run_java_tests(cassandra_node, ring_datasets, tmp_path,
                                     f"-Dringfeed.test.tls-ca-file={cassandra_node.ring.tls_ca_file}",
                                     "-Dringfeed.test.tls-server-name=nodes.another-ring")
    assert failure and counts.get("errors", 0) + counts.get("failures", 0) > 0, counts


@pytest.fixture(scope="module")
def mounted_tier(cassandra_node, ring_datasets, tmp_path_factory):
    require_runtime()
    state = tmp_path_factory.mktemp("cache-state")
    mount = tmp_path_factory.mktemp("cache-mount") / "ring"
    tier = LocalCache(state)
    try:
        # Over TLS, the node checked against its CA and server name, as a Ring's cache tier reads.
        tier.up(cassandra_node.hosts, 9042, mount, memory_bytes=256 << 20, host="127.0.40.1",
                tls_ca_file=cassandra_node.ring.tls_ca_file, tls_server_name=cassandra_node.ring.tls_server_name)
        yield tier, mount
    finally:
        tier.down()


def read_tree(mount: Path, dataset: str) -> dict[str, bytes]:
    files = {}
    for path in sorted((mount / dataset).rglob("*")):
        if path.is_file():
            files[path.relative_to(mount).as_posix()] = path.read_bytes()
    return files


def test_a_preload_reads_every_file_of_a_dataset_once_into_the_workers_memory(mounted_tier, ring_datasets):
    """First in the module: the tier is cold. `ringfeed cache preload` (the command a FUSE Pod's preload container
    runs) reads the raw tensors' tree whole; the worker's memory then holds every byte, and a pass again reads
    nothing new."""
    from click.testing import CliRunner

    from ringfeed.cache.preload import Preloader
    from ringfeed.cli import main as cli

    tier, mount = mounted_tier
    expected = {path: data for path, data in expected_tree(ring_datasets).items() if path.startswith(TENSORS + "/")}
    cold = tier.cached_bytes()
    result = CliRunner().invoke(cli, ["cache", "--state-dir", str(tier.state_dir), "preload",
                                      str(mount / TENSORS), "--threads", "8"])
    assert result.exit_code == 0, result.output
    assert f"preloaded {len(expected):,} files" in result.output
    # An .npy is the stored tensor behind a header, labels.csv is made by the master: at least the tensors' bytes.
    tensor_bytes = sum(array.nbytes for array in ring_datasets["tensors"].values())
    assert tier.cached_bytes() - cold >= tensor_bytes
    preloader = Preloader(mount / TENSORS, threads=4)
    assert preloader.run_pass().files == len(expected) and preloader.run_pass().files == 0
    assert CliRunner().invoke(cli, ["cache", "--state-dir", str(tier.state_dir), "preload", "--ready-file",
                                    "x.json"]).exit_code == 2  # --ready-file goes with --watch


def test_fuse_shows_every_file_of_both_splits_byte_for_byte(mounted_tier, ring_datasets):
    tier, mount = mounted_tier
    expected = expected_tree(ring_datasets)
    seen = {**read_tree(mount, IMAGES), **read_tree(mount, TENSORS)}
    assert sorted(seen) == sorted(expected)
    for path, data in seen.items():
        if path.endswith(".npy"):
            array = np.load(io.BytesIO(data))
            assert array.dtype == np.float32 and array.shape == (4, 5), path
            assert array.tobytes() == expected[path], path
        else:
            assert data == expected[path], path
    # ImageFolder's view: one folder per class, named as the dataset names its classes.
    train = mount / IMAGES / "by-file" / "train"
    assert sorted(p.name for p in train.iterdir()) == sorted(CLASSES)
    first = next((train / "cat").iterdir())
    assert Image.open(first).size == (40, 32)


def test_the_second_read_comes_from_the_workers_memory(mounted_tier, ring_datasets):
    tier, mount = mounted_tier
    read_tree(mount, IMAGES)
    cached = tier.cached_bytes()
    image_bytes = sum(len(data) for data in ring_datasets["images"].values())
    assert cached >= image_bytes, f"the memory tier holds {cached} bytes after reading {image_bytes}"
    assert read_tree(mount, IMAGES) == {path: data for path, data in expected_tree(ring_datasets).items()
                                        if path.startswith(IMAGES + "/")}


def fuse_process(tier: LocalCache) -> ProcessStatus:
    return next(process for process in tier.status() if process.name == "fuse")


def read_calls(pid: int) -> int:
    """Read system calls a process has made (all its threads): the FUSE process reads each request from /dev/fuse
    with one."""
    return int(next(line.split()[1] for line in Path(f"/proc/{pid}/io").read_text().splitlines()
                    if line.startswith("syscr:")))


def read_whole(path: Path) -> bytes:
    """open, read to the end, close: the system calls alone. (Python's open() also asks the file whether it is a
    terminal, an ioctl that FUSE passes to its process: one request per file that the tier cannot spare.)"""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def test_a_warm_read_sends_the_fuse_process_no_request(mounted_tier):
    """Opens need no message (the tier's FUSE answers the first with ENOSYS) and the kernel keeps pages, entries and
    attributes: opening, reading and closing every file again reaches the FUSE process with nothing. Alluxio's own
    FUSE answered three requests per file (open, flush, release) even when every page was cached."""
    tier, mount = mounted_tier
    files = sorted(path for path in (mount / IMAGES).rglob("*") if path.is_file())
    contents = [read_whole(path) for path in files]
    assert contents == [path.read_bytes() for path in files]
    fuse = fuse_process(tier)
    before = read_calls(fuse.pid)
    for _ in range(5):
        assert [read_whole(path) for path in files] == contents
    requests = read_calls(fuse.pid) - before
    # The JVM's other threads may read a little meanwhile (its client's heartbeats), never one call per file.
    assert requests < len(files) / 4, f"{requests} read calls of the FUSE process in 5 warm reads of {len(files)} files"


def listening_addresses(pid: int) -> set[str]:
    """Local addresses of the listening TCP sockets a process holds (from /proc: its socket inodes)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    addresses = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                raw = bytes.fromhex(fields[1].split(":")[0])
                if width == 8:
                    addresses.add(".".join(str(b) for b in raw[::-1]))
                else:
                    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
                    address = ipaddress.IPv6Address(b"".join(words))
                    addresses.add(str(address.ipv4_mapped or address))
    return addresses


def test_every_server_socket_of_the_tier_is_on_its_loopback_address(mounted_tier):
    tier, _ = mounted_tier
    for process in tier.status():
        assert process.running, process
        addresses = listening_addresses(process.pid)
        assert addresses <= {"127.0.40.1"}, (process.name, addresses)
        assert addresses or process.name == "fuse", f"the {process.name} serves nothing?"


def test_the_tree_is_read_only(mounted_tier):
    _, mount = mounted_tier
    with pytest.raises(OSError):
        (mount / IMAGES / "new.txt").write_bytes(b"x")
    with pytest.raises(OSError):
        next((mount / IMAGES / "by-file" / "train" / "cat").iterdir()).unlink()


def test_a_split_made_after_more_ingest_shows_every_new_file(mounted_tier, ring_datasets, cassandra_node, tmp_path):
    """A split made after its dataset's folder was listed shows; one looked up before it was made shows after
    `ringfeed cache refresh`. The master scanned the dataset for the first listing: samples ingested later, in those
    splits, are found by scanning again. A new version of a split replaces the listed one after a refresh (last in
    this module: it adds splits to the tree the other tests compare)."""
    tier, mount = mounted_tier
    assert "after-ingest" not in os.listdir(mount / IMAGES)
    rng = np.random.default_rng(9)
    added = {}
    for name in CLASSES:
        (tmp_path / "more" / name).mkdir(parents=True)
        for n in range(100, 104):
            buffer = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (30, 30, 3), dtype=np.uint8)).save(buffer, format="JPEG")
            (tmp_path / "more" / name / f"{n}.jpg").write_bytes(buffer.getvalue())
            added[sample_uuid(IMAGES, (f"{name}/{n}.jpg",))] = (name, buffer.getvalue())
    split = mount / IMAGES / "after-ingest"
    assert not split.exists()
    with Store(cassandra_node.address) as store:
        ingest(store, IMAGES, str(tmp_path / "more"))
        create_split(store, IMAGES, "after-ingest", SplitSpec(ratios=(1,), names=("all",), seed=1))
        create_split(store, IMAGES, "not-looked-up", SplitSpec(ratios=(1,), names=("all",), seed=1))
    # As on Kubernetes, where a trainer looks only for a split that is ready: it shows with no refresh.
    assert len(list((mount / IMAGES / "not-looked-up" / "all").rglob("*.jpg"))) == 24 * len(CLASSES) + len(added)
    tier.refresh()
    seen = {path.relative_to(split / "all").as_posix(): path.read_bytes() for path in (split / "all").rglob("*.jpg")}
    assert len(seen) == 24 * len(CLASSES) + len(added)
    for member, (name, data) in added.items():
        assert seen[f"{name}/{member}.jpg"] == data

    with Store(cassandra_node.address) as store:
        create_split(store, IMAGES, "after-ingest", SplitSpec(ratios=(1, 1), names=("a", "b"), seed=2))
        members = {part: {uuid.UUID(bytes=bytes(row)) for row in uuids}
                   for part, uuids in load_split(store, IMAGES, "after-ingest").loaded_parts.items()}
    tier.refresh()
    assert sorted(os.listdir(split)) == ["a", "b"]
    for part in ("a", "b"):
        assert {uuid.UUID(path.stem) for path in (split / part).rglob("*.jpg")} == members[part]


def test_a_preload_pass_reads_a_split_made_after_the_mount_listed_its_dataset(mounted_tier, cassandra_node):
    """What a FUSE Pod's preload container does every minute: its dataset's folder was listed, and FUSE keeps that
    listing, before the split was made; the next pass drops the listing and reads the new split's files, only
    those."""
    from ringfeed.cache.preload import Preloader

    tier, mount = mounted_tier
    preloader = Preloader(mount / IMAGES, threads=8)
    preloader.run_pass()
    assert preloader.run_pass().files == 0
    with Store(cassandra_node.address) as store:
        create_split(store, IMAGES, "preloaded-later", SplitSpec(ratios=(1,), names=("all",), seed=3))
        members = len(load_split(store, IMAGES, "preloaded-later").uuids("all"))
    figures = preloader.run_pass()
    assert (figures.files, figures.failed) == (members, 0)
    assert preloader.run_pass().files == 0


def test_a_killed_fuse_process_is_mounted_again_by_up(mounted_tier, cassandra_node):
    """A FUSE process killed outright leaves its mount dead (ENOTCONN); `ringfeed cache up` again detaches it and
    mounts anew, and the tree reads as before."""
    tier, mount = mounted_tier
    before = read_tree(mount, IMAGES)
    fuse = fuse_process(tier)
    os.kill(fuse.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while fuse.pid in {process.pid for process in tier.status() if process.running}:
        assert time.monotonic() < deadline, "the FUSE process outlived SIGKILL by 30 s"
        time.sleep(0.2)
    with pytest.raises(OSError) as dead:
        read_tree(mount, IMAGES)
    # ENOTCONN; a request the kernel had sent before the process died fails with ECONNABORTED
    assert dead.value.errno in (errno.ENOTCONN, errno.ECONNABORTED), dead.value
    tier.up(cassandra_node.hosts, 9042, mount, memory_bytes=256 << 20, host="127.0.40.1")
    assert read_tree(mount, IMAGES) == before
