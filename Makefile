# Quick start (see README.md):
#   make demo   build what is missing, then run the supervisor on the CPU engine
#   make test   build what is missing, then run the whole test suite
#
# Every build step is idempotent: a marker written at its end says it is done.

PYTHON ?= python3
VENV := .venv
ENGINE_VENV := .engine-venv
MODELS := .demo-models
SUP := $(VENV)/bin/supervisor

# The browser tests (tests/browser/) drive Debian's Chromium; CI runs `make test` as root.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test lint setup clean chromium promtool lock

setup: $(VENV)/.installed $(ENGINE_VENV)/.supervisor-engine-env.json $(MODELS)/BUILD.json

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --disable-pip-version-check -q -e '.[dev]'
	touch $@

$(ENGINE_VENV)/.supervisor-engine-env.json: | $(VENV)/.installed
	$(SUP) engine-env --path $(ENGINE_VENV)

$(MODELS)/BUILD.json: supervisor/demo/build_models.py | $(ENGINE_VENV)/.supervisor-engine-env.json
	$(SUP) demo-models $(MODELS) --engine-python $(ENGINE_VENV)/bin/python

demo: setup
	$(SUP) run --policy policies/cpu-demo.yaml

chromium:
	@command -v chromium >/dev/null || \
		{ $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium; }

# promtool (Debian's `prometheus` package, ~96 MB installed) runs the alert rules' unit
# tests (dashboards/alerts/) and checks a live scrape of /metrics.
promtool:
	@command -v promtool >/dev/null || \
		{ $(SUDO) apt-get update -q && \
		  $(SUDO) apt-get install -y -q --no-install-recommends prometheus; }

test: setup chromium promtool
	$(VENV)/bin/pytest

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) $(ENGINE_VENV) $(MODELS) .supervisor
