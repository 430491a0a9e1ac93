"""viz.py - pictures of the two prefix caches, for the notebooks.

``draw_radix(tree)`` draws a ``RadixCache`` and ``draw_block_pool(pool)`` a
``PrefixCachingBlockPool``. Both return a ``graphviz.Digraph``: the last expression of a notebook
cell renders it inline, ``.source`` is its DOT text, ``.pipe(format="svg")`` renders it (this needs
Graphviz's ``dot`` program; the ``graphviz`` Python package only writes DOT).

The two pictures share one colour code, so a reader who learns it once reads both:

* orange: in use. A radix node some request has locked (``lock_ref > 0``, *protected*), or a block
  with a reference count above zero. Eviction cannot touch it.
* blue: cached but unused. An unlocked radix node (*evictable*), or a free block that still holds
  its hash. It can serve a hit, and it is what eviction takes.
* white: a free block that caches nothing.
* green: the path the last lookup walked. Purple: the node the last split created.
* red, dashed: what the last eviction removed (radix leaves appear as ghosts under their old
  parent; blocks are marked where they were overwritten).

Both read their structure by duck typing, so a reader's own classes written in a chapter draw too:
``draw_block_pool`` needs ``ref_cnt`` and ``free_queue`` (``block_hash``, ``hash_to_block``,
``block_size``, ``last_evicted`` when there); ``draw_radix`` needs ``root`` (nodes with ``key``,
``value``, ``children``, ``parent``, ``lock_ref``, ``last_access``), ``evictable_size``,
``protected_size`` and ``total_size()``; the package's extras (``nodes()``, node ``id``,
``last_match_path``, ``last_split``, ``last_evicted``, ``page_size``) are used when present.

``draw_tiered_radix(tree)`` draws a ``HiRadixCache`` (chapter 06) with its own colour code, by
where a node's KV lives: blue on the device only, lilac on the host only, striped on both; locked
nodes orange-bordered, copies in flight dashed orange, deleted nodes red ghosts as above.

``grouped_bars`` is the one chart helper: grouped bar charts of tables such as hit rate per
workload and method.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import graphviz

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from nano_engine.hiradix import HiRadixCache
    from nano_engine.prefix_cache import PrefixCachingBlockPool
    from nano_engine.radix import Node, RadixCache


class Tokenizer(Protocol):
    """Anything with a Hugging Face style ``decode(ids) -> str`` (``AutoTokenizer`` qualifies)."""

    def decode(self, ids: list[int]) -> str: ...


COLORS = {
    "protected": "#E8862E",  # border of locked nodes / referenced blocks
    "protected_fill": "#FDE8D5",
    "evictable": "#3E83C3",  # border of unlocked nodes / cached free blocks
    "evictable_fill": "#DCEAF8",
    "empty": "#A9A9A9",  # border of free blocks holding nothing
    "empty_fill": "#FFFFFF",
    "root": "#7F7F7F",
    "root_fill": "#EFEFEF",
    "match": "#2A9D5C",  # the last match / insert path
    "split": "#8E44AD",  # the node the last split created
    "evicted": "#D64541",  # what the last eviction removed
    "text": "#222222",
    "muted": "#6B6B6B",
    "ghost_text": "#9A9A9A",
}
"""The colour code of both pictures (tests look for these in the DOT source)."""

FONT = "Helvetica"
MONO = "Courier"


# ------------------------------------------------------------------------------- formatting


def format_tokens(tokens: Sequence[int], tokenizer: Tokenizer | None = None, max_tokens: int = 6,
                  max_chars: int = 28) -> str:
    """A run of tokens as short text: ``[1, 2, 3]``, or ``"an apple"`` with a tokenizer.

    Long runs keep their ends and elide the middle (``[1, 2, 3, …, 98, 99]``), because the ends are
    what tell two neighbouring runs apart. Newlines and tabs are made visible.
    """
    tokens = [int(t) for t in tokens]
    if tokenizer is not None:
        text = tokenizer.decode(tokens).replace("\n", "⏎").replace("\t", "⇥")
        if len(text) > max_chars:
            keep = max_chars // 2
            text = f"{text[:keep]}…{text[-(max_chars - keep - 1):]}"
        return f'"{text}"'
    if len(tokens) > max_tokens:
        head, tail = (max_tokens + 1) // 2, max_tokens // 2
        return "[" + ", ".join(map(str, tokens[:head])) + ", …, " + ", ".join(map(str, tokens[-tail:])) + "]"
    return "[" + ", ".join(map(str, tokens)) + "]"


def format_split(key_before: Sequence[int], at: int, tokenizer: Tokenizer | None = None,
                 max_tokens: int = 6) -> str:
    """A run with a bar where it was cut: ``[1, 2, 3 | 4, 5]``, or ``"an apple is| red"`` as text
    (the text keeps its own spaces, so the bar sits exactly at the token boundary)."""
    front = format_tokens(key_before[:at], tokenizer, max_tokens)
    back = format_tokens(key_before[at:], tokenizer, max_tokens)
    return f"{front[:-1]}|{back[1:]}" if tokenizer is not None else f"{front[:-1]} | {back[1:]}"


def format_slots(slots: Sequence[int], max_runs: int = 3) -> str:
    """KV slots as ranges: ``10-12, 20-21``. Slots are usually consecutive, so this stays short."""
    runs: list[list[int]] = []
    for s in slots:
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    if len(parts) > max_runs:
        parts = parts[:max_runs - 1] + [f"… ({len(runs)} runs)"]
    return ", ".join(parts) if parts else "none"


def short_hash(h: Hashable, digits: int = 4) -> str:
    """The last ``digits`` hex digits of a block hash, e.g. ``#3fa2``: enough to tell blocks apart.

    Python's builtin hash gives an int, vLLM's sha256 / xxhash choices give bytes."""
    if isinstance(h, bytes):
        return "#" + h.hex()[-digits:]
    return "#" + format((h if isinstance(h, int) else hash(h)) % (1 << 64), "016x")[-digits:]


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _label(lines: list[str]) -> str:
    """An HTML-like label: one left-aligned table row per (already formatted) line."""
    rows = "".join(f'<TR><TD ALIGN="LEFT">{line}</TD></TR>' for line in lines)
    return f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">{rows}</TABLE>>'


def _font(text: str, size: int = 11, color: str | None = None, face: str | None = None,
          bold: bool = False) -> str:
    attrs = f' POINT-SIZE="{size}"'
    if color:
        attrs += f' COLOR="{color}"'
    if face:
        attrs += f' FACE="{face}"'
    body = f"<B>{text}</B>" if bold else text
    return f"<FONT{attrs}>{body}</FONT>"


def _swatch(text: str, fill: str, border: str, style: str = "rounded", width: int = 1) -> str:
    """One legend cell drawn like the thing it explains."""
    return (f'<TD BGCOLOR="{fill}" COLOR="{border}" BORDER="{width}" STYLE="{style}" '
            f'CELLPADDING="4">{_font(_esc(text), 10)}</TD>')


def _legend_row(cells: list[str], caption: str | None = None) -> str:
    caption_row = (f'<TR><TD COLSPAN="{len(cells)}" ALIGN="LEFT">{_font(_esc(caption), 10, COLORS["muted"])}'
                   f'</TD></TR>' if caption else "")
    return (f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="6">{caption_row}<TR>{"".join(cells)}</TR>'
            f'</TABLE>>')


def _digraph(name: str, rankdir: str, title: str | None) -> graphviz.Digraph:
    g = graphviz.Digraph(name)
    g.attr(rankdir=rankdir, fontname=FONT, nodesep="0.25", ranksep="0.35", pad="0.2",
           bgcolor="white", labelloc="b", labeljust="l")
    if title:
        g.attr(label=title)
    g.attr("node", fontname=FONT, fontsize="11", fontcolor=COLORS["text"], margin="0.12,0.06")
    g.attr("edge", color="#9A9A9A", arrowsize="0.7", penwidth="1.2")
    return g


# ------------------------------------------------------------------------------- radix tree


def draw_radix(
    tree: RadixCache,
    tokenizer: Tokenizer | None = None,
    *,
    show_match: bool = True,
    show_split: bool = True,
    show_evicted: bool = True,
    max_tokens: int = 6,
    rankdir: str = "TB",
    legend: bool = True,
) -> graphviz.Digraph:
    """Draw a radix tree: one box per node, coloured protected (orange) or evictable (blue).

    Each box shows the node's token run (decoded when ``tokenizer`` is given; long runs elided in
    the middle), its KV slots, lock count (``lock_ref``) and last access time. Highlighted, each
    switchable: the path of the last ``match_prefix``/``insert`` (green), the node the last split
    created (purple), and the nodes the last ``evict`` removed, drawn dashed under their old parent.
    """
    if rankdir not in ("TB", "LR"):
        raise ValueError(f"rankdir must be 'TB' or 'LR', got {rankdir!r}")
    live = _radix_nodes(tree)
    nid = _node_ids(live)
    live_ids = {nid(n) for n in live}
    path = [n for n in getattr(tree, "last_match_path", []) if nid(n) in live_ids] if show_match else []
    on_path = {nid(n) for n in path}
    path_edges = {(nid(a), nid(b)) for a, b in zip(path, path[1:])}
    split = getattr(tree, "last_split", None) if show_split else None
    split_id = nid(split) if split is not None and nid(split) in live_ids else None

    g = _digraph("radix", rankdir, None)
    for node in live:
        g.node(f"n{nid(node)}", **_radix_node_style(tree, node, tokenizer, max_tokens,
                                                       on_path=nid(node) in on_path,
                                                       split=nid(node) == split_id))
        if node.parent is not None:
            edge = (nid(node.parent), nid(node))
            if edge in path_edges:
                g.edge(f"n{edge[0]}", f"n{edge[1]}", color=COLORS["match"], penwidth="2.6")
            else:
                g.edge(f"n{edge[0]}", f"n{edge[1]}")

    ghosts = _evicted_with_parents(tree) if show_evicted else []
    ghost_ids = {nid(n) for n, _ in ghosts}
    for node, parent in ghosts:
        g.node(f"n{nid(node)}", **_ghost_style(node, tokenizer, max_tokens))
        if nid(parent) in live_ids or nid(parent) in ghost_ids:
            g.edge(f"n{nid(parent)}", f"n{nid(node)}", color=COLORS["evicted"], style="dashed",
                   arrowhead="none")

    if legend:
        sizes = (f"evictable {tree.evictable_size} · protected {tree.protected_size} · "
                 f"total {tree.total_size()} tokens")
        if getattr(tree, "page_size", 1) > 1:
            sizes += f" · page size {tree.page_size}"
        swatches = [
            _swatch("protected (lock > 0)", COLORS["protected_fill"], COLORS["protected"]),
            _swatch("evictable (lock 0)", COLORS["evictable_fill"], COLORS["evictable"]),
        ]
        if hasattr(tree, "last_match_path"):  # a reader's tree keeps no record of its last operations
            swatches += [
                _swatch("last match path", "white", COLORS["match"], width=2),
                _swatch("made by last split", "white", COLORS["split"], width=2),
                _swatch("evicted", "white", COLORS["evicted"], style="dashed"),
            ]
        g.attr(label=_legend_row(swatches, caption=sizes))
    return g


def _evicted_with_parents(tree: RadixCache) -> list[tuple[Node, Node]]:
    """The last eviction's nodes, each with the parent it was removed from."""
    return list(zip(getattr(tree, "last_evicted", []), getattr(tree, "last_evicted_parents", [])))


