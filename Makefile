# Two commands for a new user: `make demo` and `make test`. Both set up
# everything they need first (.venv, dependencies, compiled extensions).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rmqfilter-installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup build harness s3proxy test test-cython test-python matrix demo bench fuzz lint docs clean

setup: $(STAMP) build

$(PY):
	$(PYTHON) -m venv $(VENV)

# The package is installed editable without its extensions (RMQFILTER_BUILD=none): `build`
# compiles each once. pip's editable build would compile them into a temporary directory that
# `build_ext --inplace` cannot reuse, so a fresh clone compiled every module twice (setup.py).
$(STAMP): $(PY) pyproject.toml setup.py
	$(PY) -m pip install -q --upgrade pip setuptools wheel "Cython>=3" numpy
	RMQFILTER_BUILD=none $(PY) -m pip install -q --no-build-isolation -e ".[spark,connect,test,bench,rocksdb]"
	touch $@

# Quick when nothing changed: Cython and setuptools only rebuild stale modules.
build: $(STAMP)
	$(PY) setup.py -q build_ext --inplace

# The whole suite under the Cython engines, then the tests of the packages that have
# kernels (bloom, selector, cq, and the real-broker checks) again under the pure-Python
# twins (RMQFILTER_PUREPYTHON=1), as msgpack does; the engine-against-twin tests
# (*_engines.py) need both engines, so they run in the first pass only. The tests marked
# `broker` hold rmqfilter against a real RocketMQ broker (tests/broker, docs/testing.md):
# harness builds it (Java 17 + Maven; quick when nothing changed), and each scenario runs
# once, into build/broker-runs/, while the other tests run; the second pass reuses them.
# The two passes run at once (the first often waits on JVMs and brokers; two cores are enough):
# the pure-Python pass writes build/test-python.log, shown once both have finished. The
# Cython pass is the longer one (it holds every test that needs the shared SparkSession: a
# second session would cost its own JVM's start and warm-up, docs/contributing.md#suite-time),
# so `test` hands slow, self-contained files that need no SparkSession (SIDE_TESTS: descriptor
# bounds over 3,000 queues, the standalone Spark cluster, the docs' examples, the store fuzz
# sweeps, the live broker, killed writers, the kernels against their twins, the conformance
# cases, corruption, live stores, ...) to the pure pass's process, still under the compiled
# engines, before that pass: both passes end with the broker checks, which wait for the scenario
# runs, so the side files run while the brokers do (docs/contributing.md#suite-time);
# `make test-cython` alone runs every file.
SIDE_TESTS = tests/cli/test_fd_bounds.py tests/spark/test_cluster.py tests/test_docs.py tests/cq/readers/test_store_fuzz.py \
	tests/broker/test_broker_live.py tests/cq/writer/test_writer_interrupted.py tests/cq/kernels/test_cq_engines.py \
	tests/cq/analyses/test_why.py tests/selector/test_selector_parser.py tests/cq/readers/test_data_path.py \
	tests/cq/writer/test_writer_redispatch.py tests/selector/test_selector_conformance.py \
	tests/cq/readers/test_store_corrupt.py tests/cli/test_cli_why.py tests/cq/store/test_live_tail.py \
	tests/cq/store/test_live_store.py
# setup and harness run side by side (-j2): the extensions compile while Maven fetches and
# compiles the broker harness (and fetches s3proxy, the object-storage tests' S3 server).
test:
	@$(MAKE) --no-print-directory -j2 setup harness s3proxy
	@mkdir -p build; \
	( $(PY) -m pytest -q $(SIDE_TESTS); b=$$?; $(MAKE) --no-print-directory test-python; a=$$?; \
	  [ $$a -eq 0 ] && [ $$b -eq 0 ] ) \
		> build/test-python.log 2>&1 & pure=$$!; \
	$(PY) -m pytest -q --durations=12 $(addprefix --ignore=,$(SIDE_TESTS)) tests; cython=$$?; \
	wait $$pure; python=$$?; \
	echo "---- $(SIDE_TESTS), then the pure-Python pass (build/test-python.log):"; \
	if [ $$python -eq 0 ]; then grep -E "^[0-9]+ passed" build/test-python.log; else cat build/test-python.log; fi; \
	[ $$cython -eq 0 ] && [ $$python -eq 0 ]

# Builds the harness against every RocketMQ release it pins (tests/broker/run.py RELEASES: 5.3.3
# and the newest, each into tests/broker/target/<version>/; docs/testing.md#releases).
# Without Java or Maven only CI stops here; elsewhere the broker tests then skip, loudly.
harness: $(STAMP)
	$(PY) tests/broker/run.py build || test -z "$$CI"

# The S3-compatible server the object-storage tests read stores from (org.gaul:s3proxy from Maven
# Central into build/s3proxy/; docs/object-storage.md). Without Java or Maven only CI stops here.
s3proxy: $(STAMP)
	$(PY) tests/s3_server.py fetch

# Generated broker runs (tests/broker/matrix.py, docs/testing.md#matrix): each seed's random
# scenario and the random checks against it; a summary names each failing seed and check.
# SEEDS="3 17 ...", default 30 fresh seeds; ROCKETMQ=VERSION is passed to run.py.
SEEDS ?=
ROCKETMQ ?=
matrix: setup harness
	$(PY) tests/broker/matrix.py $(SEEDS) $(if $(ROCKETMQ),--rocketmq $(ROCKETMQ))

test-cython:
	$(PY) -m pytest -q tests

test-python:
	RMQFILTER_PUREPYTHON=1 $(PY) -m pytest -q -m "not spark and not cluster" --ignore-glob="*_engines.py" \
		tests/bloom tests/selector tests/cq tests/broker

demo: setup
	$(VENV)/bin/rmqfilter demo

# Every benchmark beside its alternative; writes bench/RESULTS.md and bench/charts/.
bench: setup
	$(PY) bench/report.py

# Coverage-guided fuzzing (atheris) of every target under fuzz/, with the
# extensions rebuilt under AddressSanitizer + UBSan in build/asan.
FUZZ_SECONDS ?= 60
fuzz: setup
	$(PY) -m pip install -q atheris
	$(PY) fuzz/run.py --seconds $(FUZZ_SECONDS)

# The docs site (MkDocs + Material + mkdocstrings) into site/; --strict makes
# every warning (a broken link, an unlisted page, a docstring mkdocstrings
# cannot read) an error. The examples in the pages run in tests/test_docs.py.
DOCS_STAMP := $(VENV)/.rmqfilter-docs-installed
$(DOCS_STAMP): $(STAMP)
	RMQFILTER_BUILD=none $(PY) -m pip install -q --no-build-isolation -e ".[docs]"
	touch $@

docs: setup $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf build site $(VENV) */*.so */*.c */*/*.so */*/*.c cq/kernels/_layout.h */__pycache__ */*/__pycache__ tests/__pycache__ *.egg-info
