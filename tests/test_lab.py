"""`make lab`: the command it runs and the settings Jupyter loads from the project, checked without
starting a server. It must run as root (containers), open on chapter 00 and ask nothing of the
network (no news pop-up, no update check, no extension index).
"""

import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ANNOUNCEMENTS = "@jupyterlab/apputils-extension:announcements"


@pytest.fixture(scope="module")
def lab_command() -> list[str]:
    """The `jupyter lab` line that `make lab` would run (``make -n`` prints it, runs nothing)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "-s", "lab"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    lines = [line for line in out.splitlines() if "jupyter lab" in line]
    assert len(lines) == 1, f"expected one `jupyter lab` line in `make -n lab`:\n{out}"
    return shlex.split(lines[0])


def config_path(command: list[str]) -> Path:
    settings = dict(word.split("=", 1) for word in command if "=" in word and not word.startswith("-"))
    assert "JUPYTER_CONFIG_PATH" in settings, f"`make lab` does not point Jupyter at the project's settings: {command}"
    return Path(settings["JUPYTER_CONFIG_PATH"])


def test_lab_opens_chapter_00_with_the_project_settings(lab_command):
    assert lab_command[-1] == "notebooks/00_the_model.ipynb"
    assert (ROOT / lab_command[-1]).is_file()
    assert config_path(lab_command) == ROOT / ".ci" / "jupyter"


def test_lab_disables_the_news_prompt(lab_command, monkeypatch):
    """The news prompt is a front-end plugin that asks whenever its setting is unset, whatever the
    server's ``news_url``; only disabling the plugin keeps it from asking."""
    from jupyterlab_server.config import get_static_page_config

    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(config_path(lab_command)))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", "/nonexistent")  # the reader's own settings play no part here
    assert get_static_page_config(level="all")["disabledExtensions"].get(ANNOUNCEMENTS) is True


