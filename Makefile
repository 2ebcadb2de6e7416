# Clicklab: two commands. `make demo` runs the app with a demo study; `make test` runs the whole suite.
# `make lock` re-resolves the dependency locks after a pin changes.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# PostgreSQL and Redis used by the test suite (CI and developer machines run both on loopback).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/clicklab_ci
TEST_BROKER_URL ?= redis://127.0.0.1:6379/0
# Where `make demo` serves: `make demo PORT=8001`, `make demo HOST=0.0.0.0` (every interface, so a phone on the
# same network can open the links; the command warns). Plain `=` so only the command line sets them: a shell's
# own HOST variable (zsh exports the machine name) must not move the demo off loopback.
PORT = 8000
HOST = 127.0.0.1

.PHONY: demo prod bench-faults test test-both lint test-js test-services test-embedded install install-test chromium clean lock messages

# torch comes first, at the lock's version, from the index TORCH_INDEX_URL names when it is set: which build
# (CPU or a CUDA one) is the machine's choice, not the lock's. The public index serves the CUDA build on Linux
# (several GB); for the CPU build: `make demo TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu` (its
# 2.13.0+cpu matches the lock's 2.13.0: a local label is ignored by ==). Unset, pip's own configuration decides
# (here a local CPU wheel). The locks never carry a local version label (`make lock` strips them; a test checks).
TORCH_INDEX_URL ?=
TORCH_VERSION := $(shell sed -n 's/^torch==//p' requirements.lock)

# Installs come from the locks (every package of the tree, pinned), never from the loose top-level pins.
$(VENV)/.installed: requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==$(TORCH_VERSION) $(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL))
	$(PIP) install --quiet -r requirements.lock
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed requirements-test.lock
	$(PIP) install --quiet -r requirements-test.lock
	touch $@

# `make lock`: resolve requirements.txt (runtime) and requirements-test.txt (plus the test tools) into
# requirements.lock and requirements-test.lock with pip-tools, in a tool venv of its own under var/. Run it
# after changing a pin; the test lock is constrained by the runtime lock, so both name the same versions.
LOCK_TOOLS := var/lock-tools
PIP_COMPILE = CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_TOOLS)/bin/pip-compile --quiet --allow-unsafe \
	--strip-extras --no-emit-index-url --no-emit-find-links
lock:
	test -x $(LOCK_TOOLS)/bin/pip-compile || { $(PYTHON) -m venv $(LOCK_TOOLS) && \
		$(LOCK_TOOLS)/bin/pip install --quiet pip-tools==7.6.2; }
	$(PIP_COMPILE) --output-file requirements.lock requirements.txt
	$(PIP_COMPILE) --constraint requirements.lock --output-file requirements-test.lock requirements-test.txt
	sed -i -E 's/^([A-Za-z0-9_.-]+==[^ +]+)\+[A-Za-z0-9.]+/\1/' requirements.lock requirements-test.lock

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

demo: $(VENV)/.installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py demo --port $(PORT) --host $(HOST)

# The production stack in the foreground (config/runner.py): migrate, collectstatic, then gunicorn, a worker per
# queue, beat and the outbox relay against DATABASE_URL / CELERY_BROKER_URL (and SECRET_KEY) from the
# environment. Ctrl-C stops all of them. `make prod PORT=8080`.
prod: $(VENV)/.installed
	$(PY) -m config.runner --host $(HOST) --port $(PORT)

# Load and fault suite (bench/bench_load_faults.py), short version: 100 annotators over HTTP against the
# production processes on throw-away PostgreSQL and Redis, with dropped requests, lost responses, worker
# SIGKILL, broker restart, web restart and PostgreSQL restart; fails on anything lost, duplicated, a 500, a
# finished session left unvalidated, or an annotator who could not finish. Part of `make test` (after both
# test runs, about 2 minutes; the working tree alone: the comparison with another commit, --against, is a
# figure of a quiet machine, not a test). Full run (1,000 annotators, against 322004d): bench/bench_load_faults.py.
bench-faults: $(VENV)/.installed-test
	$(PY) bench/bench_load_faults.py --short --against none

