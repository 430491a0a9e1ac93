"""The figure checker (tests/figure_check.py): every figure and claim a chapter's prose states about
its own runs is checked by a cell.

Two kinds of test. The chapters themselves must report nothing. And the checker must be strict
enough to catch what learners found: the seven mismatches M1-M7 of the 2026-12-04 learner review
(chapters 04 and 07 as they stood then) are kept below verbatim, each with the code cells beside it,
and each must be reported; the same text with the check the convention asks for must not be.
"""

import json

import pytest
from figure_check import CHAPTERS, check_chapter, prose_figures


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_figure_the_prose_quotes_is_checked(path):
    findings = check_chapter(path)
    assert not findings, (f"{path.name}: {len(findings)} figures or claims no cell checks (state each in "
                          "said(\"...\", value) or an assert; see tests/figure_check.py):\n"
                          + "\n".join(str(f) for f in findings))


def chapter(tmp_path, *cells) -> list:
    """Write a notebook of ``cells`` (("md" | "code", source) pairs) and return its findings."""
    nb = {"cells": [{"cell_type": "markdown" if kind == "md" else "code", "metadata": {}, "source": source,
                     **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                    for kind, source in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "99_case.ipynb"
    path.write_text(json.dumps(nb))
    return check_chapter(path)


def texts(findings) -> list[str]:
    return [f.text for f in findings]


# ------------------------------------------------------------------ M1-M7, verbatim from the review

M1_PROSE = """## 5. Mooncake's conversation trace over four engines

Mooncake's FAST'25 paper measures, on its production traces, how much a **global** cache (one pool
shared by all prefill nodes, KV moved between them) beats **local** per-node caches: **×2.22** hit
rate on the conversation trace (Figure 10). We replay its first 1,000 requests (chapter 04's
`nano_engine.traces`; one hash id = one 512-token block, so a "token" here is a block id) over 4
engines of 1,500 blocks each, with random and round robin (local caches, blind routing) against
the two event-driven routers, and beside them one cache of 4 × 1,500 blocks (the global pool's
upper bound)."""
M1_CODE = """trace = load_trace("conversation")[: 400 if HEADLESS else 1000]
CAP = 2500 if HEADLESS else 6000                          # blocks per engine
print(f"4 engines x {CAP} blocks")"""


def test_m1_a_parameter_the_prose_misstates(tmp_path):
    assert "1,500" in texts(chapter(tmp_path, ("md", M1_PROSE), ("code", M1_CODE)))
    fixed = M1_PROSE.replace("1,500", "6,000").replace("first 1,000", "first 1,000")
    check = M1_CODE + '\nsaid("6,000 blocks", CAP)\nsaid("1,000 requests", len(trace))\nsaid("512-token", 512)\n' \
        'said("4 engines", 4)'
    assert chapter(tmp_path, ("md", fixed), ("code", check)) == []


M2_PROSE = """## Setup

No model runs in this chapter: the engines are the package's `SimulatedInstance`s (chapter 05), a
prefix cache and a first-in first-out server each, and what travels between them and the router is
real: vLLM's msgpack bytes on real ZeroMQ sockets over loopback TCP and `ipc://`."""


def test_m2_a_claim_about_the_whole_chapter(tmp_path):
    found = chapter(tmp_path, ("md", M2_PROSE), ("code", "import atexit\nimport os"))
    assert [f.kind for f in found] == ["never"], found
    check = 'assert not engines_started, "No model runs in this chapter"'
    assert chapter(tmp_path, ("md", M2_PROSE), ("code", check)) == []


M34_SUMMARY = """## Summary

- Below the working set, cache-aware routing turns scattered misses into hits and short queues; on
  Mooncake's conversation trace it recovers much of what one shared cache would hold. With replay,
  drops and restarts heal; without it, the index drifts and a restarted router stays blind. Under
  eviction pressure the approximate tree's stale guesses cost hits that events do not.
"""


def test_m3_m4_summary_claims_without_a_check(tmp_path):
    found = chapter(tmp_path, ("code", "print(rates)"), ("md", M34_SUMMARY))
    kinds = {f.text: f.kind for f in found}
    assert kinds.get("that events do not") == "contrast", found          # M3
    assert kinds.get("short queues") == "compare", found                 # M4
    checks = ('assert rate["dynamo"] > rate["approx"], "the approximate tree\'s stale guesses cost hits that events do not"\n'
              'assert p90["dynamo"] < p90["round-robin"], "turns scattered misses into hits and short queues"')
    assert chapter(tmp_path, ("code", checks), ("md", M34_SUMMARY)) == []


M5_PROSE = """Fewer gaps than dropped batches: consecutive drops make one gap, and a replay returns everything
buffered from its start, so it often fills the next hole before the live stream reveals it (those
batches then arrive live as duplicates). Nothing is missing once it has caught up. Our `follow` does
the same on the same kind of stream:"""
M5_BEFORE = """sub = KVEventSubscriber(index)
assert index.snapshot() == truth_of(batches)
print(sub.stats)"""
M5_CODE = """rng = random.Random(7)
live = [(seq, events) for seq, events in enumerate(batches) if rng.random() >= 0.2]
cached, applied, verdicts = follow(live, dict(enumerate(batches)))
assert cached == truth_of(batches) and applied == list(range(len(batches)))
print(dict(verdicts))"""


def test_m5_a_vague_sameness_next_to_a_run_that_asserts_something_else(tmp_path):
    found = chapter(tmp_path, ("code", M5_BEFORE), ("md", M5_PROSE), ("code", M5_CODE))
    assert [f.text for f in found if f.kind == "same"] == ["does the same"], found
    check = M5_CODE + '\nassert cached == truth_of(batches), "our follow does the same on the same kind of stream"'
    assert not [f for f in chapter(tmp_path, ("code", M5_BEFORE), ("md", M5_PROSE), ("code", check))
                if f.kind == "same"]


M6_TRY_IT = """## Try it

2. In section 6, make the router restart at tick 150 with replay on, but give the engines a replay
   buffer of 50 batches (`KVEventPublisher(..., buffer_steps=50)` in `Engine.start`). What happens to
   the accuracy, and what would fix it?

<details><summary>Answers</summary>

2. The new router asks each engine for its buffer from seq 0; an engine that has published more than
   50 batches answers from a later seq, so the oldest batches are gone: the subscriber asks three
   times, gives the gap up (a logged warning) and applies the rest. The index misses the blocks those
   old batches stored that are still cached: the accuracy jumps back, but to just below 1, and creeps
   up only as those blocks are evicted.
</details>
"""


def test_m6_a_try_it_answer_no_code_runs(tmp_path):
    """The chapter's own asserts compare with 1 (replay heals to 1.000), but a Try it answer is about
    the Try it's run: only its fences can check it."""
    found = chapter(tmp_path, ("code", "assert accuracy[-1] == 1.0"), ("md", M6_TRY_IT))
    assert "1" in texts(found), found


M7_PROSE = """A trace holds no text and no tokens. Each request gives its `input_length` and `hash_ids`, one id
per 512-token block of the prompt, remapped from a chained hash: equal ids at the same positions
mean an equal prefix. The replay feeds the requests in file order, one at a time, to the chapter's
`PrefixCachingBlockPool` and to `RadixCache`: look up, take the hits, allocate the rest (evicting
least recently used), cache, release. Capacity counts 512-token blocks."""
M7_CODE = """capacities = [1_000_000, 3_000_000, 10_000_000, None]   # tokens; None = unlimited
results = [replay_trace(trace, cache, capacity) for cache in ("hashed", "radix") for capacity in capacities]
print(trace.unique_ids * 512)"""


def test_m7_a_unit_no_cell_states(tmp_path):
    found = chapter(tmp_path, ("md", M7_PROSE), ("code", M7_CODE))
    assert any(f.text == "512" and "Capacity counts" in f.sentence for f in found), found


# ------------------------------------------------------------------------------------ the rules


@pytest.mark.parametrize("prose, figures", [
    ("The replay gets 37.4% and 65.1%.", ["37.4%", "65.1%"]),
    ("A tick is 12.5 ms, about 41k tokens per second, 1.5× faster.", ["12.5", "41k", "1.5×"]),
    ("Chapters 02 and 03 built two caches; see section 4, cells 32–33 and exercise 41.", []),
    ("vLLM 0.33.0 (PR #42892, commit `4c542aa`) on Qwen3-0.6B, as of 2026-12-01.", []),
    ("Mooncake's Table 2 gives 40% for conversation: here the replay gets 37.4%.", ["37.4%"]),
    ("Its Figure 9 says 3M tokens reach under half. It also says 50M reach nearly all.", []),
    ("It prints \"1 + 1 = 2.\" (9 tokens, then EOS) with `max_tokens=16`.", ["9"]),
    ("1. **Block size 1.** The first item.", ["1"]),
])
def test_what_counts_as_a_figure(prose, figures):
    assert [f.text for f, _ in prose_figures(prose)] == figures


def test_a_figure_is_checked_by_said_or_an_assert_literal_with_its_precision(tmp_path):
    prose = "The replay gets 37.4% on conversation, 10136 tokens, a gap under 3 points."
    assert texts(chapter(tmp_path, ("md", prose), ("code", "print(rate)"))) == ["37.4%", "10136", "3"]
    ok = 'said("37.4%", rate)\nassert computed == 10136\nassert gap < 0.03'
    assert chapter(tmp_path, ("md", prose), ("code", ok)) == []
    other_precision = 'said("37%", rate)\nassert computed == 10136\nassert gap < 0.03'
    assert texts(chapter(tmp_path, ("md", prose), ("code", other_precision))) == ["37.4%"]
    index_only = 'said("37.4%", rate)\nassert computed[10136] and gap[3]'
    assert texts(chapter(tmp_path, ("md", prose), ("code", index_only))) == ["10136", "3"]


def test_history_boxes_and_the_self_test_are_exempt(tmp_path):
    prose = ("**Self-test**: answer these.\n\n1. How many of 1,000 tokens hit with 16-token blocks?\n\n"
             "<details><summary>Answers</summary>\n\n1. 992.\n</details>\n\n"
             "<details><summary>History and sources (as of 2026-12-01)</summary>\n\nv0.23 took 20% off.\n</details>")
    assert chapter(tmp_path, ("md", prose)) == []


def test_try_it_questions_name_their_fences_inputs_and_answers_are_checked_there(tmp_path):
    prose = ("## Try it\n\n1. Build it with 40 conversations:\n\n```python\nw = multi_turn(0, num_conversations=40)\n"
             "print(hit_rate(w, 16))\n```\n\n<details><summary>Answers</summary>\n\n1. About 42%.\n</details>\n")
    assert texts(chapter(tmp_path, ("md", prose))) == ["42%"]
    checked = prose.replace("print(hit_rate(w, 16))", 'said("about 42%", hit_rate(w, 16), within=2)')
    assert chapter(tmp_path, ("md", checked)) == []
    assert texts(chapter(tmp_path, ("md", checked.replace("40 conversations", "60 conversations")))) == ["60"]
