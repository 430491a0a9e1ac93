"""The diagrams of nano_engine.notebook.viz: DOT content checked against the caches' own state.

The scenarios are the reference sessions of chapters 02 and 03 (an independent implementation's
doctests), so what each picture must show is
known independently of the drawing code: which nodes exist, which slots they hold, which leaves
the eviction removed, which block was overwritten.
"""

import html
import re
import shutil

import pytest
from hypothesis import given, settings, strategies as st

from nano_engine.notebook.viz import (
    COLORS,
    draw_block_pool,
    draw_radix,
    format_slots,
    format_split,
    format_tokens,
    grouped_bars,
    short_hash,
)
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.radix import RadixCache

needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's `dot` is not installed (apt-get install graphviz)")


class WordTokenizer:
    """A stand-in tokenizer: token i is the word WORDS[i] (decode joins them, HF-style)."""

    WORDS = ["an", " apple", " is", " red", " green", "\n", " and", " sweet"]

    def decode(self, ids):
        return "".join(self.WORDS[i] if i < len(self.WORDS) else f"<{i}>" for i in ids)


def node_statements(dot: str) -> dict[str, str]:
    """Node name -> its DOT statement (graphviz writes one statement per line)."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^\t(n\d+) \[.*$", dot, re.M)}


def edges(dot: str) -> dict[tuple[str, str], str]:
    return {(m.group(1), m.group(2)): m.group(0)
            for m in re.finditer(r"^\t(n\d+) -> (n\d+).*$", dot, re.M)}


def seed_tree_after_split() -> RadixCache:
    tree = RadixCache()
    assert tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14]) == 0
    assert tree.insert([1, 2, 3, 9, 9], [10, 11, 12, 20, 21]) == 3  # splits [1..5] after 3
    return tree


# ------------------------------------------------------------------------------- formatting


def test_format_helpers():
    assert format_tokens([1, 2, 3]) == "[1, 2, 3]"
    assert format_tokens(list(range(20)), max_tokens=6) == "[0, 1, 2, …, 17, 18, 19]"
    assert format_tokens([0, 1, 5, 3], WordTokenizer()) == '"an apple⏎ red"'
    long = format_tokens([0, 1, 2, 3] * 5, WordTokenizer(), max_chars=20)
    assert len(long) == 22 and "…" in long and long.startswith('"an apple') and long.endswith('red"')
    assert format_split([1, 2, 3, 4, 5], 3) == "[1, 2, 3 | 4, 5]"
    assert format_split([0, 1, 2, 3], 3, WordTokenizer()) == '"an apple is| red"'
    assert format_slots([10, 11, 12, 20, 21]) == "10-12, 20-21"
    assert format_slots([7]) == "7"
    assert format_slots([1, 3, 5, 7, 9]) == "1, 3, … (5 runs)"
    assert short_hash(0xABCDEF) == "#cdef" and short_hash(-1) == "#ffff"


# ------------------------------------------------------------------------------- radix tree


def test_radix_after_split_shows_nodes_slots_and_highlights():
    tree = seed_tree_after_split()
    dot = draw_radix(tree).source
    nodes = node_statements(dot)
    by_key = {tuple(n.key): n for n in tree.nodes()}
    assert set(by_key) == {(), (1, 2, 3), (4, 5), (9, 9)}
    assert set(nodes) == {f"n{n.id}" for n in tree.nodes()}  # one box per node, nothing else
    front, old, new = by_key[(1, 2, 3)], by_key[(4, 5)], by_key[(9, 9)]
    assert "[1, 2, 3]" in nodes[f"n{front.id}"] and "slots 10-12" in nodes[f"n{front.id}"]
    assert "slots 13-14" in nodes[f"n{old.id}"] and "slots 20-21" in nodes[f"n{new.id}"]
    # The split created the front [1, 2, 3]; the insert walked root -> [1, 2, 3] -> [9, 9].
    assert tree.last_split is front
    assert f'color="{COLORS["split"]}"' in nodes[f"n{front.id}"] and "split" in nodes[f"n{front.id}"]
    assert f'color="{COLORS["match"]}"' in nodes[f"n{new.id}"]
    assert f'color="{COLORS["match"]}"' not in nodes[f"n{old.id}"]
    edge = edges(dot)
    assert COLORS["match"] in edge[(f"n{tree.root.id}", f"n{front.id}")]
    assert COLORS["match"] in edge[(f"n{front.id}", f"n{new.id}")]
    assert COLORS["match"] not in edge[(f"n{front.id}", f"n{old.id}")]
    # Nothing is locked: every node is drawn evictable.
    for n in (front, old, new):
        assert COLORS["evictable_fill"] in nodes[f"n{n.id}"]
    assert COLORS["evicted"] not in "".join(nodes.values())
    assert "evictable 7 · protected 0 · total 7 tokens" in dot

    plain = draw_radix(tree, show_match=False, show_split=False, legend=False).source
    assert COLORS["split"] not in plain and COLORS["match"] not in plain
    assert "protected (lock" not in plain


def test_radix_after_eviction_draws_ghosts_under_old_parents():
    tree = seed_tree_after_split()
    _, node = tree.match_prefix([1, 2, 3, 4, 7])   # the seed transcript: splits [4, 5] after [4]
    tree.inc_lock_ref(node)
    assert sorted(tree.evict(10)) == [14, 20, 21]   # the leaves [5] and [9, 9] go
    dot = draw_radix(tree).source
    nodes, edge = node_statements(dot), edges(dot)
    live = {tuple(n.key): n for n in tree.nodes()}
    assert set(live) == {(), (1, 2, 3), (4,)}
    ghosts = {tuple(n.key): n for n in tree.last_evicted}
    assert set(ghosts) == {(5,), (9, 9)}
    assert set(nodes) == {f"n{n.id}" for n in [*live.values(), *ghosts.values()]}
    for key, parent_key in [((5,), (4,)), ((9, 9), (1, 2, 3))]:
        ghost = nodes[f"n{ghosts[key].id}"]
        assert "dashed" in ghost and f'color="{COLORS["evicted"]}"' in ghost and "evicted" in ghost
        link = edge[(f"n{live[parent_key].id}", f"n{ghosts[key].id}")]
        assert "dashed" in link and COLORS["evicted"] in link
    assert "slots 20-21" in nodes[f"n{ghosts[(9, 9)].id}"]
    # The lock protects [1, 2, 3] and [4]: drawn protected, with their lock counts.
    for key in [(1, 2, 3), (4,)]:
        assert COLORS["protected_fill"] in nodes[f"n{live[key].id}"] and "lock 1" in nodes[f"n{live[key].id}"]
    assert "evictable 0 · protected 4 · total 4 tokens" in dot
    quiet = node_statements(draw_radix(tree, show_evicted=False).source)
    assert set(quiet) == {f"n{n.id}" for n in live.values()}


def test_radix_decodes_with_tokenizer_and_elides_long_runs():
    tree = RadixCache()
    tree.insert([0, 1, 2, 3], [0, 1, 2, 3])
    tree.insert(list(range(100, 130)), list(range(4, 34)))
    dot = draw_radix(tree, WordTokenizer()).source
    assert "&quot;an apple is red&quot;" in dot
    elided = draw_radix(tree).source
    assert "[100, 101, 102, …, 127, 128, 129]" in elided and "30 tok" in elided


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["insert", "lock", "unlock", "evict"]),
                          st.lists(st.integers(1, 3), min_size=1, max_size=6)), max_size=12))
def test_radix_every_node_drawn_with_its_lock_colour(ops):
    tree, locked, slot = RadixCache(), [], 0
    for op, key in ops:
        if op == "insert":
            tree.insert(key, list(range(slot, slot + len(key))))
            slot += len(key)
        elif op == "lock":
            _, node = tree.match_prefix(key)
            tree.inc_lock_ref(node)
            locked.append(node)
        elif op == "unlock" and locked:
            tree.dec_lock_ref(locked.pop())
        elif op == "evict":
            tree.evict(len(key))
    nodes = node_statements(draw_radix(tree).source)
    assert len(nodes) == sum(1 for _ in tree.nodes()) + len(tree.last_evicted)
    for n in tree.nodes():
        if n is not tree.root:
            fill = COLORS["protected_fill"] if n.lock_ref > 0 else COLORS["evictable_fill"]
            assert f'fillcolor="{fill}"' in nodes[f"n{n.id}"]
            assert f"lock {n.lock_ref} · last access {n.last_access}" in nodes[f"n{n.id}"]


# ------------------------------------------------------------------------------- block pool


def seed_pool() -> PrefixCachingBlockPool:
    """The chapter's transcript, up to the allocation that overwrites block 1."""
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    blocks = pool.allocate(3)
    pool.cache_blocks([1, 2, 3, 4, 5], blocks, num_computed=5)
    pool.free(blocks)
    hit = pool.lookup([1, 2, 3, 4, 9])
    pool.touch(hit)
    pool.free(hit)
    return pool