def _node_ids(live: list[Node]) -> Callable[[Node], int]:
    """Node -> its name in the picture: the package's ``id`` field; for a reader's tree, whose
    nodes have none, the node's place in a walk of the live tree (stable for equal trees)."""
    if all(getattr(n, "id", None) is not None for n in live):
        return lambda n: n.id
    order = {id(n): i for i, n in enumerate(live)}
    return lambda n: order.get(id(n), -1)


def _radix_nodes(tree: RadixCache) -> list[Node]:
    """Every node, root first: ``tree.nodes()`` when the tree has it, else a walk from ``root``."""
    if hasattr(tree, "nodes"):
        return list(tree.nodes())
    out, stack = [], [tree.root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(list(node.children.values())))
    return out


def _radix_node_style(tree: RadixCache, node: Node, tokenizer: Tokenizer | None, max_tokens: int,
                      *, on_path: bool, split: bool) -> dict[str, str]:
    if node is tree.root:
        lines = [_font("root", 12, bold=True)]
        fill, border = COLORS["root_fill"], COLORS["root"]
    else:
        locked = node.lock_ref > 0
        lines = [
            _font(_esc(format_tokens(node.key, tokenizer, max_tokens)), 12,
                  face=None if tokenizer else MONO, bold=True),
            _font(_esc(f"{len(node.key)} tok · slots {format_slots(node.value)}"), 9, COLORS["muted"]),
            _font(_esc(f"lock {node.lock_ref} · last access {node.last_access}"), 9,
                  COLORS["protected"] if locked else COLORS["muted"]),
        ]
        fill = COLORS["protected_fill"] if locked else COLORS["evictable_fill"]
        border = COLORS["protected"] if locked else COLORS["evictable"]
    penwidth = "1.2"
    if split:
        lines.append(_font("new: front of a split", 9, COLORS["split"], bold=True))
        border, penwidth = COLORS["split"], "2.6"
    elif on_path and node is not tree.root:
        border, penwidth = COLORS["match"], "2.6"
    return {"label": _label(lines), "shape": "box", "style": "rounded,filled", "fillcolor": fill,
            "color": border, "penwidth": penwidth, "tooltip": f"node {getattr(node, 'id', '')}"}


