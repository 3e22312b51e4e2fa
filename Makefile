# `make demo` and `make test` each build .venv from scratch if it is missing.
# The dev environment installs the tested stack: constraints.txt pins every package (torch 2.13.0,
# deepspeed, transformers, accelerate, peft, bitsandbytes, pytest, hypothesis, ruff, ...), so a new
# upstream release cannot break a fresh clone. setup.cfg keeps open ranges for users; `make pins`
# refreshes the pins from the newest releases (then run make test). torch==2.13.0 is the CPU build this
# machine installs from local disk; users of zerokit[deepspeed] pick their own torch.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH  := torch==2.13.0
PINS   := constraints.txt
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean venv system-deps pins

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml Makefile $(PINS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c $(PINS) $(TORCH)
	$(PIP) install -q -c $(PINS) -e '.[deepspeed,dev]'
	touch $(STAMP)

# Rebuild the pins from the newest releases in a scratch venv: every installed package at its exact version
# (torch without its +cpu/+cuXXX label, so any build of that version matches). Run make test before committing.
pins:
	rm -rf .venv-pins
	$(PYTHON) -m venv .venv-pins
	.venv-pins/bin/python -m pip install -q --upgrade pip
	.venv-pins/bin/python -m pip install -q $(TORCH)
	.venv-pins/bin/python -m pip install -q -e '.[deepspeed,dev]' peft bitsandbytes
	{ sed -n '1,2p' $(PINS); .venv-pins/bin/python -m pip freeze --exclude-editable \
		| sed 's/^torch==\([0-9.]*\)+.*/torch==\1/' | sort -f -t= -k1,1; } > $(PINS).new
	mv $(PINS).new $(PINS)
	rm -rf .venv-pins
	@echo "constraints.txt refreshed; run make test, then commit it"

# Packages from the distribution, installed where apt is ours (root) and skipped otherwise:
#   libaio-dev      DeepSpeed JIT-builds async_io with it (NVMe offload tests)
#   openssh-server  sshd in each network namespace of the multi-node tests (pdsh over ssh)
#   pdsh            DeepSpeed's default multi-node launcher
#   numactl         DeepSpeed's --bind_cores_to_rank runs each rank under it (zerokit launch --bind-cores-to-rank)
system-deps:
	@missing=""; \
	[ -e /usr/include/libaio.h ] || missing="$$missing libaio-dev"; \
	command -v numactl >/dev/null || missing="$$missing numactl"; \
	[ -x /usr/sbin/sshd ] || missing="$$missing openssh-server"; \
	command -v pdsh >/dev/null || missing="$$missing pdsh"; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			$$missing >/dev/null) || echo "warning: could not install$$missing; the tests that need them are skipped"; \
	else echo "note:$$missing not installed; the tests that need them are skipped"; fi

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
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) benchmarks/realrun_memory.py
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) benchmarks/step_time.py
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) benchmarks/step_time_nodes.py
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) benchmarks/zero3_gathers.py
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) benchmarks/batch_rounding.py
	# the GPU tables (committed H100 data); exits 1 while the GPU step-time target is not met
	-PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) benchmarks/gpu_runs.py

clean:
	rm -rf $(VENV) .venv-pins build *.egg-info demo-out
