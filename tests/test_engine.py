"""LLMEngine against the reference greedy loop (``nano_engine.model.generate``), token for token.

Every configuration the engine can be in must give the same tokens: chunk sizes from 1 token per
step to unlimited, block sizes 1, 16 and 7 (which divides none of the prompt lengths but one),
pools so small that requests are preempted and recomputed, and the three cache managers.
"""

import pytest
import torch
from engine_helpers import MAX_TOKENS, assert_running_prefixes_intact, total

from nano_engine.engine import LLMEngine, SamplingParams
from nano_engine.model import generate
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.prompts import PROMPT_LENGTHS, chat_prompts

SMALL_POOL_TOKENS = 360     # the longest request needs 300 + 5 - 1 = 304 slots

# (cache, block size, max_num_batched_tokens, small pool)
CONFIGS = [
    ("none", 16, None, False),
    ("none", 16, 1, False),
    ("none", 1, 64, True),
    ("none", 7, 7, False),
    ("hashed", 16, 64, False),
    ("hashed", 16, 32, True),
    ("hashed", 1, None, True),
    ("hashed", 7, 1, False),
    ("hashed", 7, 48, True),
    ("radix", 16, None, True),
    ("radix", 1, 64, False),
    ("radix", 7, 48, True),
    ("radix", 1, 7, False),
    ("radix", 16, 1, False),
]


