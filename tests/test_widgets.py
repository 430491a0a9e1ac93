"""The steppers of chapters 02 and 03 (``nano_engine.notebook.pool_stepper``, ``radix_stepper``, on the
base in ``stepper``) and the predictions (``predict``), driven from code (no browser); and the old
``widgets`` module they were split from.

What they narrate is checked against the caches' own records (the radix tree's events and
``last_*`` attributes, the pool's KV events and ``last_evicted``) and against a hand-written run
of the same operations on a cache of our own.
"""

import doctest
import html
import importlib
import sys

import pytest
from hypothesis import given, settings, strategies as st

from nano_engine.kv_events import BlockRemoved, BlockStored
from nano_engine.notebook import static_html
from nano_engine.notebook.pool_stepper import BlockPoolStepper
from nano_engine.notebook.predict import Prediction, Revealed, predict
from nano_engine.notebook.radix_stepper import RadixStepper
from nano_engine.notebook.stepper import Request, Step, StepperState, encode_requests
from nano_engine.notebook.tier_stepper import TierStepper
from nano_engine.notebook.viz import COLORS, format_slots, format_tokens, short_hash
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.radix import RadixCache

# r2 holds [1 .. 5] locked while r3 arrives and splits it: the front must inherit the lock.
SPLIT_WHILE_LOCKED = [[1, 2, 3, 4, 5], [9], [1, 2, 3, 4, 5, 6], [1, 2, 3, 7]]


def run_all(stepper):
    states = [stepper.state]
    while stepper.index < stepper.num_steps:
        states.append(stepper.step())
    return states


def test_back_restores_every_diagram():
    stepper = RadixStepper(SPLIT_WHILE_LOCKED, capacity=6, concurrent=2)
    forward = run_all(stepper)
    assert stepper.step() == forward[-1]  # stepping past the end changes nothing
    for i in range(len(forward) - 1, 0, -1):
        assert stepper.back() == forward[i - 1]
    assert stepper.back() == forward[0]
    assert stepper.go_to(7) == forward[7] and stepper.go_to(3) == forward[3]
    assert stepper.reset() == forward[0]
    assert [s.dot for s in run_all(stepper)] == [s.dot for s in forward]


def test_narration_is_what_the_tree_did():
    stepper = RadixStepper(SPLIT_WHILE_LOCKED, concurrent=2)
    states = run_all(stepper)
    kinds = [s.kind for s in states[1:]]
    assert kinds == ["match", "match", "insert", "match", "lock", "insert", "match", "lock",
                     "insert", "unlock", "insert", "unlock"]
    # The split is the tree's own event, and the narration says what it did.
    split_states = [s for s in states if any(e[0] == "split" for e in s.events)]
    assert len(split_states) == 1
    [split] = [data for kind, data in split_states[0].events if kind == "split"]
    assert split["key_before"] == [1, 2, 3, 4, 5] and split["at"] == 3 and split["inherited_lock"] == 1
    assert "split [1, 2, 3 | 4, 5] at 3; the front inherits lock 1" in split_states[0].narration
    assert split_states[0].narration.startswith("r3: ")

    # The same operations by hand on a tree of our own give the same events.
    events = []
    tree = RadixCache(on_event=events.append)
    tree.match_prefix([1, 2, 3, 4, 5])
    tree.match_prefix([9])
    tree.insert([1, 2, 3, 4, 5], [0, 1, 2, 3, 4])
    _, locked = tree.match_prefix([1, 2, 3, 4, 5, 6])
    tree.inc_lock_ref(locked)
    tree.insert([9], [5])
    _, front = tree.match_prefix([1, 2, 3, 7])
    tree.inc_lock_ref(front)
    assert [e for s in states[1:9] for e in s.events] == events


