"""End-to-end checks in a real browser: the radix stepper works inside JupyterLab, its running hit
rate updates as requests go through, a prediction widget renders and takes a guess, and the tier
stepper (chapter 06) draws its node states, copies in flight and eviction counts.

JupyterLab serves a small notebook on 127.0.0.1 only; Debian's ``chromium`` (headless, driven by
Playwright's Python API through ``executable_path``; no browser is downloaded) opens it, runs the
cells, clicks Step and checks that the narration, the hit rate and the SVG diagram change. One server
and one Chromium serve the whole file; each test gets its own copy of the notebook (so its own kernel),
its own JupyterLab workspace (nothing restored from the test before) and its own page (one browser
context for the file, so its HTTP cache keeps JupyterLab's scripts between tests), and leaves a screenshot, ``browser.png``, in its temporary folder (pytest's ``--basetemp``). Skips, saying why,
when Chromium, Playwright or JupyterLab is missing (``NANO_ENGINE_CHROMIUM`` may point at another
Chromium binary). The server and its kernel are always stopped.
"""

import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
NOTEBOOK_CELL = """\
from nano_engine.notebook.radix_stepper import RadixStepper

stepper = RadixStepper([[1, 2, 3, 4, 5], [1, 2, 3, 9, 9], [7, 7, 7]], capacity=6)
stepper"""
PREDICT_CELL = """\
from nano_engine.notebook.predict import predict

guess = predict("How many of the first 10 looked-up tokens will hit?")
guess"""
FOLDED_CELL = """\
folded = predict("How many tokens will the cache hold?")
folded"""
REVEAL_CELL = """\
display(folded.reveal(480))   # Run All reaches this at once, before anybody typed"""
TIER_CELL = """\
from nano_engine.notebook.tier_stepper import TierStepper

tier = TierStepper([[1, 2, 3, 4], [5, 6, 7, 8], [1, 2, 3, 4, 9]], device_tokens=6, host_tokens=12,
                   load_back_threshold=2)
tier"""


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's Chromium, and the Python packages the test drives it with (else: skip, saying which)."""
    path = os.environ.get("NANO_ENGINE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        pytest.skip(f"Chromium not found at {path} (install it: apt-get install chromium)")
    for module in ("playwright", "jupyterlab", "ipywidgets"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the Python package {module} is not installed")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(folder: Path, name: str) -> str:
    notebook = {
        "cells": [{"cell_type": "code", "execution_count": None, "id": cell_id, "metadata": {},
                   "outputs": [], "source": source}
                  for cell_id, source in (("stepper", NOTEBOOK_CELL), ("predict", PREDICT_CELL),
                                                  ("folded", FOLDED_CELL), ("reveal", REVEAL_CELL),
                                                  ("tier", TIER_CELL))],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    (folder / f"{name}.ipynb").write_text(json.dumps(notebook))
    return f"{name}.ipynb"


@pytest.fixture(scope="module")
def lab(tmp_path_factory, chromium):
    """A JupyterLab server on 127.0.0.1 (own config, runtime and workspace folders), one for the
    file; yields ``open_url(name)``, which writes a fresh copy of the test notebook and returns the
    URL that opens it in a workspace of the same name (so nothing of an earlier test is restored)."""
    tmp_path = tmp_path_factory.mktemp("lab")
    root, home = tmp_path / "notebooks", tmp_path / "jupyter"
    root.mkdir()
    home.mkdir()
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), IPYTHONDIR=str(home / "ipython"))
    log = open(tmp_path / "jupyter.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.extension_manager=readonly",  # no package index queries
         *(["--allow-root"] if os.geteuid() == 0 else [])],  # CI containers often run as root
        env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)  # its own process group: the kernels it starts go down with it
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("JupyterLab did not start:\n" + (tmp_path / "jupyter.log").read_text()[-3000:])
                time.sleep(0.3)

        def open_url(name: str) -> str:
            notebook = write_notebook(root, name)
            return f"http://127.0.0.1:{port}/lab/workspaces/{name}/tree/{notebook}?token={token}"

        yield open_url
    finally:
        for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(server.pid, sig)  # the group this fixture created (server and kernels)
            except ProcessLookupError:
                break
            try:
                server.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        try:
            os.killpg(server.pid, signal.SIGKILL)  # a kernel outliving the server, if any
        except ProcessLookupError:
            pass
        log.close()


@pytest.fixture(scope="module")
def browser_context(chromium):
    """One headless Chromium for the file; yields its one context, where each test opens its own page."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=30_000)
        try:
            yield browser.new_context(viewport={"width": 1400, "height": 1000})
        finally:
            browser.close()


def run_notebook(page) -> None:
    """Run All Cells from the menu until the stepper shows up.

    Until its kernel session is ready, JupyterLab may drop a run or ask which kernel to use; the
    dialog is accepted (the notebook names python3) and the run repeated.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.get_by_text(re.compile(r"\| Idle$")).first.wait_for(timeout=60_000)  # status bar: kernel idle
    for _ in range(4):
        dialog = page.locator(".jp-Dialog .jp-mod-accept")
        if dialog.count():
            dialog.first.click()
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:
            page.wait_for_selector(".nano-stepper-diagram svg", timeout=15_000)
            page.wait_for_selector(".nano-predict", timeout=15_000)
            return
        except PlaywrightTimeout:
            continue
    raise AssertionError("the stepper never appeared after Run All Cells")


