#!/usr/bin/env bash
# Build Ringfeed's images from the Dockerfiles under images/ with buildah (no Docker engine) and push them to a
# registry: the local cluster's (TLS + login, started when needed), from which its node pulls them as any cluster's
# node does, or any other.
#
#   build.sh all      base (once), pause, wheels, every images/*/Dockerfile, the ring's images, then push to the local
#                     registry
#   build.sh push [REGISTRY]   push every built image to REGISTRY/ringfeed/<name>:<tag> (default: the local
#                     registry); a registry's login comes from REGISTRY_AUTH_FILE (a docker config) or `buildah login`
#   build.sh chart [REGISTRY]  package the chart for REGISTRY (its images by the digests pushed there, CRDs copied in)
#                     into $RINGFEED_CACHE/chart and push it as oci://REGISTRY/charts/ringfeed
#   build.sh archives every image as an OCI archive in $RINGFEED_CACHE/images (kind load image-archive)
#   build.sh wheels   only the wheelhouses that are the Dockerfiles' build contexts (for a Docker build elsewhere)
#   build.sh image NAME   (development) wheels and images/NAME alone, pushed to the local registry; the next `all`
#                     rebuilds every image
#   build.sh kueue    (the e2e's) Kueue's controller manager from the Go module proxy (e2e/kueue), as an image in
#                     the local registry; its record in $RINGFEED_CACHE/images/kueue.pushed, its chart in kueue-go/chart
#   build.sh kueue-image   the same image, not pushed
#   build.sh previous FOLDER   a previous release (FOLDER: e2e/upgrade/<version>: its packaged chart, its ringfeed
#                     sdist, its client and operator wheels) in the local registry, for the upgrade e2e: its
#                     data-plane and operator images built from them, the trainer and cache tier this build's
#
# RUN steps use chroot isolation in the host's network namespace: no bridge, no NAT rule, no netns is created.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cache=${RINGFEED_CACHE:?set RINGFEED_CACHE (the Makefile does)}/images
store=$cache/buildah
python=${PYTHON_VENV:-$repo/.venv}/bin/python
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/dataplane/pyproject.toml")
base=localhost/ringfeed/base:bookworm
pause=localhost/ringfeed/pause:1.0
images=(dataplane operator trainer alluxio)
# A Ring's images, built from the source tarballs in third_party/ (images/k8ssandra/): cass-operator and
# k8ssandra-client's `config build` (static Go binaries, FROM scratch) and Cassandra 5.0.9 with MAAC.
cass_operator=localhost/ringfeed/cass-operator:v1.32.0
k8ssandra_client=localhost/ringfeed/k8ssandra-client:v0.9.0
cassandra_maac=localhost/ringfeed/cassandra-maac:5.0.9
# Every image a cluster needs, by local name; each is pushed as <registry>/ringfeed/<name>:<tag>.
cluster_images=("${images[@]/#/localhost/ringfeed/}") && cluster_images=("${cluster_images[@]/%/:$version}")
cluster_images+=("$cass_operator" "$k8ssandra_client" "$cassandra_maac")

setup_buildah() {
    command -v buildah >/dev/null || { echo "error: buildah missing; run: e2e/cluster/install-packages.sh" >&2; exit 1; }
    mkdir -p "$store/etc" "$store/tmp"
    for f in storage.conf registries.conf containers.conf; do
        sed "s#@STORE@#$store#g" "$here/buildah/$f" >"$store/etc/$f"
    done
    export CONTAINERS_STORAGE_CONF=$store/etc/storage.conf CONTAINERS_REGISTRIES_CONF=$store/etc/registries.conf
    export CONTAINERS_CONF=$store/etc/containers.conf BUILDAH_ISOLATION=chroot TMPDIR=$store/tmp
}

key_of() { cat "$@" | sha256sum | cut -c1-16; }
has_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }
timed() { # label, command…
    local t; t=$(date +%s%N); "${@:2}"; echo "images: $1 in $(( ($(date +%s%N) - t) / 1000000 )) ms"
}

