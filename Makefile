# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
EXTRAS ?= train,server,io,dev
PYTEST_WORKERS ?= 2

.PHONY: demo test lint install clean bench

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# torch is pinned and installed first: an unpinned torch would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rlcockpit demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	cd src && ../$(VENV)/bin/lint-imports ../pyproject.toml

test: $(STAMP) lint
	$(PY) -m pytest -n $(PYTEST_WORKERS) --timeout 900 tests

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