def queue_in_picture(dot: str) -> list[int]:
    row = re.search(r"head ▸(.*)◂ tail", dot).group(1)
    return [int(b) for b in re.findall(r"<B>(\d+)</B>", row)]


def test_block_pool_states_queue_and_hash_table():
    pool = seed_pool()
    h0, h1 = pool.block_hash[0], pool.block_hash[1]
    dot = draw_block_pool(pool).source
    assert all(f'PORT="b{b}"' in dot for b in range(4))
    assert queue_in_picture(dot) == list(pool.free_queue) == [3, 2, 1, 0]
    assert dot.count("no hash") == 2 and short_hash(h0) in dot and short_hash(h1) in dot
    assert "[1, 2]" in dot and "[3, 4]" in dot  # the tokens each cached block holds
    assert not any(COLORS["evicted"] in cell for cell in re.findall(r'<TD PORT="b\d+"[^>]*>', dot))
    assert "0 in use · 2 cached and free · 2 empty · 2 hashes cached" in dot

    assert pool.allocate(3) == [3, 2, 1]  # reuses block 1: its cache entry is evicted
    assert pool.last_evicted == [(1, h1)]
    dot = draw_block_pool(pool, block_tables={"r2": [3, 2, 1]}).source
    assert queue_in_picture(dot) == [0]
    cell = re.search(r'<TD PORT="b1"[^>]*>', dot).group(0)
    assert f'COLOR="{COLORS["evicted"]}"' in cell and 'BORDER="2"' in cell
    assert f"evicted {short_hash(h1)}" in dot and f"<S>{short_hash(h1)}</S>" in dot
    assert "ref 1" in dot and "r2" in dot and "[3, 2, 1]" in dot
    assert "3 in use · 1 cached and free · 0 empty · 1 hash cached" in dot
    assert "hashes:h0:s -> blocks:b0:n" in dot  # the live entry points at block 0
    quiet = draw_block_pool(pool, show_evicted=False).source
    assert f"evicted {short_hash(h1)}" not in quiet and "<S>" not in quiet


