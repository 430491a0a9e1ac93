# Two commands do all the set-up on a fresh machine:
#   make lab        create .venv (first time), install, open JupyterLab on chapter 00
#   make book       the chapters executed, as a static site in .ci/book/_build/html
#   make test       the same set-up, then lint (ruff, mypy) and the whole test suite, in parallel
# And for the edit-test loop:
#   make test-fast  the unit tests in parallel (no notebooks, browser or full-size model)
#   make lint       ruff and mypy alone
#   make check-citations  download the pinned vLLM / SGLang releases and check every cited file and
#                   symbol (tests/citations.toml), and report what moved in the newest releases; needs
#                   the network, so not part of make test
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: lab book test test-fast lint setup system-deps clean check-citations

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

# The project's Jupyter settings (.ci/jupyter) let it run as root (containers) and keep it
# off the network: no news pop-up, no update check, no extension index. default_url makes the
# addresses Jupyter prints (the ones to open from a container) chapter 00's own, not the Launcher's.
FIRST_CHAPTER := 00_the_model.ipynb
lab: setup
	@echo "Starting JupyterLab; open the http://127.0.0.1:.../lab/tree/$(FIRST_CHAPTER)?token=... address it prints (the Launcher is at /lab)."
	JUPYTER_CONFIG_PATH="$(CURDIR)/.ci/jupyter" $(VENV)/bin/jupyter lab --LabApp.default_url=/lab/tree/$(FIRST_CHAPTER) notebooks/$(FIRST_CHAPTER)

# The book: every chapter executed and rendered as a static site (Sphinx + MyST-NB, pinned in
# .ci/book/requirements.txt, installed on top of the set-up; the book's Sphinx configuration is
# .ci/book/conf.py). Chapters whose code did not change since the last build are not re-run
# (jupyter-cache in .ci/book/_build/jupyter_cache). notebooks/ holds the chapters and their index only.
BOOK_STAMP := $(VENV)/.book-installed
BOOK_HTML  := .ci/book/_build/html

$(BOOK_STAMP): $(STAMP) .ci/book/requirements.txt
	$(PY) -m pip install -q -r .ci/book/requirements.txt
	touch $@

book: setup $(BOOK_STAMP)
	$(PY) -m sphinx -b html -q -c .ci/book -d .ci/book/_build/doctrees notebooks $(BOOK_HTML)
	@echo "The book is in $(BOOK_HTML) ($$(du -sh $(BOOK_HTML) | cut -f1)): open $(BOOK_HTML)/index.html in a browser, or serve the folder with any static server."

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

# One pytest-xdist worker per core. Under --dist loadgroup the browser tests run on one worker (one
# JupyterLab and one Chromium for them all), the tests that read the one run of `judge.py check` on
# one worker, and the two that read the one Triton-interpreter child on one worker
# (tests/conftest.py groups them by their marks and fixtures); the chapters, each in its own kernel,
# and the rest spread over all workers.
PYTEST_PARALLEL := -n auto --dist loadgroup

test: setup lint
	$(PY) -m pytest $(PYTEST_PARALLEL)

test-fast: $(STAMP)
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not notebook and not browser and not slow" -q

check-citations: $(STAMP)
	$(PY) tests/check_citations.py

clean:
	rm -rf $(VENV) .ci/book/_build .pytest_cache .hypothesis .mypy_cache .ruff_cache
