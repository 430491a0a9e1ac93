"""engine.py: ``LLMEngine``, continuous batching over a paged KV cache with optional prefix caching.

Each ``step()`` is four named stages: nano-vllm's ``LLMEngine.step`` (``nanovllm/engine/llm_engine.py``:
``scheduler.schedule`` → ``model_runner.run`` → ``scheduler.postprocess``), plus a log:

1. ``_plan``: the :class:`~nano_engine.scheduler.Scheduler` picks sequences and how many tokens
   each computes (decodes, prefill chunks, admissions with prefix-cache hits, preemptions when
   memory is short); :class:`StepPlan` lays their tokens out as one flat batch;
2. ``_forward_and_sample``: one model forward over that batch (attention writes the new K/V to the
   paged :class:`~nano_engine.kv_cache.KVCache` and reads each sequence through its page table),
   then every sequence whose tokens are now all computed samples its next token;
3. ``_postprocess``: only now is anything recorded: the computed tokens count as computed, the
   cache manager registers their KV for reuse, the sampled tokens are appended, and finished
   sequences release their memory;
4. ``_log``: one dict in ``step_log``.

**Faults.** Nothing in stage 2 changes the bookkeeping, so a failure there (a model error, a
sampling error, Ctrl-C in the middle of a long forward) is undone by forgetting the step: the
sequences are scheduled again next step and compute the same tokens (``cache.rollback`` drops
whatever a manager registered ahead of time, seeded generators get their state back). Stages 1
and 3 change the queues and the caches; each change to one sequence is all or nothing, a failure
undoes the current sequence's change and marks the scheduler for ``repair``, and Ctrl-C is held
back until they end (:mod:`nano_engine.interrupts`). Afterwards every request is either still
scheduled correctly or finished/aborted with its memory released. (nano-vllm's step has no such
undo; this one is meant to be interrupted in a notebook.)

``generate(prompts, params)`` adds requests and steps until they are done, returning completions
only (the same tokens as ``nano_engine.model.generate(...)[0].tolist()`` under greedy decoding).
``step_log`` keeps one dict per step (the last ``step_log_size`` steps, see :class:`StepLog`)::

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

import numbers
import operator
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence as Seq
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from nano_engine.attention import AttentionMetadata, PagedAttention, device_tensor
from nano_engine.cache_manager import HashedBlockCacheManager
from nano_engine.engine_config import EngineConfig
from nano_engine.interrupts import InterruptGuard
from nano_engine.kv_cache import KVCache
from nano_engine.model import Transformer
from nano_engine.paged import BlockPool, ceil_div
from nano_engine.sampling import SamplingParams, make_generator, sample
from nano_engine.scheduler import Scheduler, SchedulerOutput
from nano_engine.sequence import Metrics, Sequence

__all__ = ["EngineConfig", "LLMEngine", "RequestAborted", "SamplingParams", "StepLog"]

PROGRESS_MIN_PROMPTS = 32
"""``progress=None`` shows a bar from this many prompts on, and never under pytest."""


class RequestAborted(RuntimeError):
    """``generate`` was waiting for a request that ``LLMEngine.abort`` stopped."""


class StepLog(Seq[dict]):
    """``step_log``: one dict per step, the last ``maxlen`` steps kept (None: all; 0: none).

    Indexed by step number since the engine started, so ``n = len(log); ...; log[n:]`` gives the
    steps since ``n`` however long the engine has run. Reading a dropped step raises IndexError;
    iterating yields the steps still kept."""

    def __init__(self, maxlen: int | None) -> None:
        self.maxlen, self.num_dropped = maxlen, 0
        self._steps: deque[dict] = deque(maxlen=maxlen)

    def append(self, step: dict) -> None:
        self.num_dropped += len(self._steps) == self.maxlen
        self._steps.append(step)

    def __len__(self) -> int:
        return self.num_dropped + len(self._steps)

    def __iter__(self) -> Iterator[dict]:
        return iter(self._steps)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = operator.index(index) + (len(self) if index < 0 else 0)
        if not self.num_dropped <= i < len(self):
            raise IndexError(f"step {index} is not in the log: it keeps steps {self.num_dropped}..{len(self) - 1} "
                             f"(LLMEngine(step_log_size=...) keeps more)")
        return self._steps[i - self.num_dropped]

    def __repr__(self) -> str:
        return f"StepLog({len(self)} steps, last {len(self._steps)} kept)"


@dataclass
class StepPlan:
    """One step: the scheduler's choice laid out as a flat batch. ``input_ids`` are the new tokens
    of every scheduled sequence end to end; row ``logits_rows[i]`` gives ``to_sample[i]`` its next
    token (a sequence samples once all its tokens are computed)."""

    scheduled: SchedulerOutput
    input_ids: list[int]
    logits_rows: list[int]
    to_sample: list[Sequence]
    num_decode_tokens: int
    cuda_graph: bool = False              # set by the forward: replayed from a CUDA graph
    generator_states: dict[Sequence, torch.Tensor] = field(default_factory=dict)   # before sampling

    @classmethod
    def build(cls, scheduled: SchedulerOutput) -> StepPlan:
        plan = cls(scheduled, [], [], [], 0)
        for seq, n in zip(scheduled.seqs, scheduled.num_new_tokens, strict=True):
            first = seq.num_computed_tokens
            plan.input_ids += seq.token_ids[first:first + n]
            if first + n == seq.num_tokens:
                plan.logits_rows.append(len(plan.input_ids) - 1)
                plan.to_sample.append(seq)
                plan.num_decode_tokens += n == 1 and seq.num_tokens > seq.num_prompt_tokens
        return plan

    @property
    def seqs(self) -> list[Sequence]:
        return self.scheduled.seqs

    @property
    def num_new_tokens(self) -> list[int]:
        return self.scheduled.num_new_tokens


class LLMEngine:
    """Continuous-batching engine for a :class:`~nano_engine.model.Transformer`.

    Memory and caching (pick one way; :mod:`nano_engine.engine_config` tells them apart):

    * ``pool=None, cache=None``: no prefix caching, a ``BlockPool`` of ``num_blocks`` blocks of
      ``block_size`` tokens (default: 16384 tokens or 2 GiB of KV, whichever is smaller; or
      ``kv_bytes`` of KV);
    * ``pool=PrefixCachingBlockPool(num_blocks, block_size)``: vLLM-style hashed prefix caching on
      that pool (its size and block size win); a plain ``BlockPool`` means no caching;
    * ``cache="none" | "hashed" | "vllm" | "radix"`` builds that manager with ``num_blocks``/``block_size``
      (``"vllm"``: ``"hashed"`` with ``PrefixCachingBlockPool(..., vllm=True)``);
      ``cache=<CacheManager>`` uses the given one.

    Scheduling: ``max_num_batched_tokens`` tokens per step at most (None: as many as the pool
    holds, or with ``gpu_memory_utilization`` the 8192 tokens its profile measured),
    ``max_num_seqs`` running sequences at most, ``policy`` the admission order ("fcfs", the
    cache-aware "lpm" / "dfs-weight", or an object, see :mod:`nano_engine.policies`).

    ``attention`` builds the per-step attention context from the KV cache and the metadata
    (default: the PyTorch reference ``PagedAttention``); by name, ``"torch"`` (the reference),
    ``"triton"`` (the Triton kernels, CUDA) or ``"auto"`` (Triton on a GPU of compute capability
    8.0+ when installed, the reference on a T4 and on CPU: ``nano_engine.devices``), see
    ``nano_engine.fast.fast_attention``.

    Host tier (chapter 06): ``host_kv_tokens=N`` (with ``write_policy="write_through"`` |
    ``"write_through_selective"`` | ``"write_back"``, radix only), or ``host_tier=HostTier(...)``,
    puts N tokens of host memory under a ``"radix"``, ``"hashed"`` or ``"vllm"`` cache
    (``nano_engine.tiered_cache_manager``). ``close()`` (or ``with LLMEngine(...) as engine``)
    waits for the copies still in flight.

    GPU options: ``gpu_memory_utilization`` (e.g. 0.9) sizes the KV pool from free GPU memory after a
    profiling forward, like vLLM (``nano_engine.fast.gpu_memory``); ``cuda_graphs=True`` (with Triton
    attention on CUDA) replays decode-only steps from CUDA graphs (``nano_engine.fast.cuda_graph``).

    ``tokenizer`` lets ``generate`` take strings. ``progress``: True / False / None (a tqdm bar
    from 32 prompts on, off under pytest). ``step_log_size``: steps kept in ``step_log`` (default
    10 000; None keeps all).

    The options are checked once, into an :class:`~nano_engine.engine_config.EngineConfig`
    (``LLMEngine(model, config=EngineConfig(...))`` works too): a bad one raises ValueError naming it.

    **Threads.** One lock serializes ``add_request``, ``step``, ``abort`` and every step of
    ``generate``: any number of threads may share one engine (two ``generate`` calls interleave
    their steps, and each returns its own completions); steps never run in parallel.
    """

    def __init__(self, model: Transformer, eos_token_id: int | None = None, pool: BlockPool | None = None, *,
                 config: EngineConfig | None = None, tokenizer: Any = None, **options: Any) -> None:
        if config is None:
            config = EngineConfig(eos_token_id=eos_token_id, pool=pool, **options)
        elif eos_token_id is not None or pool is not None or options:
            raise ValueError("pass the options either as config= or as keyword arguments, not both")
        self.model, self.config, self.engine_config = model.eval(), model.config, config
        self.eos_token_id, self.tokenizer, self.progress = config.eos_token_id, tokenizer, config.progress
        self.attention = self._attention_factory(config.attention)
        kv_dtype = config.kv_dtype or model.dtype
        with self._on_device():
            layout = config.layout(model, self.attention, kv_dtype)      # sizes settled, nothing built yet
            self.block_size = layout.block_size
            self.kv_cache = KVCache(self.config, layout.num_blocks, self.block_size, device=model.device,
                                    dtype=kv_dtype)
            self.cache = config.build_cache_manager(
                layout, self.kv_cache, layerwise=self.attention is PagedAttention and not config.cuda_graphs)
            self.scheduler = Scheduler(self.cache, config.step_token_budget(), config.max_num_seqs, config.policy)
            self.graph_runner = self._make_graph_runner() if config.cuda_graphs else None
        self.step_log = StepLog(config.step_log_size)
        self.last_metrics: list[Metrics] = []
        self._next_request_id = 0
        self._lock = threading.RLock()
        self._interrupts = InterruptGuard()

    def _on_device(self) -> AbstractContextManager:
        """The model's CUDA device made current (Triton launches, graph capture and new streams
        use the current device, which is not ``cuda:1`` unless someone says so); nothing on CPU."""
        device = self.model.device
        return torch.cuda.device(device) if device.type == "cuda" else nullcontext()

    def close(self) -> None:
        """Wait for every host-tier copy still in flight (their pages are the engine's own KV
        memory: dropping an engine with a copy running would hand that memory out too early).
        The engine stays usable; ``with LLMEngine(...) as engine:`` calls this at the end."""
        with self._lock:
            self.cache.close()

    def __enter__(self) -> LLMEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _attention_factory(self, attention: str | Callable) -> Callable:
        if isinstance(attention, str):      # "torch" | "triton" | "auto": see nano_engine.fast.fast_attention
            from nano_engine.fast.fast_attention import attention_factory
            return attention_factory(attention, self.model.device)
        return attention

    def _make_graph_runner(self):
        """Decode steps replayed from CUDA graphs (``nano_engine.fast.cuda_graph``); the static page table
        as wide as the longest sequence this engine admits (its pool, or the model's context)."""
        from nano_engine.fast.cuda_graph import DecodeGraphRunner
        max_pages = min(self.cache.usable_blocks, ceil_div(self.config.max_position_embeddings, self.block_size))
        return DecodeGraphRunner(self.model, self.kv_cache, self.scheduler.max_num_seqs, max_pages,
                                 attention=self.attention)

    # -- requests --------------------------------------------------------------------------------

    def add_request(self, prompt: Seq[int] | str | torch.Tensor, params: SamplingParams | None = None) -> int:
        """Queue one request; returns its id (for ``abort``). Bad input raises ValueError and changes nothing."""
        params = self._check_params(params)
        with self._lock, self._critical():
            seq = self._make_sequence(prompt, params, self._next_request_id)
            self._next_request_id += 1
            self.scheduler.add(seq)
        return seq.request_id

    @staticmethod
    def _check_params(params: object, name: str = "params") -> SamplingParams:
        if params is None:
            return SamplingParams()
        if not isinstance(params, SamplingParams):
            hint = ": build SamplingParams(**params)" if isinstance(params, dict) else ""
            raise ValueError(f"{name} must be a SamplingParams or None (the defaults), got "
                             f"{type(params).__name__}{hint}")
        return params

    def _make_sequence(self, prompt: Any, params: SamplingParams, request_id: int, label: str = "") -> Sequence:
        name = f"request {request_id}{label}"
        try:
            params.validate()        # again: a field may have been changed since construction
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        token_ids = self._token_ids(prompt, name)
        vocab, context = self.config.vocab_size, self.config.max_position_embeddings
        bad = [t for t in token_ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"{name}: token id {bad[0]} is outside the vocabulary (0..{vocab - 1})")
        total = len(token_ids) + params.max_tokens
        if total > context:
            raise ValueError(f"{name}: {len(token_ids)} prompt tokens + max_tokens {params.max_tokens} = "
                             f"{total} exceeds the model's context of {context} tokens")
        # The last generated token is never fed back, so the KV holds at most prompt + max_tokens - 1.
        need = self.cache.blocks_needed(total - 1)
        if need > self.cache.usable_blocks:
            raise ValueError(f"{name}: {len(token_ids)} prompt tokens + max_tokens {params.max_tokens} need "
                             f"{need} KV blocks of {self.block_size} tokens, but the pool can give one request "
                             f"at most {self.cache.usable_blocks}")
        return Sequence(request_id, token_ids, params, eos_token_id=self.eos_token_id,
                        generator=make_generator(params, self.model.device))

    def _token_ids(self, prompt: Any, name: str) -> list[int]:
        """A prompt as a non-empty list of ints: from a string (with the tokenizer), a 1-D tensor,
        or a sequence of integers (NumPy's too; never bools, floats or the bytes of a bytes object)."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError(f"{name}: got a string prompt but the engine has no tokenizer "
                                 "(pass tokenizer= or token ids)")
            prompt = self.tokenizer(prompt)["input_ids"]
        if isinstance(prompt, torch.Tensor):
            if prompt.dim() != 1:
                raise ValueError(f"{name}: a tensor prompt must be 1-D (one sequence of token ids), "
                                 f"got shape {tuple(prompt.shape)}")
            prompt = prompt.tolist()
        try:
            if isinstance(prompt, (bytes, bytearray)) or any(isinstance(t, bool) for t in prompt):
                raise TypeError
            token_ids = [operator.index(t) for t in prompt]
        except TypeError:
            raise ValueError(f"{name}: the prompt must be a string or a list of token ids (integers, "
                             f"not bools, floats or bytes), got {type(prompt).__name__}") from None
        if not token_ids:
            raise ValueError(f"{name}: the prompt is empty (at least 1 token is needed)")
        return token_ids

    def abort(self, request: int | Sequence) -> bool:
        """Stop a request, by the id ``add_request`` returned or by its ``Sequence``, and release its
        memory; a ``generate`` waiting for it raises :class:`RequestAborted`. Idempotent: for a
        request that has already finished (or was aborted) nothing changes, its finish reason
        included, and the result is False."""
        with self._lock, self._critical():
            seq = self._find_request(request)
            return seq is not None and self.scheduler.abort(seq)

    def _find_request(self, request: int | Sequence) -> Sequence | None:
        if isinstance(request, Sequence):
            return request
        if not isinstance(request, int) or isinstance(request, bool) or not 0 <= request < self._next_request_id:
            raise ValueError(f"request must be a request id (0..{self._next_request_id - 1}) or a Sequence, "
                             f"got {request!r}")
        alive = (s for queue in (self.scheduler.running, self.scheduler.waiting) for s in queue)
        return next((s for s in alive if s.request_id == request), None)     # None: it finished already

    # -- one step --------------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> list[Sequence]:
        """Plan, forward and sample, postprocess, log (see the module docstring); returns the
        sequences that finished in this step."""
        with self._lock, self._critical(), self._on_device():
            start = time.perf_counter()
            self.cache.begin_step()          # a host tier acknowledges copies and starts its stores
            plan = self._plan()
            if plan is None:
                return []
            tokens = self._forward_and_sample(plan)
            finished = self._postprocess(plan, tokens)
            self._log(plan, start)
            return finished

    @contextmanager
    def _critical(self) -> Iterator[None]:
        """A section that changes the bookkeeping: Ctrl-C waits until it ends (``_forward_and_sample``
        lets it through), and an exception leaves the scheduler marked for ``repair``."""
        with self._interrupts.deferred():
            try:
                yield
            except BaseException:
                self.scheduler.needs_repair = True
                raise

    def _plan(self) -> StepPlan | None:
        """Stage 1: the scheduler's choice as a flat batch; None when no request is left."""
        scheduled = self.scheduler.schedule()
        if scheduled.seqs:
            return StepPlan.build(scheduled)
        if self.scheduler.has_unfinished:
            raise RuntimeError(f"no request could be scheduled: {self.scheduler.running} running, "
                               f"{list(self.scheduler.waiting)} waiting, {self.cache.size_info()}")
        return None

    def _forward_and_sample(self, plan: StepPlan) -> list[int]:
        """Stage 2: the next token of every sequence in ``plan.to_sample``. Records nothing, so a
        failure here (Ctrl-C included) is undone by forgetting the step."""
        plan.generator_states = {s: s.generator.get_state() for s in plan.to_sample if s.generator is not None}
        try:
            with self._interrupts.allowed():
                self.cache.before_forward()  # a host tier starts its loads (the forward reads them)
                logits = self._forward(plan)
                return sample(logits, [s.params for s in plan.to_sample], [s.generator for s in plan.to_sample])
        except BaseException:
            self._rollback(plan, plan.seqs)
            raise

    def _forward(self, plan: StepPlan) -> torch.Tensor:
        """One forward over the flat batch: the logits of ``plan.logits_rows``. Decode-only steps
        replay a CUDA graph when the engine has one that fits."""
        block_tables = [s.block_table for s in plan.seqs]
        num_computed = [s.num_computed_tokens for s in plan.seqs]
        runner = self.graph_runner
        plan.cuda_graph = runner is not None and runner.can_run(plan.num_new_tokens, block_tables)
        if runner is not None and plan.cuda_graph:
            return runner.forward(plan.input_ids, block_tables, num_computed, plan.logits_rows)
        device = self.model.device
        metadata = AttentionMetadata.build(page_tables=block_tables, num_computed=num_computed,
                                           num_new=plan.num_new_tokens, page_size=self.block_size, device=device)
        return self.model(device_tensor(plan.input_ids, torch.long, device), positions=metadata.positions,
                          context=self.attention(self.kv_cache, metadata),
                          logits_indices=device_tensor(plan.logits_rows, torch.long, device))

    def _rollback(self, plan: StepPlan, seqs: Seq[Sequence]) -> None:
        """Forget this step for ``seqs``: next step they compute the same tokens and draw the same samples."""
        for seq in seqs:
            self.cache.rollback(seq)
            if seq in plan.generator_states:
                seq.generator.set_state(plan.generator_states[seq])  # type: ignore[union-attr]

    def _postprocess(self, plan: StepPlan, tokens: list[int]) -> list[Sequence]:
        """Stage 3, the commit, one sequence at a time. If something raises, the sequences before
        it keep their step, it and the ones after are rolled back (they recompute next step)."""
        sampled = dict(zip(plan.to_sample, tokens, strict=True))
        now = time.perf_counter()
        committed = 0
        try:
            for seq, n in zip(plan.seqs, plan.num_new_tokens, strict=True):
                self._mark_computed(seq, n)
                committed += 1
                self._append_token(seq, sampled.get(seq), now)
        except BaseException:
            self._rollback(plan, plan.seqs[committed:])
            raise
        return [s for s in plan.to_sample if s.is_finished]

    def _mark_computed(self, seq: Sequence, num_new_tokens: int) -> None:
        """``seq``'s new tokens now have their KV: count them, and let the cache manager register
        them for reuse (if that raises, they are not counted)."""
        seq.num_computed_tokens += num_new_tokens
        try:
            self.cache.cache(seq, num_new_tokens)
        except BaseException:
            seq.num_computed_tokens -= num_new_tokens
            raise

    def _append_token(self, seq: Sequence, token: int | None, now: float) -> None:
        """Append the token ``seq`` sampled (None: it is still in prefill); if that finished it, its
        memory goes back (should ``free`` raise, ``Scheduler.repair`` finishes it next step)."""
        if token is None:
            return
        seq.append_token(token, now)
        if seq.is_finished:
            self.scheduler.finish(seq)

    def _log(self, plan: StepPlan, start: float) -> None:
        """Stage 4: one ``step_log`` entry (keys in the module docstring)."""
        self.step_log.append({
            "num_tokens": plan.scheduled.num_tokens,
            "num_prefill_tokens": plan.scheduled.num_tokens - plan.num_decode_tokens,
            "num_decode_tokens": plan.num_decode_tokens,
            "num_seqs": len(plan.seqs),
            "num_context_tokens": sum(s.num_computed_tokens for s in plan.seqs),
            "cuda_graph": plan.cuda_graph,
            "num_cached_tokens": plan.scheduled.num_cached_tokens,
            "num_preempted": len(plan.scheduled.preempted),
            "num_running": len(self.scheduler.running),
            "num_waiting": len(self.scheduler.waiting),
            "time": time.perf_counter() - start,
        })

    # -- the offline API -------------------------------------------------------------------------

    def generate(self, prompts: Seq[Seq[int] | str] | torch.Tensor,
                 params: SamplingParams | Seq[SamplingParams] | None = None,
                 *, progress: bool | None = None, return_metrics: bool = False):
        """Generate for every prompt; returns the completions (token ids, no prompt) in input order.

        ``prompts``: a list of prompts (token-id lists, 1-D tensors or strings) or a 2-D tensor
        (one row per prompt). ``params`` is one ``SamplingParams`` for all prompts or one per prompt.
        Every request is checked before any is queued, so a bad one raises ValueError and leaves
        the engine as it was. If one of the requests is aborted meanwhile (``abort``, e.g. from
        another thread), the others are aborted too and :class:`RequestAborted` is raised.
        Per-request :class:`~nano_engine.sequence.Metrics` (time to first token, decode tokens/s,
        cache hits, preemptions) land in ``self.last_metrics``; ``return_metrics=True`` returns
        ``(completions, metrics)``."""
        prompts = self._check_prompts(prompts)
        params = self._params_per_prompt(params, len(prompts))
        seqs: list[Sequence] = []
        bar = self._progress_bar(len(prompts), progress)
        try:
            self._queue(prompts, params, seqs)
            self._run_until_done(seqs, bar)
        except BaseException:
            with self._lock, self._critical():
                for seq in seqs:
                    self.scheduler.abort(seq)
            raise
        finally:
            if bar is not None:
                bar.close()
        self.last_metrics = [s.metrics for s in seqs]
        outputs = [s.output_token_ids for s in seqs]
        return (outputs, self.last_metrics) if return_metrics else outputs

    @staticmethod
    def _check_prompts(prompts: object) -> list:
        """The prompts as a list: from a list (tuple, array) of prompts or a 2-D tensor, one row each."""
        if isinstance(prompts, torch.Tensor) and prompts.dim() != 2:
            raise ValueError(f"prompts as a tensor must be 2-D (one row per prompt), got shape "
                             f"{tuple(prompts.shape)}; pass one 1-D tensor as [tensor]")
        if isinstance(prompts, (str, bytes, dict)) or not isinstance(prompts, Iterable):
            raise ValueError(f"prompts must be a list of prompts (each a list of token ids, a 1-D tensor or a "
                             f"string), got {type(prompts).__name__}")
        prompts = list(prompts)
        if any(isinstance(p, numbers.Integral) for p in prompts):
            raise ValueError("prompts must be a list of prompts, got a list of ints: wrap one prompt as [prompt]")
        return prompts

    def _params_per_prompt(self, params: object, num_prompts: int) -> list[SamplingParams]:
        if params is None or isinstance(params, SamplingParams):
            return [self._check_params(params)] * num_prompts
        if isinstance(params, (dict, str)) or not isinstance(params, Seq):
            hint = ": build SamplingParams(**params)" if isinstance(params, dict) else ""
            raise ValueError(f"params must be a SamplingParams, a list of them (one per prompt) or None, got "
                             f"{type(params).__name__}{hint}")
        if len(params) != num_prompts:
            raise ValueError(f"got {len(params)} SamplingParams for {num_prompts} prompts")
        return [self._check_params(p, f"params[{i}]") for i, p in enumerate(params)]

    def _queue(self, prompts: list, params: list[SamplingParams], seqs: list[Sequence]) -> None:
        """Check every request, then queue them all (into ``seqs`` too) or, if one is bad, none."""
        with self._lock, self._critical():
            first = self._next_request_id
            new = [self._make_sequence(p, sp, first + i, f" (prompt {i})")
                   for i, (p, sp) in enumerate(zip(prompts, params, strict=True))]
            self._next_request_id += len(new)
            for seq in new:
                self.scheduler.add(seq)
            seqs += new

    def _run_until_done(self, seqs: list[Sequence], bar: Any) -> None:
        """Step until each of ``seqs`` has finished (other threads' steps count too)."""
        remaining = seqs
        while remaining:
            self.step()
            done = [s for s in remaining if s.is_finished]
            if not done:
                continue
            remaining = [s for s in remaining if not s.is_finished]
            aborted = [s.request_id for s in done if s.finish_reason == "abort"]
            if aborted:
                raise RequestAborted(f"request(s) {aborted} were aborted while generate waited for them "
                                     f"(LLMEngine.abort); the call's other requests are aborted too")
            if bar is not None:
                bar.update(len(done))

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
        if pin and not isinstance(self.cache, HashedBlockCacheManager):
            raise ValueError(f"pinning needs the hashed cache, this engine uses {self.cache.name!r}")
        keys = {"lora_id": lora_id, "cache_salt": cache_salt}
        seqs: list[Sequence] = []
        self._queue([prompt], [SamplingParams(max_tokens=1, **keys)], seqs)
        self._run_until_done(seqs, None)
        (seq,) = seqs
        if isinstance(self.cache, HashedBlockCacheManager) and pin:
            return len(self.cache.pool.pin(seq.prompt_token_ids, **keys)) * self.block_size
        probe = Sequence(-1, seq.prompt_token_ids + [0], seq.params)   # +1: match stops before the last token
        return self.cache.peek(probe)

    @property
    def pool(self) -> BlockPool:
        """The block pool behind the cache manager."""
        return self.cache.pool

    def check_no_leaks(self) -> None:
        """Raise AssertionError unless every request is done and no block is held outside the cache."""
        assert not self.scheduler.has_unfinished, (
            f"requests still queued: running {self.scheduler.running}, waiting {list(self.scheduler.waiting)}")
        self.cache.check_no_leaks()