def test_lab_config_as_jupyter_loads_it(lab_command, tmp_path):
    """``--show-config`` loads the configuration as `make lab` would, prints it and exits before
    the server listens."""
    pytest.importorskip("jupyterlab")
    env = dict(os.environ, JUPYTER_CONFIG_PATH=str(config_path(lab_command)),
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_DATA_DIR=str(tmp_path / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    shown = subprocess.run([sys.executable, "-m", "jupyterlab", "--show-config", lab_command[-1]], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-3000:]
    config = shown.stdout
    assert ".allow_root = True" in config
    assert ".news_url = None" in config
    assert ".check_for_updates_class = 'jupyterlab.NeverCheckForUpdate'" in config
    assert ".extension_manager = 'readonly'" in config
    assert f".file_to_run = '{ROOT / 'notebooks' / '00_the_model.ipynb'}'" in config


@pytest.mark.timeout(300)
def test_lab_prints_chapter_00s_own_address(lab_command, tmp_path):
    """In a container nobody opens a browser: the address Jupyter prints is the one a reader copies,
    and it must open chapter 00 (Jupyter's own default prints the Launcher's, /lab)."""
    pytest.importorskip("jupyterlab")
    import urllib.request

    options = [word for word in lab_command if word.startswith("--")]  # the options `make lab` passes
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JUPYTER_CONFIG_PATH=str(config_path(lab_command)),
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"), IPYTHONDIR=str(tmp_path / "ipython"))
    address = re.compile(rf"http://127\.0\.0\.1:{port}(/\S*)\?token=([0-9a-f]+)")  # as Jupyter makes its token
    log_path = tmp_path / "jupyter.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", *options, lab_command[-1], "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", "--ServerApp.port_retries=0"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while not address.search(log_path.read_text()):
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab printed no address:\n" + log_path.read_text()[-3000:])
                time.sleep(0.3)
            time.sleep(0.5)  # the rest of the banner
            printed = set(address.findall(log_path.read_text()))
            assert {path for path, _ in printed} == {"/lab/tree/00_the_model.ipynb"}, printed
            token = next(iter(printed))[1]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab/tree/00_the_model.ipynb?token={token}",
                                        timeout=30) as reply:
                assert reply.status == 200
        finally:
            for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
                try:
                    os.killpg(server.pid, sig)  # the group this test created
                    server.wait(timeout=wait_s)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue


def test_lab_serves_each_chapter_with_the_metadata_its_kernel_reports(lab_command):
    """JupyterLab writes the kernel's ``kernelspec`` and ``language_info`` into a notebook when its
    kernel starts, and marks the notebook modified unless they are already there, byte for byte.
    So what `make lab`'s contents manager serves for every chapter must equal what a ``python3``
    kernel started here reports (its ``kernel_info`` reply) and the spec JupyterLab reads."""
    import asyncio

    pytest.importorskip("jupyterlab")
    from jupyter_client.manager import start_new_kernel
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("jupyter_server_config.py", path=str(config_path(lab_command))).load_config()
    from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

    manager = config.ServerApp.get("contents_manager_class", AsyncLargeFileManager)(root_dir=str(ROOT / "notebooks"))
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
    try:
        reply = kc.kernel_info(reply=True, timeout=60)["content"]
        spec = km.kernel_spec
        expected = {"kernelspec": {"name": "python3", "display_name": spec.display_name, "language": spec.language},
                    "language_info": reply["language_info"]}
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    for chapter in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        metadata = asyncio.run(manager.get(chapter.name))["content"]["metadata"]
        served = {key: metadata.get(key) for key in expected}
        assert served == expected, f"{chapter.name} is served with {served}; its kernel reports {expected}"


OPENER = """import pathlib, sys
pathlib.Path(sys.argv[1]).write_text(sys.argv[2])
"""


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_lab_in_a_browser_opens_chapter_00_and_asks_nothing(lab_command, tmp_path):
    """The server `make lab` starts (same settings, same file; a private port and token), the URL
    it hands to the browser, and that page in headless Chromium: chapter 00 open, no news prompt."""
    chromium = os.environ.get("NANO_ENGINE_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        pytest.skip("Chromium not found (install it: apt-get install chromium)")
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    opener, opened = tmp_path / "opener.py", tmp_path / "opened-url.txt"
    opener.write_text(OPENER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_PATH=str(config_path(lab_command)),
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"), IPYTHONDIR=str(tmp_path / "ipython"),
               BROWSER=f"{sys.executable} {opener} {opened} %s")   # Python's webbrowser runs this
    log = open(tmp_path / "jupyter.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", lab_command[-1], "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not opened.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail("JupyterLab opened no browser:\n" + (tmp_path / "jupyter.log").read_text()[-3000:])
            time.sleep(0.3)
        url = opened.read_text()     # a local page that redirects to the server (keeps the token off argv)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox"], timeout=30_000)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            try:
                page.goto(url, timeout=60_000)
                page.wait_for_url(f"http://127.0.0.1:{port}/lab/tree/00_the_model.ipynb*", timeout=60_000)
                # The kernel turns idle after the app is restored, which is when the news plugin asks.
                page.get_by_text(re.compile(r"\| Idle$")).first.wait_for(timeout=90_000)
                page.wait_for_timeout(2_000)
                assert page.locator(".lm-TabBar-tab.lm-mod-current", has_text="00_the_model.ipynb").count() == 1
                assert page.get_by_text("official Jupyter news").count() == 0
                assert page.locator(".lm-TabBar-tab.jp-mod-dirty").count() == 0, \
                    "chapter 00 shows as modified (the dot on its tab) before anybody edited it"
            except Exception:
                page.screenshot(path=str(tmp_path / "lab.png"))
                raise
            finally:
                browser.close()
    finally:
        for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(server.pid, sig)  # the group this test created: the server and its kernel
                server.wait(timeout=wait_s)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        log.close()