build_base() { # debootstrap is the slow step (~1 min): only when mkbase.sh changed
    local key; key=$(key_of "$here/base/mkbase.sh")
    has_image "$base" && [[ -f $store/base.$key ]] && return 0
    echo "images: base $base from debootstrap (about a minute) …"
    timed base "$here/base/mkbase.sh" "$base"
    rm -f "$store"/base.* && touch "$store/base.$key"
}

build_pause() {
    local key; key=$(key_of "$here/pause/pause.c")
    has_image "$pause" && [[ -f $store/pause.$key ]] && return 0
    local dir; dir=$(mktemp -d "$store/tmp/pause.XXXXXX")
    gcc -Os -static -Wall -Werror -o "$dir/pause" "$here/pause/pause.c" && strip "$dir/pause"
    local container; container=$(buildah from scratch)
    buildah copy --quiet "$container" "$dir/pause" /pause >/dev/null
    buildah config --os linux --arch amd64 --entrypoint '["/pause"]' --user 65535:65535 "$container"
    buildah commit --rm --quiet "$container" "$pause" >/dev/null
    rm -rf "$dir" "$store"/pause.* && touch "$store/pause.$key"
}

build_wheels() { # ringfeed, ringfeed-client, ringfeed-operator and every dependency (constraints.txt's versions)
    local out=$cache/wheels lock=$repo/constraints.txt
    # The wheel that ships: libjpeg-turbo with its SIMD, which needs nasm (a dev build goes on without, more slowly).
    command -v nasm >/dev/null || { echo "error: nasm missing; run: e2e/cluster/install-packages.sh (libjpeg-turbo's SIMD)" >&2; exit 1; }
    rm -rf "$out" "$cache/wheels.key" && mkdir -p "$out"
    # One wheel for any Linux x86_64 with glibc >= 2.28 and any CPython >= 3.11 (abi3): zig (PyPI's ziglang, the
    # venv's) links against glibc 2.28's symbols on any build host, OpenSSL is built in statically (the
    # vendored-openssl feature, pyproject.toml), so the wheel needs no libssl of the host. The venv's editable build
    # (make deps) is this one, in the same target dir for the same interpreter: what it compiled is packed here.
    (cd "$repo/dataplane" && PATH=$(dirname "$python"):$PATH "$python" -m maturin build --release --quiet --zig \
        --compatibility manylinux_2_28 --target-dir native/target/manylinux -i "$python" --out "$out" >/dev/null)
    # The pure wheels from a copy of the sources (their LICENSE links to the root's): setuptools' <project>/build in
    # the checkout keeps modules removed from the sources, and two builds at once would share it.
    local src; src=$(mktemp -d)
    cp "$repo/LICENSE" "$src/"
    tar -C "$repo" --exclude=build --exclude='*.egg-info' --exclude=__pycache__ --exclude=.pytest_cache \
        --exclude=tests -cf - operator client | tar -C "$src" -xf -
    "$python" -m pip wheel --quiet --no-deps --build-constraint "$lock" --wheel-dir "$out" "$src/operator" "$src/client"
    rm -rf "$src"
    "$python" -m pip download --quiet --only-binary=:all: --constraint "$lock" --dest "$out" --find-links "$out" \
        "$out"/ringfeed-0*.whl "$out"/ringfeed_operator-*.whl
    sources_key >"$cache/wheels.key"
}

