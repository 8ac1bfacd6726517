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

# Everything downloaded or generated stays inside the checkout (git-ignored).
export RINGFEED_CACHE := $(CURDIR)/.cache
export RINGFEED_LOCAL_DIR := $(CURDIR)/.state/local
export CARGO_HOME ?= $(HOME)/.cargo

##@ General

help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
	  /^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Setup

deps: $(VENV)/.installed .cache/.cassandra ## Install everything: venv, native extension, Cassandra jars

$(VENV)/.installed: dataplane/pyproject.toml $(NATIVE_SOURCES)
	@scripts/require-tools.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e 'dataplane[test]'
	@touch $@

.cache/.cassandra: $(VENV)/.installed
	$(PY) -c "from ringfeed.local import ensure_cassandra_jars; print('Cassandra jars:', ensure_cassandra_jars())"
	@touch $@

k8s-binaries: ## Build etcd, Kubernetes v1.33, helm and kwok from the Go module proxy into .cache/k8s (reused)
	@e2e/cluster/build-binaries.sh

$(REFWRITER): $(shell find benchmarks/refwriter/src -name '*.rs') benchmarks/refwriter/Cargo.toml
	cargo build --quiet --release --manifest-path benchmarks/refwriter/Cargo.toml

##@ Run

demo: deps ## Local Cassandra node, a small image set, ingest, a split by patient
	$(RINGFEED) demo

local-up: deps ## Start the local ring (NODES=1)
	$(RINGFEED) local up --nodes $(or $(NODES),1)

local-down: ## Stop the local ring
	@test -x $(RINGFEED) && $(RINGFEED) local down || true

##@ Test

test: deps ## Run unit and integration tests (real Cassandra nodes on loopback)
	$(PY) -m pytest dataplane/tests

test-unit: deps ## Unit tests only (no servers)
	$(PY) -m pytest dataplane/tests/unit

##@ Benchmarks

bench-ingest: deps $(REFWRITER) ## Ringfeed ingest vs a plain Rust scylla writer (BAR lines at the end)
	$(PY) benchmarks/bench_ingest.py --refwriter $(REFWRITER)

bench-split: deps ## Splits engine on 1.28M and 10M rows vs the paper's algorithm, and the metadata scan (BAR lines)
	$(PY) benchmarks/bench_split.py

##@ Cleanup

clean: local-down ## Remove state, venv and build outputs (keeps downloaded jars)
	rm -rf .state $(VENV) dataplane/native/target benchmarks/refwriter/target

.PHONY: help deps k8s-binaries demo local-up local-down test test-unit bench-ingest bench-split clean