@pytest.fixture
def page(browser_context, lab, request, tmp_path):
    """A Chromium page on this test's own copy of the notebook with all its cells run; leaves ``browser.png``."""
    page = browser_context.new_page()
    try:
        page.goto(lab(request.node.name), timeout=45_000)
        run_notebook(page)
        yield page
    finally:
        page.screenshot(path=str(tmp_path / "browser.png"), full_page=True)
        page.close()


def test_step_button_changes_the_diagram(page):
    # The notebook's first stepper (the radix one; the tier stepper below it has its own test).
    diagram_nodes = "document.querySelector('.nano-stepper-diagram').querySelectorAll('svg g.node').length"
    narration = "document.querySelector('.nano-stepper-narration')?.innerText ?? ''"
    before_text = page.evaluate(narration)
    before_svg = page.inner_html(".nano-stepper-diagram")
    assert page.evaluate(diagram_nodes) == 1  # the empty tree: the root alone
    assert "empty tree" in before_text

    step = page.locator(".nano-stepper-step").first
    step.click()  # r0 matches nothing ...
    page.wait_for_function(f"({narration}).includes('match')", timeout=15_000)
    step.click()  # ... and inserts its five tokens: a new node
    page.wait_for_function(f"({diagram_nodes}) === 2", timeout=15_000)
    after_text = page.evaluate(narration)
    assert "insert" in after_text and "[1, 2, 3, 4, 5]" in after_text
    assert page.inner_html(".nano-stepper-diagram") != before_svg
    assert "slots 0-4" in page.inner_text(".nano-stepper-diagram")


def test_hit_rate_and_prediction_render(page):
    hit_rate = "document.querySelector('.nano-stepper-hit-rate')?.innerText ?? ''"
    assert "no lookup yet" in page.evaluate(hit_rate)
    step = page.locator(".nano-stepper-step").first
    for _ in range(3):  # r0 matches nothing and inserts; r1 matches [1, 2, 3]
        step.click()
        page.wait_for_timeout(300)
    page.wait_for_function(f"({hit_rate}).includes('3 of 10')", timeout=15_000)
    assert "3 of 10 looked-up tokens cached (30%)" in page.evaluate(hit_rate)
    bar = page.locator(".nano-stepper-hit-rate .nano-hit-rate-fill").first
    assert bar.evaluate("e => e.style.width") == "30%"  # the green bar: 30% of its track

    question = page.locator(".nano-predict").first
    assert "Predict: How many of the first 10 looked-up tokens will hit?" in question.inner_text()
    box = page.locator(".nano-predict-input input").first
    box.fill("4")
    assert box.input_value() == "4"
    assert "run the experiment below" in page.inner_text(".nano-predict-answer")


def test_run_all_keeps_the_revealed_answer_folded(page):
    """Run All ran the reveal right after the question: the answer is there, folded, until a click
    on "Show answer" or a typed prediction (Enter) opens it."""
    folded = page.locator(".nano-predict").nth(1)
    fold = folded.locator("details.nano-predict-fold")
    fold.wait_for(timeout=15_000)
    assert fold.evaluate("d => d.open") is False
    assert not folded.get_by_text("Answer: 480").is_visible()       # in the page, but not shown
    fold.locator("summary").click()                                   # "Show answer"
    assert fold.evaluate("d => d.open") is True
    assert folded.get_by_text("Answer: 480 (no prediction typed).").is_visible()
    box = folded.locator(".nano-predict-input input")
    box.fill("500")
    box.press("Enter")                                                # a prediction typed after the run
    page.wait_for_function("[...document.querySelectorAll('.nano-predict-answer')].some("
                           "e => e.innerText.includes('You predicted 500; answer: 480 (off by 20).'))", timeout=15_000)


def test_tier_stepper_shows_states_copies_and_evictions(page):
    """The notebook's second stepper (a host tier under the radix tree): seven steps in, r1 has
    pushed [1, 2, 3, 4] off the device (host only now) and queued the store of [5, 6, 7, 8]."""
    diagram = page.locator(".nano-stepper-diagram").nth(1)
    diagram.locator("svg").wait_for(timeout=30_000)
    narration = "document.querySelectorAll('.nano-stepper-narration')[1]?.innerText ?? ''"
    assert "device pool 6 tokens, host pool 12 tokens" in page.evaluate(narration)
    step = page.locator(".nano-stepper-step").nth(1)
    for _ in range(7):
        step.click()
        page.wait_for_timeout(300)
    page.wait_for_function(f"({narration}).includes('step 7 / ')", timeout=15_000)
    assert "back up [5, 6, 7, 8] (stores queued" in page.evaluate(narration)
    text = diagram.inner_text()
    assert "4 tok · host" in text and "4 tok · device+host" in text          # the two states, by name ...
    assert "store to the host in flight (queued)" in text
    assert "device evictions 1 · demoted 1 · deleted 0 · host evictions 0" in text
    svg = diagram.inner_html()
    assert 'fill="#e9e0f3"' in svg and 'fill="#dceaf8"' in svg              # ... and by colour
    assert 'stroke="#e8862e" stroke-width="2.4" stroke-dasharray' in svg     # the copy in flight: dashed orange
