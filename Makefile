# Ringfeed — deep-learning training data in an Apache Cassandra ring.
# `make demo` and `make test` do every set-up step themselves (venv, native build, Cassandra jars).

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := $(CURDIR)/.venv
PY := $(VENV)/bin/python
RINGFEED := $(VENV)/bin/ringfeed
NATIVE_SOURCES := $(shell find dataplane/native/src -name '*.rs' 2>/dev/null) dataplane/native/Cargo.toml dataplane/native/Cargo.lock
REFWRITER := benchmarks/refwriter/target/release/refwriter
REFREADER := benchmarks/refreader/target/release/refreader
WANPROXY := benchmarks/wanproxy/target/release/wanproxy
# make bench-ring-scale RF=2: the ring's replication factor and starting size
RF ?= 1
HELM := $(CURDIR)/.cache/k8s/bin/helm
PROMTOOL := $(CURDIR)/.cache/prometheus/usr/bin/promtool
PROMETHEUS_OPERATOR_CRDS := $(CURDIR)/.cache/prometheus-operator/crds/monitoring.coreos.com_servicemonitors.yaml
# checkov in a venv of its own (its dependencies clash with the project's), exactly the versions of this list.
CHECKOV_REQUIREMENTS := scripts/checkov-requirements.txt
CHECKOV_VENV := $(CURDIR)/.cache/checkov-venv
CHECKOV := $(CHECKOV_VENV)/bin/checkov
RUST_CRATES := dataplane/native benchmarks/refreader benchmarks/refwriter benchmarks/wanproxy
# Every tracked shell script: *.sh, and regular files whose first line is a sh or bash shebang (the cluster's stubs).
SHELL_SCRIPTS = $(sort $(shell git ls-files '*.sh') $(shell git ls-files -s | awk '$$1 ~ /^100/ {print $$4}' \
  | xargs ls -d 2>/dev/null \
  | xargs awk 'FNR == 1 { if ($$0 ~ /^\#!(\/usr\/bin\/env +|\/usr\/bin\/|\/bin\/)(ba)?sh( |$$)/) print FILENAME; nextfile }'))

# Everything downloaded or generated stays inside the checkout (git-ignored).
export RINGFEED_CACHE := $(CURDIR)/.cache
# The local ring (demo, local-up, local-down): the CLI's default, ~/.local/state/ringfeed/local (docs/local-ring.md).
export CARGO_HOME ?= $(HOME)/.cargo

##@ General

help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
	  /^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Setup

deps: $(VENV)/.installed .cache/.cassandra ## Install everything: venv, native extension, Cassandra jars

# The packages declare ranges; constraints.txt (the lock) gives the venv the exact versions CI tests, build
# requirements (maturin, ziglang, setuptools) included. The extension is _native.abi3.so: one left from an older build
# under another name (_native.cpython-311-*.so) would be imported before it.
# The venv's extension is built as the wheel is (images/build.sh wheels): through zig for manylinux_2_28, in the same
# target dir, for the same interpreter. So the venv tests the code the wheel ships, and `make wheels` finds every
# crate compiled (a fresh build takes ~8 min on 2 cores, and was made twice). Without nasm libjpeg-turbo builds without
# SIMD: in a target dir of its own, which the wheel never takes.
NATIVE_TARGET = $(CURDIR)/dataplane/native/target/$(if $(shell command -v nasm),manylinux,manylinux-without-simd)
$(VENV)/.installed: client/pyproject.toml dataplane/pyproject.toml operator/pyproject.toml constraints.txt $(NATIVE_SOURCES)
	@scripts/require-tools.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --constraint constraints.txt --upgrade pip maturin ziglang setuptools
	rm -f dataplane/ringfeed/_native.cpython-*.so
	PATH=$(VENV)/bin:$$PATH MATURIN_PEP517_ARGS="--zig --compatibility manylinux_2_28 --target-dir $(NATIVE_TARGET)" \
	  $(PY) -m pip install --quiet --no-build-isolation --constraint constraints.txt \
	  -e client -e 'dataplane[test,torch]' -e operator
	@touch $@

.cache/.cassandra: $(VENV)/.installed
	$(PY) -c "from ringfeed.local import ensure_cassandra_jars; print('Cassandra jars:', ensure_cassandra_jars())"
	@touch $@

$(PROMTOOL): scripts/install-prometheus.sh
	@scripts/install-prometheus.sh .cache/prometheus

$(PROMETHEUS_OPERATOR_CRDS): scripts/fetch-prometheus-operator-crds.sh
	@scripts/fetch-prometheus-operator-crds.sh .cache/prometheus-operator/crds