def _ghost_style(node: Node, tokenizer: Tokenizer | None, max_tokens: int) -> dict[str, str]:
    lines = [
        _font(_esc(format_tokens(node.key, tokenizer, max_tokens)), 12, COLORS["ghost_text"],
              face=None if tokenizer else MONO),
        _font(_esc(f"{len(node.key)} tok · slots {format_slots(node.value)}"), 9, COLORS["ghost_text"]),
        _font(f"evicted (last access {node.last_access})", 9, COLORS["evicted"], bold=True),
    ]
    return {"label": _label(lines), "shape": "box", "style": "rounded,dashed,filled",
            "fillcolor": "white", "color": COLORS["evicted"], "penwidth": "1.6",
            "tooltip": f"evicted node {getattr(node, 'id', '')}"}


# ------------------------------------------------------------------------------- tiered radix tree

TIER_COLORS = {
    "device": ("#3E83C3", "#DCEAF8"),       # (border, fill): the device copy only
    "host": ("#7D5BA6", "#E9E0F3"),         # the host copy only
    "device+host": ("#4F6FB0", "#DCEAF8;0.5:#E9E0F3"),   # both copies: striped blue | lilac
}
"""The three node states of a tiered radix tree (``hiradix.HiNode.state``), as the tier picture colours them."""


