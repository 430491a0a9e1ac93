# Two commands do all the set-up on a fresh machine:
#   make lab        create .venv (first time), install, open JupyterLab on chapter 00
#   make test       the same set-up, then lint (ruff, mypy) and the whole test suite, in parallel
# And for the edit-test loop:
#   make test-fast  the unit tests in parallel (no notebooks, browser or full-size model)
#   make lint       ruff and mypy alone
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: lab test test-fast lint setup system-deps clean

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

# The project's Jupyter settings (notebooks/.jupyter) let it run as root (containers) and keep it
# off the network: no news pop-up, no update check, no extension index.
lab: setup
	JUPYTER_CONFIG_PATH="$(CURDIR)/notebooks/.jupyter" $(VENV)/bin/jupyter lab notebooks/00_the_model.ipynb

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

# One pytest-xdist worker per core. Under --dist loadgroup the chapters run one after another on one
# worker and the browser tests on one worker (tests/conftest.py groups them by their marks), while
# the other workers take the rest.
PYTEST_PARALLEL := -n auto --dist loadgroup

test: setup lint
	$(PY) -m pytest $(PYTEST_PARALLEL)

test-fast: $(STAMP)
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not notebook and not browser and not slow" -q

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache
