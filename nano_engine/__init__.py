"""nano_engine: a small inference engine that really runs Qwen3, built to teach KV-cache reuse.

Chapters import each mechanism from the module named after it (``nano_engine.paged``,
``nano_engine.radix`` ...), so the file a reader opens is the one the chapter talks about. The
engine's two entry points are also here, for scripts that only run the engine
(``from nano_engine import LLMEngine, SamplingParams``).

The module map, by layer. A module imports only from its own layer and the ones above it; the
one exception happens only when asked for: the engine's imports of ``fast/`` (a fast path).

  checks every layer uses
    checks.py          the one "must be an integer >= N" check every option goes through (require_int)

  the model (chapter 00)
    model.py           a hand-written Qwen3 decoder in plain PyTorch, and the reference greedy loop
    weights.py         config.json and safetensors (one file or sharded), checked field by field
    tokenizer.py       Qwen's tokenizer, rebuilt offline
    devices.py         what a device gets by default: bfloat16 + Triton on sm_80+ GPUs, float32 + PyTorch attention on a T4 / CPU
    checkpoints.py     the model folders the chapters and tests use, by preset name (tiny, medium, trained, full)
    training.py        how the small trained default model was made (deterministic, CPU), and its expansion
    train_corpus.py    its training text: Python's bundled docs and generated questions about inference engines
    prompts.py         the chapters' chat requests that share one long system prompt

  paged KV memory (chapter 01)
    paged.py           the block allocator: free queue and reference counts
    kv_cache.py        the paged K/V tensors every attention path reads and writes
    attention.py       attention for a flat batch, reading K/V through page tables (the reference)

  prefix caches (chapters 02 and 03)
    hashing.py         the hash functions a block cache can key its blocks with
    prefix_cache.py    vLLM's way: chained block hashes, free blocks kept as an LRU cache
    kv_events.py       what a prefix cache tells the outside world (stored / removed blocks)
    radix.py           SGLang's way: a radix tree over token ids, LRU eviction of leaves

  a host-memory tier under the caches (chapter 06; the data structures, no engine import)
    host_tier.py       HostTier (size and write policy, checked once), host KV pages (pinned on CUDA), the copies between tiers
    hiradix.py         SGLang's HiCache: radix nodes on device, host or both; two eviction rules; load-back
    offload.py         vLLM's offloading manager for hashed blocks: store, lookup, load, LRU, CPU events

  the engine (chapters 01 to 06)
    sequence.py        the state of one request as it moves through the engine
    sampling.py        per-request sampling parameters, and the sampler
    cache_manager.py   one interface between scheduler and KV memory: no cache, hashed blocks, radix
    tiered_cache_manager.py  the hashed and radix managers with a host tier under them, sharing one host side
    scheduler.py       which sequences run in the next step, and how many tokens each computes
    policies.py        admission orders: FCFS, and the cache-aware ones (longest prefix match, DFS weight)
    engine_config.py   every LLMEngine option checked once; the pool's blocks, block size and cache kind settled first
    interrupts.py      Ctrl-C held back while a step commits its bookkeeping, delivered right after
    engine.py          LLMEngine: plan, run the model and sample, postprocess, log; continuous batching
    cache_adapters.py  your own pool, prefix cache or radix tree (chapters 01-03) under LLMEngine, checked call by call

  beyond one engine (chapters 04 and 05)
    workloads.py       request streams with shared prefixes, and the hit rate a cache gets on them
    traces.py          real traffic: Mooncake's production request traces, replayed through the caches
    replay.py          the one replay core: any cache (and a host tier) fed whole requests, hits counted one way
    trace_pool.py      the hashed pool keyed by a trace's ids: the token-level trace replay in seconds, not minutes
    hitrate.py         the ``hitrate`` command's study: options checked once, the replays, the report
    tier_replay.py     moved to replay.py (its old names work for one more release, with a warning)
    timing.py          chapter 02's six-request reuse experiment timed: cache off vs on, TTFT and wall time

  routing requests over several engines (chapters 05 and 07)
    kv_index.py        the router's global index: which worker holds which block hash, on which medium
    routing.py         which engine serves a request: six routers behind one interface, from random to Dynamo's cost
    instances.py       what a router feeds: simulated instances, a real engine, a trace's clock; run_trace
    router.py          deprecated (one release): the old names of routing.py and instances.py

  many engines in many processes (chapter 07)
    kv_wire.py         KV events as bytes, exactly as vLLM 0.33 encodes them (msgspec / msgpack)
    kv_pubsub.py       KV events over ZeroMQ: vLLM's publisher (PUB + replay ROUTER), a subscriber that recovers gaps
    cluster.py         N instance processes publishing KV events over ZeroMQ, a router indexing them; faults, a TTFT model
    engine_cluster.py  the same with real engines: a few LLMEngine processes on a real model, routed by their events

  fast/: the GPU fast path (optional; the engine runs without it, and so do the chapters)
    triton_attention.py  Triton kernels: write K/V by slot, attend through page tables
    fast_attention.py    the engine's attention context on those kernels; picking one by name
    cuda_graph.py        decode steps captured once per batch size and replayed
    gpu_memory.py        how many KV blocks fit on the GPU (vLLM's gpu_memory_utilization)

  notebook/: what only the chapters use
    viz.py             diagrams of the block pool and the radix tree
    stepper.py         the stepper base: requests through a cache, one operation at a time; buttons, slider, static HTML
    pool_stepper.py    chapter 02's stepper: a PrefixCachingBlockPool (lookup, touch, allocate, cache, free)
    radix_stepper.py   chapter 03's stepper: a RadixCache (match, lock, insert, unlock, evict)
    tier_stepper.py    chapter 06's stepper: a HiRadixCache over a device pool and a host pool
    predict.py         predict, then run: a question the reader answers before an experiment
    widgets.py         deprecated (one release): the old names of the five modules above
    exercises.py       a chapter's exercise: the statement and a "Check my solution" button
    listing.py         show_source (a class's real source, never pasted text) and add_to_class (a class one method a cell)
    figures.py         said("6,000 blocks", value): a figure the prose quotes, checked against the run

  tools
    __main__.py        the command line: ``python -m nano_engine generate | hitrate | cluster | bench | events``
    bench.py           throughput of LLMEngine beside transformers' batched generate
    deprecation.py     moved(): a name that moved to another module still imports from the old one, for one release

Words. A *block* and a *page* are the same thing, a fixed run of token slots of KV memory: the
engine's options and vLLM's side say ``block_size`` (``engine_config``, ``cache_manager``,
``prefix_cache``, ``offload``), and only the modules that speak SGLang's or the kernels' word say
``page_size`` (``radix``, ``hiradix``, ``host_tier``, ``kv_cache``, ``attention``, ``fast/``).
"""

__version__ = "0.1.0"

_LAZY = {"LLMEngine": "nano_engine.engine", "SamplingParams": "nano_engine.sampling"}


def __getattr__(name: str):
    # Imported on first use, so `import nano_engine` stays cheap (no torch) for the judge and CLI.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nano_engine' has no attribute {name!r}")
