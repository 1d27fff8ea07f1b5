# Two commands from a fresh clone (Python 3.11 + pip, package index reachable):
#   make demo   set up .venv, index the bundled sample memory folder, run searches
#   make test   set up .venv, run the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install clean bench-smoke

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/lethe demo --keep demo-project

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench-smoke: $(STAMP)
	$(BIN)/python -m pytest -q tests -k bench_smoke

clean:
	rm -rf $(VENV) build dist *.egg-info
