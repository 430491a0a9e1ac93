"""nano_engine.notebook.listing: the chapters' show_source and add_to_class."""

import doctest
import inspect

import nano_engine.notebook.listing as listing
from nano_engine.notebook.listing import add_to_class, show_source
from nano_engine.paged import BlockPool
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.radix import RadixCache


def test_module_doctest():
    result = doctest.testmod(listing)
    assert result.attempted > 0 and result.failed == 0


def test_show_source_is_the_installed_code_with_its_place():
    for method in (BlockPool.free, PrefixCachingBlockPool.lookup, RadixCache.evict):
        listing_ = show_source(method)
        lines, first = inspect.getsourcelines(method)
        assert listing_.text.splitlines()[0] == lines[0].strip()          # dedented, starts at `def`
        assert len(listing_.text.splitlines()) == len(lines)
        assert listing_.where.endswith(f":{first}-{first + len(lines) - 1}")
        assert listing_.where.startswith("nano_engine/") and "/work/" not in listing_.where
        html = listing_._repr_html_()
        assert repr(listing_).startswith(f"# {listing_.where}\n") and listing_.where in html and "<pre" in html
    assert "def num_free" in show_source(BlockPool.num_free).text              # a property: its getter


def test_add_to_class_adds_one_method_per_cell():
    class Pool:
        def __init__(self):
            self.n = 2

    @add_to_class(Pool)
    def double(self):
        return 2 * self.n

    assert Pool().double() == 4 and double(Pool()) == 4                     # returned unchanged too
