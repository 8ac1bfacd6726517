#!/usr/bin/env bash
# The cache tier's runtime, from Maven Central and Debian only (no Alluxio tarball):
#   DIR/extensions/ringfeed-alluxio-ufs.jar   Ringfeed's under-storage extension (dataplane/alluxio), unit tests run
#   DIR/lib/*.jar                             Alluxio 2.9.6: master, worker, FUSE, shell and their dependencies,
#                                             and Ringfeed's FUSE launcher (ringfeed-alluxio-fuse.jar)
#   DIR/fuse/                                 libfuse3 (Debian's libfuse3-3 and fuse3, unpacked: no root, no install)
# Rebuilt only when dataplane/alluxio or this script changes. Cold: ~2 min and ~230 MB of Maven repository.
# Usage: scripts/build-alluxio.sh DIR
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
target=$(realpath -m "${1:?usage: build-alluxio.sh DIR}") # absolute: Maven resolves paths from its project
maven_repo=${RINGFEED_CACHE:?set RINGFEED_CACHE (the Makefile does)}/m2
project=$repo/dataplane/alluxio
stamp=$(cat "$0" <(cd "$project" && git ls-files -co --exclude-standard pom.xml maven-settings.xml runtime src | sort \
  | xargs cat) | sha256sum | cut -c1-16)
[[ -f $target/.stamp && $(cat "$target/.stamp") == "$stamp" ]] && exit 0

maven=(mvn -B -q -s "$project/maven-settings.xml" -Dmaven.repo.local="$maven_repo")
echo "alluxio: building the ring's under-storage extension and fetching Alluxio's jars …"
rm -rf "$target"
mkdir -p "$target/extensions" "$target/lib" "$target/fuse"
"${maven[@]}" -f "$project/pom.xml" package
cp "$project/target/ringfeed-alluxio-ufs.jar" "$target/extensions/"
cp "$project/target/ringfeed-alluxio-ufs-fuse.jar" "$target/lib/ringfeed-alluxio-fuse.jar"
# Alluxio 2.9 logs through log4j 1 (reload4j); the log4j 2 bridge would take over its logging.
"${maven[@]}" -f "$project/runtime/pom.xml" dependency:copy-dependencies -DoutputDirectory="$target/lib" \
  -DexcludeArtifactIds=log4j-slf4j-impl

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
download() { (cd "$work" && apt-get download -qq libfuse3-3 fuse3 2>/dev/null); }
download || { [[ $(id -u) -eq 0 ]] && apt-get update -qq && download; } || {
  echo "error: apt-get download libfuse3-3 fuse3 failed: is Debian's package index reachable (apt-get update)?" >&2
  exit 1
}
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$target/fuse"; done
echo "$stamp" > "$target/.stamp"
echo "alluxio: $(ls "$target/lib" | wc -l) jars, $(du -sh "$target" | cut -f1) in $target"
