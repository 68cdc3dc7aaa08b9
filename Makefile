# mmuscope: `make run` opens the explorer, `make test` runs every check.
# Both create .venv and install the project on first use (a fresh Debian needs only
# python3 and apt).  The Debian packages they use come from apt-get when missing and we
# are root; otherwise the exact command is printed (scripts/debian-packages.sh): Graphviz's
# `dot` (for PDF/SVG/PNG export) and trace-cmd (to replay binary trace.dat files) for
# both, headless Chromium (the browser-mode test, skipped without it) for `make test`.

# The interpreter: Debian's own /usr/bin/python3 where it is (the python3 of the fresh
# Debian this set-up is for, and the one python3-venv below serves), else python3 from
# PATH; `make clean test PYTHON=python3.13` picks another.  A python3 found first on PATH
# can be a build run through libpython.so (pyenv's --enable-shared): the suite took 447 s
# of pytest with that one here against 375 s with Debian's (statically linked), the same
# 2,048 tests on the same quiet 2-core machine, and `simulate` ran 1.2-1.4x slower.
PYTHON ?= $(or $(wildcard /usr/bin/python3),python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.mmuscope-installed
RUN_PACKAGES := graphviz trace-cmd
TEST_PACKAGES := $(RUN_PACKAGES) chromium
export PYTHON

.PHONY: run test lint bench screenshots setup apt-update packages graphviz trace-cmd chromium clean

# `e` and `S` write into exports/ (ignored by git), not into the checkout's root
run:
	@$(MAKE) --no-print-directory -j2 setup PACKAGES="$(RUN_PACKAGES)"
	@mkdir -p exports
	$(BIN)/mmuscope --export-dir exports

# Two pytest-xdist workers (CI has 2 cores); `make test PYTEST_ARGS=-n0` runs serially.
PYTEST_ARGS ?= -n 2
# The README's screenshots are drawn again (deterministic: an image changes only when the
# look does; `git status` shows which ones to commit) and the lint runs, both while the
# suite runs: no core waits for the longer of the two before pytest starts, and xdist
# hands the tests to whichever worker is free.  Their output (-O: each one's together)
# follows pytest's; `make test` fails when any of the three fails.
# The suite writes Python's bytecode cache (__pycache__/, ignored by git) even where the
# environment says PYTHONDONTWRITEBYTECODE: without it every `mmuscope` the CLI tests
# start compiles the package again, and each worker rewrites every test module's asserts.
test: export PYTHONDONTWRITEBYTECODE :=
test:
	@$(MAKE) --no-print-directory -j2 setup PACKAGES="$(TEST_PACKAGES)"
	@mkdir -p build
	@$(MAKE) --no-print-directory -j2 -Otarget lint screenshots >build/checks.log 2>&1 & \
	checks=$$!; \
	$(BIN)/python -m pytest --dist=loadgroup $(PYTEST_ARGS); tests=$$?; \
	wait $$checks; lint=$$?; \
	cat build/checks.log; \
	[ $$lint = 0 ] || echo "make test: lint or screenshots failed (above)"; \
	[ $$tests = 0 ] && [ $$lint = 0 ]

# mypy checks the packages as installed (mmuscope.engine, mmuscope.tui): two links make
# that layout in build/typecheck (see [tool.mypy] in pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@mkdir -p build/typecheck/mmuscope
	@ln -sfn ../../../engine build/typecheck/mmuscope/engine
	@ln -sfn ../../../tui build/typecheck/mmuscope/tui
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/memslot_speed.py
	$(BIN)/python benchmarks/tui_speed.py
	$(BIN)/python benchmarks/startup_speed.py
	$(BIN)/python benchmarks/replay_speed.py
	$(BIN)/python benchmarks/session_speed.py
	-$(BIN)/python benchmarks/kvm_speed.py  # needs /dev/kvm and root
	$(BIN)/python benchmarks/tdp_speed.py

screenshots: $(STAMP)
	$(BIN)/python scripts/screenshots.py

# The set-up: one `apt-get update` when any of the Debian packages is missing, python3-venv
# (the venv needs it), then the venv filled by pip (network and CPU) while apt-get installs
# the other packages (network and dpkg): `run` and `test` make `setup` with two jobs.
setup: $(STAMP) packages

apt-update:
	@sh scripts/debian-packages.sh update python3-venv $(PACKAGES)
	@sh scripts/debian-packages.sh install python3-venv

packages: apt-update
	@sh scripts/debian-packages.sh install $(PACKAGES)

$(STAMP): pyproject.toml | apt-update
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,data]'
	touch $(STAMP)

# One package alone (`make chromium`), with its own `apt-get update` when it is missing.
graphviz trace-cmd chromium:
	@sh scripts/debian-packages.sh update $@
	@sh scripts/debian-packages.sh install $@

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
