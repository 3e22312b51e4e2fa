# `make demo` and `make test` each build .venv from scratch if it is missing.
# torch is pinned here, for the dev environment only: torch==2.13.0 is the CPU build this machine
# installs from local disk; any other torch requirement pulls a multi-GB CUDA build. Users of
# zerokit[deepspeed] pick their own torch.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH  := torch==2.13.0
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean venv system-deps

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[deepspeed,dev]'
	touch $(STAMP)

# libaio-dev lets DeepSpeed JIT-build async_io for NVMe offload; skipped where apt is not ours.
system-deps:
	@if [ -e /usr/include/libaio.h ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libaio-dev >/dev/null) \
		|| echo "warning: could not install libaio-dev; NVMe offload tests will be skipped"; \
	else echo "note: libaio-dev is not installed; NVMe offload tests will be skipped"; fi

demo: venv system-deps
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH bash examples/demo.sh

test: venv system-deps
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m pytest -q -ra tests

test-fast: venv
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m pytest -q -ra -m "not slow" tests

lint: venv
	$(VENV)/bin/ruff check zerokit tests benchmarks examples

bench: venv
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) benchmarks/plan_speed.py
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) benchmarks/lint_speed.py
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) benchmarks/activations.py

clean:
	rm -rf $(VENV) build *.egg-info demo-out
