"""What only the chapters use: diagrams of the caches, steppers that drive them one operation at a
time, predictions, and the exercise buttons. The engine never imports these (they need graphviz,
ipywidgets and the ``practice/`` folder, which a server has no use for).

``static_html()`` says how all of them display: live ipywidgets, or HTML that needs no kernel.
"""

import os


def static_html() -> bool:
    """Whether widgets render as static HTML: ``NANO_ENGINE_STATIC_HTML=1``, which ``make book`` sets
    for the kernels that execute its pages (no kernel behind them afterwards); else live ipywidgets."""
    return os.environ.get("NANO_ENGINE_STATIC_HTML") == "1"