def draw_tiered_radix(
    tree: HiRadixCache,
    tokenizer: Tokenizer | None = None,
    *,
    events: Sequence[tuple[str, dict]] = (),
    show_match: bool = True,
    counts: Mapping[str, int] | None = None,
    device_capacity: int | None = None,
    max_tokens: int = 6,
    legend: bool = True,
) -> graphviz.Digraph:
    """Draw a :class:`~nano_engine.hiradix.HiRadixCache`: one box per node, coloured by where its KV is.

    Blue: on the device only; lilac: on the host only; striped blue | lilac: on both. A locked node
    has an orange border; a node whose copy (store to the host, or load back to the device) is not
    acknowledged yet has a dashed orange border and says so, with "queued" (submitted) or "started".
    ``events`` are the tree's own events of the last operation (its ``on_event`` records): nodes it
    demoted (device copy dropped) are marked, nodes it deleted (device eviction of a node without a
    host copy, or host eviction) are drawn dashed red under their old parent. ``counts`` (e.g.
    evictions per tier) and ``device_capacity`` go into the caption.
    """
    live = list(tree.nodes())
    live_ids = {n.id for n in live}
    path = [n for n in getattr(tree, "last_match_path", []) if n.id in live_ids] if show_match else []
    on_path = {n.id for n in path}
    path_edges = {(a.id, b.id) for a, b in zip(path, path[1:])}
    marks: dict[int, str] = {}
    for kind, data in events:
        if kind in _TIER_MARKS and data.get("node") in live_ids:
            marks[data["node"]] = _TIER_MARKS[kind]
    queued = {id(c) for c in tree.copies.submitted}

    g = _digraph("tiered_radix", "TB", None)
    for node in live:
        g.node(f"n{node.id}", **_tier_node_style(tree, node, tokenizer, max_tokens, marks.get(node.id),
                                                 on_path=node.id in on_path, queued=queued))
        if node.parent is not None:
            if (node.parent.id, node.id) in path_edges:
                g.edge(f"n{node.parent.id}", f"n{node.id}", color=COLORS["match"], penwidth="2.6")
            else:
                g.edge(f"n{node.parent.id}", f"n{node.id}")
    ghost_ids: set[int] = set()
    for kind, data in events:
        if kind not in ("evict", "evict_host"):
            continue
        where = "device (no host copy)" if kind == "evict" else "host"
        lines = [_font(_esc(format_tokens(data["key"], tokenizer, max_tokens)), 12, COLORS["ghost_text"],
                       face=None if tokenizer else MONO),
                 _font(_esc(f"{len(data['key'])} tok"), 9, COLORS["ghost_text"]),
                 _font(_esc(f"evicted from the {where}: gone"), 9, COLORS["evicted"], bold=True)]
        g.node(f"n{data['node']}", label=_label(lines), shape="box", style="dashed,filled", fillcolor="white",
               color=COLORS["evicted"], penwidth="1.6", tooltip=f"evicted node {data['node']}")
        ghost_ids.add(data["node"])
        if data.get("parent") in live_ids or data.get("parent") in ghost_ids:
            g.edge(f"n{data['parent']}", f"n{data['node']}", color=COLORS["evicted"], style="dashed",
                   arrowhead="none")
    if legend:
        pool = f" (pool {device_capacity})" if device_capacity is not None else ""
        caption = (f"cached on the device {tree.total_size()} tokens{pool} · on the host {tree.host_size} "
                   f"(pool {tree.host.num_slots}) · write policy {tree.write_policy}")
        if counts:
            caption += " · " + " · ".join(f"{k} {v}" for k, v in counts.items())
        swatches = [_tier_swatch("device only", "device"), _tier_swatch("device + host", "device+host"),
                    _tier_swatch("host only", "host"),
                    _swatch("locked", "white", COLORS["protected"], style="solid", width=2),
                    _swatch("copy in flight", "white", COLORS["protected"], style="dashed", width=2),
                    _swatch("evicted", "white", COLORS["evicted"], style="dashed")]
        g.attr(label=_legend_row(swatches, caption=caption))
    return g


