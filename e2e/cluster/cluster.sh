#!/usr/bin/env bash
# The local single-node Kubernetes cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# containerd, kube-proxy, CoreDNS and kube-router, all started and stopped by PID inside a private network namespace
# ($NETNS) with a real Pod network: bridge cni0 (10.244.0.1/24 = node IP = Pods' gateway) + host-local IPAM, Services
# through kube-proxy (nftables mode, rules of the namespace only), cluster DNS for *.cluster.local, NetworkPolicy
# enforced by kube-router's firewall (iptables-nft rules and ipsets of the namespace only). Nothing is added to the
# host's network namespace; deleting $NETNS deletes every link, route, rule and set the cluster made.
#
#   cluster.sh up        start a fresh cluster (new etcd, PKI kept) and wait until the node is Ready
#   cluster.sh down      stop everything by PID, unmount, remove cgroups, delete the network namespace (images kept)
#   cluster.sh status    what runs, node and Pods
#   cluster.sh clean     down, then remove all cluster state including imported images
#   cluster.sh registry  start the image registry alone (TLS + htpasswd on $node_ip:5000 of the namespace), making
#                        the namespace when there is none: `make images` pushes to it, the node pulls from it; the
#                        same images anonymous and read-only on :5001, the node's mirror of ghcr.io
#   cluster.sh import    import the node's pause image (the sandbox image, built by `make images`) into containerd
#   cluster.sh exec CMD  run CMD inside the cluster's network (KUBECONFIG and kubectl/helm on PATH): Pod IPs,
#                        ClusterIPs and the apiserver on 127.0.0.1:26443 are reachable from there
#   cluster.sh run CMD   like exec, creating the network namespace first if needed (and deleting it afterwards
#                        when it made it and no cluster is left running): how `make test-e2e` runs pytest
#
# State lives in $RINGFEED_CLUSTER_DIR (default .state/cluster): pki/, kubeconfig, logs/, run/*.pid, containerd/,
# registry-auth.json (the registry's login as a docker config: the pull Secret's content). The registry's blobs live
# in $RINGFEED_CACHE/registry and outlive the cluster.
# Binaries come from `make k8s-binaries` ($RINGFEED_CACHE/k8s/bin), containerd/runc/CNI/iptables from Debian and
# ipset unpacked from Debian into $RINGFEED_CACHE/ipset (install-packages.sh). Sandbox-specific settings live in
# etc/containerd.toml and etc/kubelet-config.yaml (SANDBOX).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
state=${RINGFEED_CLUSTER_DIR:-$(cd "$here/../.." && pwd)/.state/cluster}
bin=${RINGFEED_CACHE:?set RINGFEED_CACHE (the Makefile does)}/k8s/bin
# shellcheck source=versions.env
source "$here/versions.env"
ipset_root=$RINGFEED_CACHE/ipset/$IPSET_VERSION
node=$(hostname)
apiserver=https://127.0.0.1:26443
export KUBECONFIG=$state/kubeconfig
NETNS=${RINGFEED_NETNS:-ringfeed-cluster}
node_ip=10.244.0.1           # cni0's address: the node IP, the Pods' gateway, where CoreDNS and the apiserver answer
registry=$node_ip:5000       # the image registry: what global.imageRegistry names in the e2e's values
mirror=$node_ip:5001         # the same images, anonymous and read-only: the node's mirror of $mirrored
mirrored=ghcr.io             # the chart's default registry
service_cidr=10.0.0.0/24

in_netns() { [[ $(ip netns identify $$ 2>/dev/null) == "$NETNS" ]]; }
netns_exists() { [[ -e /run/netns/$NETNS ]]; }
# Enter only the network namespace: `ip netns exec` also makes a mount namespace and remounts /sys, which hides the
# cgroup hierarchies under /sys/fs/cgroup (the kubelet then fails with "failed to find cgroup mounts").
enter() { nsenter --net="/run/netns/$NETNS" -- "$@"; }