$(CHECKOV_VENV)/.installed: $(CHECKOV_REQUIREMENTS)
	rm -rf $(CHECKOV_VENV)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --requirement $(CHECKOV_REQUIREMENTS)
	@touch $@

prometheus: $(PROMTOOL) $(PROMETHEUS_OPERATOR_CRDS) ## Prometheus + promtool (Debian's package) and the Prometheus Operator's CRDs, into .cache

alluxio: deps ## The cache tier's runtime: Ringfeed's Alluxio extension (+ its unit tests), Alluxio 2.9.6's jars, libfuse3
	@scripts/build-alluxio.sh $(CURDIR)/.cache/alluxio

k8s-binaries: ## Build etcd, Kubernetes v1.33 (kubectl, kube-proxy), CoreDNS, helm and kube-router from the Go module proxy
	@e2e/cluster/build-binaries.sh

kwok: ## Build kwok (simulated nodes of bench-operator-scale) from the Go module proxy
	@e2e/cluster/build-kwok.sh

node-packages: ## Debian packages of the local node and image builds: containerd, runc, CNI plugins, nftables, buildah; ipset into .cache
	@e2e/cluster/install-packages.sh

wheels: deps ## Wheels into .cache/images/wheels: ringfeed (manylinux_2_28, abi3), ringfeed-client, ringfeed-operator, their dependencies (constraints.txt)
	@images/build.sh wheels

images: deps node-packages alluxio k8s-binaries ## Build the images from images/*/Dockerfile with buildah; push them to the local cluster's registry
	@images/build.sh all

push: images ## Push every image to REGISTRY=host[:port][/path] (login: buildah login or REGISTRY_AUTH_FILE), else the local registry
	@images/build.sh push $(or $(REGISTRY),local)

chart: images ## Package the chart (CRDs copied in, images by digest) for REGISTRY, else the local registry, and push it there (oci://…/charts)
	@images/build.sh chart $(or $(REGISTRY),local)

$(REFWRITER): $(shell find benchmarks/refwriter/src -name '*.rs') benchmarks/refwriter/Cargo.toml
	cargo build --quiet --release --manifest-path benchmarks/refwriter/Cargo.toml

$(REFREADER): $(shell find benchmarks/refreader/src -name '*.rs') benchmarks/refreader/Cargo.toml
	cargo build --quiet --release --manifest-path benchmarks/refreader/Cargo.toml

$(WANPROXY): $(shell find benchmarks/wanproxy/src -name '*.rs') benchmarks/wanproxy/Cargo.toml
	cargo build --quiet --release --manifest-path benchmarks/wanproxy/Cargo.toml

##@ Run

demo: deps ## Local Cassandra node, a small image set, ingest, a split by patient, two epochs through the loader
	$(RINGFEED) demo

local-up: deps ## Start the local ring (NODES=1)
	$(RINGFEED) local up --nodes $(or $(NODES),1)

local-down: ## Stop the local ring
	@test -x $(RINGFEED) && $(RINGFEED) local down || true

##@ Local Kubernetes cluster (one node with a Pod network, kube-proxy and DNS, in its own network namespace)

cluster-up: k8s-binaries node-packages images ## Start a fresh local cluster in network namespace ringfeed-cluster
	@e2e/cluster/cluster.sh up

cluster-down: ## Stop the local cluster by PID, unmount, remove its cgroups and network namespace (images are kept)
	@e2e/cluster/cluster.sh down

cluster-status: ## What runs, the node, every Pod, the imported images
	@e2e/cluster/cluster.sh status

cluster-shell: ## A shell inside the cluster's network: kubectl, helm, Pod IPs, ClusterIPs (or: cluster.sh exec CMD)
	@e2e/cluster/cluster.sh exec bash

