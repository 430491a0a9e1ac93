"""deprecation.py: names that moved to another module keep working from the old one for one release.

A module whose names moved sets ``__getattr__ = moved(__name__, {"Name": "new.module", ...})``:
the old import still returns the very object from its new module, with a ``DeprecationWarning``
that says where to import it from. The new module is imported on first use, by name, so an old
module never imports the layer its names moved to (a data structure never imports the engine).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def moved(module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``names`` ({name: the module it moved to}) of ``module``.

    >>> import warnings
    >>> getattr_ = moved("old.place", {"OrderedDict": "collections"})
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     cls = getattr_("OrderedDict")
    >>> cls.__module__, caught[0].category.__name__
    ('collections', 'DeprecationWarning')
    >>> str(caught[0].message)
    'old.place.OrderedDict moved to collections.OrderedDict; import it from there (the old name goes in the next release)'
    """
    def __getattr__(name: str) -> Any:
        if name in names:
            warnings.warn(f"{module}.{name} moved to {names[name]}.{name}; import it from there (the old name goes in "
                          "the next release)", DeprecationWarning, stacklevel=2)
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return __getattr__