build_trainer_context() { # the example trainer's context: torch and its pure-Python dependencies, the client, train.py
    local context=$cache/trainer-context
    mkdir -p "$context/torch" "$context/client"
    # The venv's versions; torch's nvidia-* and triton dependencies stay out (see images/trainer/Dockerfile). Files
    # already downloaded are kept: torch's 540 MB wheel is fetched once. torchvision and Pillow: ImageFolder over a
    # cache tier's mount (access: posix).
    # shellcheck disable=SC2046  # one argument per requirement
    "$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$context/torch" $("$python" -c '
import importlib.metadata as m
print(" ".join(f"{n}=={m.version(n)}" for n in ("torch", "torchvision", "pillow", "filelock", "fsspec", "jinja2",
      "markupsafe", "networkx", "sympy", "mpmath", "typing_extensions")))')
    rm -f "$context/client"/*.whl
    cp "$cache/wheels"/ringfeed_client-*.whl "$cache/wheels"/numpy-*.whl "$context/client/"
    cp "$here/trainer/train.py" "$context/"
}

build_alluxio_context() { # the cache tier's context: the wheelhouse and Alluxio's runtime (`make alluxio`), linked
    local context=$cache/alluxio-context runtime=$RINGFEED_CACHE/alluxio
    [[ -f $runtime/.stamp ]] || { echo "error: $runtime is not built; run: make alluxio" >&2; exit 1; }
    rm -rf "$context" && mkdir -p "$context/alluxio"
    cp -al "$cache/wheels" "$context/wheels"
    cp -al "$runtime/lib" "$runtime/extensions" "$context/alluxio/"
}

build_image() { # name: images/<name>/Dockerfile with the wheelhouse (the trainer, the cache tier: their own) as context
    local context=$cache/wheels
    [[ $1 == trainer || $1 == alluxio ]] && context=$cache/$1-context
    buildah bud --quiet --layers --pull=never --isolation chroot --build-arg BASE="$base" \
        -f "$here/$1/Dockerfile" -t "localhost/ringfeed/$1:$version" "$context" >/dev/null
}

export_image() { # image, archive: rewritten only when the image changed
    local id; id=$(buildah inspect --type image --format '{{.FromImageID}}' "$1")
    [[ -f $2 && $(cat "$2.id" 2>/dev/null) == "$id" ]] && return 0
    rm -f "$2" && buildah push --quiet "$1" "oci-archive:$2:$1" && echo "$id" >"$2.id"
}

build_once() { # name, script, key files…: $cache/<name> made by the script, again only when a key file changed
    local out=$cache/$1 key; key=$(key_of "$2" "${@:3}")
    [[ $(cat "$out.key" 2>/dev/null) == "$key" ]] && return 0
    rm -rf "$out" "$out.key"
    timed "$1" "$2" "$out"
    echo "$key" >"$out.key"
}

static_image() { # image, binary, its path in the image (as the upstream image has it): alone FROM scratch, non-root
    local container; container=$(buildah from scratch)
    buildah copy --quiet --chmod 0755 "$container" "$2" "$3" >/dev/null
    buildah config --os linux --arch amd64 --entrypoint "[\"$3\"]" --user 65532:65532 "$container"
    buildah commit --rm --quiet "$container" "$1" >/dev/null
}

build_cassandra_maac() { # the context of images/cassandra-maac/Dockerfile: Cassandra's jars, MAAC's, bin/, conf/
    local context=$cache/cassandra-maac-context
    rm -rf "$context" && mkdir -p "$context/lib" "$context/mgmtapi"
    cp -r "$here/cassandra-maac/"{bin,conf} "$context/"
    cp "$RINGFEED_CACHE"/cassandra-5.0.9/lib/*.jar "$cache"/k8ssandra-maac/netty-codec-http-*.jar "$context/lib/"
    cp "$cache"/k8ssandra-maac/datastax-mgmtapi-*.jar "$context/mgmtapi/"
    tar -xzOf "$repo"/third_party/management-api-for-apache-cassandra-*.tar.gz --wildcards \
        '*/cassandra/scripts/docker-entrypoint.sh' >"$context/docker-entrypoint.sh"
    buildah bud --quiet --layers --pull=never --isolation chroot --build-arg BASE="$base" \
        -f "$here/cassandra-maac/Dockerfile" -t "$cassandra_maac" "$context" >/dev/null
    rm -rf "$context"  # 330 MB of jars, copied again for the next build
}

ring_images() { # cass-operator, its config builder and the Cassandra + MAAC image, each rebuilt when its sources change
    local k8s=$here/k8ssandra crds=$repo/charts/ringfeed/files/cass-operator/crds.yaml key
    build_once k8ssandra-go "$k8s/build-go.sh" "$repo"/third_party/{cass-operator,k8ssandra-client}-*.tar.gz \
        "$k8s"/cfgbuild/*
    build_once k8ssandra-maac "$k8s/build-maac.sh" "$repo"/third_party/management-api-for-apache-cassandra-*.tar.gz
    # The chart carries cass-operator's CRDs as rendered from the tarball: a new tarball must bring them along.
    cmp -s "$cache/k8ssandra-go/crds.yaml" "$crds" || {
        echo "error: $crds differs from the CRDs of third_party/cass-operator-*: cp $cache/k8ssandra-go/crds.yaml $crds" >&2
        exit 1
    }
    key=$(cat "$cache/k8ssandra-go.key" "$cache/k8ssandra-maac.key" <(ls "$store"/base.*) "$here/build.sh" \
          <(cd "$here" && find cassandra-maac -type f | sort | xargs sha256sum) | sha256sum | cut -c1-16)
    if [[ $(cat "$cache/ring-images.key" 2>/dev/null) != "$key" ]]; then
        timed cass-operator static_image "$cass_operator" "$cache/k8ssandra-go/cass-operator" /manager
        timed k8ssandra-client static_image "$k8ssandra_client" "$cache/k8ssandra-go/kubectl-k8ssandra" \
            /kubectl-k8ssandra
        timed cassandra-maac build_cassandra_maac
        echo "$key" >"$cache/ring-images.key"
    fi
}

use_registry() { # target ("local" or host[:port][/path]): sets registry, via (how to reach it), auth_file, ca_dir
    if [[ $1 == local ]]; then
        "$repo/e2e/cluster/cluster.sh" registry >/dev/null
        # shellcheck source=/dev/null  # written by cluster.sh registry: REGISTRY, AUTH_FILE, CERT_DIR, NETNS
        source "${RINGFEED_CLUSTER_DIR:-$repo/.state/cluster}/registry.env"
        registry=$REGISTRY via=(nsenter --net="/run/netns/$NETNS" --) auth_file=$AUTH_FILE ca_dir=$CERT_DIR
    else
        registry=${1%/} via=() auth_file=${REGISTRY_AUTH_FILE:-} ca_dir=
    fi
}

use_registry_to_push() { # target: use_registry, and buildah push's options for it appended to the caller's options
    use_registry "$1"
    [[ -n $auth_file ]] && options+=(--authfile "$auth_file")
    [[ -n $ca_dir ]] && options+=(--cert-dir "$ca_dir")
    return 0
}

pushed_dir() { # registry: where push_images records what it pushed there (one file per image: id, digest, reference)
    echo "$cache/pushed/${1//\//_}"
}

push_images() { # [registry]: each image not yet pushed there as this build; its digest into $cache/pushed/<registry>/
    local registry via auth_file ca_dir options=(--quiet)
    use_registry_to_push "${1:-local}"
    local pushed image name id digest
    pushed=$(pushed_dir "$registry")
    mkdir -p "$pushed"
    for image in "${cluster_images[@]}"; do
        name=${image#localhost/ringfeed/} id=$(buildah inspect --type image --format '{{.FromImageID}}' "$image")
        [[ $(cut -d' ' -f1 "$pushed/${name%%:*}" 2>/dev/null) == "$id" ]] && continue
        "${via[@]}" buildah push "${options[@]}" --digestfile "$pushed/.digest" "$image" "docker://$registry/ringfeed/$name"
        digest=$(cat "$pushed/.digest")
        echo "$id $digest $registry/ringfeed/$name" >"$pushed/${name%%:*}"
        echo "images: pushed $registry/ringfeed/$name@$digest"
    done
}

chart() { # [registry]: the packaged chart, pinned to the images pushed there, pushed there
    local registry via auth_file ca_dir options=()
    use_registry "${1:-local}"
    [[ -n $auth_file ]] && options+=(--registry-config "$auth_file")
    [[ -n $ca_dir ]] && options+=(--ca-file "$ca_dir/ca.crt")
    "${via[@]}" "$python" "$repo/scripts/package-chart.py" --helm "$RINGFEED_CACHE/k8s/bin/helm" \
        --pushed "$(pushed_dir "$registry")" --registry "$registry" --out "$RINGFEED_CACHE/chart" --push \
        "${options[@]}"
}

forget_native_library() { # target dir: the extension module's linked outputs, so that the next build links its own
    rm -f "$1"/*/release/lib_native.so "$1"/*/release/deps/lib_native.so
}

previous() { # folder: e2e/upgrade/<version>: chart/ringfeed-<version>.tgz; python/ its ringfeed sdist, client and operator wheels
    local folder released registry via auth_file ca_dir options=(--quiet) records wheels unpacked target name id
    folder=$(cd "$1" && pwd) released=$(basename "$1")
    setup_buildah
    use_registry_to_push local
    # The release's wheelhouse: its three packages (ringfeed built from its sdist) beside this build's wheels of the
    # dependencies, whose locked versions the release shares.
    wheels=$cache/wheels-$released
    rm -rf "$wheels" && cp -al "$cache/wheels" "$wheels"
    rm -f "$wheels"/ringfeed-0*.whl "$wheels"/ringfeed_client-*.whl "$wheels"/ringfeed_operator-*.whl
    cp "$folder"/python/*.whl "$wheels/"
    unpacked=$(mktemp -d "$store/tmp/sdist.XXXXXX")
    tar -xzf "$folder/python/ringfeed-$released.tar.gz" -C "$unpacked"
    # This build's target dir: the locked dependencies are compiled there already, only the release's crate is built.
    # A path crate's cdylib has no hash in its file name, so both releases write the same lib_native.so, and cargo
    # (which compares mtimes) would take the other release's newer file as its own fresh output: it goes before and
    # after, and each build links its own.
    target=$repo/dataplane/native/target/manylinux
    forget_native_library "$target"
    (cd "$unpacked/ringfeed-$released" && PATH=$(dirname "$python"):$PATH "$python" -m maturin build --release --quiet \
        --zig --compatibility manylinux_2_28 --target-dir "$target" -i "$python" --out "$wheels" >/dev/null)
    forget_native_library "$target"
    rm -rf "$unpacked"
    for name in dataplane operator; do
        buildah bud --quiet --layers --pull=never --isolation chroot --build-arg BASE="$base" \
            -f "$here/$name/Dockerfile" -t "localhost/ringfeed/$name:$released" "$wheels" >/dev/null
    done
    for name in trainer alluxio; do  # the example trainer and the cache tier: this build's, tagged <released>
        buildah tag "localhost/ringfeed/$name:$version" "localhost/ringfeed/$name:$released"
    done
    # Its push records: the images tagged <released>, and this build's Ring images (their tags carry no release).
    records=$cache/pushed-$released
    rm -rf "$records" && mkdir -p "$records"
    cp "$(pushed_dir "$registry")"/{cass-operator,k8ssandra-client,cassandra-maac} "$records/"
    for name in "${images[@]}"; do
        id=$(buildah inspect --type image --format '{{.FromImageID}}' "localhost/ringfeed/$name:$released")
        "${via[@]}" buildah push "${options[@]}" --digestfile "$records/.digest" "localhost/ringfeed/$name:$released" \
            "docker://$registry/ringfeed/$name:$released"
        echo "$id $(cat "$records/.digest") $registry/ringfeed/$name:$released" >"$records/$name"
    done
    "${via[@]}" "$python" "$repo/scripts/package-chart.py" --helm "$RINGFEED_CACHE/k8s/bin/helm" \
        --chart "$folder/chart/ringfeed-$released.tgz" --pushed "$records" --registry "$registry" \
        --out "$RINGFEED_CACHE/chart/previous" --push ${auth_file:+--registry-config "$auth_file"} \
        ${ca_dir:+--ca-file "$ca_dir/ca.crt"}
}

kueue_image() { # Kueue for the e2e's admission test (not Ringfeed's: neither in cluster_images nor in the chart),
    # built again only when e2e/kueue changes; one build at a time (the e2e starts one in the background)
    local release
    release=$(sed -n -E 's#^(require )?[[:space:]]*sigs\.k8s\.io/kueue (v[^ ]+)( //.*)?$#\2#p' "$repo/e2e/kueue/gomod/go.mod")
    kueue=localhost/kueue/kueue:$release
    setup_buildah
    exec 9>"$cache/kueue.lock" && flock 9
    build_once kueue-go "$repo/e2e/kueue/build-go.sh" "$repo"/e2e/kueue/gomod/go.{mod,sum}
    if [[ $(cat "$cache/kueue-image.key" 2>/dev/null) != "$(cat "$cache/kueue-go.key")" ]] || ! has_image "$kueue"; then
        timed kueue static_image "$kueue" "$cache/kueue-go/kueue" /manager
        cp "$cache/kueue-go.key" "$cache/kueue-image.key"
    fi
}

kueue_push() { # the image of kueue_image into the local registry (blobs it holds are not sent again); its record
    # (id, digest, reference) in $cache/kueue.pushed
    local registry via auth_file ca_dir options=(--quiet) record=$cache/kueue.pushed
    use_registry_to_push local
    "${via[@]}" buildah push "${options[@]}" --digestfile "$record.digest" "$kueue" "docker://$registry/${kueue#localhost/}"
    echo "$(buildah inspect --type image --format '{{.FromImageID}}' "$kueue") $(cat "$record.digest")" \
        "$registry/${kueue#localhost/}" >"$record" && rm "$record.digest"
    echo "images: pushed $registry/${kueue#localhost/}"
}

archives() { # every image as an OCI archive (for `kind load image-archive`), rewritten when the image changed
    setup_buildah
    local image
    for image in "$pause" "${cluster_images[@]}"; do
        export_image "$image" "$cache/$(basename "${image%%:*}").oci.tar"
    done
    echo "images: $(du -sh --apparent-size "$cache"/*.oci.tar | awk '{printf "%s %s  ", $2, $1}')"
}

sources_key() { # everything the wheels and images are made from
    (cd "$repo" && find constraints.txt dataplane/pyproject.toml dataplane/ringfeed dataplane/native/src dataplane/native/Cargo.* \
        operator/pyproject.toml operator/ringfeed_operator client/pyproject.toml client/ringfeed_client images/base \
        images/dataplane images/operator images/trainer images/alluxio \
        -type f ! -name '*.pyc' | sort | xargs sha256sum; cat "$RINGFEED_CACHE/alluxio/.stamp") | sha256sum | cut -c1-16
}

all() {
    setup_buildah
    build_base
    timed pause build_pause
    export_image "$pause" "$cache/pause.oci.tar"
    local key name
    key=$(sources_key)
    if [[ $(cat "$cache/sources.key" 2>/dev/null) != "$key" ]]; then
        # Made by `make wheels` from the same sources already, they stay: make test's tests of them may be running.
        [[ $(cat "$cache/wheels.key" 2>/dev/null) == "$key" ]] || timed wheels build_wheels
        timed "trainer context" build_trainer_context
        timed "alluxio context" build_alluxio_context
        for name in "${images[@]}"; do timed "$name" build_image "$name"; done
        buildah rm --all >/dev/null
        rm -rf "$cache/alluxio-context"
        echo "$key" >"$cache/sources.key"
    else
        echo "images: sources unchanged since the last build"
    fi
    ring_images
    # A rebuilt image leaves its previous version and build stages untagged (~5 GB a round for the three Python
    # images): what the cluster runs is in the registry, so they go.
    buildah rmi --prune >/dev/null
    timed "push to the local registry" push_images local
}

one() { # name
    setup_buildah
    [[ -f $here/$1/Dockerfile && $1 != cassandra-maac ]] || { echo "error: no project image $1" >&2; exit 2; }
    timed wheels build_wheels
    [[ $1 == trainer ]] && timed "trainer context" build_trainer_context
    [[ $1 == alluxio ]] && timed "alluxio context" build_alluxio_context
    timed "$1" build_image "$1"
    rm -f "$cache/sources.key"
    timed "push to the local registry" push_images local
}

case "${1:-}" in
    all) all ;;
    image) one "${2:?usage: build.sh image NAME}" ;;
    push) setup_buildah; push_images "${2:-local}" ;;
    chart) chart "${2:-local}" ;;
    previous) timed "previous release" previous "${2:?usage: build.sh previous FOLDER}" ;;
    kueue-image) kueue_image ;;
    # Not `kueue_image && kueue_push`: a function on the left of && runs without errexit, and a failed Go build went
    # on to record an empty build as done.
    kueue) kueue_image; kueue_push ;;
    archives) archives ;;
    wheels) build_wheels ;;
    *) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
