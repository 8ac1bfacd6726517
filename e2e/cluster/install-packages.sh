#!/usr/bin/env bash
# Debian packages of the local node and of image builds: containerd + runc (the node's runtime), the CNI bridge,
# host-local and loopback plugins, nftables (kube-proxy's rules inside the cluster's network namespace; `nft` and
# `iptables-save` also let the tests prove the host's ruleset unchanged), iptables (kube-router's NetworkPolicy rules,
# through iptables-nft, inside that namespace), debootstrap (the base image's root filesystem) and buildah
# (Dockerfile builds without a Docker engine), nasm (the shipped wheel's libjpeg-turbo with its SIMD, images/build.sh).
# Installs only what is missing; no daemon is started (the cluster scripts start containerd themselves).
# ipset (kube-router's sets, made inside the cluster's network namespace only) is not installed: Debian's ipset and
# libipset13 are unpacked into $RINGFEED_CACHE/ipset/<version>, which cluster.sh puts on kube-router's PATH.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

unpack_ipset() { # Debian's ipset $IPSET_VERSION and its library into the cache, once
    local target=${RINGFEED_CACHE:?set RINGFEED_CACHE (the Makefile does)}/ipset/$IPSET_VERSION
    [[ -x $target/usr/sbin/ipset ]] && return 0
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "node packages: unpacking Debian's ipset $IPSET_VERSION into $target …"
    download() { (cd "$work" && apt-get download -qq "ipset=$IPSET_VERSION" "libipset13=$IPSET_VERSION" 2>/dev/null); }
    # A fresh machine may have no package lists yet: fetch them once (root only) and try again.
    download || { [[ $(id -u) -eq 0 ]] && apt-get update -qq && download; } || {
        echo "error: apt-get download ipset=$IPSET_VERSION failed: is Debian's package index reachable (apt-get update)?" >&2
        return 1
    }
    mkdir -p "$work/root"
    local deb
    for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
    LD_LIBRARY_PATH=$(echo "$work"/root/usr/lib/*-linux-gnu) "$work/root/usr/sbin/ipset" --version >/dev/null
    # Other versions are of no further use.
    rm -rf "$(dirname "$target")" && mkdir -p "$(dirname "$target")" && mv "$work/root" "$target"
}
unpack_ipset

packages=(containerd runc containernetworking-plugins nftables iptables debootstrap buildah nasm)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
    echo "error: installing ${missing[*]} needs root (apt-get)" >&2
    exit 1
fi
echo "node packages: installing ${missing[*]} …"
started=$(date +%s)
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "node packages: installed in $(( $(date +%s) - started )) s"