def test_block_pool_decodes_tokens_and_checks_arguments():
    pool = PrefixCachingBlockPool(num_blocks=2, block_size=2)
    blocks = pool.allocate(2)
    pool.cache_blocks([0, 1, 2, 3], blocks, num_computed=4)
    dot = draw_block_pool(pool, WordTokenizer()).source
    assert "&quot;an apple&quot;" in dot and "&quot; is red&quot;" in dot
    assert "(empty: every block is in use)" in dot
    with pytest.raises(ValueError, match="per_row"):
        draw_block_pool(pool, per_row=0)
    with pytest.raises(ValueError, match="rankdir"):
        draw_radix(RadixCache(), rankdir="BT")


# ------------------------------------------------------------------------------- rendering


@needs_dot
def test_diagrams_render_to_svg():
    tree = seed_tree_after_split()
    svg = html.unescape(draw_radix(tree, WordTokenizer()).pipe(format="svg", encoding="utf-8"))
    assert svg.count('class="node"') == sum(1 for _ in tree.nodes())
    assert "slots 20-21" in svg and '" apple is red"' in svg
    pool = seed_pool()
    pool.allocate(3)
    svg = draw_block_pool(pool).pipe(format="svg", encoding="utf-8")
    assert "<svg" in svg and "block 3" in svg and "evicted" in svg


