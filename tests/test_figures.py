"""said(): a figure the prose quotes holds only for values that round to it as written."""

import doctest

import pytest

from nano_engine.notebook import figures
from nano_engine.notebook.figures import parse_figure, said


def test_module_doctest():
    result = doctest.testmod(figures)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("quote, value", [
    ("6,000 blocks", 6000), ("6_000", 6000), ("0.676", 0.6757), ("0.676", 0.67649),
    ("65%", 0.6462), ("65%", 0.6549), ("1.5x", 1.46), ("3M tokens", 3_200_000), ("-2.5%", -0.025),
    ("4k", 4000), ("2K tokens", 2048),
])
def test_values_that_round_to_the_figure_hold(quote, value):
    said(quote, value)


@pytest.mark.parametrize("quote, value", [
    ("6,000 blocks", 6001), ("6,000 blocks", 1500), ("0.676", 0.6749), ("0.676", 0.6771),
    ("65%", 0.644), ("65%", 65), ("1.5x", 1.56), ("-2.5%", 0.025),
])
def test_values_that_do_not_round_to_the_figure_fail_quoting_the_prose(quote, value):
    with pytest.raises(AssertionError, match="the text says"):
        said(quote, value)


def test_within_is_in_the_figures_own_unit():
    said("about 65%", 0.62, within=3)           # percentage points
    with pytest.raises(AssertionError):
        said("about 65%", 0.61, within=3)
    said("about 0.68", 0.70, within=0.02)


@pytest.mark.parametrize("quote", ["no number", "4 engines of 6,000 blocks", ""])
def test_a_quote_holds_exactly_one_number(quote):
    with pytest.raises(ValueError, match="exactly one number"):
        parse_figure(quote)


@pytest.mark.parametrize("within", [-1, float("nan"), float("inf")])
def test_within_must_be_finite_and_not_negative(within):
    with pytest.raises(ValueError, match="within"):
        said("41", 41, within=within)
