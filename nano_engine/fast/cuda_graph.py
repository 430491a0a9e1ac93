"""cuda_graph.py: the decode forward captured once per batch size and replayed (nano-vllm's trick).

A decode step of Qwen3-0.6B is well over a thousand small kernels (about 50 per layer in this
unfused model: seven projections, four RMSNorms of several kernels each, rotary embeddings,
attention, SiLU-and-mul, residual adds; 28 layers). Launched one by one from Python, they cost more CPU time than the GPU
needs to run them. A CUDA graph records the whole sequence of launches once and replays it with a
single call, so the step costs what the GPU needs, plus one launch.

A graph replays exactly what was recorded: the same kernels, on the same memory, with the same
shapes. So:

* **Static inputs.** Token ids, positions, slots, context lengths and page tables live in
  preallocated device buffers; each step copies its values into them (from pinned host memory,
  without waiting for the GPU) before replaying.
* **A few batch sizes.** One graph per size in ``graph_batch_sizes(max_num_seqs)``: 1, 2, 4, 8,
  then every multiple of 16 up to ``max_num_seqs``, as nano-vllm does. A batch of ``n`` sequences
  runs the smallest graph with room for it; the extra *padding rows* write their K/V to slot -1,
  which ``store_kv`` skips, and have context length 0, for which decode attention returns zeros.
  Their logits are computed and thrown away.
* **Only decode.** Every sequence brings exactly one new token, whatever its context length:
  lengths are read from the buffers by the Triton kernels, never baked into the graph. Steps with
  a prefill chunk run eagerly. The PyTorch reference attention sizes its tensors from lengths known
  on the host, so graphs need the Triton context (:class:`~nano_engine.fast.fast_attention.TritonPagedAttention`).

All graphs share one memory pool (captured largest first, as vLLM and nano-vllm do; PyTorch allows a shared pool for graphs that
never replay concurrently): only one runs
at a time, so their intermediate tensors can live in the same memory.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from nano_engine.attention import AttentionMetadata, device_tensor
from nano_engine.checks import require_int
from nano_engine.fast.fast_attention import PAGE_TABLE_ALIGN, TritonPagedAttention
from nano_engine.kv_cache import KVCache
from nano_engine.model import Transformer
from nano_engine.paged import ceil_div


def graph_batch_sizes(max_num_seqs: int) -> list[int]:
    """Batch sizes to capture: 1, 2, 4, 8, then multiples of 16, ending at ``max_num_seqs``.

    A batch is padded to the next size, so at most 15 rows (and under half the batch below 16)
    are wasted; 256 sequences need 20 graphs."""
    require_int("max_num_seqs", max_num_seqs)
    sizes = [s for s in (1, 2, 4, 8) if s < max_num_seqs] + list(range(16, max_num_seqs + 1, 16))
    if not sizes or sizes[-1] != max_num_seqs:
        sizes.append(max_num_seqs)
    return sizes


def padded_batch_size(num_seqs: int, sizes: Sequence[int]) -> int | None:
    """The smallest captured size that holds ``num_seqs`` rows (``sizes`` ascending); None if none does."""
    i = bisect.bisect_left(sizes, num_seqs)
    return sizes[i] if i < len(sizes) else None


@dataclass
class DecodeBatch:
    """One decode step's inputs on the host, padded to a captured batch size.

    ``input_ids``, ``positions``, ``slot_mapping`` (int64) and ``seq_lens`` (int32) have one entry
    per row of the padded batch; padding rows have token 0, position 0, slot -1 and length 0.
    ``page_table [num_seqs, max_pages]`` (int32) has the real rows only, each padded with page 0:
    a padding row reads no page at all, so its row in the device buffer may hold anything."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    seq_lens: torch.Tensor
    page_table: torch.Tensor

    @property
    def num_seqs(self) -> int:
        return self.page_table.shape[0]


