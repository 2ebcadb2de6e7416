# Clicklab: two commands. `make demo` runs the app with a demo study; `make test` runs the whole suite.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# PostgreSQL and Redis used by the test suite (CI and developer machines run both on loopback).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/clicklab_ci
TEST_BROKER_URL ?= redis://127.0.0.1:6379/0

.PHONY: demo test lint test-services test-embedded install install-test chromium clean

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed requirements-test.txt
	$(PIP) install --quiet -r requirements-test.txt
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

demo: $(VENV)/.installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py demo

chromium:
	@test -x /usr/bin/chromium || { echo "Installing Debian's chromium for the browser tests..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The whole suite twice: against PostgreSQL + Redis (production's services), then on the embedded
# default (SQLite + the file-system broker). Each run uses a real Celery worker process and Chromium.
test: $(VENV)/.installed-test chromium lint test-services test-embedded

test-services: $(VENV)/.installed-test
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) CLICKLAB_VAR_DIR=$(CURDIR)/var/test-services \
		$(PY) -m pytest $(PYTEST_ARGS)

test-embedded: $(VENV)/.installed-test
	env -u DATABASE_URL -u CELERY_BROKER_URL CLICKLAB_VAR_DIR=$(CURDIR)/var/test-embedded \
		$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf var/test-services var/test-embedded
