"""The Triton paged-KV kernels against a plain PyTorch reference written here.

Without a GPU the kernels run in Triton's interpreter, on CPU tensors. ``TRITON_INTERPRET=1`` only
takes effect if it is set before the *first* ``import triton`` of the process (Triton decorates its
own helpers, such as ``tl.max``, at that moment), and in a full test run another module may have
imported triton long before this one. So the interpreter cases run in a child pytest process on this
file (and test_fast_path.py's interpreter cases: one child for both, conftest.py's ``interpreter_run``),
started with the variable set (``test_interpreter_cases_in_a_child_process``); in the parent
they are skipped with that reason. Running ``TRITON_INTERPRET=1 pytest tests/test_triton_attention.py``
runs them directly.

The parent process, with compiled kernels, checks what needs no interpreter: compilation for a
Hopper GPU (Triton bundles ptxas), the import without Triton, the refusal of CPU tensors, and, on
a machine with CUDA, the real kernels in bfloat16 and float32 at Qwen3-0.6B's shapes.

The reference gathers each sequence's keys and values slot by slot from the page table, repeats
KV heads for grouped-query attention, and applies a causal softmax in float32. It shares no code
with the kernels.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

MODULE_PATH = Path(__file__).resolve().parents[1] / "nano_engine" / "fast" / "triton_attention.py"
# Set at process start (by the parent test below, or by the user): the interpreter run.
INTERPRETER_RUN = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on")


@pytest.fixture(scope="module")
def interp():
    """The kernels in Triton's interpreter (CPU tensors); only in the interpreter run."""
    if not INTERPRETER_RUN:
        pytest.skip("runs in a child process with TRITON_INTERPRET=1 (test_interpreter_cases_in_a_child_process)")
    pytest.importorskip("triton")
    from nano_engine.fast import triton_attention

    assert triton_attention._INTERPRETED
    return triton_attention


@pytest.fixture(scope="module")
def compiled():
    """The kernels compiled for the GPU; only outside the interpreter run."""
    if INTERPRETER_RUN:
        pytest.skip("needs compiled kernels; this is the interpreter run")
    pytest.importorskip("triton")
    from nano_engine.fast import triton_attention

    assert not triton_attention._INTERPRETED
    return triton_attention


def test_interpreter_cases_in_a_child_process(interpreter_run):
    """This file run in the one interpreter child (conftest.py's ``interpreter_run``)."""
    if INTERPRETER_RUN:
        pytest.skip("this is the interpreter run")
    pytest.importorskip("triton")
    child, counts = interpreter_run
    report = child.stdout[-6000:] + child.stderr[-2000:]
    assert child.returncode == 0, report
    assert counts["test_triton_attention.py"]["passed"] > 0 and counts["test_triton_attention.py"]["failed"] == 0, report


def load_private_copy(name: str):
    """Execute triton_attention.py as a fresh module that sys.modules does not know about."""
    spec = importlib.util.spec_from_file_location(name, MODULE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------------
# Reference (independent of the kernels)
# ------------------------------------------------------------------------------------------------


def slots_of(page_table_row: torch.Tensor, page_size: int, length: int) -> torch.Tensor:
    """Slots of positions 0..length-1 of one sequence."""
    positions = torch.arange(length, device=page_table_row.device)
    pages = page_table_row[positions // page_size].long()
    return pages * page_size + positions % page_size


def reference_attention(q, k_cache, v_cache, page_table, cu_seqlens_q, seq_lens, page_size, scale):
    """Causal attention of each sequence's new tokens over its whole context, in float32."""
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[1]
    group = num_heads // num_kv_heads
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b in range(seq_lens.shape[0]):
        start, end = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        seq_len, q_len = int(seq_lens[b]), end - start
        slots = slots_of(page_table[b], page_size, seq_len)
        k = k_cache[slots].float().repeat_interleave(group, dim=1)  # [seq_len, num_heads, head_dim]
        v = v_cache[slots].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q[start:end].float(), k) * scale
        q_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)
        k_pos = torch.arange(seq_len, device=q.device)
        scores = scores.masked_fill(k_pos[None, None, :] > q_pos[None, :, None], float("-inf"))
        out[start:end] = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), v)
    return out


