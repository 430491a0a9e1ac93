"""Offline throughput: LLMEngine against transformers' batched ``generate``, in the same run.

The same as ``python -m nano_engine bench``; the workload, the engine paths and the figures are
described in ``nano_engine/bench.py``. nano-vllm's workload: random token ids, prompt and output
lengths uniform in a range, ``ignore_eos``; output tokens/s for each engine path and for
transformers, process CPU time beside wall time (on a shared, busy CPU the steadier figure), the
decode step time beside its memory-bandwidth bound, and with ``--prefix-heavy`` a shared-system-prompt
workload with each cache manager.

    python benchmarks/throughput.py --model tiny                   # CPU, a few minutes
    python benchmarks/throughput.py --model full                   # Qwen3-0.6B shapes, random weights
    python benchmarks/throughput.py --model full --device cuda --prefix-heavy   # nano-vllm's scale, bf16:
                                     # 256 sequences, prompts and outputs 100-1024, triton+graphs / triton / torch
"""

import sys

from nano_engine.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
