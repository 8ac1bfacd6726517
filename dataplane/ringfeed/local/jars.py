"""Cassandra runtime jars, resolved from Maven Central into Ringfeed's cache (no tarball, no prebuilt download)."""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from ringfeed.errors import RingfeedError

CASSANDRA_VERSION = "5.0.9"


def cache_dir() -> Path:
    """Where downloaded runtimes live: ``$RINGFEED_CACHE``, else ``~/.cache/ringfeed``."""
    return Path(os.environ.get("RINGFEED_CACHE", Path.home() / ".cache" / "ringfeed")).resolve()


def cassandra_lib_dir(version: str = CASSANDRA_VERSION) -> Path:
    return cache_dir() / f"cassandra-{version}" / "lib"


def require_java() -> str:
    """Path of a Java 17+ runtime, or a one-line error saying how to get one."""
    java = shutil.which("java")
    if java is None:
        raise RingfeedError("Java 17 is required to run Cassandra: install it "
                            "(Debian: apt-get install openjdk-17-jre-headless)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    # `java -version` prints e.g. 'openjdk version "17.0.15" 2025-04-15' on stderr.
    try:
        major = int(out.split('"')[1].split(".")[0])
    except (IndexError, ValueError):
        raise RingfeedError(f"cannot read the Java version from: {out.strip()[:120]}") from None
    if major < 17:
        raise RingfeedError(f"Java 17 or newer is required to run Cassandra {CASSANDRA_VERSION}, found Java {major}")
    return java


def ensure_cassandra_jars(version: str = CASSANDRA_VERSION) -> Path:
    """Return the directory holding Cassandra's runtime jars, fetching them with Maven on first use."""
    lib = cassandra_lib_dir(version)
    marker = lib / ".complete"
    if marker.exists():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RingfeedError("Maven is required once to fetch Cassandra's jars (Debian: apt-get install maven)")
    require_java()
    lib.mkdir(parents=True, exist_ok=True)
    pom = resources.files("ringfeed.local") / "cassandra-pom.xml"
    with resources.as_file(pom) as pom_path:
        proc = subprocess.run(
            [mvn, "-B", "-q", "-f", str(pom_path), f"-Dcassandra.version={version}",
             f"-Dmaven.repo.local={cache_dir() / 'm2'}", "dependency:copy-dependencies",
             f"-DoutputDirectory={lib}", "-DincludeScope=runtime"],
            capture_output=True, text=True,
        )
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise RingfeedError(f"Maven could not fetch Cassandra {version}: " + " | ".join(tail))
    marker.write_text(version + "\n")
    return lib
