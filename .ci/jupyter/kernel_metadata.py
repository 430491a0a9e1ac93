"""Serve the chapters with the kernel metadata that this environment's kernel reports, so that a
chapter opened in JupyterLab is not marked modified before anyone edits it.

Why it was: when a notebook's kernel starts, JupyterLab writes what the kernel reports into the
notebook's metadata (``NotebookPanel._updateSpec`` sets ``kernelspec``, ``_updateLanguage`` sets
``language_info`` from the kernel's ``kernel_info`` reply). The chapters are committed with the
short form (``{"name": "python"}``, display name "Python 3"); the kernel reports the long one
(``codemirror_mode``, ``mimetype``, ``version`` "3.11.7" ...; "Python 3 (ipykernel)"), so the model
changed and the tab showed the dot at once. JupyterLab skips a metadata write whose value is
already there, so serving the notebook with the kernel's own values makes the write a no-op.

The values cannot be committed instead: ``language_info.version`` is the Python version of whoever
runs the kernel. So ``make lab``'s contents manager fills them in when it reads a notebook whose
kernel is ``python3``, from the same sources the kernel uses: the ``python3`` kernel spec, and
ipykernel's ``IPythonKernel.language_info`` for this interpreter (jupyter_client starts a spec whose
command is ``python`` with the server's own interpreter). Nothing is written to disk until the reader
saves, and then the file holds what JupyterLab would have written anyway.
"""

from __future__ import annotations

import sys
from typing import Any

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

KERNEL = "python3"


def kernel_metadata() -> dict[str, Any] | None:
    """The ``kernelspec`` and ``language_info`` JupyterLab will set for a ``python3`` kernel started
    by this server, or None when that kernel would run another interpreter (then nothing is filled)."""
    from ipykernel.ipkernel import IPythonKernel
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:
        return None
    own = {"python", f"python{sys.version_info[0]}", f"python{sys.version_info[0]}.{sys.version_info[1]}",
           sys.executable}
    if not spec.argv or spec.argv[0] not in own:
        return None
    return {"kernelspec": {"name": KERNEL, "display_name": spec.display_name, "language": spec.language},
            "language_info": dict(IPythonKernel.language_info)}


class KernelMetadataContentsManager(AsyncLargeFileManager):
    """The default contents manager, but a ``python3`` notebook is served with this environment's
    kernel metadata (see the module docstring)."""

    async def get(self, path, content=True, type=None, format=None, require_hash=False):  # noqa: A002
        model = await super().get(path, content=content, type=type, format=format, require_hash=require_hash)
        if model.get("type") == "notebook" and model.get("content") is not None:
            metadata = model["content"]["metadata"]
            if metadata.get("kernelspec", {}).get("name", KERNEL) == KERNEL:
                filled = kernel_metadata()
                if filled is not None:
                    metadata.update(filled)
        return model
