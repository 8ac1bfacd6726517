"""The wheels of `make wheels` as a user gets them: pip installs them into a clean venv of CPython 3.11, 3.12 and
3.13, the installed `ringfeed` command ingests a small dataset on the test node and the installed `ringfeed.Loader`
reads it back; the extension's own OpenSSL (built in) verifies the node's certificate.

The project's wheels come from the wheelhouse ($RINGFEED_CACHE/images/wheels); their dependencies from PyPI at
constraints.txt's versions, binary wheels only (nothing is built from source), downloaded once per Python into
$RINGFEED_CACHE/wheel-test/<tag> and again when the lock or the wheels' requirements change. Every Python must be
there: a missing one fails the test, it is never skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import textwrap
import time
import tomllib
import uuid
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ringfeed.ids import sample_uuid
from ringfeed.local.jars import cache_dir

from conftest import REPO

PYTHONS = ("3.11", "3.12", "3.13")
LOCK = REPO / "constraints.txt"
WHEEL_TAG = "cp311-abi3-manylinux_2_28_x86_64"
VERSION = tomllib.loads((REPO / "dataplane" / "pyproject.toml").read_text())["project"]["version"]
GLIBC_MAX = (2, 28)
SAMPLES = 40
STRESS_EXIT = REPO / "scripts" / "stress-exit.py"
# Runs of the stress child that exits while daemon threads decode: the wheel's unwinder crashed 12 in 12 of them
# before the extension kept such threads away from the GIL at exit (lifecycle.rs).
EXIT_RUNS = 6

# Run by the venv's Python, outside the checkout: where each module comes from; TLS through the extension (the node's
# CA accepted, another refused); every sample of both parts of the split through ringfeed.Loader, as (uuid, index
# encoded in the tensor, label, exact).
PROBE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import ringfeed, ringfeed._native, ringfeed_client
    from ringfeed import ClusterAddress, Loader

    name, ca, other_ca = sys.argv[1:]
    address = ClusterAddress.from_env()
    session = ringfeed._native.Session(list(address.hosts), address.port, tls_ca_file=ca)
    session.prepare("SELECT release_version FROM system.local")
    try:
        ringfeed._native.Session(list(address.hosts), address.port, tls_ca_file=other_ca)
        refused = ""
    except ConnectionError as exc:
        refused = str(exc)
    samples = []
    for part in ("train", "test"):
        loader = Loader(name, "halves", part, batch_size=8, decode="tensor", with_uuids=True, address=address)
        for x, y, uuids in loader:
            index = (x[:, 0, 0] / 10).astype(int)
            exact = (x == (np.arange(6, dtype=np.float32) + index[:, None] * 10).reshape(-1, 2, 3)).all(axis=(1, 2))
            samples += [[u.tobytes().hex(), int(i), int(label), bool(e)]
                        for u, i, label, e in zip(uuids, index, y, exact)]
    print(json.dumps({"python": list(sys.version_info[:2]), "ringfeed": ringfeed.__file__,
                      "native": ringfeed._native.__file__, "client": ringfeed_client.__file__, "refused": refused,
                      "samples": samples}))
""")


