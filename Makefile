# Two commands do all the set-up on a fresh machine:
#   make lab    create .venv (first time), install, open JupyterLab on notebooks/
#   make test   the same set-up, then the whole test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: lab test setup system-deps clean

setup: $(STAMP) system-deps

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-installs only when the pins or the package metadata change.
$(STAMP): $(PY) requirements.txt pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

system-deps:
	@bash .ci/system-deps.sh

lab: setup
	$(VENV)/bin/jupyter lab notebooks/

test: setup
	$(PY) -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
