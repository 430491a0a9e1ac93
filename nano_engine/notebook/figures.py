"""figures.py: the numbers a chapter's prose quotes, checked against the run that produced them.

A chapter's markdown says "4 engines of 6,000 blocks" or "a hit rate of 65%". If the code behind it
changes, the sentence goes stale silently. So each such figure is stated once more in a code cell,
in the same words, beside the value it describes::

    said("6,000 blocks", cap)              # the run's value must be the figure as written
    said("65%", hit_rate)                  # a percentage is a fraction: 0.6512 rounds to 65%
    said("about 0.68", accuracy, within=0.02)

The figure is the one number in ``quote``. The value must *round to it as written*: "0.676" holds
for 0.6757 but not for 0.6749, "65%" for 0.6462 but not for 0.644, and "6,000" only for 6000.
``within`` widens that to a tolerance in the figure's own unit (percentage points for "%"), for
prose that says "about". Suffixes ``%``, ``x`` / ``×`` (a ratio), ``k`` / ``K`` and ``M`` (thousands,
millions) are understood; thousands separators (``6,000``, ``6_000``) and a leading sign too.

A failed check raises ``AssertionError`` quoting the prose and the value, so the chapter stops at
the cell whose prose went stale. ``tests/`` reads these calls to check that every figure the prose
quotes about the chapter's own runs is stated in one.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-−+]?)(?P<digits>\d{1,3}(?:[,_]\d{3})+|\d+)(?P<frac>\.\d+)?"
    r"\s?(?P<unit>%|x\b|×|[kK]\b|M\b)?")
_SCALE = {"%": Decimal("0.01"), "k": Decimal(1000), "K": Decimal(1000), "M": Decimal(1_000_000)}


def parse_figure(quote: str) -> tuple[float, float]:
    """The one number in ``quote`` as ``(value, half_step)``: what it means and how far a value may
    be from it and still be written that way (half a unit of its last digit, in the value's scale).

    >>> parse_figure("6,000 blocks")
    (6000.0, 0.5)
    >>> parse_figure("65%")
    (0.65, 0.005)
    >>> parse_figure("about 0.676")
    (0.676, 0.0005)
    >>> parse_figure("1.5x faster")
    (1.5, 0.05)
    """
    found = list(_NUMBER.finditer(quote))
    if len(found) != 1:
        raise ValueError(f"a quoted figure must hold exactly one number; {quote!r} holds {len(found)}")
    m = found[0]
    text = m["digits"].replace(",", "").replace("_", "") + (m["frac"] or "")
    number = Decimal(text)
    step = Decimal(1).scaleb(-len(m["frac"]) + 1) if m["frac"] else Decimal(1)
    scale = _SCALE.get(m["unit"] or "", Decimal(1))
    sign = -1 if m["sign"] in ("-", "−") else 1
    return sign * float(number * scale), float(step * scale / 2)


def said(quote: str, value: float, *, within: float = 0.0) -> None:
    """Check that ``value`` is what the prose's ``quote`` says it is (see the module docstring).

    >>> said("41 blocks", 41)
    >>> said("65%", 0.6512)
    >>> said("about 65%", 0.63, within=3)
    >>> said("6,000 blocks", 1500)
    Traceback (most recent call last):
    ...
    AssertionError: the text says '6,000 blocks', the run gives 1500
    """
    figure, half_step = parse_figure(quote)
    unit_scale = 0.01 if "%" in quote else 1.0
    if within < 0 or not math.isfinite(within):
        raise ValueError(f"within must be a finite number >= 0, not {within!r}")
    tolerance = max(half_step, within * unit_scale)
    value = float(value)
    # A hair of slack for binary floats (0.675 is 0.67499999...), never more than a millionth of a step.
    if not abs(value - figure) <= tolerance * (1 + 1e-9):
        raise AssertionError(f"the text says {quote!r}, the run gives {value:g}")
