"""The chapter's reuse experiment with caching off and on, side by side in one run.

Six chat prompts share a long system prompt. The first runs alone, then the other five together,
on one engine; we report the tokens the five computed, their wall time and their median time to
first token (the figure a user feels), for each cache manager, plus whether every output is
identical to the reference ``generate``.

    python benchmarks/prefix_reuse.py                   # default model (tiny unless models/Qwen3-0.6B)
    python benchmarks/prefix_reuse.py --model full      # full-size random Qwen3-0.6B (slower)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoTokenizer

from nano_engine.checkpoints import default_model_path, full_size_checkpoint, tokenizer_path
from nano_engine.engine import LLMEngine
from nano_engine.model import Transformer, generate
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.prompts import chat_prompts
from nano_engine.sampling import SamplingParams


def run(model, eos, prompts, cache: str, max_tokens: int) -> dict:
    pool = PrefixCachingBlockPool(256, 16) if cache == "hashed" else None
    kwargs = {"pool": pool} if pool else {"cache": cache, "num_blocks": 256, "block_size": 16}
    engine = LLMEngine(model, eos_token_id=eos, **kwargs)
    params = SamplingParams(max_tokens=max_tokens)
    first = engine.generate(prompts[:1], params)
    n_steps = len(engine.step_log)
    t0 = time.perf_counter()
    rest, metrics = engine.generate(prompts[1:], params, return_metrics=True)
    elapsed = time.perf_counter() - t0
    engine.check_no_leaks()
    return {
        "outputs": first + rest,
        "computed": sum(s["num_tokens"] for s in engine.step_log[n_steps:]),
        "prefill": sum(s["num_prefill_tokens"] for s in engine.step_log[n_steps:]),
        "seconds": elapsed,
        "ttft_ms": 1e3 * statistics.median(m.time_to_first_token for m in metrics),
        "hits": (pool.num_hits, pool.num_queries) if pool else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["default", "full"], default="default")
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-tokens", type=int, default=16)
    args = p.parse_args()
    path = full_size_checkpoint() if args.model == "full" else default_model_path()
    model = Transformer.from_pretrained(path, device=args.device)
    tok_dir = path if (path / "tokenizer.json").exists() else tokenizer_path()
    tok = AutoTokenizer.from_pretrained(tok_dir)
    prompts = chat_prompts(tok)
    reference = [generate(model, torch.tensor([q]), args.max_tokens, eos_token_id=tok.eos_token_id)[0].tolist()
                 for q in prompts]
    print(f"model {path.name} on {args.device}; prompt lengths {[len(q) for q in prompts]}; "
          f"{args.max_tokens} new tokens each")
    rows = {cache: run(model, tok.eos_token_id, prompts, cache, args.max_tokens)
            for cache in ("none", "hashed", "radix")}
    base = rows["none"]
    print(f"{'cache':8s}{'computed':>10s}{'prefill':>9s}{'x off':>7s}{'wall s':>8s}{'x off':>7s}"
          f"{'TTFT ms':>9s}{'x off':>7s}  identical to reference")
    for cache, r in rows.items():
        print(f"{cache:8s}{r['computed']:10d}{r['prefill']:9d}{r['computed'] / base['computed']:7.2f}"
              f"{r['seconds']:8.2f}{r['seconds'] / base['seconds']:7.2f}{r['ttft_ms']:9.1f}"
              f"{r['ttft_ms'] / base['ttft_ms']:7.2f}  {r['outputs'] == reference}")
    hits, queries = rows["hashed"]["hits"]
    print(f"hashed blocks: {hits} hit tokens out of {queries} queried; "
          f"computed tokens dropped by {base['computed'] - rows['hashed']['computed']}")


if __name__ == "__main__":
    main()
