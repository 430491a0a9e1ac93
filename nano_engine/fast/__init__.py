"""The GPU fast path: Triton kernels over the paged KV cache, CUDA-graph replay of decode steps,
and sizing the KV pool from free GPU memory.

Optional: ``LLMEngine`` imports these modules only when asked (``attention`` given by name,
``cuda_graphs=True``, ``gpu_memory_utilization=``); without Triton or a GPU the engine runs on the
PyTorch reference (``nano_engine.attention``), which the kernels must agree with.
"""