def test_eviction_narration_names_the_evicted_leaves():
    requests = [[1, 2, 3, 4, 5], [1, 2, 3, 9, 9], [7, 7, 7], [1, 2, 3, 4, 8]]
    stepper = RadixStepper(requests, capacity=7)
    seen = []
    while stepper.index < stepper.num_steps:
        state = stepper.step()
        evicted = [data for kind, data in state.events if kind == "evict"]
        if state.kind != "evict":
            assert not evicted and f'color="{COLORS["evicted"]}"' not in state.dot
            continue
        tree = stepper.tree
        assert [d["key"] for d in evicted] == [n.key for n in tree.last_evicted]
        for d, parent in zip(evicted, tree.last_evicted_parents, strict=True):
            assert f"{format_tokens(d['key'])} (slots {format_slots(d['slots'])})" in state.narration
            ghost = next(line for line in state.dot.splitlines() if line.startswith(f'\tn{d["node"]} ['))
            assert f'color="{COLORS["evicted"]}"' in ghost and "dashed" in ghost  # a red ghost ...
            assert f'\tn{parent.id} -> n{d["node"]} [' in state.dot  # ... under its old parent
        assert tree.total_size() <= 7
        seen.append(state.narration)
    # r1 leaves 7 tokens; r2's [7, 7, 7] makes 10. The leaf [4, 5] was last touched by r0 (r1's
    # split stamped only the front [1, 2, 3]), so it goes first, then r1's [9, 9]: 4 >= 3 freed.
    assert seen[0] == ("r2: the tree holds 10 > 7 tokens; evict leaves, least recently used first: "
                       "[4, 5] (slots 3-4), [9, 9] (slots 5-6)")


def test_highlights_follow_the_step():
    stepper = RadixStepper(SPLIT_WHILE_LOCKED, concurrent=2)
    states = run_all(stepper)
    for state in states[1:]:
        has_split = any(kind == "split" for kind, _ in state.events)
        walked = [data for kind, data in state.events if kind == "insert"
                  or (kind == "match" and data["matched"] > 0)]
        assert (f'color="{COLORS["split"]}"' in state.dot) == has_split
        assert (f'color="{COLORS["match"]}"' in state.dot) == bool(walked)


def test_text_requests_with_a_tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    from nano_engine.checkpoints import tokenizer_path

    tok = tokenizers.Tokenizer.from_file(str(tokenizer_path() / "tokenizer.json"))
    stepper = RadixStepper(["An apple is red.", "An apple is green."], tokenizer=tok)
    states = run_all(stepper)
    assert any('split "An apple is| red." at 3' in s.narration for s in states), \
        [s.narration for s in states]
    assert "&quot;An apple is&quot;" in states[-1].dot
    with pytest.raises(ValueError, match="tokenizer"):
        RadixStepper(["text without a tokenizer"])


def test_pages_and_bad_arguments():
    stepper = RadixStepper([[1, 2, 3, 4, 5], [1, 2, 3, 4, 6, 6]], page_size=2, capacity=4)
    for _ in range(stepper.num_steps):
        stepper.step()
        stepper.tree.check_invariants()
        for node in stepper.tree.nodes():
            assert len(node.key) % 2 == 0 and all(v % 2 == 0 for v in node.value[::2])
    assert stepper.tree.total_size() == 4
    with pytest.raises(ValueError, match="page_size"):
        RadixStepper([[1]], page_size=0)
    with pytest.raises(ValueError, match="capacity"):
        RadixStepper([[1]], capacity=-1)
    with pytest.raises(ValueError, match="concurrent"):
        RadixStepper([[1]], concurrent=0)
    with pytest.raises(ValueError, match="empty"):
        RadixStepper([])
    with pytest.raises(ValueError, match="no tokens"):
        RadixStepper([[]])


@settings(max_examples=40, deadline=None)
@given(requests=st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=6), min_size=1, max_size=6),
       capacity=st.one_of(st.none(), st.integers(0, 12)), concurrent=st.integers(1, 3),
       back_to=st.integers(0, 100))
def test_radix_stepper_keeps_the_tree_consistent(requests, capacity, concurrent, back_to):
    stepper = RadixStepper(requests, capacity=capacity, concurrent=concurrent)
    dots = [stepper.state.dot]
    for _ in range(stepper.num_steps):
        state = stepper.step()
        stepper.tree.check_invariants()
        if state.kind == "evict":
            assert stepper.tree.total_size() <= capacity or stepper.tree.evictable_size == 0
        dots.append(state.dot)
    assert stepper.tree.protected_size == 0  # every lock was released
    index = back_to % (stepper.num_steps + 1)
    assert stepper.go_to(index).dot == dots[index]