_TIER_MARKS = {"demote": "device copy dropped (demoted)", "backup": "backed up to the host",
               "load": "loading back to the device"}


def _tier_swatch(text: str, state: str) -> str:
    border, fill = TIER_COLORS[state]
    if ";" in fill:   # a table cell cannot be striped: two half cells
        a, b = fill.split(";")[0], fill.split(":")[1]
        return (f'<TD COLOR="{border}" BORDER="1" CELLPADDING="0"><TABLE BORDER="0" CELLBORDER="0" '
                f'CELLSPACING="0"><TR><TD BGCOLOR="{a}" CELLPADDING="4">{_font(_esc(text[:6]), 10)}</TD>'
                f'<TD BGCOLOR="{b}" CELLPADDING="4">{_font(_esc(text[6:]), 10)}</TD></TR></TABLE></TD>')
    return _swatch(text, fill, border, style="solid")


def _tier_node_style(tree: HiRadixCache, node: Node, tokenizer: Tokenizer | None, max_tokens: int,
                     mark: str | None, *, on_path: bool, queued: set[int]) -> dict[str, str]:
    if node is tree.root:
        return {"label": _label([_font("root", 12, bold=True)]), "shape": "box", "style": "rounded,filled",
                "fillcolor": COLORS["root_fill"], "color": COLORS["root"], "tooltip": "root"}
    state: str = node.state    # type: ignore[attr-defined]
    host_value = node.host_value    # type: ignore[attr-defined]
    border, fill = TIER_COLORS[state]
    locked = node.lock_ref > 0
    lines = [
        _font(_esc(format_tokens(node.key, tokenizer, max_tokens)), 12, face=None if tokenizer else MONO, bold=True),
        _font(_esc(f"{len(node.key)} tok · {state}"), 9, COLORS["muted"]),
        _font(_esc(f"device slots {format_slots(node.value)}" if node.value else "device: none"), 9, COLORS["muted"]),
        _font(_esc(f"host slots {format_slots(host_value)}" if host_value is not None else "host: none"), 9,
              COLORS["muted"]),
        _font(_esc(f"lock {node.lock_ref} · last access {node.last_access}"), 9,
              COLORS["protected"] if locked else COLORS["muted"]),
    ]
    style, penwidth = ("striped" if ";" in fill else "filled"), "1.2"
    if locked:
        border, penwidth = COLORS["protected"], "2.2"
    copy = node.copy    # type: ignore[attr-defined]
    if node.in_flight:    # type: ignore[attr-defined]
        where = "store to the host" if copy.kind == "store" else "load to the device"
        lines.append(_font(_esc(f"{where} in flight ({'queued' if id(copy) in queued else 'started'})"), 9,
                           COLORS["protected"], bold=True))
        style += ",dashed"
        border, penwidth = COLORS["protected"], "2.4"
    if mark:
        lines.append(_font(_esc(mark), 9, COLORS["evicted"] if "dropped" in mark else COLORS["match"], bold=True))
    if on_path and not node.in_flight:    # type: ignore[attr-defined]
        border, penwidth = COLORS["match"], "2.6"
    return {"label": _label(lines), "shape": "box", "style": style, "fillcolor": fill, "color": border,
            "penwidth": penwidth, "tooltip": f"node {node.id} ({state})"}