def reference_store(k_cache, v_cache, k, v, slot_mapping):
    """Copies of the caches with each non-padding token written at its slot."""
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    for t, slot in enumerate(slot_mapping.tolist()):
        if slot >= 0:
            k_cache[slot] = k[t]
            v_cache[slot] = v[t]
    return k_cache, v_cache


def make_paged_context(seq_lens, page_size, num_kv_heads, head_dim, dtype, gen, device="cpu", spare_pages=3):
    """Random caches (every slot filled, so a wrong slot gives a wrong answer) and a page table.

    Page ids are a random permutation: a sequence's pages are scattered and out of order, and the
    table is padded with -1 beyond each sequence's last page.
    """
    pages_per_seq = [-(-n // page_size) for n in seq_lens]
    num_pages = sum(pages_per_seq) + spare_pages
    page_ids = torch.randperm(num_pages, generator=gen).tolist()
    page_table = torch.full((len(seq_lens), max(pages_per_seq) + 1), -1, dtype=torch.int32)
    for b, n in enumerate(pages_per_seq):
        page_table[b, :n] = torch.tensor([page_ids.pop() for _ in range(n)], dtype=torch.int32)
    shape = (num_pages * page_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    v_cache = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    return k_cache, v_cache, page_table.to(device)


def as_int32(values, device="cpu"):
    return torch.tensor(values, dtype=torch.int32, device=device)


def cumulative(lengths, device="cpu"):
    return as_int32([0] + torch.tensor(lengths).cumsum(0).tolist(), device)


# ------------------------------------------------------------------------------------------------
# store_kv
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
def test_store_kv_writes_each_token_at_its_slot_and_skips_padding(interp, dtype, slot_dtype):
    gen = torch.Generator().manual_seed(0)
    num_slots, num_kv_heads, head_dim = 40, 3, 24  # 3 heads and 24 dims: neither a power of two
    k_cache = torch.randn(num_slots, num_kv_heads, head_dim, generator=gen).to(dtype)
    v_cache = torch.randn(num_slots, num_kv_heads, head_dim, generator=gen).to(dtype)
    # k and v as views into a fused projection output: token stride larger than heads * dim.
    fused = torch.randn(9, 2, num_kv_heads, head_dim, generator=gen).to(dtype)
    k, v = fused[:, 0], fused[:, 1]
    slot_mapping = torch.tensor([7, 0, 39, -1, 12, 13, 5, -1, 20], dtype=slot_dtype)

    expected_k, expected_v = reference_store(k_cache, v_cache, k, v, slot_mapping)
    interp.store_kv(k, v, k_cache, v_cache, slot_mapping)

    assert torch.equal(k_cache, expected_k)
    assert torch.equal(v_cache, expected_v)


# ------------------------------------------------------------------------------------------------
# paged_decode_attention
# ------------------------------------------------------------------------------------------------

DECODE_CASES = [
    # (num_heads, num_kv_heads, head_dim, page_size, seq_lens, num_splits)
    pytest.param(4, 2, 32, 16, [1, 17, 70], None, id="gqa2-page16"),
    pytest.param(4, 4, 16, 1, [5, 33], 1, id="mha-page1"),
    pytest.param(8, 1, 64, 4, [64, 3, 129, 40], 3, id="mqa-page4-3splits-some-empty"),
    pytest.param(6, 2, 24, 3, [10, 50], 2, id="gqa3-dim24-page3-2splits"),
    pytest.param(16, 2, 32, 1, [200], 4, id="gqa8-page1-4splits"),
    # Several key tiles per split, so the running maximum moves and partial sums must be rescaled.
    pytest.param(4, 2, 32, 16, [300, 700], 1, id="long-one-split"),
    pytest.param(4, 2, 32, 16, [300, 700], 2, id="long-two-splits"),
]


@pytest.mark.parametrize("num_heads, num_kv_heads, head_dim, page_size, seq_lens, num_splits", DECODE_CASES)
def test_paged_decode_matches_reference(interp, num_heads, num_kv_heads, head_dim, page_size, seq_lens,
                                        num_splits):
    gen = torch.Generator().manual_seed(1)
    k_cache, v_cache, page_table = make_paged_context(seq_lens, page_size, num_kv_heads, head_dim, torch.float32,
                                                      gen)
    q = torch.randn(len(seq_lens), num_heads, head_dim, generator=gen)
    lens = as_int32(seq_lens)
    scale = head_dim**-0.5

    out = interp.paged_decode_attention(q, k_cache, v_cache, page_table, lens, page_size, scale,
                                        num_splits=num_splits)
    expected = reference_attention(q, k_cache, v_cache, page_table, cumulative([1] * len(seq_lens)), lens,
                                   page_size, scale)

    assert out.shape == q.shape and out.dtype == q.dtype
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_paged_decode_float16_and_int64_indices(interp):
    gen = torch.Generator().manual_seed(2)
    seq_lens, page_size = [9, 100, 31], 16
    k_cache, v_cache, page_table = make_paged_context(seq_lens, page_size, 2, 32, torch.float16, gen)
    q = torch.randn(3, 4, 32, generator=gen).half()
    lens = torch.tensor(seq_lens)  # int64 instead of the usual int32

    out = interp.paged_decode_attention(q, k_cache, v_cache, page_table.long(), lens, page_size, num_splits=2)
    expected = reference_attention(q, k_cache, v_cache, page_table, cumulative([1, 1, 1]), lens, page_size,
                                   32**-0.5)

    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), expected, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_paged_decode_padding_entry_with_no_context_gives_zeros(interp, num_splits):
    # A batch padded to a captured CUDA-graph size carries entries with seq_len 0.
    gen = torch.Generator().manual_seed(3)
    k_cache, v_cache, page_table = make_paged_context([0, 40], 8, 2, 16, torch.float32, gen)
    q = torch.randn(2, 4, 16, generator=gen)
    lens = as_int32([0, 40])

    out = interp.paged_decode_attention(q, k_cache, v_cache, page_table, lens, 8, num_splits=num_splits)
    expected = reference_attention(q[1:], k_cache, v_cache, page_table[1:], cumulative([1]), lens[1:], 8,
                                   16**-0.5)

    assert torch.equal(out[0], torch.zeros_like(out[0]))
    torch.testing.assert_close(out[1:], expected, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# paged_prefill_attention
# ------------------------------------------------------------------------------------------------

PREFILL_CASES = [
    # (num_heads, num_kv_heads, head_dim, page_size, q_lens, prefix_lens)
    pytest.param(4, 2, 32, 16, [5, 20, 1], [0, 0, 0], id="prefill-page16"),
    pytest.param(4, 2, 32, 1, [3, 1, 70], [12, 40, 7], id="extend-page1-two-query-blocks"),
    pytest.param(6, 2, 24, 3, [9, 66], [30, 0], id="gqa3-dim24-page3"),
    pytest.param(2, 2, 16, 4, [64, 2], [64, 129], id="mha-block-aligned"),
]


@pytest.mark.parametrize("num_heads, num_kv_heads, head_dim, page_size, q_lens, prefix_lens", PREFILL_CASES)
def test_paged_prefill_matches_reference(interp, num_heads, num_kv_heads, head_dim, page_size, q_lens,
                                         prefix_lens):
    gen = torch.Generator().manual_seed(4)
    seq_lens = [p + n for p, n in zip(prefix_lens, q_lens)]
    k_cache, v_cache, page_table = make_paged_context(seq_lens, page_size, num_kv_heads, head_dim, torch.float32,
                                                      gen)
    q = torch.randn(sum(q_lens), num_heads, head_dim, generator=gen)
    cu_seqlens_q, lens = cumulative(q_lens), as_int32(seq_lens)
    scale = head_dim**-0.5

    out = interp.paged_prefill_attention(q, k_cache, v_cache, page_table, cu_seqlens_q, lens, page_size, scale)
    expected = reference_attention(q, k_cache, v_cache, page_table, cu_seqlens_q, lens, page_size, scale)

    assert out.shape == q.shape
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_store_then_prefill_then_decode_like_the_engine(interp):
    """One engine step sequence: write new tokens' K/V by slot, attend, then decode one more token."""
    gen = torch.Generator().manual_seed(5)
    page_size, num_heads, num_kv_heads, head_dim = 4, 4, 2, 16
    prefix_lens, q_lens = [6, 0], [5, 9]
    seq_lens = [p + n for p, n in zip(prefix_lens, q_lens)]
    # Room for one decode token more per sequence.
    k_cache, v_cache, page_table = make_paged_context([n + 1 for n in seq_lens], page_size, num_kv_heads, head_dim,
                                                      torch.float32, gen)
    new_slots = [slots_of(page_table[b], page_size, seq_lens[b])[prefix_lens[b]:] for b in range(2)]
    slot_mapping = torch.cat(new_slots + [torch.tensor([-1, -1])])  # two padding tokens at the end
    total = slot_mapping.shape[0]
    q = torch.randn(total, num_heads, head_dim, generator=gen)
    k = torch.randn(total, num_kv_heads, head_dim, generator=gen)
    v = torch.randn(total, num_kv_heads, head_dim, generator=gen)
    cu_seqlens_q, lens = cumulative(q_lens), as_int32(seq_lens)

    ref_k_cache, ref_v_cache = reference_store(k_cache, v_cache, k, v, slot_mapping)
    interp.store_kv(k, v, k_cache, v_cache, slot_mapping)
    out = interp.paged_prefill_attention(q, k_cache, v_cache, page_table, cu_seqlens_q, lens, page_size)
    expected = reference_attention(q, ref_k_cache, ref_v_cache, page_table, cu_seqlens_q, lens, page_size,
                                   head_dim**-0.5)
    torch.testing.assert_close(out[: sum(q_lens)], expected[: sum(q_lens)], rtol=1e-4, atol=1e-5)

    # Decode: one token per sequence at position seq_len.
    decode_slots = torch.stack([slots_of(page_table[b], page_size, seq_lens[b] + 1)[-1] for b in range(2)])
    q1 = torch.randn(2, num_heads, head_dim, generator=gen)
    k1 = torch.randn(2, num_kv_heads, head_dim, generator=gen)
    v1 = torch.randn(2, num_kv_heads, head_dim, generator=gen)
    lens1 = lens + 1
    ref_k_cache, ref_v_cache = reference_store(ref_k_cache, ref_v_cache, k1, v1, decode_slots)
    interp.store_kv(k1, v1, k_cache, v_cache, decode_slots)
    out1 = interp.paged_decode_attention(q1, k_cache, v_cache, page_table, lens1, page_size, num_splits=2)
    expected1 = reference_attention(q1, ref_k_cache, ref_v_cache, page_table, cumulative([1, 1]), lens1, page_size,
                                    head_dim**-0.5)
    torch.testing.assert_close(out1, expected1, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# Errors and import safety
# ------------------------------------------------------------------------------------------------


def _bad_calls(ta):
    """One wrong call per check, keyed by the words its error message must contain."""
    cache = torch.randn(32, 2, 16)
    table, lens = torch.zeros(2, 4, dtype=torch.int32), as_int32([3, 5])
    q = torch.randn(2, 4, 16)
    return {
        "num_heads": lambda: ta.paged_decode_attention(torch.randn(2, 3, 16), cache, cache, table, lens, 8),
        "shape": lambda: ta.store_kv(torch.randn(3, 2, 16), torch.randn(3, 2, 16), cache, cache, torch.arange(2)),
        "dtype": lambda: ta.paged_decode_attention(q.half(), cache, cache, table, lens, 8),
        "int32 or int64": lambda: ta.store_kv(q[:, :2], q[:, :2], cache, cache, torch.tensor([1.0, 2.0])),
        "page_size": lambda: ta.paged_decode_attention(q, cache, cache, table, lens, 0),
        "num_splits": lambda: ta.paged_decode_attention(q, cache, cache, table, lens, 8, num_splits=0),
        "cu_seqlens_q": lambda: ta.paged_prefill_attention(q, cache, cache, table, as_int32([0, 1]), lens, 8),
        "k_cache and v_cache": lambda: ta.paged_decode_attention(q, cache, cache[:16], table, lens, 8),
    }


@pytest.mark.parametrize("what", list(_bad_calls(None)))  # the calls are only built here, not made
def test_bad_input_raises_value_error_naming_it(interp, what):
    with pytest.raises(ValueError, match=what):
        _bad_calls(interp)[what]()


def test_import_without_triton_sets_flag_and_calls_explain(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` raise ImportError
    monkeypatch.setitem(sys.modules, "triton.language", None)
    module = load_private_copy("_triton_attention_without_triton")

    assert module.HAS_TRITON is False
    cache = torch.randn(8, 1, 16)
    with pytest.raises(RuntimeError, match="Triton is not installed"):
        module.store_kv(cache[:2], cache[:2], cache, cache, torch.arange(2))


def test_cpu_tensors_without_interpreter_are_refused_clearly(compiled):
    cache = torch.randn(8, 1, 16)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        compiled.store_kv(cache[:2], cache[:2], cache, cache, torch.arange(2))


# ------------------------------------------------------------------------------------------------
# GPU compilation without a GPU, and the real thing on CUDA
# ------------------------------------------------------------------------------------------------


def test_kernels_compile_for_hopper_without_a_gpu(compiled):
    """Triton ships ptxas: compiling for sm_90 here catches what the interpreter lets through
    (tl.dot's 16-wide minimum, dtype rules, shared-memory limits)."""
    triton = pytest.importorskip("triton")
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as error:
        pytest.skip(f"this Triton has no ahead-of-time compile API: {error}")
    bundled_ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not bundled_ptxas.exists() and not shutil.which("ptxas"):
        pytest.skip("no ptxas bundled with Triton")
    ta = compiled

    def compile_for_sm90(kernel, constexprs, pointer_types):
        signature = {
            name: "constexpr" if name in constexprs
            else pointer_types.get(name, "*bf16") if name.endswith("_ptr")
            else "fp32" if name == "scale" else "i32"
            for name in kernel.arg_names
        }
        compiled = triton.compile(ASTSource(kernel, signature, constexprs), target=GPUTarget("cuda", 90, 32))
        assert compiled.asm["cubin"]

    # Qwen3-0.6B: 16 query heads, 8 KV heads, head_dim 128; bfloat16.
    index_types = {"slot_mapping_ptr": "*i64", "page_table_ptr": "*i32", "seq_lens_ptr": "*i32",
                   "cu_seqlens_q_ptr": "*i32", "lse_ptr": "*fp32"}
    compile_for_sm90(ta._store_kv_kernel, dict(NUM_KV_HEADS=8, HEAD_DIM=128, BLOCK_H=8, BLOCK_D=128), index_types)
    for page_size, num_splits in [(1, 1), (16, 4)]:
        partial = {"out_ptr": "*fp32"} if num_splits > 1 else {}
        compile_for_sm90(ta._paged_decode_kernel,
                         dict(HEAD_DIM=128, GROUP_SIZE=2, PAGE_SIZE=page_size, NUM_SPLITS=num_splits, BLOCK_H=16,
                              BLOCK_N=64, BLOCK_D=128, DOT_PRECISION="tf32"),
                         {**index_types, **partial})
    compile_for_sm90(ta._combine_splits_kernel, dict(HEAD_DIM=128, NUM_SPLITS=4, BLOCK_S=4, BLOCK_D=128),
                     {"partial_ptr": "*fp32", "lse_ptr": "*fp32"})
    compile_for_sm90(ta._paged_prefill_kernel,
                     dict(HEAD_DIM=128, GROUP_SIZE=2, PAGE_SIZE=16, BLOCK_M=64, BLOCK_N=64, BLOCK_D=128,
                          DOT_PRECISION="tf32"),
                     index_types)


# (GPU class, compute capability, dtype, prefill tiles expected): the fp32 rows used to need more
# shared memory than those GPUs give a block (OutOfResources at the first prefill).
TILE_CASES = [("T4", 75, torch.float32, (64, 32)), ("T4", 75, torch.float16, (64, 64)),
              ("A10G / L4", 86, torch.float32, (64, 32)), ("A10G / L4", 86, torch.bfloat16, (64, 64)),
              ("H200", 90, torch.bfloat16, (64, 64)), ("H200", 90, torch.float32, (64, 64))]


@pytest.mark.parametrize("gpu, arch, dtype, want", TILE_CASES, ids=[f"{c[0]}-{c[2]}" for c in TILE_CASES])
def test_prefill_tiles_fit_each_gpu_class_without_a_gpu(compiled, gpu, arch, dtype, want):
    """The prefill tiles are chosen from the kernel as compiled for the device (Triton's own
    ptxas, no GPU needed here): the largest that fits its shared memory per block, at Qwen3-0.6B's
    shapes (head_dim 128, 2 query heads per KV head)."""
    pytest.importorskip("triton")
    bundled_ptxas = Path(compiled.triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not bundled_ptxas.exists() and not shutil.which("ptxas"):
        pytest.skip("no ptxas bundled with Triton")
    ta = compiled
    limit = ta.SHARED_MEMORY_PER_BLOCK[arch]
    tiles = ta.prefill_tiles(dtype, 128, 2, arch, limit)
    assert tiles == want, f"{gpu} sm_{arch} {dtype}: tiles {tiles}, expected {want}"
    m, n = tiles
    need = ta.kernel_shared_memory(ta._paged_prefill_kernel, dict(
        HEAD_DIM=128, GROUP_SIZE=2, PAGE_SIZE=16, BLOCK_M=m, BLOCK_N=n, BLOCK_D=128,
        DOT_PRECISION=ta._dot_precision(dtype)), dtype, arch)
    assert need <= limit, f"prefill needs {need} B of shared memory, sm_{arch} gives {limit}"
    decode = ta.kernel_shared_memory(ta._paged_decode_kernel, dict(
        HEAD_DIM=128, GROUP_SIZE=2, PAGE_SIZE=16, NUM_SPLITS=1, BLOCK_H=16, BLOCK_N=64, BLOCK_D=128,
        DOT_PRECISION=ta._dot_precision(dtype)), dtype, arch)
    assert decode <= limit, f"decode needs {decode} B of shared memory, sm_{arch} gives {limit}"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("dtype, tol", [(torch.bfloat16, 2e-2), (torch.float32, 1e-4)])
def test_cuda_kernels_match_reference(compiled, page_size, dtype, tol):
    ta = compiled
    device = "cuda"
    gen = torch.Generator().manual_seed(6)
    num_heads, num_kv_heads, head_dim = 16, 8, 128  # Qwen3-0.6B
    q_lens = torch.randint(1, 300, (8,), generator=gen).tolist()
    prefix_lens = torch.randint(0, 1800, (8,), generator=gen).tolist()
    seq_lens = [p + n for p, n in zip(prefix_lens, q_lens)]
    k_cache, v_cache, page_table = make_paged_context(seq_lens, page_size, num_kv_heads, head_dim, dtype, gen,
                                                      device)
    lens = as_int32(seq_lens, device)
    scale = head_dim**-0.5

    # store_kv: the new tokens of every sequence, plus padding.
    slot_mapping = torch.cat([slots_of(page_table[b], page_size, seq_lens[b])[prefix_lens[b]:] for b in range(8)]
                             + [torch.full((5,), -1, device=device)])
    total = slot_mapping.shape[0]
    k = torch.randn(total, num_kv_heads, head_dim, generator=gen).to(device, dtype)
    v = torch.randn(total, num_kv_heads, head_dim, generator=gen).to(device, dtype)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    keep = slot_mapping >= 0
    expected_k[slot_mapping[keep]], expected_v[slot_mapping[keep]] = k[keep], v[keep]
    ta.store_kv(k, v, k_cache, v_cache, slot_mapping)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)

    # Prefill / extend.
    cu_seqlens_q = cumulative(q_lens, device)
    q = torch.randn(sum(q_lens), num_heads, head_dim, generator=gen).to(device, dtype)
    out = ta.paged_prefill_attention(q, k_cache, v_cache, page_table, cu_seqlens_q, lens, page_size, scale)
    expected = reference_attention(q, k_cache, v_cache, page_table, cu_seqlens_q, lens, page_size, scale)
    torch.testing.assert_close(out.float(), expected, rtol=tol, atol=tol)

    # Decode, with the default split count and with explicit ones.
    q1 = torch.randn(8, num_heads, head_dim, generator=gen).to(device, dtype)
    expected1 = reference_attention(q1, k_cache, v_cache, page_table, cumulative([1] * 8, device), lens, page_size,
                                    scale)
    for num_splits in (None, 1, 7):
        out1 = ta.paged_decode_attention(q1, k_cache, v_cache, page_table, lens, page_size, scale,
                                         num_splits=num_splits)
        torch.testing.assert_close(out1.float(), expected1, rtol=tol, atol=tol)
