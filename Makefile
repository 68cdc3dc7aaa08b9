# mmuscope: `make run` opens the explorer, `make test` runs every check.
# Both create .venv and install the project on first use (a fresh Debian needs only
# python3 and apt).  Graphviz's `dot` (for PDF/SVG/PNG export) and trace-cmd (to replay
# binary trace.dat files) come from apt-get when missing and we are root; otherwise the
# exact command is printed.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.mmuscope-installed

.PHONY: run test lint bench screenshots graphviz trace-cmd chromium clean

# `e` and `S` write into exports/ (ignored by git), not into the checkout's root
run: $(STAMP) graphviz trace-cmd
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
test: $(STAMP) graphviz trace-cmd chromium
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

$(STAMP): pyproject.toml
	@if ! $(PYTHON) -c 'import venv, ensurepip' >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; \
	  else \
	    echo "python3 cannot create a virtual environment: run  sudo apt-get install python3-venv"; exit 2; \
	  fi; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,data]'
	touch $(STAMP)

graphviz:
	@if ! command -v dot >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Graphviz (dot) with apt-get"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz; \
	  else \
	    echo "Graphviz 'dot' is missing (PDF/SVG/PNG export needs it): run  sudo apt-get install graphviz"; \
	  fi; \
	fi

# trace-cmd turns the binary trace.dat of `trace-cmd record` into the text `replay` reads.
trace-cmd:
	@if ! command -v trace-cmd >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing trace-cmd (to replay trace.dat files) with apt-get"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq trace-cmd; } || \
	      echo "could not install trace-cmd: replay reads text; run  trace-cmd report -i trace.dat > trace.txt  elsewhere"; \
	  else \
	    echo "trace-cmd is missing (replaying a binary trace.dat needs it): run  sudo apt-get install trace-cmd"; \
	  fi; \
	fi

# Headless Chromium for the browser-mode test (tests/test_serve.py), which is skipped
# without it.  Debian's package: `mmuscope serve` itself needs no browser on the server.
chromium:
	@if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Chromium (for the browser-mode test) with apt-get"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
	      echo "could not install Chromium: the browser-mode test will be skipped"; \
	  else \
	    echo "Chromium is missing (the browser-mode test is skipped without it): run  sudo apt-get install chromium"; \
	  fi; \
	fi

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