# ------------------------------------------------------------------------------- block pool


def draw_block_pool(
    pool: PrefixCachingBlockPool,
    tokenizer: Tokenizer | None = None,
    *,
    block_tables: Mapping[str, Sequence[int]] | None = None,
    show_evicted: bool = True,
    per_row: int = 8,
    max_tokens: int = 6,
    legend: bool = True,
) -> graphviz.Digraph:
    """Draw a block pool: every block's state, the free queue head to tail, and the hash table.

    A block is *in use* (orange, with its reference count), *cached and free* (blue, with a short
    hash and the tokens it holds) or *empty* (white). The free queue lists the free blocks in the
    order ``allocate`` takes them. Each hash-table entry points at its block. Blocks whose cache
    entry the last ``allocate`` evicted are outlined in red with the hash they lost, and that hash
    is struck through in the table. ``block_tables`` (name -> block ids) adds the requests' block
    tables, for pictures of a running engine.
    """
    if per_row < 1:
        raise ValueError(f"per_row must be >= 1, got {per_row}")
    evicted = dict(getattr(pool, "last_evicted", [])) if show_evicted else {}
    num_blocks = len(pool.ref_cnt)
    hash_to_block: Mapping[Hashable, int] = getattr(pool, "hash_to_block", {})
    block_size = getattr(pool, "block_size", None)
    caching = hasattr(pool, "block_hash")  # chapter 01's pool caches nothing: no hash table to draw
    g = _digraph("block_pool", "TB", None)
    g.attr(nodesep="0.5", ranksep="0.45")
    g.attr("node", shape="plaintext", margin="0")

    # The blocks, in id order, as rows of cells (a picture of memory).
    rows = []
    for start in range(0, num_blocks, per_row):
        cells = "".join(_block_cell(pool, b, evicted.get(b), tokenizer, max_tokens, caching)
                        for b in range(start, min(start + per_row, num_blocks)))
        rows.append(f"<TR>{cells}</TR>")
    title = (f'<TD ROWSPAN="{len(rows)}" VALIGN="MIDDLE">{_font("blocks", 10, COLORS["muted"], bold=True)}'
             + (f'<BR/>{_font(f"{block_size} tokens each", 9, COLORS["muted"])}' if block_size else "")
             + '</TD>')
    rows[0] = rows[0].replace("<TR>", "<TR>" + title, 1)
    g.node("blocks", label=f'<<TABLE BORDER="0" CELLSPACING="4" CELLPADDING="0">{"".join(rows)}</TABLE>>')

    # The hash table: one column per entry (plus struck-through ones just evicted), pointing at blocks.
    entries = [(h, b, False) for h, b in hash_to_block.items()]
    entries += [(h, b, True) for b, h in evicted.items()]
    if not caching:
        pass
    elif entries:
        heads, targets = [], []
        for i, (h, b, gone) in enumerate(entries):
            color = COLORS["evicted"] if gone else COLORS["evictable"]
            text = f"<S>{short_hash(h)}</S>" if gone else short_hash(h)
            heads.append(f'<TD BORDER="1" COLOR="{color}" BGCOLOR="white" CELLPADDING="4">'
                         f'{_font(text, 10, color, MONO)}</TD>')
            targets.append(f'<TD PORT="h{i}" CELLPADDING="2">{_font(f"→ {b}", 9, COLORS["muted"])}</TD>')
        g.node("hashes", label=f'<<TABLE BORDER="0" CELLSPACING="3" CELLPADDING="0"><TR><TD ROWSPAN="2">'
                               f'{_font("hash → block", 10, COLORS["muted"], bold=True)}</TD>{"".join(heads)}</TR>'
                               f'<TR>{"".join(targets)}</TR></TABLE>>')
        for i, (_, b, gone) in enumerate(entries):
            if gone:
                g.edge(f"hashes:h{i}:s", f"blocks:b{b}:n", color=COLORS["evicted"], style="dashed",
                       arrowhead="tee")
            else:
                g.edge(f"hashes:h{i}:s", f"blocks:b{b}:n", color=COLORS["evictable"], penwidth="1")
    else:
        g.node("hashes", label=_label([_font("hash → block: (empty)", 10, COLORS["muted"], bold=True)]))
    if caching:
        g.edge("hashes", "blocks", style="invis")

    # The free queue, head (reused first) to tail.
    queue = list(pool.free_queue)
    queue_cells = []
    for b in queue:
        cached = _hash_of(pool, b) is not None
        fill = COLORS["evictable_fill"] if cached else COLORS["empty_fill"]
        border = COLORS["evictable"] if cached else COLORS["empty"]
        queue_cells.append(f'<TD BORDER="1" COLOR="{border}" BGCOLOR="{fill}" CELLPADDING="4" WIDTH="24">'
                     f'{_font(str(b), 11, bold=True)}</TD>')
    body = ("".join(queue_cells) if queue_cells
            else f'<TD>{_font("(empty: every block is in use)", 10, COLORS["muted"])}</TD>')
    g.node("queue", label=f'<<TABLE BORDER="0" CELLSPACING="2" CELLPADDING="0"><TR>'
                          f'<TD>{_font("free queue", 10, COLORS["muted"], bold=True)}</TD>'
                          f'<TD>{_font("head ▸", 9, COLORS["muted"])}</TD>{body}'
                          f'<TD>{_font("◂ tail", 9, COLORS["muted"])}</TD></TR></TABLE>>')
    g.edge("blocks", "queue", style="invis")

    if block_tables:
        table_rows = "".join(f'<TR><TD ALIGN="LEFT">{_font(_esc(name), 10, bold=True)}</TD>'
                             f'<TD ALIGN="LEFT">{_font(_esc(str(list(table))), 10, face=MONO)}</TD></TR>'
                             for name, table in block_tables.items())
        g.node("tables", label=f'<<TABLE BORDER="0" CELLSPACING="2"><TR><TD COLSPAN="2" ALIGN="LEFT">'
                               f'{_font("block tables", 10, COLORS["muted"], bold=True)}</TD></TR>{table_rows}</TABLE>>')
        g.edge("blocks", "tables", style="invis")

    if legend and not caching:
        in_use = sum(1 for c in pool.ref_cnt if c > 0)
        g.attr(label=_legend_row([
            _swatch("in use (ref count)", COLORS["protected_fill"], COLORS["protected"], "solid"),
            _swatch("free", COLORS["empty_fill"], COLORS["empty"], "solid"),
        ], caption=f"{in_use} in use · {len(queue)} free"))
    elif legend:
        in_use = sum(1 for c in pool.ref_cnt if c > 0)
        cached_free = sum(1 for b in queue if _hash_of(pool, b) is not None)
        sizes = (f"{in_use} in use · {cached_free} cached and free · "
                 f"{len(queue) - cached_free} empty · {len(hash_to_block)} "
                 f"hash{'es' * (len(hash_to_block) != 1)} cached")
        g.attr(label=_legend_row([
            _swatch("in use (ref count)", COLORS["protected_fill"], COLORS["protected"], "solid"),
            _swatch("cached, free (hash)", COLORS["evictable_fill"], COLORS["evictable"], "solid"),
            _swatch("empty", COLORS["empty_fill"], COLORS["empty"], "solid"),
            _swatch("evicted by last allocate", "white", COLORS["evicted"], "solid", 2),
        ], caption=sizes))
    return g


