# Quick start (see README.md):
#   make demo   build what is missing, then run the supervisor on the CPU engine
#               (ENGINE=llama_cpp: on llama.cpp's llama-server instead of vLLM)
#               (ENGINE_RUNTIME=container: the engine as a podman container)
#   make test   build what is missing, then run the whole test suite
#
# Every build step is idempotent: a marker written at its end says it is done.

PYTHON ?= python3
VENV := .venv
ENGINE_VENV := .engine-venv
MODELS := .demo-models
LLAMACPP := .llamacpp
# A real coding agent's SDK, in an environment of its own like any agent tool on the box
# (tests/agents/: the OpenAI Agents SDK through the gateway across a crash, issue 33).
AGENT_VENV := .agent-venv
AGENT_SDK := openai-agents==0.24.0
# A real coding agent's CLI from its registry, in a prefix of its own (issue 33): Claude Code
# (npm; a native binary per platform, no Node.js code runs) for the real-engine test
# tests/integration/test_claude_code_real.py (make test-long). About 11 s, 384 MB.
AGENT_NODE := .agent-node
CLAUDE_CODE := @anthropic-ai/claude-code@2.1.332
SUP := $(VENV)/bin/supervisor
# The engine `make demo` runs: vllm (policies/cpu-demo.yaml) or llama_cpp
# (policies/cpu-demo-llamacpp.yaml).
ENGINE ?= vllm
DEMO_POLICY_vllm := policies/cpu-demo.yaml
DEMO_POLICY_llama_cpp := policies/cpu-demo-llamacpp.yaml

# The browser tests (tests/browser/) drive Debian's Chromium; CI runs `make test` as root.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-long fuzz lint setup setup-steps clean chromium promtool podman lock \
	agent-venv agent-cli test-py312 test-floors

# llama-server's build (CPU-bound: about 6 min on 2 cores) needs only .venv, so `setup`
# runs it beside the engine environment (downloads and unpacking) with -j2; --output-sync
# prints each step's output whole when it ends. The demo models come after the build:
# torch's training threads and the compiler slow each other several-fold on 2 cores
# (measured: the demo models 55 s alone, 390 s beside the build).
LLAMA_SERVER := $(LLAMACPP)/bin/llama-server
GGUF_MODELS := $(LLAMACPP)/.models-converted
SETUP_STEPS := $(VENV)/.installed $(ENGINE_VENV)/.supervisor-engine-env.json \
	$(MODELS)/BUILD.json $(LLAMA_SERVER) $(GGUF_MODELS)

setup:
	@$(MAKE) --no-print-directory -q $(SETUP_STEPS) 2>/dev/null || { \
	  echo "setup: building in two lanes (make -j2); each step's output is printed when it ends"; \
	  $(MAKE) --no-print-directory -j2 --output-sync=target setup-steps; }

# One goal for the sub-make, so the steps already done are not each said to be up to date.
setup-steps: $(SETUP_STEPS)

# The development environment is exactly requirements-dev.lock (what CI tests with); the
# project itself goes on top without resolving anything again. `make lock` rewrites the
# lock from a fresh resolution of pyproject.toml's [dev] extra.
LOCK := requirements-dev.lock
LOCK_VENV := /tmp/agent-supervisor-lock-venv
PIP := pip --disable-pip-version-check -q

$(VENV)/.installed: pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/$(PIP) install -r $(LOCK)
	$(VENV)/bin/$(PIP) install --no-deps -e .
	touch $@

lock:
	rm -rf $(LOCK_VENV) build
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/$(PIP) install '.[dev]'
	{ echo "# The development and CI environment: \`make lock\` writes it (a fresh venv, pip install"; \
	  echo "# '.[dev]', pip freeze). \`make setup\` installs exactly this, then the project --no-deps."; \
	  echo "# Python $$($(LOCK_VENV)/bin/python -c 'import platform; print(platform.python_version())')"; \
	  $(LOCK_VENV)/bin/pip freeze --exclude-editable | grep -v '^agent-serving-supervisor'; } > $(LOCK)
	rm -rf $(LOCK_VENV) build

$(ENGINE_VENV)/.supervisor-engine-env.json: | $(VENV)/.installed
	$(SUP) engine-env --path $(ENGINE_VENV)

