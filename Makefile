# Two commands from a fresh clone (Python 3.11 + pip, package index reachable):
#   make demo   set up .venv, index the bundled sample memory folder, run searches
#   make test   set up .venv, run the test suite
# pip's output goes to .venv/install.log and is shown only when the install fails.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install clean bench-smoke

$(STAMP): pyproject.toml bench/pyproject.toml Makefile
	@echo "make: installing lethe-sql and its dependencies into $(VENV) (pip's log: $(VENV)/install.log)"
	@$(PYTHON) -m venv $(VENV)
	@{ $(BIN)/python -m pip install --upgrade pip && \
	   $(BIN)/python -m pip install -e '.[test]' -e ./bench; } > $(VENV)/install.log 2>&1 \
	 || { tail -n 30 $(VENV)/install.log; echo "make: pip failed; the whole log is $(VENV)/install.log"; exit 1; }
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@$(BIN)/lethe demo --keep demo-project

test: $(STAMP)
	@$(BIN)/python -m pytest -q

bench-smoke: $(STAMP)
	@$(BIN)/python -m pytest -q tests -k bench_smoke

clean:
	rm -rf $(VENV) build dist *.egg-info
