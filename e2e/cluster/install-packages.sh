#!/usr/bin/env bash
# Debian packages of the local node and of image builds: containerd + runc (the node's runtime), the CNI bridge,
# host-local and loopback plugins, nftables (kube-proxy's rules inside the cluster's network namespace; `nft` and
# `iptables-save` also let the tests prove the host's ruleset unchanged), debootstrap (the base image's root
# filesystem) and buildah (Dockerfile builds without a Docker engine).
# Installs only what is missing; no daemon is started (the cluster scripts start containerd themselves).
set -euo pipefail

packages=(containerd runc containernetworking-plugins nftables iptables debootstrap buildah)
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
