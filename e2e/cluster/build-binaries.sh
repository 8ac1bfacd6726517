#!/usr/bin/env bash
# Build the local cluster's binaries from the Go module proxy (no release downloads are reachable here):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl, CoreDNS, helm,
# kube-router (the NetworkPolicy engine) and the image registry (CNCF Distribution) with its htpasswd writer. kwok,
# which only make bench-operator-scale runs, is build-kwok.sh's.
#
# Output: $RINGFEED_CACHE/k8s/<key>/bin, where <key> hashes the pinned wrapper modules and this script, and a
# symlink $RINGFEED_CACHE/k8s/bin pointing at it. A key that is already built is reused at once; changing a pinned
# version (a go.mod/go.sum under gomod/) changes the key and builds anew.
# Costs measured on 2 cores: ~10 min cold for the Kubernetes binaries (GOCACHE grows by ~4 GB), ~2 min for CoreDNS,
# ~1.5 min for kube-router, seconds when warm.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=keyed-build.sh
source "$here/keyed-build.sh"

pinned=("$here"/{build-binaries.sh,keyed-build.sh,versions.env} "$here"/gomod/*/main.go)
for module in etcd helm coredns kube-router registry k8s; do
    pinned+=("$here/gomod/$module/go.mod" "$here/gomod/$module/go.sum")
done
keyed_build_key "${RINGFEED_CACHE:?set RINGFEED_CACHE (the Makefile does)}/k8s" "${pinned[@]}"
if keyed_build_reused; then
    echo "k8s binaries: reusing $out/bin (Kubernetes v$K8S_VERSION, etcd v$ETCD_VERSION, CoreDNS v$COREDNS_VERSION, helm v$HELM_VERSION, kube-router v$KUBE_ROUTER_VERSION, registry v$REGISTRY_VERSION)"
    exit 0
fi
keyed_build_start
step() { echo "k8s binaries: $1 …"; }

# Kubernetes reports its version from these variables; without them it says v0.0.0-master.
minor=${K8S_VERSION#*.}; minor=${minor%%.*}
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=2025-01-01T00:00:00Z"
done

step "etcd v$ETCD_VERSION"
(cd "$here/gomod/etcd" && go build -trimpath -o "$out/bin/etcd" .)
# helm template and lint assume the Kubernetes of the client-go they are built with (as helm's own Makefile sets);
# unset, they assume 1.20 and refuse a chart that needs a newer one (kubeVersion).
helm_kube=""
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    helm_kube+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
done
step "helm v$HELM_VERSION"
(cd "$here/gomod/helm" && go build -trimpath -o "$out/bin/helm" \
    -ldflags "-X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean $helm_kube" \
    helm.sh/helm/v3/cmd/helm)
step "CoreDNS v$COREDNS_VERSION (cluster-DNS plugins only)"
(cd "$here/gomod/coredns" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/bin/coredns" .)
step "kube-router v$KUBE_ROUTER_VERSION (run as the NetworkPolicy engine only)"
(cd "$here/gomod/kube-router" && CGO_ENABLED=0 go build -trimpath -o "$out/bin/kube-router" \
    -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=v$KUBE_ROUTER_VERSION -X github.com/cloudnativelabs/kube-router/v2/pkg/version.BuildDate=2024-03-02T21:45:54Z" \
    github.com/cloudnativelabs/kube-router/v2/cmd/kube-router)
step "registry v$REGISTRY_VERSION (CNCF Distribution) and registry-htpasswd"
(cd "$here/gomod/registry" && CGO_ENABLED=0 go build -trimpath -o "$out/bin/registry" \
    -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=v$REGISTRY_VERSION" \
    github.com/distribution/distribution/v3/cmd/registry \
    && go build -trimpath -ldflags "-s -w" -o "$out/bin/registry-htpasswd" .)
step "Kubernetes v$K8S_VERSION: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl (cold: ~10 min)"
# -s -w as Kubernetes' own release builds: no symbol table or DWARF, a shorter link of six large binaries.
(cd "$here/gomod/k8s" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kubectl)

keyed_build_done
echo "k8s binaries: built in $(( $(date +%s) - started )) s into $out/bin ($(du -sh "$out/bin" | cut -f1))"
