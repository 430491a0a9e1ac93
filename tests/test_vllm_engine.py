"""vLLM mode in the engine (``LLMEngine(model, cache="vllm")``) and the multi-turn case of issue 12.

* Same-step caching: the full blocks a step will compute are registered when allocated, so a
  request admitted later in the same step hits them. Outputs must still equal the reference
  ``generate``: attention writes every new K/V of the batch before any sequence reads it.
* ``rollback``: a failed step's registrations for tokens it never computed are forgotten.
* The default mode's multi-turn reuse does not depend on whether two turns shared a step.
"""

import random

import torch
from engine_helpers import total

from nano_engine.attention import AttentionMetadata, PagedAttention
from nano_engine.cache_manager import HashedBlockCacheManager
from nano_engine.engine import LLMEngine
from nano_engine.model import generate
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.sampling import SamplingParams
from nano_engine.sequence import Sequence

BLOCK = 16


def shared_prefix_prompts(vocab_size: int, num: int = 4, prefix: int = 4 * BLOCK, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    shared = [rng.randrange(vocab_size) for _ in range(prefix)]
    return [shared + [rng.randrange(vocab_size) for _ in range(5 + 7 * i)] for i in range(num)]


def reference_outputs(model, prompts, max_tokens):
    return [generate(model, torch.tensor([p]), max_tokens)[0].tolist() for p in prompts]


class LastSequenceFirst:
    """A *wrong* attention for the check below: it handles the batch's sequences one at a time,
    from the last to the first, each writing its own new K/V and then attending. On its own it is
    a correct attention (each sequence sees its own history); it only breaks when a sequence reads
    blocks that an *earlier* sequence of the same batch writes in this very step."""

    def __init__(self, cache, metadata: AttentionMetadata):
        starts, self.parts = 0, []
        for i, (n, length) in enumerate(zip(metadata.query_lens, metadata.context_lens, strict=True)):
            pages = metadata.page_table[i].tolist()
            one = AttentionMetadata.build([pages], [length - n], [n], metadata.page_size, metadata.page_table.device)
            self.parts.append((slice(starts, starts + n), PagedAttention(cache, one)))
            starts += n

    def attend(self, layer_idx, q, k, v):
        out = torch.empty_like(q)
        for rows, part in reversed(self.parts):
            out[rows] = part.attend(layer_idx, q[rows], k[rows], v[rows])
        return out


def test_same_step_caching_hits_within_the_step_and_keeps_outputs(tiny_model):  # noqa: F811 (the fixture)
    prompts = shared_prefix_prompts(tiny_model.config.vocab_size)
    params = SamplingParams(max_tokens=4)
    reference = reference_outputs(tiny_model, prompts, 4)
    computed = {}
    for cache in ("hashed", "vllm"):
        engine = LLMEngine(tiny_model, cache=cache, block_size=BLOCK, num_blocks=64, progress=False)
        assert engine.generate(prompts, params) == reference
        engine.check_no_leaks()
        computed[cache] = total(engine, "num_prefill_tokens")
        if cache == "vllm":  # all four admitted in the first step; the last three hit the shared prefix then
            assert engine.step_log[0]["num_seqs"] == 4
            assert engine.step_log[0]["num_cached_tokens"] == 3 * 4 * BLOCK
    assert computed["hashed"] == sum(map(len, prompts))
    assert computed["vllm"] == computed["hashed"] - 3 * 4 * BLOCK


def test_attention_writes_every_new_kv_before_any_sequence_reads(tiny_model):  # noqa: F811 (the fixture)
    """Would fail if a later sequence of the batch read its hit blocks before they were written: the
    same prompts through an attention that writes sequence by sequence from the last one break the
    outputs with same-step hits (vllm), and only then (hashed: no same-step hits)."""
    prompts = shared_prefix_prompts(tiny_model.config.vocab_size, seed=1)
    params = SamplingParams(max_tokens=4)
    reference = reference_outputs(tiny_model, prompts, 4)

    def run(cache, attention):
        engine = LLMEngine(tiny_model, cache=cache, block_size=BLOCK, num_blocks=64, attention=attention,
                           progress=False)
        return engine.generate(prompts, params)

    assert run("vllm", PagedAttention) == reference  # the engine's attention: store first, then read
    assert run("hashed", LastSequenceFirst) == reference  # the wrong order is harmless without same-step hits
    assert run("vllm", LastSequenceFirst) != reference  # ... and wrong with them: the check can fail


def test_rollback_forgets_what_the_failed_step_registered():
    manager = HashedBlockCacheManager(PrefixCachingBlockPool(8, 4, vllm=True))
    seq = Sequence(0, list(range(10)), SamplingParams(max_tokens=1))
    manager.lock(seq, manager.match(seq))
    assert manager.allocate(seq, 10)  # registers blocks 0 and 1 (8 tokens) for the step
    assert [manager.pool.block_hash[b] is not None for b in seq.block_table] == [True, True, False]
    twin = Sequence(1, list(range(10)), SamplingParams(max_tokens=1))
    assert manager.peek(twin) == 8  # a request admitted later in that step would hit them
    manager.rollback(seq)  # the step failed: nothing was computed
    assert all(manager.pool.block_hash[b] is None for b in seq.block_table)
    assert manager.peek(twin) == 0
    seq.num_computed_tokens = 4  # had one block been computed before, it stays cached
    assert manager.allocate(seq, 10)
    manager.rollback(seq)
    assert [manager.pool.block_hash[b] is not None for b in seq.block_table] == [True, False, False]
    manager.free(seq)
    manager.pool.check_invariants()


def test_rollback_of_a_request_that_hit_the_failed_steps_registrations():
    """B was admitted in the failed step and hit blocks A registered in it: once A forgets them,
    B's rollback must give up those hits (their K/V was never written) and recompute them."""
    manager = HashedBlockCacheManager(PrefixCachingBlockPool(8, 4, vllm=True))
    a = Sequence(0, list(range(10)), SamplingParams(max_tokens=1))
    b = Sequence(1, list(range(9)) + [99], SamplingParams(max_tokens=1))
    manager.lock(a, manager.match(a))
    assert manager.allocate(a, 10)
    manager.lock(b, manager.match(b))  # same step: hits A's two registered blocks
    assert b.num_computed_tokens == 8 and b.block_table == a.block_table[:2]
    assert manager.allocate(b, 10)
    for seq in (a, b):  # the engine rolls back the step's sequences in batch order
        manager.rollback(seq)
    assert b.num_computed_tokens == 0 and b.num_cached_tokens == 0
    assert all(manager.pool.block_hash[x] is None for x in a.block_table + b.block_table)
    assert manager.allocate(a, 10) and manager.allocate(b, 10)  # the step again: registered again
    assert [manager.pool.block_hash[x] is not None for x in b.block_table] == [True, True, False]
    manager.free(a)
    manager.free(b)
    manager.pool.check_invariants()


def test_rollback_is_a_no_op_in_the_default_mode():
    manager = HashedBlockCacheManager(PrefixCachingBlockPool(8, 4))
    seq = Sequence(0, list(range(10)), SamplingParams(max_tokens=1))
    manager.lock(seq, manager.match(seq))
    assert manager.allocate(seq, 10)
    assert all(manager.pool.block_hash[b] is None for b in seq.block_table)  # cached after the forward only
    seq.num_computed_tokens = 10
    manager.cache(seq, 10)
    manager.rollback(seq)
    assert [manager.pool.block_hash[b] is not None for b in seq.block_table] == [True, True, False]
    manager.free(seq)


def multi_turn_reuse(model, together: bool) -> list[int]:
    """Tokens conversation B reuses at turns 2 and 3, in the default (chapter) mode.

    Turn 1: conversations A and B start with the same system prompt S, either admitted in one step
    (``together``: B computes its own copy of S, which stays uncached, and B's next blocks are
    cached *after A's copy*) or one after the other (B hits A's copy and holds it). A finishes; while
    B still generates, another request needs memory and evicts A's blocks: in the together case S
    goes with them and B's later blocks are left orphaned. Then turns 2 and 3 of B. (Before the fix
    the orphaned blocks were refused as "collisions" once S was cached again, and B's later turns
    reused S only.)
    """
    rng = random.Random(7)
    vocab = model.config.vocab_size

    def words(n):
        return [rng.randrange(vocab) for _ in range(n)]

    system, msg_a, msgs_b = words(8), words(3), [words(5), words(6), words(7)]
    engine = LLMEngine(model, cache="hashed", block_size=4, num_blocks=32, progress=False)
    pool = engine.cache.pool

    def run_until(done) -> None:
        while not done():
            engine.step()

    tables = {}  # the block table each request held when it was freed
    free = engine.cache.free
    engine.cache.free = lambda seq: (tables.setdefault(seq.request_id, list(seq.block_table)), free(seq))[1]

    seqs = {}
    for name, prompt, max_tokens in (("a", system + msg_a, 1), ("b", system + msgs_b[0], 12)):
        engine.add_request(prompt, SamplingParams(max_tokens=max_tokens))
        seqs[name] = seq = engine.scheduler.waiting[-1]
        if not together:  # the next one comes once this one's prompt is computed (and cached)
            run_until(lambda: seq.num_computed_tokens >= seq.num_prompt_tokens)  # noqa: B023
    run_until(lambda: seqs["a"].is_finished)
    queue = list(pool.free_queue)
    evict = 1 + max(queue.index(b) for b in tables[seqs["a"].request_id] if b in queue)  # up to A's last block
    filler = engine.add_request(words(4 * evict), SamplingParams(max_tokens=1))
    run_until(lambda: not any(s.request_id == filler for s in [*engine.scheduler.waiting, *engine.scheduler.running]))
    s_cached = all(h in pool.hash_to_block for h in pool.block_hashes(system))
    assert not seqs["b"].is_finished and s_cached != together  # together: S evicted with A's blocks
    run_until(lambda: seqs["b"].is_finished)
    history, reused = list(seqs["b"].token_ids), []
    for msg in msgs_b[1:]:
        prompt = history + msg
        before = pool.num_hits
        history = prompt + engine.generate([prompt], SamplingParams(max_tokens=3))[0]
        reused.append(pool.num_hits - before)
    engine.check_no_leaks()
    return reused


def test_multi_turn_reuse_does_not_depend_on_sharing_a_step(tiny_model):  # noqa: F811 (the fixture)
    apart, together = multi_turn_reuse(tiny_model, together=False), multi_turn_reuse(tiny_model, together=True)
    print(f"B's reuse at turns 2 and 3: turns apart {apart}, turn 1 shared a step with A {together}")
    # Turn 2 reuses B's whole turn-1 history (24 of 25 tokens computed: 6 full blocks), turn 3 all of
    # turn 2's (8 full blocks): with A's copy of S gone, B's own copy is cached as soon as B caches
    # its next block, and the blocks B cached after A's copy are reachable through it.
    assert together == apart == [24, 32]


class FailOnce:
    """Wraps a method; its ``at``-th call (0-based) raises RuntimeError."""

    def __init__(self, method, at: int) -> None:
        self.method, self.at, self.calls = method, at, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls - 1 == self.at:
            raise RuntimeError("injected")
        return self.method(*args, **kwargs)


def test_a_failed_step_with_same_step_hits_recovers(tiny_model):  # noqa: F811 (the fixture)
    """The first step admits four requests; three hit blocks the first registered in that step.
    The step fails (in the forward, or while committing the second sequence); the engine rolls it
    back and carries on; the outputs must equal the reference (no block promises K/V that was never
    written)."""
    prompts = shared_prefix_prompts(tiny_model.config.vocab_size, seed=2)
    reference = reference_outputs(tiny_model, prompts, 4)
    for target, at in (("_forward", 0), ("cache", 1)):
        engine = LLMEngine(tiny_model, cache="vllm", block_size=BLOCK, num_blocks=64, progress=False)
        owner = engine if target == "_forward" else engine.cache
        setattr(owner, target, FailOnce(getattr(owner, target), at))
        seqs = []
        for p in prompts:
            engine.add_request(p, SamplingParams(max_tokens=4))
            seqs.append(engine.scheduler.waiting[-1])
        failures = 0
        while engine.scheduler.has_unfinished:
            try:
                engine.step()
            except RuntimeError:
                failures += 1
        assert failures == 1
        assert [s.output_token_ids for s in seqs] == reference
        engine.check_no_leaks()