netns_up() { # the namespace, its loopback and the bridge with the node IP; forwarding on inside it only
    netns_exists && return 0
    ip netns add "$NETNS"
    local inn=(ip netns exec "$NETNS")
    "${inn[@]}" ip link set lo up
    # The CNI bridge plugin would make cni0 at the first Pod; the kubelet needs its node IP on a link before that.
    "${inn[@]}" ip link add cni0 type bridge
    "${inn[@]}" ip addr add "$node_ip/24" dev cni0
    "${inn[@]}" ip link set cni0 up
    # No default route: nothing outside exists. Processes of the namespace itself (tests, kubectl, an operator run
    # by hand) reach ClusterIPs through cni0, where kube-proxy translates them to Pod IPs.
    "${inn[@]}" ip route add "$service_cidr" dev cni0 src "$node_ip"
    # Per-namespace settings (the host's stay as they are): Pod -> ClusterIP -> Pod is forwarded, and traffic
    # bridged between two Pods passes kube-proxy's rules.
    "${inn[@]}" sysctl -qw net.ipv4.ip_forward=1
    "${inn[@]}" sysctl -qw net.bridge.bridge-nf-call-iptables=1
    # Pods get IPv6 link-local addresses (fe80::) from the kernel, but the NetworkPolicy engine filters IPv4 only (the
    # Pods have no other IPv6 address): a server listening on :: would otherwise be reachable from every Pod on its
    # link-local address whatever the policies say. IPv6 frames are dropped on the bridge, between Pods and to the node.
    "${inn[@]}" nft -f - <<'EOF'
table bridge ringfeed-ipv4-only {
    chain forward { type filter hook forward priority 0; ether type ip6 drop; }
    chain input { type filter hook input priority 0; ether type ip6 drop; }
}
EOF
}

netns_down() { ip netns del "$NETNS" 2>/dev/null || true; }

