# JupyterLab settings for `make lab`, found through JUPYTER_CONFIG_PATH (the Makefile sets it), so
# the reader's own Jupyter configuration is left as it is. labconfig/page_config.json turns off the
# plugin that asks to fetch Jupyter news (it asks whatever news_url says).
import sys
from pathlib import Path

c = get_config()  # noqa: F821  (defined by Jupyter when it loads this file)

# Containers and CI-like boxes often run as root; Jupyter refuses to start there without this.
c.ServerApp.allow_root = True

# Ask nothing of the network: the reader may be offline.
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
c.LabApp.extension_manager = "readonly"  # no queries to the package index

# A chapter must not show as modified the moment it opens: serve it with the kernel metadata the
# kernel is about to report (kernel_metadata.py, beside this file, says why).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_metadata import KernelMetadataContentsManager  # noqa: E402

c.ServerApp.contents_manager_class = KernelMetadataContentsManager
