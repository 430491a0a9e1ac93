"""engine.py: ``LLMEngine``, continuous batching over a paged KV cache with optional prefix caching.

Each ``step()``:

1. the :class:`~nano_engine.scheduler.Scheduler` picks sequences and how many tokens each computes
   (decodes, prefill chunks, admissions with prefix-cache hits, preemptions when memory is short);
2. one model forward runs over the flat batch of all those tokens; attention writes the new K/V to
   the paged :class:`~nano_engine.kv_cache.KVCache` and reads each sequence through its page table;
3. the cache manager registers the newly computed KV (so others can reuse it), and every sequence
   whose tokens are all computed samples its next token; finished ones release their memory.

``generate(prompts, params)`` adds requests and steps until they are done, returning completions
only (the same tokens as ``nano_engine.model.generate(...)[0].tolist()`` under greedy decoding).
``step_log`` keeps one dict per step::

    num_tokens          tokens computed in the step (prefill + decode)
    num_prefill_tokens  prompt tokens (and recomputed tokens of preempted requests)
    num_decode_tokens   newest-token decodes
    num_seqs            sequences in the batch
    num_context_tokens  KV tokens the step's attention reads (every scheduled sequence's context)
    cuda_graph          whether the forward was a CUDA-graph replay (``cuda_graphs=True``)
    num_cached_tokens   prefix-cache hits of the requests admitted in this step
    num_preempted       sequences preempted in this step
    num_running, num_waiting   queue sizes after the step
    time                wall-clock seconds of the step
"""

from __future__ import annotations

import itertools
import operator
import os
import time
from collections.abc import Callable, Sequence as Seq

import torch

from nano_engine.attention import AttentionMetadata, PagedAttention, device_tensor
from nano_engine.cache_manager import (CacheManager, HashedBlockCacheManager, NaiveCacheManager,
                                       RadixCacheManager)
from nano_engine.kv_cache import KVCache, bytes_per_token
from nano_engine.model import AttentionContext, Transformer
from nano_engine.paged import BlockPool
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.sampling import SamplingParams, make_generator, sample
from nano_engine.scheduler import AdmissionPolicy, Scheduler
from nano_engine.sequence import Metrics, Sequence, Status

__all__ = ["LLMEngine", "SamplingParams"]

DEFAULT_KV_TOKENS = 16384
"""Default pool: room for this many tokens (1024 blocks of 16) ..."""
DEFAULT_KV_BYTES = 2 * 2**30
"""... unless that takes more than 2 GiB (Qwen3-0.6B in float32: 9362 tokens fit)."""

PROGRESS_MIN_PROMPTS = 32
"""``progress=None`` shows a bar from this many prompts on, and never under pytest."""


