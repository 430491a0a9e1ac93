"""nano_engine: a small inference engine that really runs Qwen3, built to teach KV-cache reuse.

Chapters import each mechanism from the module named after it (``nano_engine.paged``,
``nano_engine.radix`` ...), so the file a reader opens is the one the chapter talks about. The
engine's two entry points are also here, as the book chapter imports them
(``from nano_engine import LLMEngine, SamplingParams``).

The module map, by layer. A module imports only from its own layer and the ones above it; the
two exceptions happen only when asked for: the engine's imports of ``fast/`` (a fast path) and
``engine_config``'s of the host tier (``host_kv_tokens=``).

  the model (chapter 00)
    model.py           a hand-written Qwen3 decoder in plain PyTorch, and the reference greedy loop
    weights.py         config.json and safetensors (one file or sharded), checked field by field
    tokenizer.py       Qwen's tokenizer, rebuilt offline
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

  the engine (chapters 01 to 05)
    sequence.py        the state of one request as it moves through the engine
    sampling.py        per-request sampling parameters, and the sampler
    cache_manager.py   one interface between scheduler and KV memory: no cache, hashed blocks, radix
    scheduler.py       which sequences run in the next step, and how many tokens each computes
    policies.py        admission orders: FCFS, and the cache-aware ones (longest prefix match, DFS weight)
    engine_config.py   every LLMEngine option checked once, and the one place memory is sized
    interrupts.py      Ctrl-C held back while a step commits its bookkeeping, delivered right after
    engine.py          LLMEngine: plan, run the model and sample, postprocess, log; continuous batching

  a host-memory tier under the caches (chapter 06)
    host_tier.py       host KV pages (pinned on CUDA) and the copies between tiers; a bandwidth model
    hiradix.py         SGLang's HiCache: radix nodes on device, host or both; two eviction rules; load-back
    offload.py         vLLM's offloading manager for hashed blocks: store, lookup, load, LRU, CPU events

  beyond one engine (chapters 04 and 05)
    workloads.py       request streams with shared prefixes, and the hit rate a cache gets on them
    traces.py          real traffic: Mooncake's production request traces, replayed through the caches
    replay.py          the one replay core: any cache (and a host tier) fed whole requests, hits counted one way
    trace_pool.py      the hashed pool keyed by a trace's ids: the token-level trace replay in seconds, not minutes
    hitrate.py         the ``hitrate`` command's study: options checked once, the replays, the report
    tier_replay.py     moved to replay.py (its old names work for one more release, with a warning)
    router.py          which of several engine instances serves a request
    timing.py          the book chapter's reuse experiment timed: cache off vs on, TTFT and wall time

  many engines in many processes (chapter 07)
    kv_wire.py         KV events as bytes, exactly as vLLM 0.33 encodes them (msgspec / msgpack)
    kv_pubsub.py       KV events over ZeroMQ: vLLM's publisher (PUB + replay ROUTER), a subscriber that recovers gaps
    kv_index.py        the router's global index: which worker holds which block hash, on which medium
    routing.py         a cluster's routers behind one interface: random .. approximate tree, Dynamo's cost, llm-d's scorers
    cluster.py         N instance processes publishing KV events over ZeroMQ, a router indexing them; faults, a TTFT model
    engine_cluster.py  the same with real engines: a few LLMEngine processes on a real model, routed by their events

  fast/: the GPU fast path (optional; the engine runs without it, and so do the chapters)
    triton_attention.py  Triton kernels: write K/V by slot, attend through page tables
    fast_attention.py    the engine's attention context on those kernels; picking one by name
    cuda_graph.py        decode steps captured once per batch size and replayed
    gpu_memory.py        how many KV blocks fit on the GPU (vLLM's gpu_memory_utilization)

  notebook/: what only the chapters use
    viz.py             diagrams of the block pool and the radix tree
    widgets.py         steppers: requests through a cache, one operation at a time
    exercises.py       a chapter's exercise: the statement and a "Check my solution" button
    listing.py         show_source (a class's real source, never pasted text) and add_to_class (a class one method a cell)
    figures.py         said("6,000 blocks", value): a figure the prose quotes, checked against the run

  tools
    __main__.py        the command line: ``python -m nano_engine generate | hitrate | cluster | bench | events``
    bench.py           throughput of LLMEngine beside transformers' batched generate
"""

__version__ = "0.1.0"

_LAZY = {"LLMEngine": "nano_engine.engine", "SamplingParams": "nano_engine.sampling"}


def __getattr__(name: str):
    # Imported on first use, so `import nano_engine` stays cheap (no torch) for the judge and CLI.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nano_engine' has no attribute {name!r}")
