"""checks.py: the package's one way to say "this option must be an integer >= N".

Every constructor that takes a size, a count or a threshold checks it the same way and fails with
the same sentence, naming the option::

    >>> require_int("num_blocks", 0)
    Traceback (most recent call last):
    ...
    ValueError: num_blocks must be an integer >= 1, got 0
    >>> require_int("max_num_seqs", True)
    Traceback (most recent call last):
    ...
    ValueError: max_num_seqs must be an integer >= 1, got True
    >>> require_int("eos_token_id", None, minimum=0, optional=True) is None
    True

Integers of any kind pass (NumPy's too) and come back as a plain ``int``; bools, floats and
strings do not, even when their value would do (``2.0``, ``"16"``).
"""

from __future__ import annotations

import numbers
from typing import Literal, overload


def is_int(value: object) -> bool:
    """An integer (Python's, NumPy's, ...), never a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def require(ok: bool, name: str, allowed: str, value: object) -> None:
    """``ValueError("{name} must be {allowed}, got {value!r}")`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


@overload
def require_int(name: str, value: object, *, minimum: int = 1, maximum: int | None = None,
                optional: Literal[False] = False) -> int: ...
@overload
def require_int(name: str, value: object, *, minimum: int = 1, maximum: int | None = None,
                optional: Literal[True]) -> int | None: ...
def require_int(name: str, value: object, *, minimum: int = 1, maximum: int | None = None,
                optional: bool = False) -> int | None:
    """``value`` as an ``int`` if it is an integer in ``[minimum, maximum]`` (None too when
    ``optional``); else ``ValueError`` naming ``name`` and what it must be."""
    if type(value) is int and value >= minimum and (maximum is None or value <= maximum):
        return value   # the common case, checked first: hot paths (a pool's allocate) call this
    if optional and value is None:
        return None
    allowed = f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
    ok = is_int(value) and value >= minimum and (maximum is None or value <= maximum)  # type: ignore[operator]
    require(ok, name, ("None or " if optional else "") + allowed, value)
    return int(value)  # type: ignore[call-overload]