def _block_cell(pool: PrefixCachingBlockPool, b: int, evicted_hash: Hashable | None,
                tokenizer: Tokenizer | None, max_tokens: int, caching: bool = True) -> str:
    ref, h = pool.ref_cnt[b], _hash_of(pool, b)
    if ref > 0:
        fill, border, state = COLORS["protected_fill"], COLORS["protected"], f"ref {ref}"
    elif h is not None:
        fill, border, state = COLORS["evictable_fill"], COLORS["evictable"], "free"
    else:
        fill, border, state = COLORS["empty_fill"], COLORS["empty"], "empty" if caching else "free"
    lines = [_font(f"block {b}", 11, bold=True), _font(state, 9, COLORS["text"])]
    if h is not None:
        lines.append(_font(short_hash(h), 9, COLORS["evictable"], MONO))
        entry = getattr(pool, "cache_entry", None)
        if entry is not None and entry[b] is not None:
            lines.append(_font(_esc(format_tokens(entry[b].token_ids, tokenizer, max_tokens, 14)), 9,
                               COLORS["muted"], None if tokenizer else MONO))
    elif caching:
        lines.append(_font("no hash", 9, COLORS["ghost_text"]))
    width = "1"
    if evicted_hash is not None:
        lines.append(_font(f"evicted {short_hash(evicted_hash)}", 9, COLORS["evicted"], bold=True))
        border, width = COLORS["evicted"], "2"
    inner = "".join(f"<TR><TD>{line}</TD></TR>" for line in lines)
    return (f'<TD PORT="b{b}" BORDER="{width}" COLOR="{border}" BGCOLOR="{fill}" CELLPADDING="5" '
            f'WIDTH="78"><TABLE BORDER="0" CELLSPACING="0" CELLPADDING="1">{inner}</TABLE></TD>')