def run(args: list, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    return proc


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without what would let the checkout or other wheels in."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_FIND_LINKS", "PIP_NO_INDEX")}
    return {**env, "PYTHONNOUSERSITE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def find_python(version: str) -> str:
    """CPython `version`: on PATH, else pyenv's newest patch release of it, else Debian's."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [shutil.which(f"python{version}")]
    candidates += [str(p / "bin" / f"python{version}") for p in sorted(
        pyenv.glob(f"versions/{version}.*"), key=lambda p: [int(n) for n in re.findall(r"\d+", p.name)],
        reverse=True)]
    candidates += [f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    for candidate in filter(None, candidates):
        try:  # a pyenv shim exists for every installed version, but runs only the selected ones
            out = subprocess.run([candidate, "-c", "import sys, venv; print(*sys.version_info[:2], sep='.')"],
                                 capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if out.returncode == 0 and out.stdout.strip() == version:
            return candidate
    pytest.fail(f"CPython {version} with its venv module not found (PATH, {pyenv}/versions/{version}.*, /usr/bin): "
                f"install it (pyenv install {version}, or Debian's python{version}-venv): the wheels are tested under "
                f"every Python they support", pytrace=False)


def wheel_files(wheel: Path, package: str) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in z.namelist() if n.startswith(f"{package}/") and n.endswith((".py", ".pyi"))}


def check_fresh(wheel: Path, source: Path, *built_from: Path) -> None:
    """The wheel holds the checkout's Python files exactly and is newer than the other files it is `built_from`:
    a stale wheelhouse would test other code."""
    package = source.name
    shipped = wheel_files(wheel, package)
    tree = {f"{package}/{p.relative_to(source)}": p.read_bytes() for p in source.rglob("*")
            if p.suffix in (".py", ".pyi") and "__pycache__" not in p.parts}
    stale = sorted(n for n in shipped.keys() | tree.keys() if shipped.get(n) != tree.get(n))
    assert not stale, f"{wheel.name} differs from the checkout in {', '.join(stale[:5])}: run make wheels"
    newest = max(built_from, key=lambda p: p.stat().st_mtime)
    assert newest.stat().st_mtime <= wheel.stat().st_mtime, \
        f"{newest.relative_to(REPO)} is newer than {wheel.name}: run make wheels"


@pytest.fixture(scope="module")
def wheels() -> list[Path]:
    """ringfeed's manylinux_2_28 abi3 wheel and ringfeed-client's pure one, from `make wheels`, checked."""
    house = cache_dir() / "images" / "wheels"
    found = {name: sorted(house.glob(pattern)) for name, pattern in
             (("ringfeed", f"ringfeed-0*-{WHEEL_TAG}.whl"), ("ringfeed-client", "ringfeed_client-*-py3-none-any.whl"))}
    for name, paths in found.items():
        assert len(paths) == 1, f"{house}: {len(paths)} {name} wheel(s) (one expected): run make wheels"
    ringfeed_wheel, client_wheel = found["ringfeed"][0], found["ringfeed-client"][0]
    native = REPO / "dataplane" / "native"
    check_fresh(ringfeed_wheel, REPO / "dataplane" / "ringfeed", REPO / "dataplane" / "pyproject.toml",
                *native.glob("Cargo.*"), *(native / "src").rglob("*.rs"))
    check_fresh(client_wheel, REPO / "client" / "ringfeed_client", REPO / "client" / "pyproject.toml")

    with zipfile.ZipFile(ringfeed_wheel) as z:
        names = z.namelist()
        tag = re.findall(r"^Tag: (.+)$", z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode(),
                         re.M)
        assert tag == [WHEEL_TAG]
        assert {"ringfeed/py.typed", "ringfeed/_native.pyi", "ringfeed/_native.abi3.so"} <= set(names)
        extension = z.read("ringfeed/_native.abi3.so")
    with zipfile.ZipFile(client_wheel) as z:
        assert "ringfeed_client/py.typed" in z.namelist()
    for wheel in (ringfeed_wheel, client_wheel):  # the licence: its SPDX expression and the root's LICENSE
        with zipfile.ZipFile(wheel) as z:
            metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
            licence = [n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
            assert re.search(r"^License-Expression: Apache-2.0$", metadata, re.M), wheel.name
            assert licence and z.read(licence[0]) == (REPO / "LICENSE").read_bytes(), wheel.name
    # The extension asks for no glibc newer than 2.28 and links no libssl/libcrypto (OpenSSL is built in).
    so = house.parent / "wheel-test" / "_native.abi3.so"
    so.parent.mkdir(parents=True, exist_ok=True)
    so.write_bytes(extension)
    symbols = run(["objdump", "-T", so]).stdout
    versions = {tuple(map(int, v.split("."))) for v in re.findall(r"\bGLIBC_(\d+(?:\.\d+)+)", symbols)}
    assert versions and max(versions) <= GLIBC_MAX, f"GLIBC versions asked for: {sorted(versions)}"
    needed = re.findall(r"NEEDED\s+(\S+)", run(["objdump", "-p", so]).stdout)
    assert not [n for n in needed if n.startswith(("libssl", "libcrypto", "libpython"))], needed
    so.unlink()
    return [ringfeed_wheel, client_wheel]


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory) -> str:
    """A CA that did not sign the node's certificate."""
    folder = tmp_path_factory.mktemp("other-ca")
    run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other", "-keyout",
         folder / "ca.key", "-out", folder / "ca.crt"])
    return str(folder / "ca.crt")


