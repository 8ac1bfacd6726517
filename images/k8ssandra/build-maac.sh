#!/usr/bin/env bash
# Build the Management API for Apache Cassandra (MAAC: the agent inside Cassandra 5.0.x and the server beside it)
# from its source tarball in third_party/, with Maven Central only.
#
#   build-maac.sh OUT   → OUT/datastax-mgmtapi-agent.jar, OUT/datastax-mgmtapi-server.jar,
#                         OUT/netty-codec-http-<Cassandra's netty>.jar (the agent needs it; cassandra-all leaves it out)
#
# The tarball stays untouched: it is unpacked into a temporary folder, where one pom is patched. Cold ~80 s on
# 2 cores (Maven repository $RINGFEED_CACHE/m2 grows by ~240 MB); images/build.sh calls it only when the tarball or
# this file changes.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:?usage: build-maac.sh OUT}
maven_repo=${RINGFEED_CACHE:?set RINGFEED_CACHE (the Makefile does)}/m2
cassandra_lib=${CASSANDRA_LIB:-$RINGFEED_CACHE/cassandra-5.0.9/lib}

work=$(mktemp -d "${TMPDIR:-/tmp}/ringfeed-maac.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
tar -xzf "$repo"/third_party/management-api-for-apache-cassandra-*.tar.gz -C "$work" --strip-components=1

# dev.resteasy.netty:resteasy-embedded-server:1.0.0.Final is not on Maven Central; it is resteasy-netty4 relocated,
# with the same Java packages, so the server compiles unchanged against org.jboss.resteasy:resteasy-netty4.
python3 - "$work/management-api-server/pom.xml" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
relocated = """      <groupId>dev.resteasy.netty</groupId>
      <artifactId>resteasy-embedded-server</artifactId>
      <version>1.0.0.Final</version>"""
original = """      <groupId>org.jboss.resteasy</groupId>
      <artifactId>resteasy-netty4</artifactId>
      <version>${resteasy.version}</version>"""
if text.count(relocated) != 1:
    sys.exit(f"{path}: resteasy-embedded-server 1.0.0.Final not found once; the patch needs a look")
open(path, "w").write(text.replace(relocated, original))
PY

# Not on Maven Central either: cassandra-all 4.0.21 (a compile-only dependency of the common modules; 4.0.19 is the
# newest there) and swagger-maven-plugin-jakarta 2.2.45 (2.2.46 is). Formatting, licence and style checks and the
# OpenAPI generation are skipped; skip.surefire.tests is what the poms' surefire reads instead of skipTests.
(cd "$work" && mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$maven_repo" \
    -DskipTests -Dskip.surefire.tests=true -Dfmt.skip=true -Dlicense.skip=true -Dcheckstyle.skip=true \
    -DskipOpenApi=true -Dcassandra4.version=4.0.19 -Djaxrs.version=2.2.46 \
    -pl management-api-agent-5.0.x,management-api-server -am package)
cp "$work"/management-api-agent-5.0.x/target/datastax-mgmtapi-agent-5.0.x-*-SNAPSHOT.jar "$out/datastax-mgmtapi-agent.jar"
cp "$work"/management-api-server/target/datastax-mgmtapi-server-*-SNAPSHOT.jar "$out/datastax-mgmtapi-server.jar"

netty=$(basename "$cassandra_lib"/netty-all-*.jar .jar)
mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$maven_repo" dependency:copy -Dartifact="io.netty:netty-codec-http:${netty#netty-all-}" \
    -DoutputDirectory="$out"
