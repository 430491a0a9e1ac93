# JupyterLab settings for `make lab`, found through JUPYTER_CONFIG_PATH (the Makefile sets it), so
# the reader's own Jupyter configuration is left as it is. labconfig/page_config.json turns off the
# plugin that asks to fetch Jupyter news (it asks whatever news_url says).
c = get_config()  # noqa: F821  (defined by Jupyter when it loads this file)

# Containers and CI-like boxes often run as root; Jupyter refuses to start there without this.
c.ServerApp.allow_root = True

# Ask nothing of the network: the reader may be offline.
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
c.LabApp.extension_manager = "readonly"  # no queries to the package index