chromium:
	@test -x /usr/bin/chromium || { echo "Installing Debian's chromium for the browser tests..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# ruff (lint rules and formatting), then mypy: the type check of the app and the libraries, configured by
# [tool.mypy] in pyproject.toml (which packages, each override and why; typings/ holds the one hand-written
# stub, Django's choices enums). Run alone: `.venv/bin/mypy`.
lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Every test that touches the database or the broker, against PostgreSQL + Redis (production's services) and
# again on the embedded default (SQLite + the file-system broker), each run with a real Celery worker process.
# The Django-free libraries' tests (tests/benchmark, tests/segmenters) use neither backend: they run once, in
# the embedded run, which balances the two runs' lengths (they go side by side, below). Of the browser tests
# (the player's JavaScript does not change with the backend) the embedded run keeps the ones marked
# `embedded_smoke`: a full batch on desktop and phone and `manage.py demo` served to Chromium. Tests marked
# `one_backend` run in the PostgreSQL run only: those whose subject does not change with the backend (schema
# fuzzing, media access, log redaction, the evaluation live-server run, the corrective quality model) and the
# slow corrective simulation on GrabCut.
LIBRARY_TESTS := tests/benchmark tests/segmenters
EMBEDDED_SELECTION := (not browser or embedded_smoke) and not one_backend
# The two runs go side by side (the machine has two cores and each run spends much of its time waiting on
# workers, browsers and sockets): they share nothing (own database, broker, CLICKLAB_VAR_DIR, free ports).
# The PostgreSQL run prints as it goes; the embedded run's output follows it from var/test-embedded.log.
test: $(VENV)/.installed-test chromium lint test-js test-both bench-faults

test-both: $(VENV)/.installed-test
	@mkdir -p var; \
	$(MAKE) --no-print-directory test-embedded > var/test-embedded.log 2>&1 & embedded_pid=$$!; \
	$(MAKE) --no-print-directory test-services; services=$$?; \
	wait $$embedded_pid; embedded=$$?; \
	echo; echo "==== the embedded-default run (SQLite + file-system broker), run beside the one above ===="; \
	cat var/test-embedded.log; \
	echo "==== PostgreSQL + Redis run: exit $$services; embedded run: exit $$embedded ===="; \
	test $$services -eq 0 && test $$embedded -eq 0

# The browser code: eslint over static/ (the player's ES modules, the corrective player's and the researcher
# pages' scripts) and `node --test` unit tests of the player's pure parts, with the versions pinned in package-lock.json (npm ci into node_modules/, redone when the lock file changes).
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

test-js: node_modules/.installed
	npx --no-install eslint static tests/js eslint.config.js
	node --test tests/js/

test-services: $(VENV)/.installed-test
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) CLICKLAB_VAR_DIR=$(CURDIR)/var/test-services \
		$(PY) -m pytest $(foreach dir,$(LIBRARY_TESTS),--ignore=$(dir)) $(PYTEST_ARGS)

test-embedded: $(VENV)/.installed-test
	env -u DATABASE_URL -u CELERY_BROKER_URL CLICKLAB_VAR_DIR=$(CURDIR)/var/test-embedded \
		$(PY) -m pytest -m "$(EMBEDDED_SELECTION)" $(PYTEST_ARGS)

# `make messages`: the translation catalogues (locale/<lang>/LC_MESSAGES/django.po and djangojs.po, the player's
# JavaScript) brought in step with the strings marked in the code and templates, then compiled to the .mo files
# Django reads. Translate what it added (no empty or fuzzy entry may stay: tests/i18n checks) and commit the .po
# and .mo together, so a machine without GNU gettext still serves every language. Needs gettext's tools.
MESSAGES_IGNORE := --ignore .venv --ignore node_modules --ignore var --ignore tests --ignore bench --ignore benchmark
MANAGE_NO_SERVICES := env -u DATABASE_URL -u CELERY_BROKER_URL $(PY) manage.py
messages: $(VENV)/.installed
	@command -v xgettext >/dev/null && command -v msgfmt >/dev/null || \
		{ echo "make messages needs GNU gettext: apt-get install gettext"; exit 1; }
	$(MANAGE_NO_SERVICES) makemessages --all --no-obsolete --add-location file $(MESSAGES_IGNORE)
	$(MANAGE_NO_SERVICES) makemessages --all --no-obsolete --add-location file -d djangojs $(MESSAGES_IGNORE)
	$(MANAGE_NO_SERVICES) compilemessages $(MESSAGES_IGNORE)

clean:
	rm -rf var/test-services var/test-embedded
