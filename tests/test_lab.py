"""`make lab`: the command it runs and the settings Jupyter loads from the project, checked without
starting a server. It must run as root (containers), open on chapter 00 and ask nothing of the
network (no news pop-up, no update check, no extension index).
"""

import os
import shlex
import shutil
import subprocess
import sys
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
    assert config_path(lab_command) == ROOT / "notebooks" / ".jupyter"


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
