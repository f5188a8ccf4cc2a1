# The two commands a newcomer needs:   make demo   and   make test
# Everything installs into .venv: Python packages from PyPI (pinned in pyproject.toml and
# constraints/spark.txt), the pinned JVM jars of jvm/*/pom.xml from Maven Central
# (.venv/jars/spark for Delta and Kafka in Spark, .venv/jars/broker for a local Kafka broker).
# The second test leg, Spark 4.0 (Databricks Runtime 17.3 LTS), has a venv of its own,
# .venv-spark40: Python 3.12 when there is one, constraints/spark40.txt, jvm/spark40/pom.xml.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
JARS    := $(VENV)/jars
JARSTAMP := $(JARS)/.fetched
MVN     ?= mvn
VENV40  := .venv-spark40
BIN40   := $(VENV40)/bin
STAMP40 := $(VENV40)/.installed
JARS40  := $(VENV40)/jars
JARSTAMP40 := $(JARS40)/.fetched
# Databricks Runtime 17.3 LTS runs Python 3.12: the leg takes the first 3.12 it finds, else $(PY).
PY40    ?= python3.12
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)
export PYTHONPATH := $(abspath lib):$(abspath tests)

.PHONY: class-archive class-archive-spark40 wheel-check help setup setup-spark40 test-spark40 test-main demo demo-kafka kafka test test-fast test-spark test-kafka lint bench replay-sample clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml constraints/spark.txt
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[spark,dev]' -c constraints/spark.txt
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

# The local JVM's class archive (docs/engine.md, "The JVM's class archive"): a quicker Spark
# start. Run every time: it returns at once when the archive for this Java and class path is
# there, and builds it (about 40 s) when not. An optimisation only: a failure says why (a
# failed build is not tried again until `python -m controlplane class-archive --force`), and
# local Spark sessions start as before.
class-archive: $(STAMP) $(JARSTAMP) ## build the local JVM's class archive, unless it is there
	@$(BIN)/python -m controlplane class-archive \
	  || echo "make: no JVM class archive; local Spark sessions start as before (a few seconds slower)" >&2

setup: $(STAMP) $(JARSTAMP) class-archive ## create .venv, install the pinned Python packages, fetch the pinned jars, build the JVM's class archive

$(STAMP40): pyproject.toml constraints/spark40.txt
	@test -x $(BIN40)/python || for py in $(PY40) $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(PY) python3; do \
	  "$$py" -c 'import sys; sys.exit(sys.version_info[:2] not in ((3, 11), (3, 12)))' 2>/dev/null \
	    && "$$py" -m venv $(VENV40) && break; \
	done
	@$(BIN40)/python -c 'import sys; print("$(VENV40): Python", sys.version.split()[0])'
	$(BIN40)/pip install --quiet --upgrade pip
	$(BIN40)/pip install --quiet -e '.[spark,dev]' -c constraints/spark40.txt
	@touch $(STAMP40)

$(JARSTAMP40): jvm/spark40/pom.xml jvm/broker/pom.xml
	@command -v $(MVN) >/dev/null 2>&1 || { echo "make setup-spark40: Maven (mvn) and Java 17 are needed, as for make setup" >&2; exit 2; }
	@rm -rf $(JARS40)/spark $(JARS40)/broker
	$(MVN) -q -B -Dstyle.color=never -f jvm/spark40/pom.xml dependency:copy-dependencies \
	  -DincludeScope=runtime -DoutputDirectory=$(abspath $(JARS40))/spark
	$(MVN) -q -B -Dstyle.color=never -f jvm/broker/pom.xml dependency:copy-dependencies \
	  -DincludeScope=runtime -DoutputDirectory=$(abspath $(JARS40))/broker
	@touch $(JARSTAMP40)

class-archive-spark40: $(STAMP40) $(JARSTAMP40)
	@PYSPARK_PYTHON=$(abspath $(BIN40)/python) PYSPARK_DRIVER_PYTHON=$(abspath $(BIN40)/python) \
	  CONTROLPLANE_JARS=$(abspath $(JARS40)) $(BIN40)/python -m controlplane class-archive \
	  || echo "make: no JVM class archive for the Spark 4.0 leg; its sessions start as before" >&2

setup-spark40: $(STAMP40) $(JARSTAMP40) class-archive-spark40 ## the Spark 4.0 leg's .venv-spark40 and its jars

demo: $(STAMP) $(JARSTAMP) class-archive ## set up, then run the main job on the embedded local default
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

test: test-main test-spark40 ## set up, lint, run every test (unit, property, Spark, Kafka), then the Spark 4.0 leg

test-main: $(STAMP) $(JARSTAMP) class-archive lint wheel-check ## set up, lint, then every test on the main leg (pyspark 4.2) only
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

# The second leg: what touches Spark, pandas or Arrow (tests/engine, tests/spark) on Spark 4.0,
# in .venv-spark40 with its own jars. TESTS="..." narrows it.
TESTS ?= tests/engine tests/spark
test-spark40: $(STAMP40) $(JARSTAMP40) class-archive-spark40 ## the Spark-dependent tests on Spark 4.0 (Databricks Runtime 17.3 LTS's)
	PYSPARK_PYTHON=$(abspath $(BIN40)/python) PYSPARK_DRIVER_PYTHON=$(abspath $(BIN40)/python) \
	  CONTROLPLANE_JARS=$(abspath $(JARS40)) $(BIN40)/python -m pytest -q $(TESTS)

bench: $(STAMP) $(JARSTAMP) ## benchmarks that print figures (see docs/benchmarks.md)
	$(BIN)/python bench/run.py

clean: ## remove build and run outputs (keeps .venv)
	rm -rf out build dist .pytest_cache .mypy_cache .ruff_cache