def pack_decode_batch(input_ids: Sequence[int], page_tables: Sequence[Sequence[int]],
                      num_computed: Sequence[int], page_size: int, batch_size: int,
                      pin_memory: bool = False) -> DecodeBatch:
    """Host tensors for a decode step: sequence ``i`` feeds token ``input_ids[i]`` at position
    ``num_computed[i]`` (the tokens before it are cached), through pages ``page_tables[i]``.

    ``pin_memory=True`` allocates page-locked memory, which a ``copy_(non_blocking=True)`` to the
    GPU can read without the CPU waiting."""
    n = len(input_ids)
    if not 1 <= n <= batch_size or len(page_tables) != n or len(num_computed) != n:
        raise ValueError(f"a decode batch needs 1..{batch_size} sequences with one token, one page table and "
                         f"one position each; got {n} tokens, {len(page_tables)} tables, {len(num_computed)} positions")
    slots, seq_lens = [], []
    for pages, pos in zip(page_tables, num_computed, strict=True):
        if len(pages) * page_size <= pos:
            raise ValueError(f"a page table of {len(pages)} pages x {page_size} slots has no slot for position {pos}")
        slots.append(pages[pos // page_size] * page_size + pos % page_size)
        seq_lens.append(pos + 1)
    pad = batch_size - n
    width = max(len(pages) for pages in page_tables)
    table = [list(pages) + [0] * (width - len(pages)) for pages in page_tables]

    def host(values, dtype):
        return torch.tensor(values, dtype=dtype, pin_memory=pin_memory)

    return DecodeBatch(input_ids=host(list(input_ids) + [0] * pad, torch.long),
                       positions=host(list(num_computed) + [0] * pad, torch.long),
                       slot_mapping=host(slots + [-1] * pad, torch.long),
                       seq_lens=host(seq_lens + [0] * pad, torch.int32),
                       page_table=host(table, torch.int32))


class DecodeGraphRunner:
    """Decode forwards of ``model`` through ``kv_cache``, replayed from CUDA graphs.

    ``max_pages``: the most pages one sequence can hold (the width of the static page table).
    ``attention``: the engine's attention-context constructor, checked to be the Triton one (the
    only one a graph can replay). The runner sees plain arguments only, never the engine.
    ``capture=False`` runs the very same static-buffer forward eagerly instead of replaying a graph:
    it works on any device the Triton kernels run on (the CPU interpreter included), which is how the
    padding and buffer logic is tested without a GPU, and how a suspected capture bug is bisected.

    ``can_run(num_new_tokens, page_tables)`` says whether a step qualifies; ``forward(...)`` runs it.
    """

    def __init__(self, model: Transformer, kv_cache: KVCache, max_num_seqs: int, max_pages: int,
                 *, capture: bool = True, attention: Callable = TritonPagedAttention) -> None:
        if attention is not TritonPagedAttention:
            raise ValueError("cuda_graphs=True needs attention='triton' (or 'auto' on CUDA): the PyTorch reference "
                             "attention sizes its tensors from lengths on the host, which a graph cannot replay")
        device = model.device
        if capture and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a model on a CUDA device, got {device}")
        require_int("max_pages", max_pages)
        self.model, self.kv_cache, self.device = model, kv_cache, device
        self.page_size = kv_cache.page_size
        self.capture = capture
        self.sizes = graph_batch_sizes(max_num_seqs)
        self.max_pages = ceil_div(max_pages, PAGE_TABLE_ALIGN) * PAGE_TABLE_ALIGN   # TritonPagedAttention pads otherwise
        max_bs = self.sizes[-1]
        zeros = lambda *shape, dtype: torch.zeros(*shape, dtype=dtype, device=device)  # noqa: E731
        self.input_ids = zeros(max_bs, dtype=torch.long)
        self.positions = zeros(max_bs, dtype=torch.long)
        self.slot_mapping = torch.full((max_bs,), -1, dtype=torch.long, device=device)
        self.seq_lens = zeros(max_bs, dtype=torch.int32)
        self.page_table = zeros(max_bs, self.max_pages, dtype=torch.int32)
        self.cu_seqlens_q = torch.arange(max_bs + 1, dtype=torch.int32, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: torch.Tensor | None = None      # [max_bs, vocab]: every graph writes its rows here
        if capture:
            self._capture_all()

    # -- capture ---------------------------------------------------------------------------------

    def _forward(self, bs: int) -> torch.Tensor:
        """The decode forward of the first ``bs`` buffer rows: logits ``[bs, vocab]``.

        The metadata's Python-side lengths are placeholders: the Triton context reads the real
        ones from ``seq_lens`` on the device, which is what makes the forward replayable."""
        metadata = AttentionMetadata(
            positions=self.positions[:bs], slot_mapping=self.slot_mapping[:bs],
            cu_seqlens_q=self.cu_seqlens_q[:bs + 1], seq_lens=self.seq_lens[:bs],
            page_table=self.page_table[:bs], page_size=self.page_size,
            query_lens=[1] * bs, context_lens=[self.max_pages * self.page_size] * bs)
        context = TritonPagedAttention(self.kv_cache, metadata)
        return self.model(self.input_ids[:bs], positions=metadata.positions, context=context)

    @torch.inference_mode()
    def _capture_all(self) -> None:
        """One graph per batch size, sharing one memory pool and one logits buffer.

        Each graph copies its logits into the first rows of ``self.logits`` (nano-vllm shares one
        output buffer too, ``graph_vars["outputs"]``, but of hidden states: its logits are computed
        outside the graph), so its own output is a temporary of the pool, freed for the
        next graph. A buffer kept per graph would be 20 ``[bs, vocab]`` tensors (635 MiB for
        Qwen3-0.6B at 256 sequences) that the ``gpu_memory_utilization`` profile never counted."""
        pool = None
        for bs in reversed(self.sizes):         # largest first: later graphs fit in its memory
            # One eager run first: Triton compiles its kernels and cuBLAS picks its algorithms
            # outside the capture. The buffers hold padding (slot -1, length 0): nothing is written.
            warm = self._forward(bs)
            if self.logits is None:
                self.logits = torch.empty(bs, warm.shape[-1], dtype=warm.dtype, device=self.device)
            del warm
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.logits[:bs].copy_(self._forward(bs))
            pool = graph.pool() if pool is None else pool
            self.graphs[bs] = graph
        torch.cuda.synchronize(self.device)

    # -- replay ----------------------------------------------------------------------------------

    def can_run(self, num_new_tokens: Sequence[int], page_tables: Sequence[Sequence[int]]) -> bool:
        """A step qualifies when every sequence computes exactly one token, the batch fits the
        largest graph, and every page table fits the static one."""
        return (0 < len(num_new_tokens) <= self.sizes[-1] and all(n == 1 for n in num_new_tokens)
                and max(len(pages) for pages in page_tables) <= self.max_pages)

    @torch.inference_mode()
    def forward(self, input_ids: Sequence[int], page_tables: Sequence[Sequence[int]],
                num_computed: Sequence[int], logits_rows: Sequence[int] | None = None) -> torch.Tensor:
        """Logits of one decode step: row ``i`` for sequence ``i`` (or only ``logits_rows``).

        The returned tensor lives in the graphs' logits buffer: use it before the next call."""
        n = len(input_ids)
        bs = padded_batch_size(n, self.sizes)
        if bs is None:
            raise ValueError(f"{n} sequences exceed the largest captured batch ({self.sizes[-1]})")
        on_gpu = self.device.type == "cuda"
        batch = pack_decode_batch(input_ids, page_tables, num_computed, self.page_size, bs, pin_memory=on_gpu)
        width = batch.page_table.shape[1]
        if width > self.max_pages:
            raise ValueError(f"a page table of {width} pages exceeds the static page table ({self.max_pages})")
        # Host-to-device copies from pinned memory: queued behind the previous step, no waiting.
        self.input_ids[:bs].copy_(batch.input_ids, non_blocking=on_gpu)
        self.positions[:bs].copy_(batch.positions, non_blocking=on_gpu)
        self.slot_mapping[:bs].copy_(batch.slot_mapping, non_blocking=on_gpu)
        self.seq_lens[:bs].copy_(batch.seq_lens, non_blocking=on_gpu)
        self.page_table[:n, :width].copy_(batch.page_table, non_blocking=on_gpu)
        if self.capture:
            self.graphs[bs].replay()
            assert self.logits is not None
            logits = self.logits[:bs]
        else:
            logits = self._forward(bs)
        rows = list(range(n)) if logits_rows is None else list(logits_rows)
        if rows == list(range(n)):          # a pure decode step: every row samples
            return logits[:n]
        return logits[device_tensor(rows, torch.long, self.device)]

    def __repr__(self) -> str:
        mode = f"{len(self.graphs)} CUDA graphs" if self.capture else "eager (no capture)"
        return f"DecodeGraphRunner({mode}, batch sizes {self.sizes[0]}..{self.sizes[-1]}, {self.max_pages} pages/seq)"
