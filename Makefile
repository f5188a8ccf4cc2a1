# The two commands a newcomer needs:   make demo   and   make test
# Everything installs into .venv: Python packages from PyPI, the pinned JVM jars of jvm/*/pom.xml
# from Maven Central (.venv/jars/spark for Delta and Kafka in Spark, .venv/jars/broker for a
# local Kafka broker).
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
JARS    := $(VENV)/jars
JARSTAMP := $(JARS)/.fetched
MVN     ?= mvn
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)
export PYTHONPATH := $(abspath lib):$(abspath tests)

.PHONY: wheel-check help setup demo demo-kafka kafka test test-fast test-spark test-kafka lint bench replay-sample clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[spark,dev]'
	@touch $(STAMP)

$(JARSTAMP): jvm/spark/pom.xml jvm/broker/pom.xml
	@command -v $(MVN) >/dev/null 2>&1 || { echo "make setup: Maven (mvn) is needed to fetch the pinned JVM jars of jvm/*/pom.xml (Debian: apt-get install maven); Java 17 too" >&2; exit 2; }
	@command -v java >/dev/null 2>&1 || { echo "make setup: Java 17 or later is needed (Debian: apt-get install openjdk-17-jre-headless)" >&2; exit 2; }
	@rm -rf $(JARS)/spark $(JARS)/broker
	@for folder in spark broker; do \
	  $(MVN) -q -B -Dstyle.color=never -f jvm/$$folder/pom.xml dependency:copy-dependencies \
	    -DincludeScope=runtime -DoutputDirectory=$(abspath $(JARS))/$$folder || exit 1; \
	done
	@du -sh $(JARS)/spark $(JARS)/broker
	@touch $(JARSTAMP)

setup: $(STAMP) $(JARSTAMP) ## create .venv, install the pinned Python packages and fetch the pinned jars

demo: $(STAMP) $(JARSTAMP) ## set up, then run the main job on the embedded local default
	$(BIN)/python -m controlplane demo --config conf/demo.yaml

demo-kafka: $(STAMP) $(JARSTAMP) ## the same demo over Kafka: a local broker, request and answers topics
	$(BIN)/python -m controlplane demo --config conf/demo.yaml --transport kafka

kafka: $(STAMP) $(JARSTAMP) ## run a local Kafka broker for the jobs (Ctrl-C stops it; options: KAFKA_ARGS="--topic NAME:3")
	$(BIN)/python -m controlplane kafka-broker $(KAFKA_ARGS)

replay-sample: $(STAMP) ## replay the sample events in conf/ through the group and quota cores
	$(BIN)/python -m controlplane replay group --events conf/sample/group_events.jsonl --out out/replay-group --config conf/local.yaml
	$(BIN)/python -m controlplane replay quota --events conf/sample/quota_events.jsonl --out out/replay-quota --config conf/local.yaml

lint: $(STAMP) ## ruff, mypy and the import contracts that keep the core pure
	$(BIN)/ruff check lib tests jobs bench
	$(BIN)/ruff format --check lib tests jobs bench
	$(BIN)/mypy
	$(BIN)/lint-imports

test: $(STAMP) $(JARSTAMP) lint wheel-check ## set up, lint, then run every test (unit, property, Spark, Kafka)
	$(BIN)/python -m pytest -q

wheel-check: $(STAMP) ## the wheel installs on Python 3.12 (Databricks Runtime 17.3 LTS), resolved offline of this venv
	@rm -rf build/wheel-check && mkdir -p build/wheel-check
	$(BIN)/pip wheel --quiet --no-deps . -w build/wheel-check
	$(BIN)/pip install --quiet --dry-run --ignore-installed --python-version 3.12 \
	  --only-binary=:all: --report build/wheel-check/report.json build/wheel-check/*.whl
	@$(BIN)/python -c "import json; r = json.load(open('build/wheel-check/report.json')); print('wheel-check: Python 3.12 resolves', ', '.join(i['metadata']['name'] + ' ' + i['metadata']['version'] for i in r['install']))"

test-fast: $(STAMP) ## the tests that need no JVM
	$(BIN)/python -m pytest -q -m "not spark and not kafka"

test-spark: $(STAMP) $(JARSTAMP) ## only the Spark integration tests
	$(BIN)/python -m pytest -q -m spark

test-kafka: $(STAMP) $(JARSTAMP) ## only the tests against a local Kafka broker
	$(BIN)/python -m pytest -q -m kafka

bench: $(STAMP) $(JARSTAMP) ## benchmarks that print figures (see docs/benchmarks.md)
	$(BIN)/python bench/run.py

clean: ## remove build and run outputs (keeps .venv)
	rm -rf out build dist .pytest_cache .mypy_cache .ruff_cache
