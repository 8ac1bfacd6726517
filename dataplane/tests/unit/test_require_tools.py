"""scripts/require-tools.sh: a tool that is missing or too old is named once, on one line; the least versions it asks
for are the builds' own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "require-tools.sh"
# What the script runs besides the tools it checks.
UTILITIES = ("bash", "sed", "sort", "head", "cat", "printf")
GOOD = {
    "python3.11": "echo 3.11.2",
    "cargo": "echo 'cargo 1.95.0 (f2d3ce0bd 2026-03-21)'",
    "rustc": "echo 'rustc 1.95.0 (59807616e 2026-04-14)'",
    "java": "echo 'openjdk version \"17.0.15\" 2025-04-15' >&2",
    "mvn": r"printf '\033[1mApache Maven 3.8.7\033[m\nMaven home: /usr/share/maven\n'",
    "go": "echo 'go version go1.26.8 linux/amd64'",
    "gcc": "exit 0",
    "openssl": "exit 0",
    "pkg-config": "exit 0",
    "cmake": "exit 0",
    "nasm": "exit 0",
}


def minimum(name: str) -> str:
    return re.search(rf"^{name}=(\S+)", SCRIPT.read_text(), re.MULTILINE)[1]


def run_with(tmp_path: Path, **stubs: str | None) -> subprocess.CompletedProcess:
    """The script with a PATH of the utilities it needs and of stub tools (GOOD, changed by `stubs`; None: absent)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for utility in UTILITIES:
        found = shutil.which(utility)
        assert found, utility
        (bin_dir / utility).symlink_to(found)
    for name, body in {**GOOD, **stubs}.items():
        if body is not None:
            (bin_dir / name).write_text(f"#!{shutil.which('bash')}\n{body}\n")
            (bin_dir / name).chmod(0o755)
    return subprocess.run([shutil.which("bash"), str(SCRIPT)], env={"PATH": str(bin_dir)}, capture_output=True,
                          text=True, timeout=60, check=False)