def test_grouped_bars():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = {"shared system": {"radix": 0.895, "block 16": 0.888, "block 64": 0.86},
             "multi-turn": {"radix": 0.792, "block 16": 0.786, "block 64": 0.768}}
    fig = grouped_bars(table, ylabel="hit rate", percent=True, title="hits")
    ax = fig.axes[0]
    heights = sorted(round(p.get_height(), 3) for p in ax.patches)
    assert heights == sorted(v for row in table.values() for v in row.values())
    assert [t.get_text() for t in ax.get_xticklabels()] == list(table)
    assert "89.5%" in [t.get_text() for t in ax.texts]
    plt.close(fig)
    with pytest.raises(ValueError, match="empty"):
        grouped_bars({})


# ------------------------------------------------------------------------------- a reader's classes
# Chapters 01-03 write their own pool and tree in cells tagged "build"; the pictures draw those
# too (duck typing). The reader's classes are taken from the chapters themselves.


def chapter_classes(chapter: str) -> dict:
    from test_build_cells_vs_exercises import build_source

    namespace: dict = {}
    exec(compile(build_source(chapter), f"{chapter} build cells", "exec"), namespace)
    return namespace


def labels(dot: str) -> list[str]:
    """The node labels of a radix picture, without the node names (ids differ between classes)."""
    return sorted(re.sub(r'tooltip="[^"]*"', "", s.split(" ", 1)[1]) for s in node_statements(dot).values())


def test_draw_radix_draws_a_readers_tree_as_the_package_tree():
    RadixTree = chapter_classes("03_radix_tree")["RadixTree"]
    trees = RadixTree(), RadixCache()
    for tree in trees:
        tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
        tree.insert([1, 2, 3, 9, 9], [10, 11, 12, 20, 21])
        _, node = tree.match_prefix([1, 2, 3, 4, 7])
        tree.inc_lock_ref(node)
    mine, theirs = (draw_radix(t, show_match=False, show_split=False).source for t in trees)
    assert len(node_statements(mine)) == 5      # root, [1, 2, 3], [4], [5], [9, 9]
    assert labels(mine) == labels(theirs)       # same boxes: tokens, slots, locks, clocks, colours
    assert mine.count(COLORS["protected_fill"]) == theirs.count(COLORS["protected_fill"]) >= 2
    assert "evictable 3 · protected 4 · total 7 tokens" in mine
    assert "last match path" in theirs and "last match path" not in mine   # nothing to highlight
    assert len(edges(mine)) == 4
    trees[0].evict(10)                           # no eviction record on a reader's tree: no ghosts
    assert COLORS["evicted"] not in "".join(node_statements(draw_radix(trees[0]).source).values())


def test_draw_block_pool_draws_a_readers_pools():
    PrefixCache = chapter_classes("02_prefix_cache_hashed_blocks")["PrefixCache"]
    pools = PrefixCache(4, 2), PrefixCachingBlockPool(4, 2)
    for pool in pools:
        blocks = pool.allocate(3)
        pool.cache_blocks([1, 2, 3, 4, 5], blocks, num_computed=5)
        pool.free(blocks)
        pool.touch(pool.lookup([1, 2, 3, 4, 9]))
        pool.free([0, 1])
        assert pool.allocate(3) == [3, 2, 1]
    mine, theirs = (draw_block_pool(p).source for p in pools)
    assert queue_in_picture(mine) == queue_in_picture(theirs) == [0]
    assert "3 in use · 1 cached and free · 0 empty · 1 hash cached" in mine
    assert f"evicted {short_hash(pools[0].last_evicted[0][1])}" in mine

    MyBlockPool = chapter_classes("01_paged_block_pool")["MyBlockPool"]
    pool = MyBlockPool(8)
    pool.allocate(3)
    dot = draw_block_pool(pool, block_tables={"a": [0, 1, 2]}).source
    assert queue_in_picture(dot) == [3, 4, 5, 6, 7] and "tokens each" not in dot
    assert "3 in use · 5 free" in dot and "ref 1" in dot and dot.count(">free<") == 5 + 1   # + legend
    assert "hash" not in dot and "empty" not in dot       # a pool without a cache shows no cache