kind-up: images ## (machines with Docker) A kind cluster from e2e/kind.yaml with every image of `make images` loaded
	@images/build.sh archives
	kind create cluster --config e2e/kind.yaml
	for archive in .cache/images/*.oci.tar; do kind load image-archive --name ringfeed "$$archive" || exit 1; done
	@mkdir -p .state/kind && kind get kubeconfig --name ringfeed > .state/kind/kubeconfig
	@echo "RINGFEED_TEST_CLUSTER=kubeconfig KUBECONFIG=$(CURDIR)/.state/kind/kubeconfig RINGFEED_E2E_RING_PREFIX=<host address on kind's network minus its last number> $(PY) -m pytest e2e/tests"

##@ Test

# lint needs the tools, not a fresh native build: the venv is an order-only prerequisite (`make deps` refreshes it).
lint: k8s-binaries | $(VENV)/.installed ## Static checks, all run: ruff, mypy (operator, data plane), cargo clippy, helm lint, checkov, shellcheck
	@$(MAKE) --no-print-directory --keep-going lint-python lint-rust lint-chart lint-security lint-shell

lint-python: | $(VENV)/.installed ## ruff on every Python file (ruff.toml), mypy on the typed packages (mypy.ini)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

lint-rust: ## cargo clippy -D warnings on the native extension and the benchmark crates
	@for crate in $(RUST_CRATES); do \
	  echo "cargo clippy $$crate"; \
	  cargo clippy --quiet --manifest-path $$crate/Cargo.toml --all-targets -- -D warnings || exit 1; \
	done

lint-chart: k8s-binaries | $(VENV)/.installed ## helm lint --strict (defaults, e2e/values-local.yaml); the shipped dashboards are monitoring/dashboards.py's
	$(HELM) lint --strict charts/ringfeed
	$(HELM) lint --strict charts/ringfeed -f e2e/values-local.yaml
	$(PY) monitoring/dashboards.py --check

lint-security: k8s-binaries $(CHECKOV_VENV)/.installed | $(VENV)/.installed ## checkov on the chart (ci/*-values.yaml) and the operator's objects; skips: checkov-skips.yaml
	$(PY) scripts/lint-security.py --checkov $(CHECKOV) --helm $(HELM) --skips checkov-skips.yaml

lint-shell: ## shellcheck -S warning on every tracked shell script (following the files they source)
	@command -v shellcheck >/dev/null || { echo "error: shellcheck is required (Debian: apt-get install shellcheck)" >&2; exit 1; }
	shellcheck --external-sources --source-path=SCRIPTDIR -S warning $(SHELL_SCRIPTS)

# Every step is CPU-bound on 2 cores except where it waits, so the steps fill each other's idle time (a fresh clone's
# run, timed by CI: docs/development.md, "CI time"):
# - the cluster's Go build (~13 min cold) starts first, in the background at nice 10, beside the set-up;
# - the tests against Cassandra nodes on loopback (client, data plane, monitoring: ~20 CPU-minutes) run in the
#   background from the end of the set-up on (scripts/beside.sh), beside the image builds, the previous release's
#   and the chart (~35 % idle: downloads, pushes, single-threaded steps); their output comes whole when they end. They
#   need the wheels (test_wheels), so the set-up builds those (nasm first: node-packages). The e2e runs alone.
# - the operator's tests render the chart with the cluster's helm.
test: ## Run all tests: unit, real Cassandra nodes, the real local cluster
	@mkdir -p .state && { nice -n 10 e2e/cluster/build-binaries.sh >.state/k8s-binaries.log 2>&1 & }
	$(MAKE) --no-print-directory node-packages  # nasm first: the venv's extension is the wheel's build (deps)
	$(MAKE) --no-print-directory deps test-rust alluxio $(WANPROXY) prometheus wheels
	@scripts/beside.sh start cassandra-tests $(PY) -m pytest --durations=15 client/tests dataplane/tests monitoring/tests
	@status=0; { $(MAKE) --no-print-directory k8s-binaries images lint-security chart previous-release \
	  && $(PY) -m pytest --durations=5 operator/tests; } || status=$$?; \
	  scripts/beside.sh wait cassandra-tests || status=$$?; exit $$status
	$(MAKE) --no-print-directory test-e2e

test-unit: deps test-rust $(PROMTOOL) ## Unit tests only (no servers, seconds)
	$(PY) -m pytest client/tests dataplane/tests/unit operator/tests monitoring/tests

# The tests touch no Python object, so the test binary links without libpython.
test-rust: ## cargo test: the native extension's pure parts (decoding, batch assembly, request grouping, retry, ...)
	cargo test --quiet --manifest-path dataplane/native/Cargo.toml
	cargo test --quiet --manifest-path benchmarks/wanproxy/Cargo.toml

test-integration: deps alluxio $(WANPROXY) $(PROMTOOL) ## Data-plane tests against real Cassandra nodes on loopback
	$(PY) -m pytest dataplane/tests/integration

# The release the upgrade e2e starts from (test_ring.py).
PREVIOUS_RELEASE := e2e/upgrade/0.1.0

previous-release: images ## The previous release's chart and images in the local registry (the upgrade e2e starts from it)
	@images/build.sh previous $(PREVIOUS_RELEASE)

kueue: images ## (the e2e's) Kueue's controller manager built from the Go module proxy, as an image in the local registry; its chart
	@images/build.sh kueue

# Kueue's build (~11 CPU-minutes cold) runs in the background at the lowest priority, in the time the first test
# modules leave the CPU idle; the Kueue test waits for it and pushes its image (e2e/kueue).
test-e2e: deps prometheus k8s-binaries images chart previous-release ## The host stays unchanged by a cluster; then e2e/tests inside the cluster's network
	@e2e/cluster/cluster.sh down >/dev/null  # the registry that make images and make chart left running
	@mkdir -p .state && { nice -n 19 images/build.sh kueue-image >.state/kueue-image.log 2>&1 & }
	$(PY) -m pytest e2e/host
	e2e/cluster/cluster.sh run $(PY) -m pytest --durations=25 e2e/tests

##@ Benchmarks

bench-ingest: deps $(REFWRITER) ## Ringfeed ingest vs a plain Rust scylla writer (BAR lines at the end)
	$(PY) benchmarks/bench_ingest.py --refwriter $(REFWRITER)

bench-loader: deps $(REFREADER) ## Loader vs a Rust scylla reader, a Python driver loop, files on disk (BAR lines)
	$(PY) -X faulthandler benchmarks/bench_loader.py --refreader $(REFREADER)

bench-decode: deps ## Training decode: RandomResizedCrop + flip fused into the JPEG decode vs full decode then crop (BAR line)
	$(PY) benchmarks/bench_decode.py

bench-peers: deps ## Ringfeed vs torchvision DataLoader, DALI, WebDataset, MosaicML Streaming, LitData: same JPEGs, same cores (BAR lines)
	@scripts/bench-peers-venv.sh >/dev/null || echo "bench-peers: no peers' venv (above: why); their rows are left out" >&2
	$(PY) -X faulthandler benchmarks/bench_peers.py --plot docs/figures/bench-peers.png

bench-wan: deps $(WANPROXY) ## The loader's defaults at 0-100 ms of round trip through a latency-only proxy (BAR lines)
	$(PY) -X faulthandler benchmarks/bench_wan.py --wanproxy $(WANPROXY)

bench-split: deps ## Splits engine on 1.28M and 10M rows vs the paper's algorithm, and the metadata scan (BAR lines)
	$(PY) benchmarks/bench_split.py

bench-sidecar: deps ## TrainingJob handoff: loader sidecar + shared memory vs the in-process loader (BAR lines)
	$(PY) benchmarks/bench_sidecar.py

bench-train: deps ## Training steps/s fed by the sidecar vs the same loop on synthetic batches (BAR lines)
	$(PY) benchmarks/bench_sidecar.py --train

bench-cache: deps alluxio ## ImageFolder + DataLoader through the Alluxio FUSE tier (cold, warm, after a preload) vs local disk (BAR lines)
	$(PY) -X faulthandler benchmarks/bench_cache.py

bench-ring-nodes: deps ## A local ring's reads against node count, 1 → 4 → 1 under 4 loaders, nodes on CPUs of their own (16 cores: the device machine; BAR lines)
	$(PY) -X faulthandler benchmarks/bench_ring_nodes.py

bench-ring-scale: deps k8s-binaries images ## A Ring resized RF → RF+1 → RF (RF=1 default; RF=2) under a loader on the local cluster: samples/s during each step vs steady (BAR lines)
	RINGFEED_BENCH_RING_SCALE=$(CURDIR)/.state/bench/ring-scale-rf$(RF).json RINGFEED_BENCH_RING_RF=$(RF) \
	  e2e/cluster/cluster.sh run $(PY) -m pytest -q e2e/tests/test_ring.py -k bench
	$(PY) benchmarks/bench_ring_scale.py $(CURDIR)/.state/bench/ring-scale-rf$(RF).json \
	  --plot docs/bench-ring-scale-rf$(RF).svg

bench-operator-scale: deps k8s-binaries kwok chart ## The operator under COUNT (1,000) Datasets, Splits and TrainingJobs, their Pods on kwok's simulated nodes: status latency, CPU, memory, apiserver requests at rest and under churn (BAR lines)
	e2e/cluster/cluster.sh run $(PY) -X faulthandler benchmarks/bench_operator_scale.py --count $(or $(COUNT),1000)

capacity: | $(VENV)/.installed ## The capacity model (docs/capacity.md): sizing table of the worked examples, docs/capacity.svg and .csv
	$(PY) benchmarks/capacity_model.py

##@ Cleanup

clean: local-down cluster-down ## Remove state, venv and build outputs (keeps downloaded jars and cluster binaries)
	rm -rf .state $(VENV) dataplane/native/target benchmarks/refwriter/target benchmarks/refreader/target benchmarks/wanproxy/target .cache/images

.PHONY: help deps prometheus alluxio k8s-binaries kwok node-packages wheels images push chart previous-release kueue cluster-up cluster-down cluster-status cluster-shell kind-up demo local-up local-down lint lint-python lint-rust lint-chart lint-security lint-shell test test-unit test-rust test-integration test-e2e bench-ingest bench-loader bench-decode bench-peers bench-split bench-sidecar bench-train bench-wan bench-cache bench-ring-nodes bench-ring-scale bench-operator-scale capacity clean
