#!/usr/bin/env bash
# The local base image localhost/ringfeed/base:bookworm: a Debian bookworm root filesystem made by debootstrap from
# Debian's package archive (no registry to pull python:3.11-slim-bookworm from), with Python 3.11 and venv.
# It stands in for the BASE a Docker user gets from Docker Hub; the Dockerfiles do not change.
# The packages come from the Debian archive that this machine's own apt sources use for bookworm (sources.list or
# deb822 .sources alike, as apt reads them), so a machine behind a mirror builds from that mirror; DEBIAN_MIRROR
# overrides it.
# usage: mkbase.sh IMAGE   (run through images/build.sh, which sets up buildah's storage)
set -euo pipefail
image=$1
suite=bookworm

apt_mirror() { # the archive URI of the first apt source serving $suite main (sed reads all: no SIGPIPE)
    apt-get indextargets --no-release-info --format '$(REPO_URI)' 'Created-By: Packages' "Release: $suite" \
        'Component: main' | sed -n 1p
}
mirror=${DEBIAN_MIRROR:-$(apt_mirror)}
if [[ -z $mirror ]]; then
    echo "error: no apt source of this machine serves Debian $suite main; set DEBIAN_MIRROR to a Debian archive" >&2
    exit 1
fi
rootfs=$(mktemp -d "${TMPDIR:-/tmp}/ringfeed-base.XXXXXX")
trap 'rm -rf "$rootfs"' EXIT

debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,libssl3 "$suite" "$rootfs" "$mirror" >/dev/null
# Package caches, lists, docs and locales are of no use in an image (~275 MB → ~130 MB).
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/* \
       "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
       "$rootfs"/var/log/*.log "$rootfs"/var/cache/debconf/*-old

container=$(buildah from scratch)
mount=$(buildah mount "$container")
tar -C "$rootfs" --numeric-owner -cf - . | tar -C "$mount" --numeric-owner -xpf -
buildah umount "$container" >/dev/null
buildah config --os linux --arch amd64 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd '["/bin/bash"]' "$container"
buildah commit --rm --quiet "$container" "$image" >/dev/null