@pytest.mark.parametrize("cache,block_size,budget,small", CONFIGS)
def test_greedy_equals_reference(make_engine, prompts, reference, eos, cache, block_size, budget, small):
    num_blocks = -(-SMALL_POOL_TOKENS // block_size) if small else None
    engine = make_engine(eos_token_id=eos, cache=cache, block_size=block_size, num_blocks=num_blocks,
                         max_num_batched_tokens=budget)
    out = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
    assert out == reference
    assert any(len(r) < MAX_TOKENS for r in reference) and any(len(r) == MAX_TOKENS for r in reference)
    steps = engine.step_log
    if budget is not None:
        assert max(s["num_tokens"] for s in steps) <= budget
    if budget is not None and budget > 1:   # chunked prefill shares steps with decodes
        assert sum(1 for s in steps if s["num_prefill_tokens"] and s["num_decode_tokens"]) > 0, "no mixed step"
    if small:
        assert total(engine, "num_preempted") >= 2, "the small pool should force preemptions"
    if cache != "none":
        assert total(engine, "num_cached_tokens") > 0, "the shared prefixes should hit"
    computed = total(engine, "num_tokens")
    fed = sum(len(p) + len(r) - 1 for p, r in zip(prompts, reference))
    assert computed >= fed - total(engine, "num_cached_tokens")


def test_stepwise_invariants_under_preemption(make_engine, prompts, reference, eos):
    """Step by hand: after every step, running requests still own their pages (nothing they use
    was evicted or handed to someone else), for each cache manager, with a pool under pressure."""
    for cache in ("none", "hashed", "radix"):
        engine = make_engine(eos_token_id=eos, cache=cache, block_size=4, num_blocks=SMALL_POOL_TOKENS // 4,
                             max_num_batched_tokens=48)
        ids = [engine.add_request(p, SamplingParams(max_tokens=MAX_TOKENS)) for p in prompts]
        done = {}
        while engine.scheduler.has_unfinished:
            for seq in engine.step():
                done[seq.request_id] = seq.output_token_ids
            assert_running_prefixes_intact(engine)
            info = engine.cache.size_info()
            assert info.free + info.evictable + info.protected == info.capacity
        assert [done[i] for i in ids] == reference
        assert total(engine, "num_preempted") > 0


def test_one_engine_serves_many_generate_calls(make_engine, prompts, reference, eos):
    engine = make_engine(eos_token_id=eos, cache="hashed")
    params = SamplingParams(max_tokens=MAX_TOKENS)
    first = engine.generate(prompts[:3], params)
    n = len(engine.step_log)
    second = engine.generate(prompts[3:], params)
    assert first + second == reference
    assert len(engine.step_log) > n                       # the log accumulates
    n = len(engine.step_log)
    assert engine.generate(prompts[:3], params) == reference[:3]
    assert total(engine, "num_cached_tokens", since=n) > 0     # the same cache serves the repeat


def test_step_log_and_metrics(make_engine, prompts, eos):
    engine = make_engine(eos_token_id=eos, max_num_batched_tokens=64)
    out, metrics = engine.generate(prompts[:6], SamplingParams(max_tokens=MAX_TOKENS), return_metrics=True)
    assert metrics is engine.last_metrics and len(metrics) == 6
    for o, m in zip(out, metrics):
        assert m.num_output_tokens == len(o)
        assert m.time_to_first_token > 0
        assert m.finish_time >= m.first_token_time
        assert (m.decode_tokens_per_s is None) == (len(o) < 2)
    for step in engine.step_log:
        assert step["num_tokens"] == step["num_prefill_tokens"] + step["num_decode_tokens"]
        assert 1 <= step["num_seqs"] <= step["num_tokens"]
        assert step["time"] > 0
    assert total(engine, "num_prefill_tokens") == sum(len(p) for p in prompts[:6])
    assert total(engine, "num_decode_tokens") == sum(len(o) - 1 for o in out)


def test_chapter_experiment(make_engine, tiny_model, tokenizer, single_thread):
    """Chapter 02's six-request experiment, as the chapter runs it, on the tiny checkpoint: the first
    request alone, then the other five; 480 of 755 queried tokens hit, and the five compute
    exactly 480 tokens fewer."""
    prompts = chat_prompts(tokenizer)
    assert [len(p) for p in prompts] == PROMPT_LENGTHS
    reference = [generate(tiny_model, torch.tensor([p]), 16, eos_token_id=tokenizer.eos_token_id)[0].tolist()
                 for p in prompts]
    computed = {}
    for caching in (False, True):
        pool = PrefixCachingBlockPool(256, 16) if caching else None
        engine = make_engine(eos_token_id=tokenizer.eos_token_id, pool=pool)
        first = engine.generate(prompts[:1], SamplingParams(max_tokens=16))
        n_steps = len(engine.step_log)
        rest = engine.generate(prompts[1:], SamplingParams(max_tokens=16))
        computed[caching] = sum(s["num_tokens"] for s in engine.step_log[n_steps:])
        assert first + rest == reference
    assert (pool.num_hits, pool.num_queries) == (480, 755)
    assert computed[False] - computed[True] == 480

    # The same run through the radix manager: token-granular pages keep the partial block too.
    for block_size in (16, 1):
        engine = make_engine(eos_token_id=tokenizer.eos_token_id, cache="radix", block_size=block_size,
                             num_blocks=4096 // block_size)
        first = engine.generate(prompts[:1], SamplingParams(max_tokens=16))
        n_steps = len(engine.step_log)
        rest = engine.generate(prompts[1:], SamplingParams(max_tokens=16))
        assert first + rest == reference
        radix = total(engine, "num_tokens", since=n_steps)
        print(f"tokens computed for the five: no cache {computed[False]}, hashed {computed[True]}, "
              f"radix (page {block_size}) {radix}")
        assert radix <= computed[True]
        if block_size == 1:
            assert radix < computed[True]


def test_bad_requests_raise_and_leave_the_engine_serving(make_engine, tiny_model, prompts, reference, eos):
    engine = make_engine(eos_token_id=eos, num_blocks=40, block_size=16)   # 640 slots
    vocab = tiny_model.config.vocab_size
    context = tiny_model.config.max_position_embeddings
    ok = engine.add_request(prompts[3], SamplingParams(max_tokens=MAX_TOKENS))
    bad = [
        ([], SamplingParams(), "prompt is empty"),
        ([1, vocab], SamplingParams(), f"outside the vocabulary \\(0..{vocab - 1}\\)"),
        ([1, -1], SamplingParams(), "outside the vocabulary"),
        ([1] * (context - 3), SamplingParams(max_tokens=4), f"context of {context}"),
        ([1] * 600, SamplingParams(max_tokens=50), "at most 40"),
        ([1, 2.5], SamplingParams(), "integers"),
    ]
    for prompt, params, message in bad:
        with pytest.raises(ValueError, match=rf"request \d+: .*{message}"):
            engine.add_request(prompt, params)
    for field, value, message in [("max_tokens", 0, "max_tokens"), ("temperature", -0.5, "temperature"),
                                  ("top_p", 0.0, "top_p"), ("top_p", 1.5, "top_p")]:
        params = SamplingParams()
        setattr(params, field, value)            # bypass the constructor's own check
        with pytest.raises(ValueError, match=rf"request \d+: {message}"):
            engine.add_request([1, 2, 3], params)
    with pytest.raises(ValueError, match=r"prompt 1\).*outside the vocabulary"):
        engine.generate([prompts[0], [vocab + 5]], SamplingParams(max_tokens=MAX_TOKENS))
    assert len(engine.scheduler.waiting) == 1 and engine.pool.num_free == 40   # nothing queued, nothing held
    finished = []
    while engine.scheduler.has_unfinished:                                     # the good request runs
        finished += engine.step()
    assert [(s.request_id, s.output_token_ids) for s in finished] == [(ok, reference[3])]
    assert engine.generate(prompts[:3], SamplingParams(max_tokens=MAX_TOKENS)) == reference[:3]


def test_sampling_params_validate_on_construction():
    for kwargs, message in [({"max_tokens": 0}, "max_tokens"), ({"temperature": -1}, "temperature"),
                            ({"top_p": 0}, "top_p"), ({"top_p": 1.01}, "top_p"), ({"top_k": -2}, "top_k"),
                            ({"temperature": float("nan")}, "temperature")]:
        with pytest.raises(ValueError, match=message):
            SamplingParams(**kwargs)


def test_seeded_sampling_is_reproducible_and_batch_independent(make_engine, prompts):
    params = [SamplingParams(max_tokens=8, temperature=1.0, top_p=0.9, seed=i) for i in range(4)]
    alone = [make_engine(cache="none").generate([prompts[5]], p)[0] for p in params]
    engine = make_engine(cache="hashed", block_size=4, num_blocks=100, max_num_batched_tokens=16)
    # the same requests mixed with others, chunked, under preemption: each still draws its own numbers
    mixed = engine.generate([prompts[5]] * 4 + prompts[8:12],
                            params + [SamplingParams(max_tokens=8, temperature=0.7)] * 4)
    assert mixed[:4] == alone
    assert len({tuple(a) for a in alone}) > 1, "different seeds should give different samples"


def test_temperature_with_top_k_1_or_tiny_top_p_is_greedy(make_engine, prompts, reference, eos):
    engine = make_engine(eos_token_id=eos)
    for params in (SamplingParams(max_tokens=MAX_TOKENS, temperature=1.3, top_k=1),
                   SamplingParams(max_tokens=MAX_TOKENS, temperature=0.8, top_p=1e-6, seed=3)):
        assert engine.generate(prompts, params) == reference


def test_stop_tokens_and_ignore_eos(make_engine, tiny_model, prompts, eos):
    plain = generate(tiny_model, torch.tensor([prompts[9]]), 6)[0].tolist()
    engine = make_engine(eos_token_id=plain[0])
    assert engine.generate([prompts[9]], SamplingParams(max_tokens=6)) == [plain[:1]]
    assert engine.generate([prompts[9]], SamplingParams(max_tokens=6, ignore_eos=True)) == [plain]
    stop = SamplingParams(max_tokens=6, ignore_eos=True, stop_token_ids=[plain[2]])
    assert engine.generate([prompts[9]], stop) == [plain[:plain.index(plain[2]) + 1]]


def test_text_prompts_and_warm_up(make_engine, tiny_model, tokenizer):
    text = "A prefix long enough to fill a few blocks of sixteen tokens, then some more words here."
    ids = tokenizer(text)["input_ids"]
    pool = PrefixCachingBlockPool(64, 16)
    engine = make_engine(pool=pool, tokenizer=tokenizer)
    assert engine.warm_up(text, pin=True) == len(ids) // 16 * 16
    assert pool.pinned_blocks and all(pool.ref_cnt[b] == 1 for b in pool.pinned_blocks)
    expected = generate(tiny_model, torch.tensor([ids]), 3)[0].tolist()
    assert engine.generate([text], SamplingParams(max_tokens=3)) == [expected]
    assert engine.step_log[-3]["num_cached_tokens"] == len(ids) // 16 * 16
    pool.unpin(ids)
    with pytest.raises(ValueError, match="no tokenizer"):
        make_engine().generate(["hello"])


def test_engine_construction_choices(tiny_model):
    from nano_engine.cache_manager import HashedBlockCacheManager, NaiveCacheManager, RadixCacheManager
    from nano_engine.paged import BlockPool

    assert isinstance(LLMEngine(tiny_model).cache, NaiveCacheManager)
    assert isinstance(LLMEngine(tiny_model, pool=BlockPool(8), block_size=4).cache, NaiveCacheManager)
    engine = LLMEngine(tiny_model, pool=PrefixCachingBlockPool(12, 8))
    assert isinstance(engine.cache, HashedBlockCacheManager)
    assert (engine.kv_cache.num_pages, engine.kv_cache.page_size) == (12, 8)
    assert isinstance(LLMEngine(tiny_model, cache="radix", num_blocks=9).cache, RadixCacheManager)
    manager = RadixCacheManager(10, 2)
    assert LLMEngine(tiny_model, cache=manager).cache is manager
    per_block = LLMEngine(tiny_model, num_blocks=1).kv_cache.bytes_per_token * 16
    assert LLMEngine(tiny_model, kv_bytes=5 * per_block + 7).cache.num_blocks == 5
    with pytest.raises(ValueError, match="cache must be"):
        LLMEngine(tiny_model, cache="lru")
    with pytest.raises(ValueError, match="not both"):
        LLMEngine(tiny_model, pool=BlockPool(4), cache=manager)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_equals_reference_and_bf16_is_close(prompts, eos):
    from nano_engine.checkpoints import tiny_checkpoint
    from nano_engine.model import Transformer

    model = Transformer.from_pretrained(tiny_checkpoint(), device="cuda", dtype=torch.float32)
    ref = [generate(model, torch.tensor([p]), MAX_TOKENS, eos_token_id=eos)[0].tolist() for p in prompts]
    for cache, block_size, budget in [("none", 16, None), ("hashed", 7, 32), ("radix", 1, 64)]:
        engine = LLMEngine(model, eos_token_id=eos, cache=cache, block_size=block_size,
                           num_blocks=-(-SMALL_POOL_TOKENS // block_size), max_num_batched_tokens=budget)
        assert engine.kv_cache.k[0].device.type == "cuda"
        assert engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS)) == ref
        engine.check_no_leaks()
    seeded = SamplingParams(max_tokens=6, temperature=1.0, seed=7)
    engine = LLMEngine(model)
    assert engine.generate([prompts[4]], seeded) == engine.generate([prompts[4]], seeded)

    bf16 = Transformer.from_pretrained(tiny_checkpoint(), device="cuda", dtype=torch.bfloat16)
    engine = LLMEngine(bf16, eos_token_id=eos)
    assert engine.kv_cache.k[0].dtype == torch.bfloat16
    out = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
    # bf16 rounding may swap near-tied candidates (random weights), so equality is not expected;
    # but each first token must be among fp32's five best, not an arbitrary one of 151,936.
    with torch.inference_mode():
        top5 = [set(model(torch.tensor([p], device="cuda"))[0, -1].topk(5).indices.tolist()) for p in prompts]
    outside = [i for i, (o, best) in enumerate(zip(out, top5)) if o[0] not in best]
    assert not outside, f"bf16's first token is outside fp32's top 5 for prompts {outside}"
    engine.check_no_leaks()
