# The README's two commands: `make demo` (set up, then the lane-detection walk-through on the
# local backend) and `make test` (set up, then the test suite).
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_RECIPE ?= demo

.PHONY: setup demo demo-tiny test test-slow test-all bench-setup clean

setup:
	@bash scripts/setup.sh

demo: setup
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" DEMO_RECIPE=$(DEMO_RECIPE) bash scripts/demo.sh

demo-tiny: setup
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" DEMO_RECIPE=tiny bash scripts/demo.sh

# `make test` is the everyday suite (under 20 minutes on 2 cores); the end-to-end runs marked
# slow (the demo, pipelines, fault injection, repeat runs, the browser) and every test that took
# 2 s or more (pytest --durations=0) are `make test-slow`.
# CI (.ci/run) runs both.
test: setup
	$(PY) -m pytest -q tests -m "not slow"

test-slow: setup
	$(PY) -m pytest -q tests -m slow

test-all: setup
	$(PY) -m pytest -q tests

# Tools that only the benchmarks compare against (restic, DVC).
bench-setup: setup
	@command -v restic >/dev/null || (apt-get update -qq && apt-get install -y -qq restic)
	$(VENV)/bin/pip install -q dvc

clean:
	rm -rf $(VENV) demo-out