def dependency_wheels(python: Path, wheels: list[Path], tag: str) -> Path:
    """The wheels' dependencies at the lock's versions for `python`, binary only, kept until the lock or the
    wheels' requirements change."""
    key = hashlib.sha256(LOCK.read_bytes())
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        key.update("\n".join(re.findall(r"^Requires-Dist: .+$", metadata, re.M)).encode())
    folder = cache_dir() / "wheel-test" / tag
    stamp = folder / ".key"
    if stamp.exists() and stamp.read_text() == key.hexdigest():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    run([python, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--constraint", LOCK, "--dest", folder,
         *wheels], env=clean_env())
    for wheel in wheels:  # the project's own come from the wheelhouse
        (folder / wheel.name).unlink(missing_ok=True)
    stamp.write_text(key.hexdigest())
    return folder


@pytest.mark.parametrize("version", PYTHONS)
def test_wheels_install_and_load_in_a_clean_venv(version, wheels, other_ca, cassandra_node, tmp_path):
    started = time.monotonic()
    venv = tmp_path / "venv"
    run([find_python(version), "-m", "venv", venv])
    python, ringfeed = venv / "bin" / "python", venv / "bin" / "ringfeed"
    deps = dependency_wheels(python, wheels, f"cp{version.replace('.', '')}")
    run([python, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", deps, *wheels], env=clean_env())
    run([python, "-m", "pip", "check"], env=clean_env())
    installed = time.monotonic()

    # The installed command, outside the checkout: a raw-tensor dataset, ingested by the wheel's native writer, a 1:1
    # split. Sample i is float32 (2, 3) holding i * 10 + 0..5, label i % 4.
    name = f"wheels_py{version.replace('.', '')}_{uuid.uuid4().hex[:8]}"
    env = clean_env(RINGFEED_HOSTS=",".join(cassandra_node.hosts), RINGFEED_PORT=str(cassandra_node.port))
    data = tmp_path / "data"
    data.mkdir()
    rows = ["path,item,label"]
    for i in range(SAMPLES):
        (data / f"{i}.bin").write_bytes((np.arange(6, dtype=np.float32) + i * 10).tobytes())
        rows.append(f"{i}.bin,{i},{i % 4}")
    (data / "manifest.csv").write_text("\n".join(rows) + "\n")
    version_line = run([ringfeed, "--version"], env=env, cwd=tmp_path).stdout
    assert VERSION in version_line
    run([ringfeed, "dataset", "create", name, "--key", "item:int", "--encoding", "raw", "--dtype", "float32",
         "--shape", "2,3"], env=env, cwd=tmp_path)
    try:
        out = run([ringfeed, "ingest", name, data / "manifest.csv"], env=env, cwd=tmp_path).stdout
        assert f"ingested {SAMPLES} samples" in out, out
        run([ringfeed, "split", "create", name, "halves", "--ratios", "1,1", "--names", "train,test", "--seed", "3"],
            env=env, cwd=tmp_path)

        # ringfeed.Loader of the installed package reads every sample back, each once, exact.
        probe = json.loads(run([python, "-c", PROBE, name, cassandra_node.ring.tls_ca_file, other_ca], env=env,
                               cwd=tmp_path).stdout)
    finally:
        run([ringfeed, "dataset", "drop", name, "--force", "--yes"], env=env, cwd=tmp_path)
    site = venv / "lib" / f"python{version}" / "site-packages"
    assert probe["python"] == [int(n) for n in version.split(".")]
    assert Path(probe["ringfeed"]) == site / "ringfeed" / "__init__.py"
    assert Path(probe["native"]) == site / "ringfeed" / "_native.abi3.so"
    assert Path(probe["client"]) == site / "ringfeed_client" / "__init__.py"
    assert probe["refused"].startswith(f"cannot connect to {cassandra_node.hosts[0]}:"), probe["refused"]
    samples = probe["samples"]
    expected = {sample_uuid(name, (i,)).hex: i for i in range(SAMPLES)}
    assert len(samples) == SAMPLES
    assert {u: i for u, i, _, _ in samples} == expected
    assert all(label == i % 4 and exact for _, i, label, exact in samples)

    # The interpreter exits while daemon threads decode inside the installed extension: never killed by a signal.
    exits = [subprocess.run([python, STRESS_EXIT, "--child", "daemon-decoders"], env=clean_env(),
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
             for _ in range(EXIT_RUNS)]
    assert [e.returncode for e in exits] == [0] * EXIT_RUNS, [e.stderr[-2000:] for e in exits if e.returncode]
    print(f"CPython {version}: venv + install {installed - started:.1f} s, "
          f"ingest + split + load {time.monotonic() - installed:.1f} s")