class LLMEngine:
    """Continuous-batching engine for a :class:`~nano_engine.model.Transformer`.

    Memory and caching (pick one way):

    * ``pool=None, cache=None``: no prefix caching, a ``BlockPool`` of ``num_blocks`` blocks of
      ``block_size`` tokens (default: 16384 tokens or 2 GiB of KV, whichever is smaller; or
      ``kv_bytes`` of KV);
    * ``pool=PrefixCachingBlockPool(num_blocks, block_size)``: vLLM-style hashed prefix caching on
      that pool (its size and block size win); a plain ``BlockPool`` means no caching;
    * ``cache="none" | "hashed" | "vllm" | "radix"`` builds that manager with ``num_blocks``/``block_size``
      (``"vllm"``: ``"hashed"`` with ``PrefixCachingBlockPool(..., vllm=True)``);
      ``cache=<CacheManager>`` uses the given one.

    Scheduling: ``max_num_batched_tokens`` tokens per step at most (None: unlimited),
    ``max_num_seqs`` running sequences at most, ``policy`` the admission order ("fcfs", the
    cache-aware "lpm" / "dfs-weight" of ``nano_engine.policies``, or an object, see
    ``scheduler.AdmissionPolicy``).

    ``attention`` builds the per-step attention context from the KV cache and the metadata
    (default: the PyTorch reference ``PagedAttention``); by name, ``"torch"`` (the reference),
    ``"triton"`` (the Triton kernels, CUDA) or ``"auto"`` (Triton on CUDA when installed), see
    ``nano_engine.fast_attention``.

    GPU options: ``gpu_memory_utilization`` (e.g. 0.9) sizes the KV pool from free GPU memory after a
    profiling forward, like vLLM (``nano_engine.gpu_memory``); ``cuda_graphs=True`` (with Triton
    attention on CUDA) replays decode-only steps from CUDA graphs (``nano_engine.cuda_graph``).

    ``tokenizer`` lets ``generate`` take strings. ``progress``: True / False / None (a tqdm bar
    from 32 prompts on, off under pytest).
    """

    def __init__(self, model: Transformer, eos_token_id: int | None = None,
                 pool: BlockPool | None = None, *, cache: str | CacheManager | None = None,
                 num_blocks: int | None = None, block_size: int = 16, kv_bytes: int | None = None,
                 kv_dtype: torch.dtype | None = None, max_num_batched_tokens: int | None = 4096,
                 max_num_seqs: int = 256, policy: str | AdmissionPolicy = "fcfs",
                 attention: str | Callable[[KVCache, AttentionMetadata], AttentionContext] = PagedAttention,
                 tokenizer=None, progress: bool | None = None,
                 gpu_memory_utilization: float | None = None, cuda_graphs: bool = False) -> None:
        self.model = model.eval()
        self.config = model.config
        self.eos_token_id = eos_token_id
        self.tokenizer = tokenizer
        self.progress = progress
        if isinstance(attention, str):      # "torch" | "triton" | "auto": see nano_engine.fast_attention
            from nano_engine.fast_attention import attention_factory
            attention = attention_factory(attention, model.device)
        self.attention = attention
        kv_dtype = kv_dtype or model.dtype
        if gpu_memory_utilization is not None:   # the pool takes what the GPU has left (nano_engine.gpu_memory)
            if pool is not None or num_blocks is not None or kv_bytes is not None or isinstance(cache, CacheManager):
                raise ValueError("gpu_memory_utilization sizes the KV pool itself; drop pool=, num_blocks=, "
                                 "kv_bytes= or the cache-manager object")
            from nano_engine.gpu_memory import profile_kv_budget
            kv_bytes = profile_kv_budget(model, gpu_memory_utilization, self.attention, block_size, kv_dtype,
                                         max_num_batched_tokens)
        self.cache = self._make_cache_manager(pool, cache, num_blocks, block_size, kv_bytes, kv_dtype)
        self.block_size = self.cache.block_size
        self.kv_cache = KVCache(self.config, self.cache.num_blocks, self.block_size,
                                device=model.device, dtype=kv_dtype)
        self.scheduler = Scheduler(self.cache, max_num_batched_tokens, max_num_seqs, policy)
        self.graph_runner = None
        if cuda_graphs:                     # decode steps replayed from CUDA graphs: nano_engine.cuda_graph
            from nano_engine.cuda_graph import DecodeGraphRunner
            self.graph_runner = DecodeGraphRunner.for_engine(self)
        self.step_log: list[dict] = []
        self.last_metrics: list[Metrics] = []
        self._request_ids = itertools.count()

    def _make_cache_manager(self, pool, cache, num_blocks, block_size, kv_bytes, kv_dtype) -> CacheManager:
        if isinstance(cache, CacheManager):
            if pool is not None:
                raise ValueError("pass either pool= or a cache manager as cache=, not both")
            return cache
        if pool is not None:
            if cache is not None:
                raise ValueError(f"pool= already chooses the cache; drop cache={cache!r}")
            if isinstance(pool, PrefixCachingBlockPool):
                return HashedBlockCacheManager(pool)
            return NaiveCacheManager(pool.num_blocks, block_size, pool)
        if num_blocks is None:
            budget = kv_bytes if kv_bytes is not None else min(
                DEFAULT_KV_BYTES, DEFAULT_KV_TOKENS * bytes_per_token(self.config, kv_dtype))
            num_blocks = KVCache.pages_for_budget(self.config, budget, block_size, kv_dtype)
        elif kv_bytes is not None:
            raise ValueError("pass either num_blocks or kv_bytes, not both")
        if cache in (None, "none"):
            return NaiveCacheManager(num_blocks, block_size)
        if cache in ("hashed", "vllm"):     # "vllm": vLLM v1's pool, blocks registered at allocation
            return HashedBlockCacheManager(PrefixCachingBlockPool(num_blocks, block_size, vllm=cache == "vllm"))
        if cache == "radix":
            return RadixCacheManager(num_blocks, block_size)
        raise ValueError(f"cache must be 'none', 'hashed', 'vllm', 'radix' or a CacheManager, got {cache!r}")

    # -- requests --------------------------------------------------------------------------------

    def add_request(self, prompt: Seq[int] | str, params: SamplingParams | None = None) -> int:
        """Queue one request; returns its id. Bad input raises ValueError and changes nothing."""
        seq = self._make_sequence(prompt, params or SamplingParams())
        self.scheduler.add(seq)
        return seq.request_id

    def _make_sequence(self, prompt: Seq[int] | str, params: SamplingParams, label: str = "") -> Sequence:
        request_id = next(self._request_ids)
        name = f"request {request_id}{label}"
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError(f"{name}: got a string prompt but the engine has no tokenizer "
                                 "(pass tokenizer= or token ids)")
            prompt = self.tokenizer(prompt)["input_ids"]
        if isinstance(prompt, torch.Tensor):
            prompt = prompt.flatten().tolist()
        try:
            prompt = [operator.index(t) for t in prompt]    # ints (or NumPy ints), never floats
        except TypeError:
            raise ValueError(f"{name}: the prompt must be a list of token ids (integers)") from None
        try:
            params.validate()
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        vocab, context = self.config.vocab_size, self.config.max_position_embeddings
        if not prompt:
            raise ValueError(f"{name}: the prompt is empty (at least 1 token is needed)")
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"{name}: token id {bad[0]} is outside the vocabulary (0..{vocab - 1})")
        if len(prompt) + params.max_tokens > context:
            raise ValueError(f"{name}: {len(prompt)} prompt tokens + max_tokens {params.max_tokens} = "
                             f"{len(prompt) + params.max_tokens} exceeds the model's context of {context} tokens")
        # The last generated token is never fed back, so the KV holds at most prompt + max_tokens - 1.
        need = self.cache.blocks_needed(len(prompt) + params.max_tokens - 1)
        if need > self.cache.usable_blocks:
            raise ValueError(f"{name}: {len(prompt)} prompt tokens + max_tokens {params.max_tokens} need "
                             f"{need} KV blocks of {self.block_size} tokens, but the pool can give one request "
                             f"at most {self.cache.usable_blocks}")
        return Sequence(request_id, prompt, params, eos_token_id=self.eos_token_id,
                        generator=make_generator(params, self.model.device))

    def abort(self, seq: Sequence) -> None:
        """Drop an unfinished request and release its memory."""
        if seq in self.scheduler.waiting:
            self.scheduler.waiting.remove(seq)
        elif seq in self.scheduler.running:
            self.scheduler.finish(seq)
        seq.status, seq.finish_reason = Status.FINISHED, "abort"

    # -- one step --------------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> list[Sequence]:
        """Schedule, run one forward, sample. Returns the sequences that finished in this step."""
        start = time.perf_counter()
        plan = self.scheduler.schedule()
        if not plan.seqs:
            if self.scheduler.has_unfinished:
                raise RuntimeError(f"no request could be scheduled: {self.scheduler.running} running, "
                                   f"{list(self.scheduler.waiting)} waiting, {self.cache.size_info()}")
            return []

        tokens, logits_rows, to_sample, num_decode = [], [], [], 0
        for seq, n in zip(plan.seqs, plan.num_new_tokens):
            first = seq.num_computed_tokens
            tokens += seq.token_ids[first:first + n]
            if first + n == seq.num_tokens:           # everything computed: its logits give the next token
                logits_rows.append(len(tokens) - 1)
                to_sample.append(seq)
                num_decode += n == 1 and seq.num_tokens > seq.num_prompt_tokens
        device = self.model.device
        block_tables = [s.block_table for s in plan.seqs]
        use_graph = self.graph_runner is not None and self.graph_runner.can_run(plan.num_new_tokens, block_tables)
        if use_graph:
            logits = self.graph_runner.forward(tokens, block_tables, [s.num_computed_tokens for s in plan.seqs],
                                               logits_rows)
        else:
            metadata = AttentionMetadata.build(block_tables, [s.num_computed_tokens for s in plan.seqs],
                                               plan.num_new_tokens, self.block_size, device)
            logits = self.model(device_tensor(tokens, torch.long, device),
                                positions=metadata.positions, context=self.attention(self.kv_cache, metadata),
                                logits_indices=device_tensor(logits_rows, torch.long, device))

        for seq, n in zip(plan.seqs, plan.num_new_tokens):
            seq.num_computed_tokens += n
            self.cache.cache(seq, n)
        new_tokens = sample(logits, [s.params for s in to_sample], [s.generator for s in to_sample])
        now = time.perf_counter()
        finished = []
        for seq, token in zip(to_sample, new_tokens):
            seq.append_token(token, now)
            if seq.is_finished:
                self.scheduler.finish(seq)
                finished.append(seq)

        self.step_log.append({
            "num_tokens": plan.num_tokens,
            "num_prefill_tokens": plan.num_tokens - num_decode,
            "num_decode_tokens": num_decode,
            "num_seqs": len(plan.seqs),
            "num_context_tokens": sum(s.num_computed_tokens for s in plan.seqs),
            "cuda_graph": use_graph,
            "num_cached_tokens": plan.num_cached_tokens,
            "num_preempted": len(plan.preempted),
            "num_running": len(self.scheduler.running),
            "num_waiting": len(self.scheduler.waiting),
            "time": now - start,
        })
        return finished

    # -- the offline API -------------------------------------------------------------------------

    def generate(self, prompts: Seq[Seq[int] | str], params: SamplingParams | Seq[SamplingParams] | None = None,
                 *, progress: bool | None = None, return_metrics: bool = False):
        """Generate for every prompt; returns the completions (token ids, no prompt) in input order.

        ``params`` is one ``SamplingParams`` for all prompts or one per prompt. Every request is
        checked before any is queued, so a bad one raises ValueError and leaves the engine as it
        was. Per-request :class:`~nano_engine.sequence.Metrics` (time to first token, decode
        tokens/s, cache hits, preemptions) land in ``self.last_metrics``; ``return_metrics=True``
        returns ``(completions, metrics)``."""
        if isinstance(prompts, str) or (len(prompts) and isinstance(prompts[0], int)):
            raise ValueError("prompts must be a list of prompts (each a list of token ids or a string)")
        if params is None or isinstance(params, SamplingParams):
            params = [params or SamplingParams()] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"got {len(params)} SamplingParams for {len(prompts)} prompts")
        seqs = [self._make_sequence(p, sp, f" (prompt {i})") for i, (p, sp) in enumerate(zip(prompts, params))]
        for seq in seqs:
            self.scheduler.add(seq)

        bar = self._progress_bar(len(seqs), progress)
        try:
            remaining = set(seqs)
            while remaining:
                done = [s for s in self.step() if s in remaining]
                remaining.difference_update(done)
                if bar is not None and done:
                    bar.update(len(done))
        except BaseException:
            for seq in seqs:
                if not seq.is_finished:
                    self.abort(seq)
            raise
        finally:
            if bar is not None:
                bar.close()
        self.last_metrics = [s.metrics for s in seqs]
        outputs = [s.output_token_ids for s in seqs]
        return (outputs, self.last_metrics) if return_metrics else outputs

    def _progress_bar(self, total: int, progress: bool | None):
        show = progress if progress is not None else self.progress
        if show is None:
            show = total >= PROGRESS_MIN_PROMPTS and "PYTEST_CURRENT_TEST" not in os.environ
        if not show:
            return None
        from tqdm.auto import tqdm
        return tqdm(total=total, desc="generate", unit="req")

    # -- caching helpers and checks --------------------------------------------------------------

    def warm_up(self, prompt: Seq[int] | str, *, pin: bool = False, lora_id=None, cache_salt=None) -> int:
        """Compute ``prompt`` once so that its KV is cached; ``pin=True`` (hashed cache) keeps it
        from ever being evicted (``pool.unpin`` releases it). Returns the tokens now cached."""
        keys = {"lora_id": lora_id, "cache_salt": cache_salt}
        (seq,) = [self._make_sequence(prompt, SamplingParams(max_tokens=1, **keys), " (warm-up)")]
        self.scheduler.add(seq)
        while not seq.is_finished:
            self.step()
        if pin:
            if not isinstance(self.cache, HashedBlockCacheManager):
                raise ValueError(f"pinning needs the hashed cache, this engine uses {self.cache.name!r}")
            return len(self.cache.pool.pin(seq.prompt_token_ids, **keys)) * self.block_size
        probe = Sequence(-1, seq.prompt_token_ids + [0], seq.params)   # +1: match stops before the last token
        return self.cache.peek(probe)

    @property
    def pool(self) -> BlockPool:
        """The block pool behind the cache manager (the radix manager's page allocator)."""
        return self.cache.pool

    def check_no_leaks(self) -> None:
        """Raise AssertionError unless every request is done and no block is held outside the cache."""
        assert not self.scheduler.has_unfinished, (
            f"requests still queued: running {self.scheduler.running}, waiting {list(self.scheduler.waiting)}")
        self.cache.check_no_leaks()