$(MODELS)/BUILD.json: agent_supervisor/demo/build_models.py | $(ENGINE_VENV)/.supervisor-engine-env.json \
		$(LLAMA_SERVER)
	$(SUP) demo-models $(MODELS) --engine-python $(ENGINE_VENV)/bin/python

# llama-server built from the llama.cpp that llama-cpp-python's sdist vendors, then the demo
# models as GGUF; the command skips what .llamacpp/BUILD.json says is already built. Both
# steps write BUILD.json, so make goes by the binary and a marker of its own.
$(LLAMA_SERVER): agent_supervisor/demo/llamacpp.py | $(VENV)/.installed
	$(SUP) engine-env --kind llama_cpp --path $(LLAMACPP) --server-only
	touch $@

$(GGUF_MODELS): agent_supervisor/demo/llamacpp.py agent_supervisor/demo/gguf_convert.py \
		$(MODELS)/BUILD.json $(LLAMA_SERVER)
	$(SUP) engine-env --kind llama_cpp --path $(LLAMACPP) --models $(MODELS) \
		--engine-python $(ENGINE_VENV)/bin/python
	touch $@

# ENGINE_RUNTIME=container: the engine runs as a podman container (engine.runtime:
# container) built here from the engine environment, through podman's Docker Engine API.
ENGINE_RUNTIME ?= process
DEMO_RUN_process := run
DEMO_RUN_container := container-demo
demo: setup $(if $(filter container,$(ENGINE_RUNTIME)),podman)
	$(SUP) $(DEMO_RUN_$(ENGINE_RUNTIME)) --policy $(DEMO_POLICY_$(ENGINE))

agent-venv: $(AGENT_VENV)/.installed

$(AGENT_VENV)/.installed:
	rm -rf $(AGENT_VENV)
	$(PYTHON) -m venv $(AGENT_VENV)
	$(AGENT_VENV)/bin/pip --disable-pip-version-check -q install '$(AGENT_SDK)'
	touch $@

agent-cli: $(AGENT_NODE)/.installed

$(AGENT_NODE)/.installed:
	rm -rf $(AGENT_NODE)
	mkdir -p $(AGENT_NODE)
	npm install --prefix $(AGENT_NODE) --no-audit --no-fund '$(CLAUDE_CODE)'
	$(AGENT_NODE)/node_modules/.bin/claude --version
	touch $@

chromium:
	@command -v chromium >/dev/null || \
		{ $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium; }

# promtool (Debian's `prometheus` package, ~96 MB installed) runs the alert rules' unit
# tests (dashboards/alerts/) and checks a live scrape of /metrics.
promtool:
	@command -v promtool >/dev/null || \
		{ $(SUDO) apt-get update -q && \
		  $(SUDO) apt-get install -y -q --no-install-recommends prometheus; }

# Podman (Debian 12: 4.3.1) runs the engine as a container (engine.runtime: container) for
# the tests and `make demo ENGINE_RUNTIME=container`; it serves the Docker Engine API on a
# socket of the project's own. runc, not crun (crun refuses this kernel's hybrid cgroups);
# busybox-static makes the tests' tiny image. runc in the same install satisfies podman's
# `crun | runc`; the recommends (buildah, fuse-overlayfs, slirp4netns, ...) are not used
# (host network, images imported from a tar). The project's settings are in
# deploy/podman/containers.conf (CONTAINERS_CONF), never in /etc. Measured: 9.8 s
# (apt-get update included) on a 2-core box.
podman:
	@{ command -v podman && command -v runc && command -v busybox; } >/dev/null || \
		{ $(SUDO) apt-get update -q && \
		  $(SUDO) apt-get install -y -q --no-install-recommends podman runc busybox-static; }

# Tests that run no real engine and take no fixed port run on both cores (pytest-xdist):
# the pure code (tests/unit, tests/property), the admin API and the dashboard in headless
# Chromium (tests/api, tests/browser), and the stand-in engine's process tests that time
# nothing under a second (PARALLEL_PROCESS: free ports, own state directories, waits of
# 5-30 s for what takes well under one). Then the rest of tests/ one test at a time: a
# busy CPU engine starves whatever runs beside it, and the sub-second checks want the box
# to themselves (a pidfd seen in 0.5 s, a canary in 0.6 s, the gateway tests that give a
# request 0.2-0.4 s to reach the engine: test_gateway.py, test_gateway_apis.py);
# test_store_outage.py stops PostgreSQL. Tests marked `long` (a real-engine scenario of
# minutes whose decisions a stand-in test here also makes: the real two-rank engine) are
# left to `make test-long`, so that CI's `make test` stays near an hour on a loaded box.
# Both runs always run; make fails if either did.
PARALLEL_PROCESS := $(addprefix tests/process/test_,spool_kill.py gateway_process.py cli.py \
	production.py gateway_orphan.py service.py install_command.py)