def test_current_tools_pass_in_silence(tmp_path):
    result = run_with(tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_old_go_and_java_are_named_once_each_with_what_is_needed(tmp_path):
    result = run_with(tmp_path, go="echo 'go version go1.24.2 linux/amd64'",
                      java="echo 'openjdk version \"11.0.21\" 2023-10-17' >&2")
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and result.stdout == ""
    assert lines == [
        "error: Java 17 or newer is required, found 11: install Java 17 (Debian: apt-get install "
        "openjdk-17-jre-headless) — it runs Cassandra",
        f"error: Go {minimum('GO_MIN')} or newer is required, found 1.24.2: install Go {minimum('GO_MIN')} or newer "
        "(https://go.dev/dl) — it builds the local cluster's binaries and the ring's images",
    ]


@pytest.mark.parametrize(("stubs", "named"), [
    ({"go": "echo 'go version go1.26.4 linux/amd64'"}, "Go 1.26.7 or newer is required, found 1.26.4"),
    ({"java": "echo 'java version \"1.8.0_292\"' >&2"}, "Java 17 or newer is required, found 8"),
    ({"cargo": "echo 'cargo 1.84.1 (66221abde 2024-11-19)'"}, "cargo 1.88 or newer is required, found 1.84.1"),
    ({"rustc": "echo 'rustc 1.87.0 (17067e9ac 2025-05-09)'"}, "rustc 1.88 or newer is required, found 1.87.0"),
    ({"mvn": "echo 'Apache Maven 3.6.0'"}, "Maven 3.6.3 or newer is required, found 3.6.0"),
    ({"python3.11": "echo 3.10.12"}, "python3.11 3.11 or newer is required, found 3.10.12"),
    ({"go": None}, "Go 1.26.7 or newer is required, found none"),
    ({"mvn": None}, "Maven 3.6.3 or newer is required, found none"),
    ({"gcc": None}, "gcc is required"),
    ({"openssl": None}, "openssl is required"),
    ({"pkg-config": None}, "pkg-config is required"),
    ({"pkg-config": "exit 1"}, "OpenSSL's headers (libssl-dev) are required"),
    ({"cmake": None}, "cmake is required"),
], ids=["go", "java 8", "cargo", "rustc", "maven", "python", "no go", "no maven", "no gcc", "no openssl",
        "no pkg-config", "no libssl-dev", "no cmake"])
def test_each_missing_or_old_tool_is_one_line(tmp_path, stubs, named):
    result = run_with(tmp_path, **stubs)
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {named}"), lines[0]


def test_everything_missing_is_one_line_per_tool(tmp_path):
    result = run_with(tmp_path, **{name: None for name in GOOD})
    lines = result.stderr.splitlines()
    named = [re.match(r"(?:error|warning): (\S+)", line)[1] for line in lines]
    assert named == ["python3.11", "cargo", "rustc", "Java", "Maven", "Go", "gcc", "cmake", "nasm", "openssl",
                     "pkg-config"], lines


def test_without_nasm_the_build_goes_on_with_a_warning(tmp_path):
    result = run_with(tmp_path, nasm=None)
    assert result.returncode == 0 and result.stdout == ""
    assert result.stderr.startswith("warning: nasm is missing: apt-get install nasm") and \
        len(result.stderr.splitlines()) == 1


def test_newer_versions_pass(tmp_path):
    result = run_with(tmp_path, go="echo 'go version go1.27.0 linux/amd64'",
                      java="echo 'openjdk version \"21\" 2023-09-19' >&2", **{"python3.11": "echo 3.12.1"})
    assert result.returncode == 0, result.stderr


# -- the least versions are the builds' own --------------------------------------------------------------------------

def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def go_directives() -> dict[str, str]:
    """The `go` line of every go.mod a build compiles with GOTOOLCHAIN=local: the local cluster's wrapper modules,
    the images' modules and the go.mod at the top of each source tarball in third_party/."""
    found = {}
    for path in [*REPO.glob("e2e/cluster/gomod/*/go.mod"), *REPO.glob("images/**/go.mod")]:
        if match := re.search(r"^go (\S+)", path.read_text(), re.MULTILINE):
            found[str(path.relative_to(REPO))] = match[1]
    for tarball in sorted(REPO.glob("third_party/*.tar.gz")):
        with tarfile.open(tarball) as archive:
            for member in archive:
                if member.name.count("/") == 1 and member.name.endswith("/go.mod"):
                    text = archive.extractfile(member).read().decode()
                    found[f"{tarball.name}:{member.name}"] = re.search(r"^go (\S+)", text, re.MULTILINE)[1]
    return found


def test_go_minimum_is_the_newest_go_directive_of_the_builds():
    directives = go_directives()
    assert any("cass-operator" in where for where in directives) and len(directives) >= 5, directives
    newest = max(directives.values(), key=_version)
    assert minimum("GO_MIN") == newest, f"GO_MIN should be {newest}: {directives}"


def test_rust_minimum_is_the_crates_rust_version():
    versions = {str(path.relative_to(REPO)): re.search(r'^rust-version = "(\S+)"', path.read_text(), re.MULTILINE)[1]
                for path in [REPO / "dataplane/native/Cargo.toml", *REPO.glob("benchmarks/*/Cargo.toml")]}
    assert len(versions) == 4 and minimum("RUST_MIN") == max(versions.values(), key=_version), versions


def test_python_minimum_is_the_packages_requires_python():
    for package in ("client", "dataplane", "operator"):
        text = (REPO / package / "pyproject.toml").read_text()
        assert f'requires-python = ">={minimum("PYTHON_MIN")}"' in text, package
    assert "PYTHON ?= python3.11" in (REPO / "Makefile").read_text()


def test_the_script_runs_here_without_error_output_beyond_its_findings():
    """On this machine (the one the project is built on) every tool is there and new enough."""
    result = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False,
                            env={**os.environ})
    assert result.returncode == 0, result.stderr