def _hash_of(pool: PrefixCachingBlockPool, b: int) -> Hashable | None:
    """Block ``b``'s hash, or None; a pool without hashes (chapter 01's) caches nothing."""
    hashes = getattr(pool, "block_hash", None)
    return None if hashes is None else hashes[b]


# ------------------------------------------------------------------------------- charts


def grouped_bars(
    table: Mapping[str, Mapping[str, float]],
    *,
    ylabel: str = "",
    title: str = "",
    percent: bool = False,
    fmt: str | None = None,
    ax: Any = None,
) -> Figure:
    """A grouped bar chart of ``{row: {column: value}}``: one group per row, one bar per column.

    For example ``{"multi-turn": {"radix": 0.79, "block 16": 0.786}, ...}`` gives a group per
    workload with a bar per method. ``percent`` labels the bars and the axis in percent; ``fmt``
    overrides the bar labels' format (default: whole numbers for counts, else 3 digits).
    """
    import matplotlib.pyplot as plt
    import numpy as np

    if not table:
        raise ValueError("grouped_bars: the table is empty")
    rows = list(table)
    columns = list(dict.fromkeys(c for r in rows for c in table[r]))
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows) + 1), 3.6), layout="constrained")
    else:
        fig = ax.figure
    if fmt is None:
        counts = all(float(v).is_integer() for r in rows for v in table[r].values())
        fmt = "{:.1%}" if percent else ("{:,.0f}" if counts else "{:.3g}")
    x = np.arange(len(rows))
    width = 0.8 / len(columns)
    for i, column in enumerate(columns):
        values = [table[r].get(column, np.nan) for r in rows]
        bars = ax.bar(x + (i - (len(columns) - 1) / 2) * width, values, width, label=column)
        ax.bar_label(bars, fmt=fmt, fontsize=8, padding=2)
    ax.set_xticks(x, rows)
    if percent:
        ax.yaxis.set_major_formatter(plt.matplotlib.ticker.PercentFormatter(1.0))
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, ncols=min(len(columns), 4), loc="upper center", bbox_to_anchor=(0.5, -0.12))
    return fig