# ------------------------------------------------------------------------------- block pool


def test_block_pool_stepper_replays_the_chapter():
    # The chapter's transcript as requests: the second one hits blocks 0 and 1.
    stepper = BlockPoolStepper([[1, 2, 3, 4, 5], [1, 2, 3, 4, 9], [6, 6, 6, 6, 6]], num_blocks=4, block_size=2)
    states = run_all(stepper)
    assert [s.kind for s in states[1:]] == ["lookup", "allocate", "cache", "free",
                                            "lookup", "touch", "allocate", "cache", "free",
                                            "lookup", "allocate", "cache", "free"]
    assert "2 full blocks hit [0, 1]" in states[5].narration
    assert states[4].narration.startswith("r0: finishes; free [0, 1, 2], last block first")
    # r2 needs 3 blocks: the queue (head first) is [2, 3, 1, 0], so cached block 1 is overwritten.
    allocate = states[11]
    evicted = [h for e in allocate.events if isinstance(e, BlockRemoved) for h in e.block_hashes]
    reference = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    assert evicted == [reference.block_hashes([1, 2, 3, 4])[1]]
    assert f"→ [2, 3, 1]; evict block 1 ({short_hash(evicted[0])})" in allocate.narration
    assert f"evicted {short_hash(evicted[0])}" in allocate.dot
    stored = [h for e in states[3].events if isinstance(e, BlockStored) for h in e.block_hashes]
    assert stored == reference.block_hashes([1, 2, 3, 4, 5])
    assert f"cache block 0 as {short_hash(stored[0])}, block 1 as {short_hash(stored[1])}" in states[3].narration
    for i in range(len(states) - 1, -1, -1):
        assert stepper.go_to(i) == states[i]


def test_block_pool_stepper_waits_for_room():
    # Three requests of 2 blocks each on 4 blocks: the third waits for the first to finish.
    stepper = BlockPoolStepper([[1, 1, 1], [2, 2, 2], [3, 3, 3]], num_blocks=4, block_size=2, concurrent=3)
    states = run_all(stepper)
    order = [(s.kind, s.narration[:2]) for s in states[1:]]
    assert order.index(("free", "r0")) < order.index(("lookup", "r2"))
    assert stepper.pool.free_queue and all(c == 0 for c in stepper.pool.ref_cnt)
    with pytest.raises(ValueError, match="needs 3 blocks"):
        BlockPoolStepper([[1, 2, 3, 4, 5]], num_blocks=2, block_size=2)


@settings(max_examples=40, deadline=None)
@given(requests=st.lists(st.lists(st.integers(1, 2), min_size=1, max_size=7), min_size=1, max_size=6),
       num_blocks=st.integers(4, 6), concurrent=st.integers(1, 3))
def test_block_pool_stepper_never_leaks(requests, num_blocks, concurrent):
    stepper = BlockPoolStepper(requests, num_blocks=num_blocks, block_size=2, concurrent=concurrent)
    for _ in range(stepper.num_steps):
        state = stepper.step()
        stepper.pool.check_invariants()
        if state.kind == "allocate":
            for block, h in stepper.pool.last_evicted:
                assert f"block {block} ({short_hash(h)})" in state.narration
    assert all(c == 0 for c in stepper.pool.ref_cnt)
    assert len(stepper.pool.free_queue) == num_blocks


# ------------------------------------------------------------------------------- the widget


def test_widget_buttons_and_slider_drive_the_stepper():
    import ipywidgets

    stepper = RadixStepper([[1, 2, 3, 4, 5], [1, 2, 3, 9, 9]], capacity=5)
    box = stepper.widget
    assert isinstance(box, ipywidgets.VBox)
    back, step, reset, slider = box.children[0].children
    narration, hit_rate, picture = box.children[1], box.children[2], box.children[3]
    assert "no lookup yet" in hit_rate.value
    assert back.disabled and slider.max == stepper.num_steps
    step.click()
    step.click()
    assert stepper.index == slider.value == 2
    assert html.escape(stepper.state.narration) in narration.value
    assert "<svg" in picture.value or "<pre>" in picture.value
    before = picture.value
    back.click()
    assert stepper.index == 1 and picture.value != before
    slider.value = stepper.num_steps
    assert stepper.index == stepper.num_steps and step.disabled
    reset.click()
    assert stepper.index == 0 and slider.value == 0
    assert "application/vnd.jupyter.widget-view+json" in stepper._repr_mimebundle_()


