# The README's commands. Every target bootstraps .venv on its own, so a fresh clone needs
# nothing but `make demo` or `make test`. The venv is reinstalled only when pyproject.toml
# changes (its hash is kept in the stamp), so a second run starts at once: pyspark arrives
# as a source archive and takes about a minute to build. The venv gets every extra
# (`.[all,dev]`): the demo and the tests drive S3, HDFS and Spark as well as the broker.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tierlog-installed
export SPARK_LOCAL_IP ?= 127.0.0.1

.PHONY: demo test soak lint bench venv native check-java check-python system-deps clean

venv: check-python
	@want=$$(sha256sum pyproject.toml | cut -d' ' -f1); \
	if [ ! -x $(BIN)/python ] || [ "$$(cat $(STAMP) 2>/dev/null)" != "$$want" ]; then \
		echo "bootstrapping $(VENV) (pyproject.toml changed or no venv yet)"; \
		[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV) || exit 1; \
		$(BIN)/python -m pip install --quiet --upgrade pip || exit 1; \
		$(BIN)/python -m pip install --quiet -e '.[all,dev]' || exit 1; \
		echo "$$want" > $(STAMP); \
	fi

# The compiled modules (core/records/_native.pyx and _append.pyx, core/log/_recovery.pyx
# and _active_segment.pyx, rlmm/_native.pyx),
# built in place so that runs from the source tree (PYTHONPATH=$PWD, the tests' broker
# processes) use them. Cython only regenerates the C when a .pyx changed.
# TIERLOG_PURE_PYTHON=1 skips them (no C compiler).
native: venv
	@if [ "$$TIERLOG_PURE_PYTHON" != 1 ]; then \
		$(BIN)/python setup.py --quiet build_ext --inplace || exit 1; fi

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || { \
		echo "tierlog needs Python >= 3.11 (found: $$($(PYTHON) --version 2>&1))." >&2; \
		echo "Set PYTHON=/path/to/python3.11 or newer." >&2; exit 1; }

# Spark (pyspark) needs a Java 17+ runtime.
check-java:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
		echo "Spark needs Java 17 or newer (found: $${v:-none})." >&2; \
		echo "Install it, e.g. on Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless" >&2; \
		exit 1; fi

# Tools the tests drive as a user would: kcat (the command-line client), fiu-utils
# (libfiu, disk fault injection for tests/reliability) and zookeeper (Apache ZooKeeper 3.8,
# the coordination service of the replicated cluster; its jars go to /usr/share/java), all
# Debian packages. Installed when missing; needs root or sudo and Debian's apt.
system-deps:
	@missing=""; \
	command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	command -v fiu-run >/dev/null 2>&1 || missing="$$missing fiu-utils"; \
	[ -e /usr/share/java/zookeeper.jar ] || missing="$$missing zookeeper"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing (Debian packages) for the tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing >/dev/null || { \
			echo "could not install$$missing: run 'apt-get install -y$$missing' as root" >&2; \
			exit 1; }; \
	fi

# KafkaJS, the Node.js client the integration tests drive (tests/integration/js): installed
# from package-lock.json with `npm ci` into tests/integration/js/node_modules, again only
# when the lock file changes. Node.js 18+ and npm must be on the PATH.
.PHONY: node-deps
JS_DIR := tests/integration/js
JS_STAMP := $(JS_DIR)/node_modules/.tierlog-installed
node-deps:
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
		echo "the KafkaJS tests need Node.js 18+ and npm on the PATH (found: node $$(node --version 2>/dev/null || echo none), npm $$(npm --version 2>/dev/null || echo none))." >&2; \
		echo "Install them, e.g. on Debian/Ubuntu: sudo apt-get install -y nodejs npm" >&2; exit 1; }
	@node -e 'process.exit(+process.versions.node.split(".")[0] >= 18 ? 0 : 1)' || { \
		echo "the KafkaJS tests need Node.js 18+ (found: $$(node --version))." >&2; exit 1; }
	@want=$$(sha256sum $(JS_DIR)/package-lock.json | cut -d' ' -f1); \
	if [ "$$(cat $(JS_STAMP) 2>/dev/null)" != "$$want" ]; then \
		echo "installing KafkaJS into $(JS_DIR)/node_modules (npm ci)"; \
		npm ci --prefix $(JS_DIR) --no-audit --no-fund --loglevel=error || exit 1; \
		echo "$$want" > $(JS_STAMP); \
	fi

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

test: lint native check-java system-deps node-deps
	$(BIN)/pytest

# The long versions of the reliability suites (tests/reliability; short ones run in
# `make test`): 50 SIGKILLs, longer loads. Figures go to docs/RELIABILITY.md.
soak: lint native check-java system-deps
	TIERLOG_SOAK=1 $(BIN)/pytest tests/reliability -p no:cacheprovider -o timeout=7200 -s

demo: native system-deps
	$(BIN)/python -m tierlog.demo

bench: native
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) demo-data bench-data .pytest_cache .ruff_cache .hypothesis build
	rm -f core/records/_native.c core/records/_native*.so core/records/_append.c core/records/_append*.so core/log/_recovery.c core/log/_recovery*.so \
		core/log/_active_segment.c core/log/_active_segment*.so rlmm/_native.c rlmm/_native*.so