ctr_() { ctr --address "$state/containerd/containerd.sock" -n k8s.io "$@"; }
kubectl_() { "$bin/kubectl" --kubeconfig "$state/kubeconfig" "$@"; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
alive() { [[ -f $state/run/$1.pid ]] && kill -0 "$(cat "$state/run/$1.pid")" 2>/dev/null; }
wait_for() { # description, tries (×0.1 s), command…
    local what=$1 tries=$2; shift 2
    for ((i = 0; i < tries; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "error: $what did not come up; last log lines:" >&2
    return 1
}
start() { # name, command… — runs in the background, PID into run/<name>.pid, output into logs/<name>.log
    local name=$1; shift
    nohup "$@" >"$state/logs/$name.log" 2>&1 &
    echo $! >"$state/run/$name.pid"
}

preflight() {
    [[ -x $bin/kube-apiserver && -x $bin/kube-proxy && -x $bin/coredns && -x $bin/kube-router ]] || { echo "error: no cluster binaries in $bin; run: make k8s-binaries" >&2; exit 1; }
    [[ -x $ipset_root/usr/sbin/ipset ]] || { echo "error: no ipset in $ipset_root; run: make node-packages" >&2; exit 1; }
    in_netns || { echo "error: not inside network namespace $NETNS (use: cluster.sh up)" >&2; exit 1; }
    command -v containerd >/dev/null || { echo "error: containerd missing; run: e2e/cluster/install-packages.sh" >&2; exit 1; }
    [[ $(id -u) -eq 0 ]] || { echo "error: the node needs root (containerd, runc, mounts)" >&2; exit 1; }
    # The apiserver reaches the kubelet by the node's host name, which must resolve to loopback.
    local addr; addr=$(getent hosts "$node" | awk '{print $1; exit}')
    [[ $addr == 127.* ]] || { echo "error: host name $node resolves to '${addr:-nothing}', not 127.x (add it to /etc/hosts)" >&2; exit 1; }
    if alive apiserver; then echo "error: a cluster already runs from $state; run: make cluster-down" >&2; exit 1; fi
    local port
    for port in 23790 26443 10250; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "error: 127.0.0.1:$port is in use (another cluster from another checkout?); stop it first" >&2; exit 1
        fi
    done
}

make_pki() { # once per state folder: CA, apiserver and kubelet-client certificates, service-account key, tokens
    # (a state folder made before kube-proxy, CoreDNS and kube-router joined gets new certificates and tokens)
    [[ -f $state/pki/.complete && -f $state/kube-router.kubeconfig ]] && return 0
    local p=$state/pki
    rm -rf "$p" && mkdir -p "$p" && chmod 700 "$p"
    openssl genrsa -out "$p/ca.key" 2048 2>/dev/null
    openssl req -x509 -new -nodes -key "$p/ca.key" -sha256 -days 3650 -subj "/CN=ringfeed-local-ca" -out "$p/ca.crt"
    cert() { # name, subject, extendedKeyUsage, [subjectAltName]
        openssl genrsa -out "$p/$1.key" 2048 2>/dev/null
        openssl req -new -key "$p/$1.key" -subj "$2" -out "$p/$1.csr"
        { echo "basicConstraints=CA:FALSE"; echo "keyUsage=digitalSignature,keyEncipherment"
          echo "extendedKeyUsage=$3"; [[ -n ${4:-} ]] && echo "subjectAltName=$4"; } >"$p/$1.ext"
        openssl x509 -req -in "$p/$1.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 3650 -sha256 \
            -extfile "$p/$1.ext" -out "$p/$1.crt" 2>/dev/null
    }
    cert apiserver "/CN=kube-apiserver" serverAuth \
        "IP:127.0.0.1,IP:10.0.0.1,IP:$node_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
    openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
    token() { openssl rand -hex 16; }
    local admin kcm sched kubelet proxy dns netpol
    admin=$(token) kcm=$(token) sched=$(token) kubelet=$(token) proxy=$(token) dns=$(token) netpol=$(token)
    # kube-proxy is bound to system:node-proxier by the default RBAC; CoreDNS gets etc/cluster-dns.yaml's role,
    # kube-router etc/network-policy.yaml's.
    cat >"$p/tokens.csv" <<EOF
$admin,admin,admin,"system:masters"
$kcm,system:kube-controller-manager,kcm
$sched,system:kube-scheduler,sched
$kubelet,system:node:$node,system:node:$node,"system:nodes"
$proxy,system:kube-proxy,kube-proxy
$dns,system:coredns,coredns
$netpol,system:kube-router,kube-router
EOF
    kubeconfig() { # file, user, token
        local f=$state/$1
        rm -f "$f"
        kubectl_ --kubeconfig "$f" config set-cluster ringfeed-local --server=$apiserver \
            --certificate-authority="$p/ca.crt" --embed-certs=true >/dev/null
        kubectl_ --kubeconfig "$f" config set-credentials "$2" --token="$3" >/dev/null
        kubectl_ --kubeconfig "$f" config set-context ringfeed-local --cluster=ringfeed-local --user="$2" >/dev/null
        kubectl_ --kubeconfig "$f" config use-context ringfeed-local >/dev/null
        chmod 600 "$f"
    }
    kubeconfig kubeconfig admin "$admin"
    kubeconfig kcm.kubeconfig system:kube-controller-manager "$kcm"
    kubeconfig scheduler.kubeconfig system:kube-scheduler "$sched"
    kubeconfig kubelet.kubeconfig "system:node:$node" "$kubelet"
    kubeconfig kube-proxy.kubeconfig system:kube-proxy "$proxy"
    kubeconfig coredns.kubeconfig system:coredns "$dns"
    kubeconfig kube-router.kubeconfig system:kube-router "$netpol"
    touch "$p/.complete"
}

registry_pki() { # the registry's certificate (cluster CA, SAN = node IP), a random password, its htpasswd line
    local p=$state/pki
    [[ -f $p/registry.crt && -f $state/registry-auth.json ]] && return 0
    openssl genrsa -out "$p/registry.key" 2048 2>/dev/null
    openssl req -new -key "$p/registry.key" -subj "/CN=ringfeed-local-registry" -out "$p/registry.csr"
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:%s\n' \
        "$node_ip" >"$p/registry.ext"
    openssl x509 -req -in "$p/registry.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 3650 -sha256 \
        -extfile "$p/registry.ext" -out "$p/registry.crt" 2>/dev/null
    local password; password=$(openssl rand -hex 16)
    echo "$password" | "$bin/registry-htpasswd" ringfeed >"$p/registry.htpasswd"
    echo "ringfeed:$password" >"$p/registry.login"
    # The login as a docker config (buildah's and helm's --authfile, the content of a kubernetes.io/dockerconfigjson
    # Secret) and the CA as buildah's --cert-dir wants it.
    printf '{"auths": {"%s": {"auth": "%s"}}}\n' "$registry" "$(printf 'ringfeed:%s' "$password" | base64 -w0)" \
        >"$state/registry-auth.json"
    chmod 600 "$state/registry-auth.json" "$p/registry.htpasswd" "$p/registry.login"
    mkdir -p "$state/registry-certs" && cp "$p/ca.crt" "$state/registry-certs/ca.crt"
}

registry_up() { # inside the namespace: the registry and its read-only mirror, unless they run; ready when /v2/ answers
    alive registry && alive registry-mirror && return 0
    mkdir -p "$state"/{logs,run,etc} "$RINGFEED_CACHE/registry"
    make_pki
    registry_pki
    local name port read_only auth
    for name in registry registry-mirror; do
        alive "$name" && continue
        port=5000 read_only=false auth=""
        [[ $name == registry-mirror ]] && port=5001 read_only=true auth="# "
        sed -e "s#@STATE@#$state#g" -e "s#@NODE_IP@#$node_ip#g" -e "s#@DATA@#$RINGFEED_CACHE/registry#g" \
            -e "s#@PORT@#$port#g" -e "s#@READONLY@#$read_only#g" -e "s|@AUTH@|$auth|g" \
            "$here/etc/registry.yml" >"$state/etc/$name.yml"
        # No OpenTelemetry exporter: it would post traces to localhost:4318, where nothing listens.
        start "$name" env OTEL_TRACES_EXPORTER=none "$bin/registry" serve "$state/etc/$name.yml"
    done
    wait_for registry 100 curl -sf --cacert "$state/pki/ca.crt" -u "$(cat "$state/pki/registry.login")" "https://$registry/v2/" \
        || { tail -20 "$state/logs/registry.log"; exit 1; }
    wait_for registry-mirror 100 curl -sf --cacert "$state/pki/ca.crt" "https://$mirror/v2/" \
        || { tail -20 "$state/logs/registry-mirror.log"; exit 1; }
}

registry_cmd() { # from the host or inside: the namespace (if needed) and the registry
    if ! in_netns; then
        netns_up
        enter "$0" registry
        return
    fi
    [[ -x $bin/registry ]] || { echo "error: no registry in $bin; run: make k8s-binaries" >&2; exit 1; }
    registry_up
    # What pushes need (images/build.sh push sources it): address, login, CA, the namespace it is reached from.
    printf 'REGISTRY=%s\nAUTH_FILE=%s\nCERT_DIR=%s\nNETNS=%s\n' "$registry" "$state/registry-auth.json" \
        "$state/registry-certs" "$NETNS" >"$state/registry.env"
    echo "registry https://$registry (login: $state/registry-auth.json, CA: $state/pki/ca.crt)"
}

render_config() {
    mkdir -p "$state/etc/cni" "$state/cni-bin" "$state/run"
    local f
    for f in containerd.toml kubelet-config.yaml cni/10-ringfeed-bridge.conflist; do
        sed -e "s#@STATE@#$state#g" "$here/etc/$f" >"$state/etc/$f"
    done
    sed -e "s#@STATE@#$state#g" -e "s#@NODE_IP@#$node_ip#g" "$here/etc/Corefile" >"$state/etc/Corefile"
    local name server
    for name in "$registry" "$mirrored"; do
        server=$registry && [[ $name == "$mirrored" ]] && server=$mirror
        mkdir -p "$state/etc/certs.d/$name"
        sed -e "s#@STATE@#$state#g" -e "s#@SERVER@#$server#g" "$here/etc/registry-hosts.toml" \
            >"$state/etc/certs.d/$name/hosts.toml"
    done
    for f in bridge host-local loopback; do ln -sfn "/usr/lib/cni/$f" "$state/cni-bin/$f"; done
    # kube-router's tools, first on its PATH: the nftables-based iptables (its rules then sit beside kube-proxy's
    # nftables tables, all in `nft list ruleset`) and Debian's ipset from the cache.
    local tools=$state/netpol-bin
    mkdir -p "$tools"
    for f in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
        ln -sfn "/usr/sbin/${f/tables/tables-nft}" "$tools/$f"
    done
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$(echo "$ipset_root"/usr/lib/*-linux-gnu)" \
        "$ipset_root/usr/sbin/ipset" >"$tools/ipset"
    chmod +x "$tools/ipset"
}

up() {
    if ! in_netns; then  # from the host: make the namespace, then do the rest inside it
        netns_up
        enter "$0" up
        return
    fi
    preflight
    local t0 t
    t0=$(date +%s%N)
    mkdir -p "$state"/{logs,run}
    make_pki
    render_config
    registry_up
    # A fresh cluster each time: API objects and kubelet state go, pulled images stay in containerd's store.
    rm -rf "$state/etcd" "$state/kubelet" "$state/pod-logs" "$state/run/ipam" "$state/kube-cache"

    t=$(date +%s%N)
    start containerd /usr/bin/containerd --config "$state/etc/containerd.toml"
    wait_for containerd 100 ctr_ version || { tail -20 "$state/logs/containerd.log"; exit 1; }
    import_pause
    echo "containerd        $(ms_since "$t") ms"

    t=$(date +%s%N)
    start etcd "$bin/etcd" --name ringfeed-local --data-dir "$state/etcd" \
        --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
        --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
        --initial-cluster ringfeed-local=http://127.0.0.1:23800 --initial-cluster-state new \
        --listen-metrics-urls http://127.0.0.1:23810 --quota-backend-bytes 1073741824 --unsafe-no-fsync
    wait_for etcd 100 curl -sf http://127.0.0.1:23790/health || { tail -20 "$state/logs/etcd.log"; exit 1; }
    local p=$state/pki
    start apiserver "$bin/kube-apiserver" --etcd-servers=http://127.0.0.1:23790 \
        --bind-address=0.0.0.0 --secure-port=26443 --advertise-address="$node_ip" \
        --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
        --client-ca-file="$p/ca.crt" --token-auth-file="$p/tokens.csv" \
        --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
        --kubelet-client-certificate="$p/kubelet-client.crt" --kubelet-client-key="$p/kubelet-client.key" \
        --kubelet-preferred-address-types=Hostname,InternalIP \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
        --service-cluster-ip-range="$service_cidr" --allow-privileged=true
    # 0.0.0.0 is lo + cni0 of the cluster's namespace; the lease reconciler publishes $node_ip:26443 behind Service
    # kubernetes (10.0.0.1:443), so in-cluster clients need no KUBERNETES_SERVICE_* override.
    wait_for kube-apiserver 600 kubectl_ get --raw /readyz || { tail -20 "$state/logs/apiserver.log"; exit 1; }
    start controller-manager "$bin/kube-controller-manager" --kubeconfig="$state/kcm.kubeconfig" \
        --authentication-kubeconfig="$state/kcm.kubeconfig" --authorization-kubeconfig="$state/kcm.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port=26257 --leader-elect=false \
        --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
        --use-service-account-credentials=true
    start scheduler "$bin/kube-scheduler" --kubeconfig="$state/scheduler.kubeconfig" \
        --authentication-kubeconfig="$state/scheduler.kubeconfig" --authorization-kubeconfig="$state/scheduler.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port=26259 --leader-elect=false
    echo "control plane     $(ms_since "$t") ms"

    t=$(date +%s%N)
    mkdir -p "$state/kubelet"
    # The cache tiers' FUSE mounts (the chart's cache.hostDir) live under a shared mount: a FUSE Pod's Bidirectional
    # mount then reaches the node, and the trainers' HostToContainer mounts (this machine's / is a private mount).
    mkdir -p "$state/cache-mounts"
    mountpoint -q "$state/cache-mounts" || mount --bind "$state/cache-mounts" "$state/cache-mounts"
    mount --make-rshared "$state/cache-mounts"
    # The no-iptables stubs come first on PATH: belt and braces on top of makeIPTablesUtilChains: false.
    PATH=$here/etc/no-iptables:$PATH start kubelet "$bin/kubelet" --config="$state/etc/kubelet-config.yaml" \
        --kubeconfig="$state/kubelet.kubeconfig" --root-dir="$state/kubelet" --cert-dir="$state/kubelet/pki" \
        --hostname-override="$node" --node-ip="$node_ip" --v=1
    node_ready() {
        [[ $(kubectl_ get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
    }
    wait_for "node $node" 600 node_ready || { tail -20 "$state/logs/kubelet.log"; exit 1; }
    # Pods are admitted only once the controller-manager has made the namespace's default ServiceAccount.
    wait_for "default ServiceAccount" 300 kubectl_ get serviceaccount default || exit 1
    echo "kubelet → Ready   $(ms_since "$t") ms"

    t=$(date +%s%N)
    # Conntrack sizes are left alone (0): they are global sysctls of the kernel, as kind does for a kube-proxy in a
    # network namespace.
    start kube-proxy "$bin/kube-proxy" --kubeconfig="$state/kube-proxy.kubeconfig" --hostname-override="$node" \
        --proxy-mode=nftables --cluster-cidr=10.244.0.0/16 --bind-address="$node_ip" \
        --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
        --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 --v=1
    kubectl_ apply -f "$here/etc/cluster-dns.yaml" -f "$here/etc/network-policy.yaml" >/dev/null
    start coredns "$bin/coredns" -conf "$state/etc/Corefile"
    wait_for coredns 300 curl -sf http://127.0.0.1:8181/ready || { tail -20 "$state/logs/coredns.log"; exit 1; }
    wait_for kube-proxy 300 curl -sf http://127.0.0.1:10256/healthz || { tail -20 "$state/logs/kube-proxy.log"; exit 1; }
    echo "kube-proxy + DNS  $(ms_since "$t") ms"

    t=$(date +%s%N)
    # NetworkPolicy: kube-router's firewall alone (no routing, no service proxy), before any Pod exists. Its health
    # server listens on :20244 of the namespace (no flag binds it to one address).
    PATH=$state/netpol-bin:$PATH start kube-router "$bin/kube-router" --kubeconfig="$state/kube-router.kubeconfig" \
        --run-firewall=true --run-router=false --run-service-proxy=false --hostname-override="$node" \
        --service-cluster-ip-range="$service_cidr" --health-port=20244 --v=1
    # Ready once its first full sync is in: the final ACCEPT of what the policies let through ends its FORWARD chain.
    netpol_ready() {
        curl -sf http://127.0.0.1:20244/healthz && iptables-nft -S KUBE-ROUTER-FORWARD | grep -q 'explicitly ACCEPT'
    }
    wait_for kube-router 300 netpol_ready || { tail -20 "$state/logs/kube-router.log"; exit 1; }
    echo "NetworkPolicy     $(ms_since "$t") ms"
    echo "cluster up in $(ms_since "$t0") ms; export KUBECONFIG=$state/kubeconfig"
}

import_pause() { # the sandbox image, part of the node (as a node image ships it); unless containerd has this build
    local archive=$RINGFEED_CACHE/images/pause.oci.tar imported=$state/containerd/imported-pause
    [[ -f $archive ]] || { echo "error: no $archive; run: make images" >&2; exit 1; }
    [[ $(cat "$imported" 2>/dev/null) == "$(cat "$archive.id")" ]] && return 0
    ctr_ images import "$archive" >/dev/null
    cat "$archive.id" >"$imported"
}

stop() { # name: SIGTERM, up to 10 s, then SIGKILL
    local f=$state/run/$1.pid pid
    [[ -f $f ]] || return 0
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$f"
}

down() {
    if ! in_netns; then  # from the host: stop the cluster inside its namespace, then delete the namespace
        if netns_exists; then enter "$0" down; fi
        netns_down
        return
    fi
    [[ -d $state ]] || return 0
    # Controllers first, so nothing recreates the Pods; then the kubelet tears them down cleanly (it unmounts
    # their emptyDir and projected volumes).
    stop controller-manager
    stop scheduler
    stop coredns
    if alive kubelet && alive apiserver; then
        kubectl_ delete pods --all --all-namespaces --grace-period=1 --wait=true --timeout=30s >/dev/null 2>&1 || true
    fi
    stop kubelet
    stop kube-proxy  # its nftables rules live in the namespace and go with it
    stop kube-router  # so do its iptables rules and ipsets (its --cleanup-config crashes in v2.1.0; not needed)
    if alive containerd; then
        local id
        for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s KILL "$id" >/dev/null 2>&1 || true; done
        sleep 0.5
        for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true; done
        for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$id" >/dev/null 2>&1 || true; done
    fi
    stop containerd
    local name
    for name in apiserver etcd registry registry-mirror; do stop "$name"; done
    # Shims that outlived containerd: only those started for this state folder's socket.
    local pid
    for pid in $(pgrep -f containerd-shim-runc-v2 || true); do
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-address $state/containerd/containerd.sock" \
            && kill -9 "$pid" 2>/dev/null || true
    done
    local m
    for m in $(awk '{print $2}' /proc/mounts | grep "^$state/" | sort -r); do umount "$m" 2>/dev/null || umount -l "$m"; done
    # cgroups the kubelet made (cgroup v1: one tree per controller), deepest first.
    local h
    for h in /sys/fs/cgroup/*/; do
        [[ -d $h/kubepods ]] && find "$h/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
    # Host paths the kubelet and containerd write whatever their configured roots.
    rm -rf /var/lib/kubelet/device-plugins /var/lib/kubelet/pki /var/lib/cni/results /var/lib/cni/networks /run/containerd \
        "$state/run/ipam"
    rmdir /var/lib/kubelet /var/lib/cni 2>/dev/null || true
    rm -f /var/log/containers/*.log && rmdir /var/log/containers 2>/dev/null || true
    if ls -d /sys/fs/cgroup/*/kubepods >/dev/null 2>&1; then echo "warning: kubepods cgroups left behind" >&2; fi
    echo "cluster down"
}

status() {
    local name
    for name in registry registry-mirror containerd etcd apiserver controller-manager scheduler kubelet kube-proxy coredns kube-router; do
        if alive "$name"; then printf '%-20s running (pid %s)\n' "$name" "$(cat "$state/run/$name.pid")"
        else printf '%-20s stopped\n' "$name"; fi
    done
    if alive apiserver && netns_exists; then
        echo; enter "$bin/kubectl" --kubeconfig "$state/kubeconfig" get nodes -o wide
        echo; enter "$bin/kubectl" --kubeconfig "$state/kubeconfig" get pods --all-namespaces -o wide
        echo; echo "enter its network: e2e/cluster/cluster.sh exec bash   (or: make cluster-shell)"
    fi
    if alive containerd; then echo; ctr_ images ls -q | grep -v '^sha256:'; fi
}

clean() {
    down
    rm -rf "$state"
    echo "cluster state removed"
}

exec_in() { # CMD…: inside the namespace, with the cluster's kubeconfig and tools
    netns_exists || { echo "error: no cluster network namespace $NETNS; run: make cluster-up" >&2; exit 1; }
    enter env KUBECONFIG="$state/kubeconfig" KUBECACHEDIR="$state/kube-cache" PATH="$bin:$PATH" "$@"
}

run_in() { # CMD…: like exec_in, making the namespace for the command when there is none
    local made=0 rc=0
    netns_exists || { netns_up; made=1; }
    exec_in "$@" || rc=$?
    if ((made)); then
        if alive apiserver || alive registry || alive registry-mirror; then echo "note: the cluster or its registry still runs in $NETNS (make cluster-down stops it)"
        else netns_down; fi
    fi
    return $rc
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    clean) clean ;;
    registry) registry_cmd ;;
    import) import_pause ;;
    exec) shift; exec_in "$@" ;;
    run) shift; run_in "$@" ;;
    *) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