# ------------------------------------------------------------------------------- running hit rate


def common_prefix(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def lookup_states(stepper, kind):
    return [s for s in run_all(stepper) if s.kind == kind]


requests_strategy = st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=9), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(requests=requests_strategy)
def test_radix_hit_rate_is_the_longest_earlier_prefix(requests):
    # One request at a time and no eviction: a request's hit is its longest common prefix with
    # any earlier request, and it looks up all its tokens.
    matches = lookup_states(RadixStepper(requests), "match")
    hits = queries = 0
    for i, (tokens, state) in enumerate(zip(requests, matches, strict=True)):
        hits += max((common_prefix(tokens, earlier) for earlier in requests[:i]), default=0)
        queries += len(tokens)
        assert (state.hits, state.queries) == (hits, queries)
        assert state.hit_rate == hits / queries


@settings(max_examples=40, deadline=None)
@given(requests=requests_strategy, block_size=st.integers(1, 3))
def test_block_pool_hit_rate_counts_whole_blocks_before_the_last_token(requests, block_size):
    # A pool big enough never to evict: a request hits the whole blocks of its longest prefix
    # shared with an earlier request's full blocks, never including its own last token.
    lookups = lookup_states(BlockPoolStepper(requests, num_blocks=32, block_size=block_size), "lookup")
    hits = queries = 0
    for i, (tokens, state) in enumerate(zip(requests, lookups, strict=True)):
        shared = max((min(common_prefix(tokens, e), len(e) // block_size * block_size) for e in requests[:i]),
                     default=0)
        hits += min(shared, len(tokens) - 1) // block_size * block_size
        queries += len(tokens) - 1
        assert (state.hits, state.queries) == (hits, queries)


def test_hit_rate_is_shown_while_stepping():
    stepper = BlockPoolStepper([[1, 2, 3, 4, 5], [1, 2, 3, 4, 9]], num_blocks=4, block_size=2)
    hit_rate = stepper.widget.children[2]
    assert stepper.state.hit_rate is None and "no lookup yet" in hit_rate.value
    while stepper.state.queries < 8:
        stepper.step()
    assert (stepper.state.hits, stepper.state.queries) == (4, 8)
    assert "4 of 8 looked-up tokens cached (50%)" in hit_rate.value and "width: 50.0%" in hit_rate.value
    stepper.back()
    assert "0 of 4 looked-up tokens cached (0%)" in hit_rate.value


# ------------------------------------------------------------------------------- predictions


def test_prediction_reveals_the_answer_beside_the_guess():
    p = predict("How many tokens will hit?")
    box = p.widget
    typed, answer = box.children[1].children
    assert "How many tokens will hit?" in box.children[0].value and "run the experiment" in answer.value
    typed.value = " 300 "
    assert p.guess == "300"
    text = p.reveal(480)
    assert text == "How many tokens will hit? You predicted 300; answer: 480 (off by 180)."
    assert "You predicted 300; answer: 480" in answer.value and typed.disabled
    assert "Predict: How many tokens will hit?" in p._repr_mimebundle_()["text/plain"]


def test_prediction_run_all_keeps_the_answer_folded_until_a_guess_or_a_click():
    # Run All: the question is displayed, nobody types, the reveal cell runs right after.
    p = predict("How many tokens will hit?")
    box = p.widget
    typed, answer = box.children[1].children
    revealed = p.reveal(480)
    # headless text (nbclient output, static pages) still states the answer ...
    assert revealed == "How many tokens will hit? Answer: 480 (no prediction typed)."
    bundle = revealed._repr_mimebundle_()
    assert bundle["text/plain"] == revealed
    assert "application/vnd.jupyter.widget-view+json" in bundle  # ... a live frontend renders the widget
    # ... whose answer is folded under "Show answer" (a <details> that is not open)
    assert answer.value.startswith("<details") and "<summary>Show answer</summary>" in answer.value
    assert "<details open" not in answer.value and not typed.disabled
    # typing a prediction afterwards opens the comparison and freezes the guess
    typed.value = "500"
    assert answer.value == "<b>You predicted 500; answer: 480 (off by 20).</b>" and typed.disabled
    assert "details" not in answer.value


def test_prediction_reveal_without_a_displayed_question_builds_the_answer_line():
    revealed = predict("Ratio?").reveal(0.26)
    bundle = revealed._repr_mimebundle_()
    assert bundle["text/plain"] == "Ratio? Answer: 0.26 (no prediction typed)."
    assert "Show answer" in revealed.prediction._output.value


def test_prediction_headless_and_non_numeric():
    assert predict("Which hits more?", answer="radix").reveal() == "Which hits more? Answer: radix (no prediction typed)."
    assert Prediction("Which?", guess="blocks").reveal("radix") == "Which? You predicted blocks; answer: radix."
    assert Prediction("Ratio?", guess="0.5").reveal(0.5) == "Ratio? You predicted 0.5; answer: 0.5: exactly right."
    with pytest.raises(ValueError, match="answer is missing"):
        predict("Ratio?").reveal()
    with pytest.raises(ValueError, match="question must be a non-empty string"):
        predict("  ")


# ------------------------------------------------------------------------------- without a kernel


def frame_parts(page: str) -> list[dict[str, str]]:
    """Each frame of a static stepper: its narration, hit rate and diagram, as HTML."""
    import re

    frames = re.findall(r'<div class="nano-stepper-frame" data-index="(\d+)"( hidden)?>(.*?)</div></div>'
                        r'(?=<div class="nano-stepper-frame"|<script>)', page, flags=re.S)
    parts = []
    for index, hidden, body in frames:
        narration, rest = body.split('<div class="nano-stepper-hit-rate">', 1)
        hit_rate, diagram = rest.split('<div class="nano-stepper-diagram">', 1)
        parts.append({"index": index, "hidden": hidden, "narration": narration, "hit_rate": hit_rate,
                      "diagram": diagram})
    return parts


@pytest.mark.parametrize("make", [
    lambda: RadixStepper(SPLIT_WHILE_LOCKED, capacity=6, concurrent=2),
    lambda: BlockPoolStepper([[1, 2, 3, 4, 5], [1, 2, 3, 4, 9], [7, 7, 7, 7, 7]], num_blocks=4, block_size=2),
], ids=["radix", "block_pool"])
def test_static_html_holds_every_step_as_the_widget_shows_it(make):
    stepper = make()
    stepper.go_to(2)  # exporting starts from an empty cache and leaves the stepper where it stands
    page = stepper.to_html()
    assert stepper.index == 2
    states = run_all(make())
    frames = frame_parts(page)
    assert [int(f["index"]) for f in frames] == list(range(stepper.num_steps + 1))
    assert [bool(f["hidden"]) for f in frames] == [False] + [True] * stepper.num_steps  # the start shows first
    for frame, state in zip(frames, states, strict=True):
        assert html.escape(state.narration) in frame["narration"]
        assert f"step {state.index} / {state.num_steps}" in frame["narration"]
        assert html.escape(state.hit_rate_text()) in frame["hit_rate"]
        assert f"width: {(state.hit_rate or 0):.1%}" in frame["hit_rate"]
        assert frame["diagram"].lstrip().startswith("<svg") or "DOT source" in frame["diagram"]
    assert len({f["diagram"] for f in frames}) > 1
    for handle in ("back", "step", "reset", "slider"):
        assert f'class="nano-stepper-{handle}"' in page
    assert f'max="{stepper.num_steps}"' in page
    assert "http" not in page.split("<script>")[1]  # the script loads nothing


def test_static_mode_renders_html_instead_of_widgets(monkeypatch):
    stepper = RadixStepper([[1, 2, 3], [1, 2, 4]])
    prediction = predict("How many tokens will hit?")
    assert "application/vnd.jupyter.widget-view+json" in stepper._repr_mimebundle_()
    monkeypatch.setenv("NANO_ENGINE_STATIC_HTML", "1")
    bundle = stepper._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"} and bundle["text/html"] == stepper.to_html()
    bundle = prediction._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    assert "How many tokens will hit?" in bundle["text/html"] and "<input" in bundle["text/html"]
    assert prediction.reveal(3) == "How many tokens will hit? Answer: 3 (no prediction typed)."

    from nano_engine.notebook.exercises import check_button

    shown = check_button(23)._repr_html_()  # no buttons to press without a kernel: the commands instead
    assert "python practice/judge.py start 23" in shown and "python practice/judge.py test 23" in shown

def test_radix_stepper_runs_a_readers_tree():
    """``make_tree`` steps a tree written in chapter 03's build cells: the same script, the same
    hits, the same evictions as the package's tree; narrated from returns (it has no events)."""
    from test_build_cells_vs_exercises import build_source

    namespace: dict = {}
    exec(compile(build_source("03_radix_tree"), "chapter 03 build cells", "exec"), namespace)
    own = RadixStepper(SPLIT_WHILE_LOCKED, capacity=6, concurrent=2, make_tree=namespace["RadixTree"])
    pkg = RadixStepper(SPLIT_WHILE_LOCKED, capacity=6, concurrent=2)
    mine, theirs = run_all(own), run_all(pkg)
    assert [s.kind for s in mine] == [s.kind for s in theirs]
    assert [(s.hits, s.queries) for s in mine] == [(s.hits, s.queries) for s in theirs]
    assert all(s.events == () for s in mine)
    narrations = [s.narration for s in mine[1:]]
    assert narrations[4] == "r2: lock: 5 tokens evictable → protected"
    assert narrations[7] == "r3: lock: already protected"          # the front inherited r2's lock
    assert narrations[10] == "r2: the tree holds 7 > 6 tokens; evict 1 token: slots 5"
    assert "evict leaf [9] (slots 5)" in theirs[11].narration        # the package evicts the same
    assert own.go_to(3) == mine[3] and own.back() == mine[2]         # replay works on it too
    assert own.go_to(own.num_steps) == mine[-1]
    assert own.tree.total_size() == pkg.tree.total_size() == 6 and own.tree.root.lock_ref == 1
    with pytest.raises(ValueError, match="page_size=1"):
        RadixStepper(SPLIT_WHILE_LOCKED, page_size=2, make_tree=namespace["RadixTree"])


@pytest.mark.parametrize("module", ["pool_stepper", "radix_stepper", "predict"])
def test_module_doctest(module):
    result = doctest.testmod(importlib.import_module(f"nano_engine.notebook.{module}"))
    assert result.attempted > 0, f"nano_engine.notebook.{module}: no docstring example ran"
    assert result.failed == 0, f"nano_engine.notebook.{module}: {result.failed} docstring examples failed"


def test_the_old_widgets_module_warns_and_still_exports_every_name(monkeypatch):
    """``nano_engine.notebook.widgets`` was split by chapter; for one release its public names still
    import from it, the very objects of the new modules, and importing it warns."""
    moved = {"Request": Request, "static_html": static_html, "Step": Step, "StepperState": StepperState,
             "encode_requests": encode_requests, "BlockPoolStepper": BlockPoolStepper, "RadixStepper": RadixStepper,
             "TierStepper": TierStepper, "Prediction": Prediction, "Revealed": Revealed, "predict": predict}
    monkeypatch.delitem(sys.modules, "nano_engine.notebook.widgets", raising=False)   # import it afresh
    with pytest.warns(DeprecationWarning, match=r"nano_engine\.notebook\.widgets is deprecated"):
        widgets = importlib.import_module("nano_engine.notebook.widgets")
    assert sorted(widgets.__all__) == sorted(moved), "the old module exports exactly its old public names"
    stale = [name for name, new in moved.items() if getattr(widgets, name) is not new]
    assert not stale, f"nano_engine.notebook.widgets names other objects than the new modules: {stale}"