PARALLEL_TESTS := tests/unit tests/property tests/api tests/browser $(PARALLEL_PROCESS)
test: setup chromium promtool podman agent-venv
	status=0; \
	$(VENV)/bin/pytest -n 2 -m "not long" $(PARALLEL_TESTS) || status=$$?; \
	$(VENV)/bin/pytest -m "not long" $(PARALLEL_TESTS:%=--ignore=%) || status=$$?; \
	$(MAKE) --no-print-directory test-py312 || status=$$?; \
	exit $$status

# Python 3.12 beside 3.11 (a DGX Spark's OS ships 3.12, issue 33): the lock and the project
# installed into a 3.12 venv, then the pure tests (tests/unit, tests/property) on both cores;
# about 100 s (install 22 s, tests 77 s, 2026-12-03). Skipped, saying so, where no 3.12 is
# found (the system's, or pyenv's under $HOME/.pyenv).
PY312 ?= $(firstword $(wildcard /usr/bin/python3.12 /usr/local/bin/python3.12 \
	$(HOME)/.pyenv/versions/3.12*/bin/python3.12))
VENV312 := .venv312

$(VENV312)/.installed: requirements-dev.lock pyproject.toml
	rm -rf $(VENV312)
	$(PY312) -m venv $(VENV312)
	$(VENV312)/bin/pip --disable-pip-version-check -q install -r $(LOCK)
	$(VENV312)/bin/pip --disable-pip-version-check -q install --no-deps -e .
	touch $@

test-py312:
	@if [ -z "$(PY312)" ]; then echo "test-py312: no Python 3.12 on this machine: skipped"; \
	else $(MAKE) --no-print-directory $(VENV312)/.installed && \
	  $(VENV312)/bin/python --version && \
	  $(VENV312)/bin/pytest -q -n 2 -m "not long" tests/unit tests/property; fi

# Issue 33: every runtime dependency (and the agents' SDKs the tests drive) at its floor's
# release series (tests/floors.py reads pyproject.toml), the dev tools at the lock's pins,
# then the unit and property tests (but the one that checks the environment is the lock).
# Not part of `make test` (a second environment); run it when a floor moves. 2026-12-03:
# 166 s in all here (pip's cache warm), 1,499 passed, 1 skipped (the shipped schema's text).
VENV_FLOORS := .venv-floors
test-floors:
	rm -rf $(VENV_FLOORS)
	$(PYTHON) -m venv $(VENV_FLOORS)
	$(VENV_FLOORS)/bin/$(PIP) install -r $(LOCK)
	$(PYTHON) tests/floors.py pyproject.toml > $(VENV_FLOORS)/floors.txt
	$(VENV_FLOORS)/bin/$(PIP) install -r $(VENV_FLOORS)/floors.txt
	$(VENV_FLOORS)/bin/pip check
	$(VENV_FLOORS)/bin/$(PIP) install --no-deps -e .
	$(VENV_FLOORS)/bin/python tests/floors.py --check pyproject.toml
	$(VENV_FLOORS)/bin/pytest -q -n 2 -m "not long" tests/unit tests/property \
		--deselect tests/unit/test_dependencies_locked.py::test_issue_19_the_test_environment_is_the_lock

test-long: setup agent-venv agent-cli
	$(VENV)/bin/pytest -m long

# Issue 34's fuzzers at the review's count (CI runs 2,000 inputs a surface): malformed
# engine streams, whole answers and HTTP responses, FUZZ_COUNT inputs each (about 3.5 min
# for 30,000 on 2 cores).
FUZZ_COUNT ?= 30000
fuzz: $(VENV)/.installed
	SUPERVISOR_FUZZ_COUNT=$(FUZZ_COUNT) $(VENV)/bin/pytest -s \
		tests/unit/test_fuzz_streams.py tests/process/test_fuzz_upstream.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) $(ENGINE_VENV) $(MODELS) $(LLAMACPP) $(AGENT_VENV) $(AGENT_NODE) $(VENV312) $(VENV_FLOORS) .supervisor
